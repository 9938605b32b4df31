# Sourced by up.sh and down.sh with DIR set: the names one containerd
# instance uses, all derived from DIR so that two instances never collide.
# shellcheck shell=bash
SOCK=$DIR/containerd.sock
ID=$(printf %s "$DIR" | sha256sum | cut -c1-10)
# Interface names are limited to 15 characters.
BRIDGE=flt$ID
NET=fleetlet-$ID
SUBNET=10.88.$((0x${ID:0:2})).0/24
CGROUP_ROOT=/fleetlet-$ID

running() {
  [ -f "$DIR/reaper.pid" ] && kill -0 "$(cat "$DIR/reaper.pid")" 2>/dev/null &&
    ctr -a "$SOCK" version >/dev/null 2>&1
}
