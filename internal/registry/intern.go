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

// internTable maps a value to its shared copy.
type internTable struct {
	m sync.Map // string → T
	n atomic.Int64
}

func (t *internTable) lookup(key string) (any, bool) { return t.m.Load(key) }

func (t *internTable) store(key string, v any) any {
	if t.n.Add(1) > internMax {
		t.m.Clear()
		t.n.Store(1)
	}
	got, _ := t.m.LoadOrStore(key, v)
	return got
}

var internedStrings internTable

// intern returns the shared copy of s.
func intern(s string) string {
	if s == "" || len(s) > internMaxLen {
		return s
	}
	if v, ok := internedStrings.lookup(s); ok {
		return v.(string)
	}
	return internedStrings.store(s, s).(string)
}

// capabilityList is one registration's capabilities, built once for every record that
// declares exactly the same list (the replicas of one service do): records share the slice.
type capabilityList struct {
	caps []Capability
	ids  []string // the capability ids, in order (the eligibility engine's view of them)
}

// internedCapabilities maps a list's key (capabilityKey) to its capabilityList.
var internedCapabilities internTable

// capabilityKeyMax bounds the key of a list worth sharing; longer lists are built afresh.
const capabilityKeyMax = 4096

// capabilityKey spells out every field of cs, each prefixed by its length so that no two
// different lists have the same key; ok is false past capabilityKeyMax.
func capabilityKey(cs []apiv1.Capability) (key string, ok bool) {
	n := 0
	for _, c := range cs {
		n += len(c.CapabilityID) + len(c.CapabilityVersion) + len(c.ContractSchemaVersion) + len(c.Provider) + len(c.Metadata) + 5*4
	}
	if n > capabilityKeyMax {
		return "", false
	}
	b := make([]byte, 0, n)
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
	return string(b), true
}

// capabilities returns the parsed form of cs, shared with every record that declared the
// same list.
func capabilities(cs []apiv1.Capability) *capabilityList {
	key, ok := capabilityKey(cs)
	if ok {
		if v, hit := internedCapabilities.lookup(key); hit {
			return v.(*capabilityList)
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
	return internedCapabilities.store(key, l).(*capabilityList)
}
