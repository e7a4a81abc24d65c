package apiv1

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// The selection rules every consumer of a discovery answer shares — the registry ordering
// its answers, the orchestrator ordering a step's candidates, and any front end (DNS, xDS)
// handing instances out: which eligibility states are in rotation (InRotation), what
// metadata.priority is (Priority), and in which order candidates for one capability come
// (Rank). They live here, once.

// Priority returns metadata.priority, the integer that orders candidates (higher first): 0
// when the metadata has none, and an error when it has one that is not a JSON integer.
func Priority(metadata json.RawMessage) (int64, error) {
	var m struct {
		Priority json.RawMessage `json:"priority"`
	}
	if len(metadata) == 0 || json.Unmarshal(metadata, &m) != nil || m.Priority == nil || string(m.Priority) == "null" {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(m.Priority, &n); err != nil {
		return 0, fmt.Errorf("must be an integer, got %s", m.Priority)
	}
	return n, nil
}

// Rank is what orders the candidates for one capability: metadata.priority descending, then
// capability_version descending (semantic version precedence), then generation (registration
// order) ascending.
type Rank struct {
	Priority   int64
	Version    *semver.Version // nil (an unparsable version) sorts after every version
	Generation int64
}

// Compare is negative when a goes before b, positive when after, 0 when they tie.
func (a Rank) Compare(b Rank) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := CompareVersions(b.Version, a.Version); c != 0 {
		return c
	}
	return cmp.Compare(a.Generation, b.Generation)
}

// CompareVersions is semantic version precedence (nil lowest) with a fast path:
// (*semver.Version).Compare costs most of a sort, and only pre-releases need its full rules.
func CompareVersions(a, b *semver.Version) int {
	switch {
	case a == nil || b == nil:
		return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
	}
	if c := cmp.Compare(a.Major(), b.Major()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Minor(), b.Minor()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Patch(), b.Patch()); c != 0 {
		return c
	}
	if a.Prerelease() == "" && b.Prerelease() == "" {
		return 0
	}
	return a.Compare(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// HostPort splits an instance endpoint URL into host and port (80, or 443 for https, when
// the URL names none).
func HostPort(endpoint string) (host string, port uint16, ok bool) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return "", 0, false
	}
	ps := u.Port()
	if ps == "" {
		ps = "80"
		if u.Scheme == "https" {
			ps = "443"
		}
	}
	p, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return u.Hostname(), uint16(p), true
}

// SortCapabilityEntries puts the entries of a discovery answer in the registry's order:
// capability_id, provider, metadata.priority descending, capability_version descending
// (precedence), generation ascending. A delta watcher orders the answer it rebuilds by it
// (DiscoveryDelta). An unparsable version sorts after every version, a metadata.priority
// that is not an integer counts as 0.
func SortCapabilityEntries(es []CapabilityEntry) {
	r := newRanker()
	type keyed struct {
		e    CapabilityEntry
		rank Rank
	}
	ks := make([]keyed, len(es))
	for i, e := range es {
		ks[i] = keyed{e: e, rank: r.rank(&e)}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		return cmp.Or(strings.Compare(a.e.CapabilityID, b.e.CapabilityID), strings.Compare(a.e.Provider, b.e.Provider), a.rank.Compare(b.rank))
	})
	for i := range ks {
		es[i] = ks[i].e
	}
}

// ranker ranks entries, parsing each distinct version and metadata once: the replicas of a
// service share theirs.
type ranker struct {
	versions   map[string]*semver.Version
	priorities map[string]int64
}

func newRanker() *ranker {
	return &ranker{versions: map[string]*semver.Version{}, priorities: map[string]int64{}}
}

func (r *ranker) rank(e *CapabilityEntry) Rank {
	p, ok := r.priorities[string(e.Metadata)]
	if !ok {
		p, _ = Priority(e.Metadata)
		r.priorities[string(e.Metadata)] = p
	}
	v, ok := r.versions[e.CapabilityVersion]
	if !ok {
		v, _ = semver.StrictNewVersion(e.CapabilityVersion) // nil when unparsable
		r.versions[e.CapabilityVersion] = v
	}
	return Rank{Priority: p, Version: v, Generation: e.Generation}
}

// compare orders two entries as SortCapabilityEntries does.
func (r *ranker) compare(a, b *CapabilityEntry) int {
	return cmp.Or(strings.Compare(a.CapabilityID, b.CapabilityID), strings.Compare(a.Provider, b.Provider), r.rank(a).Compare(r.rank(b)))
}

// Apply returns the answer a delta watcher holds after d, given the entries it held at the
// delta's base (see DiscoveryDelta), in the answer's order as every answer and Apply give
// them: the reset's entries, or held with d's removals dropped and its additions and updates
// put in, in SortCapabilityEntries' order. It costs one pass over held and a binary search
// per entry put (10 ms for the 120,000 entries of a fleet's answer, where a sort took 200).
// held is not modified.
func (d *DiscoveryDelta) Apply(held []CapabilityEntry) []CapabilityEntry {
	if d.Reset {
		return slices.Clone(d.Capabilities)
	}
	type key struct{ instance, capability, provider, version string }
	keyOf := func(e *CapabilityEntry) key {
		return key{e.InstanceID, e.CapabilityID, e.Provider, e.CapabilityVersion}
	}
	gone := make(map[string]int64, len(d.Removed))
	for _, r := range d.Removed {
		gone[r.InstanceID] = max(gone[r.InstanceID], r.Generation)
	}
	// the entries put, the last of each key, in order
	putAt := make(map[key]int, len(d.Added)+len(d.Updated))
	puts := make([]CapabilityEntry, 0, len(d.Added)+len(d.Updated))
	for _, es := range [][]CapabilityEntry{d.Added, d.Updated} {
		for _, e := range es {
			if i, ok := putAt[keyOf(&e)]; ok {
				puts[i] = e
				continue
			}
			putAt[keyOf(&e)] = len(puts)
			puts = append(puts, e)
		}
	}
	r := newRanker()
	slices.SortStableFunc(puts, func(a, b CapabilityEntry) int { return r.compare(&a, &b) })
	// where each goes: before the first held entry it precedes
	at := make([]int, len(puts))
	for i := range puts {
		at[i] = sort.Search(len(held), func(j int) bool { return r.compare(&puts[i], &held[j]) < 0 })
	}
	// the instances the delta names: the others' entries are kept without another look
	named := make(map[string]struct{}, len(gone)+len(puts))
	for id := range gone {
		named[id] = struct{}{}
	}
	for i := range puts {
		named[puts[i].InstanceID] = struct{}{}
	}
	out := make([]CapabilityEntry, 0, len(held)+len(puts))
	p := 0
	for j := range held {
		for p < len(puts) && at[p] == j {
			out = append(out, puts[p])
			p++
		}
		e := &held[j]
		if _, ok := named[e.InstanceID]; ok {
			if g, ok := gone[e.InstanceID]; ok && e.Generation <= g {
				continue
			}
			if _, ok := putAt[keyOf(e)]; ok {
				continue // replaced
			}
		}
		out = append(out, *e)
	}
	return append(out, puts[p:]...)
}
