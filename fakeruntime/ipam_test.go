package fakeruntime

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestParsePodCIDRs(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "10.244.1.0/24", want: []string{"10.244.1.0/24"}},
		{in: "10.244.1.7/24", want: []string{"10.244.1.0/24"}}, // masked
		{in: "10.244.1.0/24, fd00::/64", want: []string{"10.244.1.0/24", "fd00::/64"}},
		{in: "10.0.0.0/30", want: []string{"10.0.0.0/30"}},
		{in: "10.0.0.0/31", wantErr: true}, // no address after network and gateway
		{in: "10.0.0.0/32", wantErr: true},
		{in: "fd00::/127", wantErr: true},
		{in: "not-a-cidr", wantErr: true},
		{in: "10.0.0.0/24,", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parsePodCIDRs(tc.in)
		var gotS []string
		for _, p := range got {
			gotS = append(gotS, p.String())
		}
		if (err != nil) != tc.wantErr || !slices.Equal(gotS, tc.want) {
			t.Errorf("parsePodCIDRs(%q) = %v, %v; want %v, error %v", tc.in, gotS, err, tc.want, tc.wantErr)
		}
	}
}

// allocN allocates n times from pool and returns the primary addresses.
func allocN(t *testing.T, pool *ipPool, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		ips, err := pool.allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		out = append(out, ips[0].String())
	}
	return out
}

func TestIPPool(t *testing.T) {
	tests := []struct {
		name string
		cidr string
		want []string // every address the range gives, in order
	}{
		{"IPv4 /30: one address", "10.0.0.0/30", []string{"10.0.0.2"}},
		{"IPv4 /29", "10.0.0.8/29", []string{"10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"}},
		{"IPv6 /126: no broadcast", "fd00::/126", []string{"fd00::2", "fd00::3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pool ipPool
			prefixes, err := parsePodCIDRs(tc.cidr)
			if err != nil {
				t.Fatal(err)
			}
			pool.setPrefixes(prefixes)
			if got := allocN(t, &pool, len(tc.want)); !slices.Equal(got, tc.want) {
				t.Errorf("allocated %v, want %v", got, tc.want)
			}
			if _, err := pool.allocate(); err == nil {
				t.Error("a full range gave out another address")
			}
		})
	}
}

func TestIPPoolRoundRobin(t *testing.T) {
	var pool ipPool
	prefixes, _ := parsePodCIDRs("10.0.0.0/29")
	pool.setPrefixes(prefixes)
	got := allocN(t, &pool, 3) // .2 .3 .4
	pool.release([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	// .2 is free, but round-robin goes on from .4 as host-local does, so a
	// released address is not reused at once; it wraps around to .2 last.
	got = append(got, allocN(t, &pool, 3)...)
	want := []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.2"}
	if !slices.Equal(got, want) {
		t.Errorf("allocated %v, want %v", got, want)
	}
	pool.release([]netip.Addr{netip.MustParseAddr("10.0.0.2")})
	pool.release([]netip.Addr{netip.MustParseAddr("10.0.0.2")}) // twice is harmless
	if len(pool.used) != 4 {
		t.Errorf("%d addresses in use, want 4", len(pool.used))
	}
}

func TestIPPoolNoCIDRAndChange(t *testing.T) {
	var pool ipPool
	if _, err := pool.allocate(); !errors.Is(err, errNoPodCIDR) {
		t.Fatalf("allocate without a CIDR = %v, want errNoPodCIDR", err)
	}
	p1, _ := parsePodCIDRs("10.0.0.0/30")
	pool.setPrefixes(p1)
	old := allocN(t, &pool, 1)
	p2, _ := parsePodCIDRs("10.0.1.0/30")
	pool.setPrefixes(p2)
	if got := allocN(t, &pool, 1); got[0] != "10.0.1.2" {
		t.Errorf("after a CIDR change got %v, want 10.0.1.2", got)
	}
	// The address from the old CIDR stays reserved until released.
	if _, ok := pool.used[netip.MustParseAddr(old[0])]; !ok {
		t.Error("an address of the former CIDR was dropped")
	}
}

func TestIPPoolDualStackAllOrNothing(t *testing.T) {
	var pool ipPool
	prefixes, _ := parsePodCIDRs("10.0.0.0/29,fd00::/126")
	pool.setPrefixes(prefixes)
	for i := 0; i < 2; i++ {
		ips, err := pool.allocate()
		if err != nil || len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() {
			t.Fatalf("dual-stack allocation %d = %v, %v", i, ips, err)
		}
	}
	// The IPv6 range is full: no IPv4 address leaks either.
	if _, err := pool.allocate(); err == nil {
		t.Fatal("allocation succeeded with a full IPv6 range")
	}
	if len(pool.used) != 4 {
		t.Errorf("%d addresses in use after a failed allocation, want 4", len(pool.used))
	}
}
