package fleet

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// A shard is one fleet process of a fleet too large for one machine, as a
// pod of a StatefulSet on another cluster (as kubemark runs hollow nodes as
// pods). Its identity is its ordinal: the pod's index in the StatefulSet.
// Everything else follows from the ordinal, so shards need no coordinator:
// node names that no other shard makes, and on one machine a range of
// loopback addresses that no other shard takes. A shard restarted under
// the same ordinal makes the same names and adopts its own nodes.

// ShardNamePrefix is the node name prefix of shard ordinal: its nodes are
// "<prefix><ordinal>-<pool>-<index>".
func ShardNamePrefix(prefix string, ordinal int) string {
	return prefix + strconv.Itoa(ordinal) + "-"
}

// shardAddresses is how many loopback addresses each shard's range holds:
// two /16 networks, more than the 100,000 nodes one process hosts.
const shardAddresses = 2 << 16

// MaxLoopbackShards is how many shards fit on one machine's loopback
// network (127.0.0.0/8) from the default first IP, 127.1.0.1.
const MaxLoopbackShards = (255 - 1) * (1 << 16) / shardAddresses

// ShardFirstIP is the first node address of shard ordinal on one machine:
// first advanced by a range of shardAddresses per ordinal, so that shards
// sharing a machine (and its loopback network) never share an address.
func ShardFirstIP(first netip.Addr, ordinal int) (netip.Addr, error) {
	if !first.Is4() || !first.IsLoopback() {
		return netip.Addr{}, fmt.Errorf("first node IP %s is not an IPv4 loopback address; use one in 127.0.0.0/8", first)
	}
	if ordinal < 0 {
		return netip.Addr{}, fmt.Errorf("shard ordinal %d is negative", ordinal)
	}
	b := first.As4()
	base := uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	// Every range must end inside 127.0.0.0/8, short of its broadcast.
	if fits := (1<<24 - 1 - base) / shardAddresses; uint64(ordinal) >= fits {
		return netip.Addr{}, fmt.Errorf("shard %d's loopback addresses would run past 127.255.255.254: %d shards fit from %s; run the shards as pods, each with its own pod IP (--pod-ip), or on more machines", ordinal, fits, first)
	}
	n := base + uint64(ordinal)*shardAddresses
	return netip.AddrFrom4([4]byte{127, byte(n >> 16), byte(n >> 8), byte(n)}), nil
}

// OrdinalFromName reads a StatefulSet pod's ordinal from its name,
// "<statefulset>-<ordinal>".
func OrdinalFromName(name string) (int, error) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return 0, fmt.Errorf("%q does not end in -<ordinal> as a StatefulSet pod's name does", name)
	}
	digits := name[i+1:]
	ordinal, err := strconv.Atoi(digits)
	if err != nil || ordinal < 0 || strconv.Itoa(ordinal) != digits {
		return 0, fmt.Errorf("%q does not end in -<ordinal> as a StatefulSet pod's name does", name)
	}
	return ordinal, nil
}
