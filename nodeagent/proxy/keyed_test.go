package proxy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"unique"
)

// TestKeyedAgreesWithAMap applies a seeded run of sets and removes to a
// keyed and to a Go map, and holds the one to the other after every step:
// the same values under the same keys, and the keys in order.
func TestKeyedAgreesWithAMap(t *testing.T) {
	var m keyed[int]
	want := map[string]int{}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 3000 {
		k := fmt.Sprintf("ns-%d/svc-%d", rng.IntN(5), rng.IntN(60))
		if rng.IntN(4) == 0 {
			m.remove(unique.Make(k))
			delete(want, k)
		} else {
			m.set(unique.Make(k), step)
			want[k] = step
		}
		if m.len() != len(want) {
			t.Fatalf("step %d: %d keys held, want %d", step, m.len(), len(want))
		}
		var keys []string
		for h := range m.keys() {
			keys = append(keys, h.Value())
		}
		if wantKeys := slices.Sorted(maps.Keys(want)); !slices.Equal(keys, wantKeys) {
			t.Fatalf("step %d: keys %v, want %v", step, keys, wantKeys)
		}
		for k, v := range want {
			if got, ok := m.get(unique.Make(k)); !ok || got != v {
				t.Fatalf("step %d: get(%q) = %d, %v; want %d", step, k, got, ok, v)
			}
		}
	}
	if _, ok := m.get(unique.Make("none")); ok {
		t.Error("get of a key never set found it")
	}
}
