package registry

import (
	"strconv"
	"sync"
	"sync/atomic"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Records of one service repeat the same values: the service's name and version, the zone,
// and most often the whole list of capabilities (with their parsed versions and metadata).
// Decoding a registration allocates each of them afresh; at a million instances the copies
// were half the registry's heap. The registry keeps one copy of each value it has seen and
// gives records that copy (records are never modified once built, so sharing is safe).
//
// The tables are bounded: past internMax distinct values one starts over (values already
// handed out stay valid; only sharing with later records is lost), so a fleet of unique
// values costs at most the table, never an unbounded map.
const (
	internMax    = 1 << 16
	internMaxLen = 512 // longer values (large metadata) are kept as sent
)

// internTable maps a value to its shared copy. It is a plain map under a read-write lock,
// not a sync.Map: a lookup by a key still in bytes (a capability list's, built in a buffer
// on the stack) then costs no allocation, where sync.Map wants the key as a string in an
// interface.
type internTable[T any] struct {
	mu sync.RWMutex
	m  map[string]T
}

// lookup returns the shared value of key.
func (t *internTable[T]) lookup(key string) (T, bool) {
	t.mu.RLock()
	v, ok := t.m[key]
	t.mu.RUnlock()
	return v, ok
}

// lookupBytes is lookup for a key in bytes; the conversion does not allocate.
func (t *internTable[T]) lookupBytes(key []byte) (T, bool) {
	t.mu.RLock()
	v, ok := t.m[string(key)]
	t.mu.RUnlock()
	return v, ok
}

// store makes v the shared value of key unless another was stored first, and returns the
// shared one. Past internMax values the table starts over.
func (t *internTable[T]) store(key string, v T) T {
	t.mu.Lock()
	defer t.mu.Unlock()
	if got, ok := t.m[key]; ok {
		return got
	}
	if t.m == nil || len(t.m) >= internMax {
		t.m = make(map[string]T)
	}
	t.m[key] = v
	return v
}

// len returns how many values the table holds.
func (t *internTable[T]) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m)
}

var internedStrings internTable[string]

// intern returns the shared copy of s.
func intern(s string) string {
	if s == "" || len(s) > internMaxLen {
		return s
	}
	if v, ok := internedStrings.lookup(s); ok {
		return v
	}
	return internedStrings.store(s, s)
}

// capabilityList is one registration's capabilities, built once for every record that
// declares exactly the same list (the replicas of one service do): records share the slice.
type capabilityList struct {
	caps    []Capability
	ids     []string                 // the capability ids, in order (the eligibility engine's view of them)
	encoded atomic.Pointer[[][]byte] // Record.CapabilitiesEncoded's, once built
}

// internedCapabilities maps a list's key (appendCapabilityKey) to its capabilityList.
var internedCapabilities internTable[*capabilityList]

// capabilityKeyMax bounds the key of a list worth sharing; longer lists are built afresh.
const capabilityKeyMax = 4096

// appendCapabilityKey appends to dst every field of cs, each prefixed by its length so that
// no two different lists have the same key; ok is false past capabilityKeyMax.
func appendCapabilityKey(dst []byte, cs []apiv1.Capability) (key []byte, ok bool) {
	n := 0
	for _, c := range cs {
		n += len(c.CapabilityID) + len(c.CapabilityVersion) + len(c.ContractSchemaVersion) + len(c.Provider) + len(c.Metadata) + 5*4
	}
	if n > capabilityKeyMax {
		return dst, false
	}
	b := dst
	field := func(s []byte) {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	for _, c := range cs {
		field([]byte(c.CapabilityID))
		field([]byte(c.CapabilityVersion))
		field([]byte(c.ContractSchemaVersion))
		field([]byte(c.Provider))
		field(c.Metadata)
	}
	return b, true
}

// capabilities returns the parsed form of cs, shared with every record that declared the
// same list.
func capabilities(cs []apiv1.Capability) *capabilityList {
	var buf [512]byte // most lists' keys fit: finding a shared list allocates nothing
	key, ok := appendCapabilityKey(buf[:0], cs)
	if ok {
		if l, hit := internedCapabilities.lookupBytes(key); hit {
			return l
		}
	}
	l := &capabilityList{caps: make([]Capability, len(cs)), ids: make([]string, len(cs))}
	for i, c := range cs {
		l.caps[i] = newCapability(c)
		l.ids[i] = l.caps[i].CapabilityID
	}
	if !ok {
		return l
	}
	return internedCapabilities.store(string(key), l)
}
