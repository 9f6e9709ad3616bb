package protocol

import (
	"cmp"
	"slices"
)

// Map is a BARE map<K><V>. It is a slice of entries rather than a Go map
// because the wire order is the sender's insertion order (the SDK's JS
// object order), and re-encoding a frame byte-exactly needs that order.
// Keys are unique: decoding rejects duplicates, and so does encoding.
type Map[K comparable, V any] []MapEntry[K, V]

// MapEntry is one key/value pair of a Map.
type MapEntry[K comparable, V any] struct {
	Key   K
	Value V
}

// Get returns the value for k and whether it is present.
func (m Map[K, V]) Get(k K) (V, bool) {
	for _, e := range m {
		if e.Key == k {
			return e.Value, true
		}
	}
	var zero V
	return zero, false
}

// Set replaces the value for k in place, or appends a new entry.
func (m *Map[K, V]) Set(k K, v V) {
	for i := range *m {
		if (*m)[i].Key == k {
			(*m)[i].Value = v
			return
		}
	}
	*m = append(*m, MapEntry[K, V]{k, v})
}

// MapOf builds a Map from a Go map with keys in sorted order, which makes
// the encoding deterministic. It returns nil for an empty map.
func MapOf[V any](m map[string]V) Map[string, V] {
	if len(m) == 0 {
		return nil
	}
	out := make(Map[string, V], 0, len(m))
	for k, v := range m {
		out = append(out, MapEntry[string, V]{k, v})
	}
	slices.SortFunc(out, func(a, b MapEntry[string, V]) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// ToMap returns the entries as a Go map.
func (m Map[K, V]) ToMap() map[K]V {
	out := make(map[K]V, len(m))
	for _, e := range m {
		out[e.Key] = e.Value
	}
	return out
}

// smallMap is the size up to which duplicate keys are found by a linear
// scan; beyond it a hash set keeps hostile inputs from making decoding
// quadratic.
const smallMap = 8

// duplicateKey reports whether m[i].Key equals the key of an earlier entry.
// It is called for i = 0, 1, 2, … in turn; *seen holds the hash set once the
// map outgrows smallMap.
func duplicateKey[K comparable, V any](m Map[K, V], i int, seen *map[K]struct{}) bool {
	k := m[i].Key
	if i < smallMap {
		for j := range i {
			if m[j].Key == k {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[K]struct{}, len(m))
		for _, e := range m[:i] {
			(*seen)[e.Key] = struct{}{}
		}
	}
	if _, dup := (*seen)[k]; dup {
		return true
	}
	(*seen)[k] = struct{}{}
	return false
}

// uniqueKeys reports whether all keys of m are distinct.
func uniqueKeys[K comparable, V any](m Map[K, V]) bool {
	if len(m) < 2 {
		return true
	}
	var seen map[K]struct{}
	for i := range m {
		if duplicateKey(m, i, &seen) {
			return false
		}
	}
	return true
}
