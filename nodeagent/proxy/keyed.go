package proxy

import (
	"iter"
	"slices"
	"strings"
)

// keyed is the proxy's map from an object's key to what it keeps of the
// object: a slice of entries sorted by key, not a Go map. Every proxy of a
// fleet holds one entry per Service and one per EndpointSlice of the
// cluster, and a Go map of 1,000 such entries takes 28 to 36 KiB (its
// groups' slots, control words and load factor) where the sorted slice
// takes 16. A lookup is a binary search over the keys' strings; an insert or
// a delete moves the entries after it, a few microseconds at 10,000
// objects, and objectStore.Replace applies a list in key order, so that a
// proxy's first list appends.
type keyed[V any] struct {
	entries []keyedEntry[V]
}

type keyedEntry[V any] struct {
	key handle
	val V
}

func compareKeys(a, b handle) int {
	if a == b {
		return 0
	}
	return strings.Compare(a.Value(), b.Value())
}

func (m *keyed[V]) find(key handle) (int, bool) {
	return slices.BinarySearchFunc(m.entries, key, func(e keyedEntry[V], k handle) int { return compareKeys(e.key, k) })
}

// get returns key's value, and whether it is held.
func (m *keyed[V]) get(key handle) (V, bool) {
	if i, ok := m.find(key); ok {
		return m.entries[i].val, true
	}
	var zero V
	return zero, false
}

// set holds val under key.
func (m *keyed[V]) set(key handle, val V) {
	i, ok := m.find(key)
	if ok {
		m.entries[i].val = val
		return
	}
	m.entries = slices.Insert(m.entries, i, keyedEntry[V]{key: key, val: val})
}

// remove drops key, if held.
func (m *keyed[V]) remove(key handle) {
	if i, ok := m.find(key); ok {
		m.entries = slices.Delete(m.entries, i, i+1)
	}
}

// len is the number of keys held.
func (m *keyed[V]) len() int { return len(m.entries) }

// keys yields the keys held, in order. The map must not change meanwhile.
func (m *keyed[V]) keys() iter.Seq[handle] {
	return func(yield func(handle) bool) {
		for _, e := range m.entries {
			if !yield(e.key) {
				return
			}
		}
	}
}
