package fakeruntime

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// errNoPodCIDR is returned when a pod needs an IP before the node agent has
// told the runtime its pod CIDR.
var errNoPodCIDR = errors.New("network is not ready: no pod CIDR is configured (the node agent sets it from Node.spec.podCIDRs with UpdateRuntimeConfig)")

// ipPool hands out pod IPs from the node's pod CIDRs the way the CNI
// host-local IPAM plugin does: the network address and the gateway (the
// first host address) are never given out, nor the IPv4 broadcast address,
// and allocation goes round-robin from the last address given, so an address
// just released is not reused at once. The caller holds Runtime.mu.
type ipPool struct {
	ranges []ipRange
	// used holds every address given out and not yet released, across the
	// current and any former CIDRs.
	used map[netip.Addr]struct{}
}

type ipRange struct {
	prefix      netip.Prefix
	first, last netip.Addr
	// cursor is the address last given out from this range; zero at first.
	cursor netip.Addr
}

// parsePodCIDRs parses the kubelet's pod CIDR string: one CIDR, or an IPv4
// and an IPv6 CIDR separated by a comma on a dual-stack node.
func parsePodCIDRs(s string) ([]netip.Prefix, error) {
	var prefixes []netip.Prefix
	for _, field := range strings.Split(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(field))
		if err != nil {
			return nil, fmt.Errorf("invalid pod CIDR %q: %w", s, err)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked()
		if _, err := newIPRange(p); err != nil {
			return nil, err
		}
		prefixes = append(prefixes, p)
	}
	return prefixes, nil
}

func newIPRange(p netip.Prefix) (ipRange, error) {
	first := p.Addr().Next().Next() // skip the network address and the gateway
	last := lastAddr(p)
	if p.Addr().Is4() {
		last = last.Prev() // the broadcast address
	}
	if !first.IsValid() || !last.IsValid() || last.Less(first) || !p.Contains(first) {
		return ipRange{}, fmt.Errorf("pod CIDR %s is too small: no address is left after the network address, the gateway and the broadcast address", p)
	}
	return ipRange{prefix: p, first: first, last: last}, nil
}

// lastAddr returns the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// setPrefixes replaces the CIDRs new addresses come from. Addresses already
// given out stay reserved until released.
func (p *ipPool) setPrefixes(prefixes []netip.Prefix) {
	ranges := make([]ipRange, 0, len(prefixes))
	for _, prefix := range prefixes {
		rg, err := newIPRange(prefix)
		if err != nil {
			continue // parsePodCIDRs already rejected it
		}
		// Keep the cursor of an unchanged range so round-robin goes on.
		for _, old := range p.ranges {
			if old.prefix == prefix {
				rg.cursor = old.cursor
			}
		}
		ranges = append(ranges, rg)
	}
	p.ranges = ranges
}

// allocate returns one address from each range, the first one primary. It
// gives out nothing when a range is full.
func (p *ipPool) allocate() ([]netip.Addr, error) {
	if len(p.ranges) == 0 {
		return nil, errNoPodCIDR
	}
	if p.used == nil {
		p.used = make(map[netip.Addr]struct{})
	}
	ips := make([]netip.Addr, 0, len(p.ranges))
	for i := range p.ranges {
		a, ok := p.ranges[i].next(p.used)
		if !ok {
			p.release(ips)
			return nil, fmt.Errorf("no IP addresses available in range %s: every address is in use", p.ranges[i].prefix)
		}
		p.used[a] = struct{}{}
		ips = append(ips, a)
	}
	return ips, nil
}

// next finds the first free address after the cursor, wrapping around, and
// moves the cursor there. At most len(used)+1 candidates need a look: among
// that many distinct addresses one is free, and a range with fewer addresses
// wraps around to addresses already seen.
func (rg *ipRange) next(used map[netip.Addr]struct{}) (netip.Addr, bool) {
	a := rg.first
	if rg.cursor.IsValid() && rg.cursor.Less(rg.last) && !rg.cursor.Less(rg.first) {
		a = rg.cursor.Next()
	}
	for range len(used) + 1 {
		if _, taken := used[a]; !taken {
			rg.cursor = a
			return a, true
		}
		if a == rg.last {
			a = rg.first
		} else {
			a = a.Next()
		}
	}
	return netip.Addr{}, false
}

// release returns addresses to the pool; releasing twice is harmless.
func (p *ipPool) release(ips []netip.Addr) {
	for _, a := range ips {
		delete(p.used, a)
	}
}
