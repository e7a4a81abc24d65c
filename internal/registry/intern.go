package registry

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/Masterminds/semver/v3"
)

// Records of one service repeat the same few values: the service's name and version, the
// zone, and for each capability its id, version, schema version, provider, metadata and parsed
// version. Decoding a registration allocates each of them afresh; at a million instances the
// copies are a quarter of the heap. The registry keeps one copy of each value it has seen and
// gives records that copy (records are never modified once built, so sharing is safe).
//
// The table is bounded: past internMax distinct values it starts over (values already handed
// out stay valid; only sharing with later records is lost), so a fleet of unique values costs
// at most the table, never an unbounded map.
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

var (
	internedStrings  internTable
	internedMetadata internTable
	internedVersions internTable
)

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

// internMetadata returns the shared copy of a capability's metadata.
func internMetadata(m json.RawMessage) json.RawMessage {
	if len(m) == 0 || len(m) > internMaxLen {
		return m
	}
	if v, ok := internedMetadata.lookup(string(m)); ok {
		return v.(json.RawMessage)
	}
	return internedMetadata.store(string(m), m).(json.RawMessage)
}

// parseVersion returns the shared parse of a capability version (nil when it is not strict
// semver; validation has refused those before a record is built).
func parseVersion(s string) *semver.Version {
	if v, ok := internedVersions.lookup(s); ok {
		return v.(*semver.Version)
	}
	v, err := semver.StrictNewVersion(s)
	if err != nil {
		return nil
	}
	return internedVersions.store(s, v).(*semver.Version)
}
