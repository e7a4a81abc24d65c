package registry

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Query selects discovery entries; every field set must match (AND).
type Query struct {
	CapabilityID string
	Provider     string
	ServiceName  string
	Zone         string
	// MinVersion keeps capability versions >= it (semantic version precedence).
	MinVersion *semver.Version
	// Constraint keeps capability versions that satisfy it (Masterminds semantics:
	// pre-releases only when the constraint names one).
	Constraint *semver.Constraints
	// IncludeAll (include=all) answers the instances out of rotation too, with their
	// verdicts (draining and absent ones excepted), so that a consumer can judge panic on the
	// pool it uses.
	IncludeAll bool
}

// queryParams are the parameters of GET /v1/discovery/capabilities that select entries.
var queryParams = []string{"capability_id", "provider", "min_version", "version", "service_name", "zone", "include"}

// Parameters that discovery endpoints take besides the selecting ones: the long poll's.
var pollParams = []string{"index", "wait", "epoch"}

// pageParams are the paging parameters of the capabilities endpoint and the catalog.
var pageParams = []string{"limit", "page_token"}

// Listing names an endpoint that takes query parameters (see UnknownParameters).
type Listing int

// The listings and the parameters each takes.
const (
	// CapabilitiesListing is GET /v1/discovery/capabilities: selection, long poll, paging.
	CapabilitiesListing Listing = iota
	// RoutesListing is GET /v1/discovery/routes: long poll.
	RoutesListing
	// CatalogListing is GET /v1/services: paging.
	CatalogListing
	// EventsListing is GET /v1/events: the journal's filters, long poll and format.
	EventsListing
	// SummaryListing is GET /v1/catalog/summary: SummaryQuery's filters and limit.
	SummaryListing
	// NoParameters is an endpoint that takes none.
	NoParameters
)

var listingParams = [...][]string{
	CapabilitiesListing: slices.Concat(queryParams, pollParams, []string{"delta"}, pageParams),
	RoutesListing:       slices.Concat(pollParams, []string{"delta"}),
	CatalogListing:      pageParams,
	EventsListing:       {"since", "type", "subject", "severity", "q", "from", "until", "limit", "wait", "format"},
	SummaryListing:      {"service_name", "capability_id", "provider", "expiring_within", "limit"},
	NoParameters:        {},
}

// UnknownParameters refuses (400 UNKNOWN_PARAMETER, naming each) the parameters of v that
// the listing does not take: a misspelled filter must not silently select everything.
func UnknownParameters(v url.Values, l Listing) error {
	known := listingParams[l]
	var ds []apiv1.Detail
	for k := range v {
		if slices.Contains(known, k) {
			continue
		}
		msg := "not a parameter of this endpoint (it takes " + strings.Join(known, ", ") + ")"
		if near := apiv1.Nearest(k, known); near != "" {
			msg = fmt.Sprintf("not a parameter of this endpoint; did you mean %s?", near)
		}
		ds = append(ds, apiv1.Detail{Path: k, Message: msg})
	}
	if len(ds) == 0 {
		return nil
	}
	slices.SortFunc(ds, func(a, b apiv1.Detail) int { return cmp.Compare(a.Path, b.Path) })
	e := apiv1.Errorf(400, apiv1.CodeUnknownParameter, "unknown query parameter %q", ds[0].Path)
	if len(ds) > 1 {
		e.Message = fmt.Sprintf("%d unknown query parameters", len(ds))
	}
	e.Details = ds
	return e
}

// ParseQuery reads a Query from URL parameters. A malformed min_version or version is an
// INVALID_REQUEST error, never an empty answer. Other parameters (index, wait) are ignored.
func ParseQuery(v url.Values) (*Query, error) {
	q := &Query{
		CapabilityID: v.Get("capability_id"),
		Provider:     v.Get("provider"),
		ServiceName:  v.Get("service_name"),
		Zone:         v.Get("zone"),
	}
	var ds []apiv1.Detail
	switch inc := v.Get("include"); inc {
	case "":
	case "all":
		q.IncludeAll = true
	default:
		ds = append(ds, apiv1.Detail{Path: "include", Message: fmt.Sprintf("the only value is all (out-of-rotation instances too), got %q", inc)})
	}
	if s := v.Get("min_version"); s != "" {
		mv, err := semver.NewVersion(s)
		if err != nil {
			ds = append(ds, apiv1.Detail{Path: "min_version", Message: fmt.Sprintf("not a version: %q", s)})
		}
		q.MinVersion = mv
	}
	if s := v.Get("version"); s != "" {
		c, err := ParseConstraint(s)
		if err != nil {
			ds = append(ds, apiv1.Detail{Path: "version", Message: err.Error()})
		}
		q.Constraint = c
	}
	if len(ds) > 0 {
		return nil, apiv1.InvalidRequest(ds)
	}
	return q, nil
}

// ParseConstraint parses a version constraint: space- or comma-separated AND, "||" for OR
// (">=1.0 <2.0", ">=1.0, <2.0", "1.x || >=3.0"). Parsed constraints are cached: a fleet
// asks the same few constraints over and over, and parsing costs a hundred times the check.
func ParseConstraint(s string) (*semver.Constraints, error) {
	if c, ok := constraints.Load(s); ok {
		return c.(*semver.Constraints), nil
	}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty version constraint")
	}
	c, err := semver.NewConstraint(s)
	if err != nil {
		return nil, fmt.Errorf("not a version constraint: %q: %v", s, err)
	}
	if constraintCount.Add(1) > maxCachedConstraints {
		constraints.Clear() // a flood of distinct constraints: start over rather than grow
		constraintCount.Store(0)
	}
	constraints.Store(s, c) // shared read-only: nothing mutates a parsed constraint
	return c, nil
}

const maxCachedConstraints = 1024

var (
	constraints     sync.Map // constraint text -> *semver.Constraints
	constraintCount atomic.Int64
)

// CanonicalQuery returns the selecting parameters of v in a fixed order, so that equal
// queries share one key (the server caches encoded answers by it).
func CanonicalQuery(v url.Values) string {
	var b strings.Builder
	for _, k := range queryParams {
		if s := v.Get(k); s != "" {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(s))
		}
	}
	return b.String()
}

// Matches reports whether the record's capability c satisfies q.
func (q *Query) Matches(r *Record, c *Capability) bool {
	switch {
	case q.CapabilityID != "" && c.CapabilityID != q.CapabilityID,
		q.Provider != "" && c.Provider != q.Provider,
		q.ServiceName != "" && r.ServiceName != q.ServiceName,
		q.Zone != "" && r.Zone != q.Zone,
		q.MinVersion != nil && c.Version.LessThan(q.MinVersion),
		q.Constraint != nil && !q.Constraint.Check(c.Version):
		return false
	}
	return true
}

// SortEntries puts entries in docs/reference/api.md's deterministic order: capability_id, provider,
// metadata.priority descending, capability_version descending, generation ascending.
//
// The common answer is the replicas of one capability at one version; one pass finds that
// case and sorts it by generation alone. Any other answer has few distinct (capability_id,
// provider, priority, version) among its entries — the replicas of a service register the
// same list — so its entries are dealt into one run per distinct key, the runs put in
// order, and each run (with the runs next to it whose version differs only in build
// metadata, which precedence ignores) sorted by generation, read once per entry. A
// comparison sort by the full order compared strings and versions of two records far apart
// in memory at every step: 195-208 ms for the 180,000 entries of an unfiltered answer at
// 60,000 instances (BenchmarkQueryAll), what a DNS or an xDS server asks at every change.
// An entry finds its run by its capability's address (shared by the replicas of a
// service), and the runs sort generations and places (16 bytes) rather than entries, which
// are then moved once each.
func SortEntries(es []Entry) {
	if len(es) < 2 {
		return
	}
	if uniform(es) {
		if len(es) < largeSort {
			slices.SortFunc(es, func(a, b Entry) int { return cmp.Compare(a.Record.Generation, b.Record.Generation) })
		} else {
			sortByGeneration(es)
		}
		return
	}
	type runKey struct {
		id, provider, version string
		priority              int64
	}
	runs := make(map[runKey]int32)
	// The replicas of a service share one parsed capability list (intern.go), so most entries
	// find their run by their capability's address, without hashing three strings. Bounded:
	// a fleet whose lists are not shared would make it a map of the answer.
	byCap := make(map[*Capability]int32)
	var first []*Capability // of each run, the capability of its first entry
	of := make([]int32, len(es))
	for i, e := range es {
		c := e.Capability()
		r, ok := byCap[c]
		if !ok {
			k := runKey{c.CapabilityID, c.Provider, c.CapabilityVersion, c.Priority}
			if r, ok = runs[k]; !ok {
				r = int32(len(first))
				runs[k] = r
				first = append(first, c)
			}
			if len(byCap) < maxRunAddresses {
				byCap[c] = r
			}
		}
		of[i] = r
	}
	// before orders two runs; 0 when their entries go by generation alone.
	before := func(a, b int32) int {
		ca, cb := first[a], first[b]
		return cmp.Or(strings.Compare(ca.CapabilityID, cb.CapabilityID), strings.Compare(ca.Provider, cb.Provider),
			cmp.Compare(cb.Priority, ca.Priority), apiv1.CompareVersions(cb.Version, ca.Version))
	}
	order := make([]int32, len(first))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, before)
	// Deal the entries into their runs, in order: each as its generation and where it is in
	// es (16 bytes, where moving whole entries moved 56).
	at := make([]int, len(first)) // where each run begins
	for _, r := range of {
		at[r]++
	}
	n := 0
	for _, r := range order {
		n, at[r] = n+at[r], n
	}
	ds := make([]genAt, len(es))
	next := slices.Clone(at)
	for i, e := range es {
		ds[next[of[i]]] = genAt{e.Record.Generation, int32(i)}
		next[of[i]]++
	}
	// Sort each span of runs that tie by generation.
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && before(order[i], order[j]) == 0 {
			j++
		}
		sortGenAt(ds[at[order[i]]:next[order[j-1]]])
		i = j
	}
	place(es, ds)
}

// largeSort is the size from which a sort by generation sorts generations and places,
// rather than the entries themselves: below it, the two slices it takes cost more than
// moving entries saves.
const largeSort = 4096

// maxRunAddresses bounds the capability addresses SortEntries remembers the run of.
var maxRunAddresses = 1 << 16 // a variable for the tests

// genAt is an entry's generation and its place in the answer being sorted.
type genAt struct {
	gen int64
	at  int32
}

func sortGenAt(ds []genAt) {
	slices.SortFunc(ds, func(a, b genAt) int { return cmp.Compare(a.gen, b.gen) })
}

// sortByGeneration sorts es by generation alone, moving 16 bytes an entry rather than 48.
func sortByGeneration(es []Entry) {
	ds := make([]genAt, len(es))
	for i, e := range es {
		ds[i] = genAt{e.Record.Generation, int32(i)}
	}
	sortGenAt(ds)
	place(es, ds)
}

// place moves the entries of es where ds says (ds[i].at is the entry that goes to i), in
// place, a cycle of the permutation at a time: each entry is written once, and no second
// answer is made (an entry holds a pointer, and the collector's write barrier made copying
// a whole answer back a quarter of the sort). It spends ds.
func place(es []Entry, ds []genAt) {
	for i := range ds {
		if ds[i].at < 0 || int(ds[i].at) == i {
			continue
		}
		held, j := es[i], i
		for {
			k := int(ds[j].at)
			ds[j].at = -1
			if k == i {
				es[j] = held
				break
			}
			es[j] = es[k]
			j = k
		}
	}
}

// uniform reports whether entries share their capability, provider, priority and version.
func uniform(es []Entry) bool {
	first := es[0].Capability()
	for _, e := range es[1:] {
		c := e.Capability()
		if c.CapabilityID != first.CapabilityID || c.Provider != first.Provider || c.Priority != first.Priority ||
			apiv1.CompareVersions(c.Version, first.Version) != 0 {
			return false
		}
	}
	return true
}
