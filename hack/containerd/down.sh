#!/usr/bin/env bash
# down.sh DIR: undo up.sh DIR. Stops every container and shim of THIS
# containerd and containerd itself, unmounts what it mounted under DIR,
# removes its pods' cgroups (DIR/cgroup-root in every hierarchy), its bridge
# and CNI cache, and what it wrote in DIR. Safe to run twice, or after a
# failed up.sh. Processes are found by this instance's paths, never by name.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
[ -d "$1" ] || exit 0
DIR=$(cd "$1" && pwd)
. "$(dirname "$0")/lib.sh"
log() { echo "down.sh: $*" >&2; }
ms() { date +%s%3N; }
T0=$(ms)

# Containers first, through containerd while it is up, so that shims exit
# and remove their own sockets.
if running; then
  for id in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1
  done
  for id in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1
  done
fi

# Whatever runc still knows of under this instance's runc root.
for root in "$DIR"/runc/*; do
  [ -d "$root" ] || continue
  for id in $(runc --root "$root" list -q 2>/dev/null); do
    runc --root "$root" delete -f "$id" >/dev/null 2>&1
  done
done

# Any process left in this instance's pod cgroups.
for procs in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"; do
  [ -d "$procs" ] || continue
  find "$procs" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null
done

# containerd, through its reaper, then shims still serving this socket.
if [ -f "$DIR/reaper.pid" ]; then
  P=$(cat "$DIR/reaper.pid")
  if kill -0 "$P" 2>/dev/null; then
    kill "$P"
    for _ in $(seq 100); do kill -0 "$P" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$P" 2>/dev/null
  fi
fi
for f in /proc/[0-9]*/cmdline; do
  c=$(tr "\0" " " 2>/dev/null <"$f") || continue
  case "$c" in
    *containerd-shim*" -address $SOCK "*) pid=${f#/proc/}; pid=${pid%/cmdline}; kill -9 "$pid" 2>/dev/null ;;
    "containerd --config $DIR/config.toml "*) pid=${f#/proc/}; pid=${pid%/cmdline}; kill -9 "$pid" 2>/dev/null ;;
  esac
done
# containerd 1.6 puts shim sockets in /run/containerd/s, named by the hash
# of <address>/<namespace>/<id>: a killed shim leaves its socket there.
for task in "$DIR"/state/io.containerd.runtime.v2.task/*/*; do
  [ -d "$task" ] || continue
  ns=$(basename "$(dirname "$task")")
  rm -f "/run/containerd/s/$(printf %s "$SOCK/$ns/$(basename "$task")" | sha256sum | cut -d' ' -f1)"
done

# Mounts under DIR (rootfs overlays, netns bind mounts, shm), deepest first.
for _ in 1 2 3; do
  mnts=$(awk -v d="$DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  [ -n "$mnts" ] || break
  for m in $mnts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done

# Pod cgroups, deepest first, in every hierarchy.
for d in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/"${CGROUP_ROOT#/}"; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
done

ip link del "$BRIDGE" 2>/dev/null
rm -f /var/lib/cni/results/"$NET"-*
# containerd sets up each sandbox's loopback as a network of its own.
for sb in "$DIR"/root/io.containerd.grpc.v1.cri/sandboxes/*; do
  [ -d "$sb" ] && rm -f "/var/lib/cni/results/cni-loopback-$(basename "$sb")-lo"
done
rmdir /var/lib/cni/results /var/lib/cni /run/containerd/s /run/containerd 2>/dev/null

rm -rf "$DIR"/{root,state,runc,cni,config.toml,containerd.log,containerd.sock,containerd.sock.ttrpc,reaper.pid,cgroup-root}

# Say what could not be removed: the caller's check should fail on it.
left=$(awk -v d="$DIR/" 'index($5, d) == 1' /proc/self/mountinfo | wc -l)
cg=$(ls -d /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" 2>/dev/null | wc -l)
[ "$left" -eq 0 ] || log "$left mounts left under $DIR"
[ "$cg" -eq 0 ] || log "cgroup $CGROUP_ROOT left in $cg hierarchies"
log "cleaned up $DIR in $(($(ms) - T0)) ms"
[ "$left" -eq 0 ] && [ "$cg" -eq 0 ]
