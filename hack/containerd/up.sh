#!/usr/bin/env bash
# up.sh DIR: a real CRI runtime for `fleetlet agent` with no registry: Debian's
# containerd + runc, started by hand under catatonit, its state, root, runc
# state, CNI and socket all under DIR; localhost/busybox:latest and
# localhost/pause:latest built locally with umoci and imported. Prints the
# socket path. Idempotent: a second run with the same DIR only prints it.
#
# Needs root. Undo with down.sh DIR. Other files it writes, for the agent:
#   DIR/cgroup-root   the cgroup root to give `fleetlet agent --cgroup-root`
#                     (down.sh removes it from every hierarchy)
# Images are cached in ${FLEETLET_CACHE:-$HOME/.cache/fleetlet} so that a new
# DIR starts in seconds.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: containerd needs root" >&2; exit 1; }
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
. "$(dirname "$0")/lib.sh"
ms() { date +%s%3N; }
log() { echo "up.sh: $*" >&2; }
T0=$(ms)

# --- packages, only when missing ---
need=()
for p in containerd:containerd runc:runc catatonit:catatonit busybox-static:busybox umoci:umoci jq:jq; do
  command -v "${p#*:}" >/dev/null || need+=("${p%%:*}")
done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
fi
T1=$(ms)

if running; then
  log "containerd for $DIR already up"
  echo "$SOCK"
  exit 0
fi

# --- images: busybox (workload) and catatonit -P (pause), cached by the
# versions of what they are built from ---
CACHE=${FLEETLET_CACHE:-$HOME/.cache/fleetlet}
key=$( (busybox | head -1; catatonit --version 2>&1 | head -1; umoci --version) | sha256sum | cut -c1-12)
IMAGES=$CACHE/containerd-images-$key.tar
if [ ! -s "$IMAGES" ]; then
  log "building images into $IMAGES"
  mkdir -p "$CACHE"
  B=$(mktemp -d "$CACHE/build.XXXXXX")
  (
    cd "$B"
    umoci init --layout oci
    umoci new --image oci:busybox && umoci unpack --image oci:busybox bb
    R=bb/rootfs; mkdir -p $R/bin $R/etc $R/tmp $R/proc $R/sys $R/dev
    cp /bin/busybox $R/bin/
    for a in $(busybox --list); do [ "$a" = busybox ] || ln -s busybox "$R/bin/$a"; done
    ln -s bin $R/sbin
    echo 'root:x:0:0:root:/root:/bin/sh' >$R/etc/passwd; echo 'root:x:0:' >$R/etc/group
    umoci repack --image oci:busybox bb
    umoci config --image oci:busybox --config.cmd /bin/sh --config.env PATH=/bin:/sbin
    umoci new --image oci:pause && umoci unpack --image oci:pause pb
    cp /usr/bin/catatonit pb/rootfs/pause     # Debian's catatonit is static
    umoci repack --image oci:pause pb
    umoci config --image oci:pause --config.entrypoint /pause --config.entrypoint -P
    jq '.manifests |= map(.annotations["io.containerd.image.name"] = "localhost/" + .annotations["org.opencontainers.image.ref.name"] + ":latest")' \
      oci/index.json >i.json && mv i.json oci/index.json
    tar -C oci -cf images.tar .
  ) >/dev/null
  mv "$B/images.tar" "$IMAGES"
  rm -rf "$B"
fi
T2=$(ms)

# --- containerd's configuration ---
mkdir -p "$DIR/cni/net.d" "$DIR/cni/bin"
ln -sf /usr/lib/cni/* "$DIR/cni/bin/"
echo "$CGROUP_ROOT" >"$DIR/cgroup-root"
cat >"$DIR/config.toml" <<TOML
version = 2
root = "$DIR/root"
state = "$DIR/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:latest"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Without CAP_SYS_RESOURCE a negative oom_score_adj is EPERM: containerd
  # raises it to its own instead.
  restrict_oom_score_adj = true
  # Network namespaces under DIR, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/bin/runc"
        Root = "$DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$DIR/cni/bin"
    conf_dir = "$DIR/cni/net.d"
TOML
cat >"$DIR/cni/net.d/10-fleetlet.conflist" <<JSON
{"cniVersion":"0.4.0","name":"$NET","plugins":[
 {"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","dataDir":"$DIR/cni/ipam","ranges":[[{"subnet":"$SUBNET"}]]}},
 {"type":"loopback"}]}
JSON

# --- containerd, under a subreaper: PID 1 here may not reap orphaned shims ---
setsid catatonit -- containerd --config "$DIR/config.toml" >"$DIR/containerd.log" 2>&1 </dev/null &
echo $! >"$DIR/reaper.pid"
for _ in $(seq 300); do
  ctr -a "$SOCK" version >/dev/null 2>&1 && break
  kill -0 "$(cat "$DIR/reaper.pid")" 2>/dev/null || { tail -20 "$DIR/containerd.log" >&2; log "containerd exited; see $DIR/containerd.log"; exit 1; }
  sleep 0.1
done
ctr -a "$SOCK" version >/dev/null 2>&1 || { log "containerd did not answer on $SOCK within 30 s; see $DIR/containerd.log"; exit 1; }
ctr -a "$SOCK" -n k8s.io images import "$IMAGES" >/dev/null
T3=$(ms)
log "ready in $((T3 - T0)) ms (packages $((T1 - T0)), images $((T2 - T1)), start+import $((T3 - T2)))"
echo "$SOCK"
