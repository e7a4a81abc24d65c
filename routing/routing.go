package routing

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// StaticRoute is an operator's explicit route; it wins over every dynamic claim.
type StaticRoute struct {
	Path     string   `json:"path" yaml:"path"`
	Methods  []string `json:"methods" yaml:"methods"`
	Upstream string   `json:"upstream" yaml:"upstream"`
}

// ManifestInput is one instance's manifest as the registry recorded it: generation and
// endpoint come from the registry, not from the manifest.
type ManifestInput struct {
	InstanceID string          `json:"instance_id,omitempty"`
	Generation int64           `json:"generation"`
	Endpoint   string          `json:"endpoint"`
	Manifest   json.RawMessage `json:"manifest"`
	// Parsed, when set, is used instead of Manifest: a gateway gets manifests already
	// decoded from the registry and need not encode them again.
	Parsed *apiv1.Manifest `json:"-"`
}

// Policy maps a service name to the path prefixes it may claim. A service missing from it
// may claim nothing.
type Policy map[string][]string

// Alias is a public path a capability declares (metadata.public_paths): POST <Path> is
// forwarded to the instance's /v1/capabilities/<CapabilityID>/invoke. Aliases take part in
// precedence like manifest routes of their service.
type Alias struct {
	Path         string `json:"path"`
	CapabilityID string `json:"capability_id"`
	Service      string `json:"service"`
	Version      string `json:"version"`
	Instance     string `json:"instance"`
	Endpoint     string `json:"endpoint"`
	Generation   int64  `json:"generation"`
}

// Input is everything a table is derived from.
type Input struct {
	Static    []StaticRoute
	Manifests []ManifestInput
	Aliases   []Alias
	Policy    Policy
}

// Route is one row of the canonical table.
type Route struct {
	Pattern    string   `json:"pattern"`
	Method     string   `json:"method"`
	Source     string   `json:"source"`
	Upstream   string   `json:"upstream,omitempty"`
	Service    string   `json:"service,omitempty"`
	Version    string   `json:"version,omitempty"`
	Instances  []string `json:"instances,omitempty"`
	Idempotent bool     `json:"idempotent"`
	Weight     *int     `json:"weight,omitempty"`
}

// Rejected is a manifest that was rejected whole, with the first rule it broke.
type Rejected struct {
	Instance string `json:"instance"`
	Service  string `json:"service"`
	Code     string `json:"code"`
	// Reason says what was wrong, for operators; it is not part of the canonical form.
	Reason string `json:"-"`
}

// Conflict is a (pattern, method) that several claimants wanted.
type Conflict struct {
	Pattern string   `json:"pattern"`
	Method  string   `json:"method"`
	Winner  string   `json:"winner"`
	Losers  []string `json:"losers"`
	key     string
}

// Canonical is the canonical form of a table.
type Canonical struct {
	Routes    []Route    `json:"routes"`
	Rejected  []Rejected `json:"rejected"`
	Conflicts []Conflict `json:"conflicts"`
}

// Upstream is one instance a dynamic route may send a request to.
type Upstream struct {
	Instance string
	Endpoint string
}

// Entry is a route of a derived table with what a proxy needs to serve it.
type Entry struct {
	Route
	// Key is the pattern's key (parameter names erased), the table's sort key.
	Key string
	// Rewrite, when set, is the path requests are forwarded to instead of their own (a
	// public alias forwards to the capability's invoke endpoint).
	Rewrite string
	// Segments of the pattern.
	Segments []apiv1.Segment
	// Upstreams, sorted by instance (dynamic routes); Route.Upstream for static ones.
	Upstreams []Upstream
	// IdempotentRetry says whether a failed connection may be retried on another instance.
	IdempotentRetry bool
	weight          int // what Route.Weight points to, for a dynamic route
}

// Table is a derived routing table. It is immutable and safe for concurrent use.
type Table struct {
	entries   []*Entry // in canonical order
	rejected  []Rejected
	conflicts []Conflict
	root      *node
}

var staticIdempotent = map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "PUT": true, "DELETE": true}

// origin is what every claim of one manifest (or alias) shares.
type origin struct {
	service, version   string
	instance, endpoint string
	generation         int64
	rewrite            string
	// replicas are the other instances whose manifest is this one's but for the instance:
	// every claim of this origin is theirs too.
	replicas []*origin
}

// claim is one method of one valid manifest route.
type claim struct {
	key, pattern string
	mi           int // index of method in apiv1.Methods
	segs         []apiv1.Segment
	weight       int
	idempotent   bool
	*origin
}

// slot is one path key: per method the static route and the claimant groups (replicas of
// one service and version). Most pairs have one group, so a short slice.
type slot struct {
	key         string
	first, last *group                      // every method's claimant groups, in the order they came
	static      *[len(apiv1.Methods)]*Entry // the static route of each method, when there is one
}

// staticClaim is a static route, parsed.
type staticClaim struct {
	route StaticRoute
	segs  []apiv1.Segment
	key   string
}

// slotsOf groups the claims and static routes whose key falls in shard (of shards, by hash)
// into slots, and returns them sorted by key.
func slotsOf(claims []*claim, statics []staticClaim, seed maphash.Seed, shard, shards int) []*slot {
	mine := func(key string) bool { return shards == 1 || maphash.String(seed, key)%uint64(shards) == uint64(shard) }
	slots := make(map[string]*slot, len(claims)/2/shards+len(statics))
	var ordered []*slot
	var slotArena arena[slot]
	var groupArena arena[group]
	var upstreamArena []Upstream
	slotOf := func(key string) *slot {
		sl := slots[key]
		if sl == nil {
			sl = slotArena.new()
			sl.key = key
			slots[key] = sl
			ordered = append(ordered, sl)
		}
		return sl
	}
	var last *slot // claims of one route come together: skip the hash and the map for its other methods
	for _, c := range claims {
		sl := last
		if sl == nil || sl.key != c.key {
			if !mine(c.key) {
				continue
			}
			sl = slotOf(c.key)
			last = sl
		}
		var g *group
		for x := sl.first; x != nil; x = x.next {
			if x.mi == c.mi && x.service == c.service && x.newest.version == c.version {
				g = x
				break
			}
		}
		if g == nil {
			// Upstreams are carved from a shared block: one allocation for many groups. A
			// group that outgrows its share (other manifests of its version) is copied.
			n := 1 + len(c.replicas)
			if len(upstreamArena) < n {
				upstreamArena = make([]Upstream, max(arenaBlock, n))
			}
			g = groupArena.new()
			*g = group{mi: c.mi, service: c.service, seniority: c.generation, newest: c, newestGen: c.generation, rewrite: c.rewrite,
				upstreams: upstreamArena[:0:n]}
			upstreamArena = upstreamArena[n:]
			if sl.last == nil {
				sl.first = g
			} else {
				sl.last.next = g
			}
			sl.last = g
		}
		g.add(c, c.origin)
		for _, o := range c.replicas {
			g.add(c, o)
		}
	}
	for _, st := range statics {
		if !mine(st.key) {
			continue
		}
		sl := slotOf(st.key)
		if sl.static == nil {
			sl.static = &[len(apiv1.Methods)]*Entry{}
		}
		for _, m := range st.route.Methods {
			if mi := apiv1.MethodIndex(m); mi >= 0 {
				sl.static[mi] = &Entry{Route: Route{Pattern: st.route.Path, Method: m, Source: "static", Upstream: st.route.Upstream,
					Idempotent: staticIdempotent[m]}, Key: sl.key, Segments: st.segs, Upstreams: []Upstream{{Instance: "static", Endpoint: st.route.Upstream}}}
			}
		}
	}
	slices.SortFunc(ordered, func(a, b *slot) int { return strings.Compare(a.key, b.key) })
	return ordered
}

// mergeSlots merges two key-sorted lists of slots with no key in common.
func mergeSlots(a, b []*slot) []*slot {
	out := make([]*slot, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].key < b[0].key {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// testShards, when set by a test, is how many shards the claims are grouped in and how many
// workers build the entries (1: all of it serial, the reference).
var testShards int

// minParallelSlots is the fewest path keys per worker worth a goroutine.
const minParallelSlots = 2048

// group is the claims of one (key, method, service, version): replicas. The newest claim
// gives the route its pattern, weight and idempotency.
type group struct {
	mi        int    // the method, an index of apiv1.Methods
	newest    *claim // the claim of the newest generation in the group
	newestGen int64
	seniority int64 // lowest generation
	rewrite   string
	upstreams []Upstream
	service   string
	ver       *semver.Version // parsed only when the group has rivals
	next      *group          // the slot's next group
}

func (g *group) label() string { return g.service + "@" + g.newest.version }

// add counts claim c, made by origin o (c's own or one of its replicas), into g.
func (g *group) add(c *claim, o *origin) {
	g.upstreams = append(g.upstreams, Upstream{Instance: o.instance, Endpoint: o.endpoint})
	g.seniority = min(g.seniority, o.generation)
	if o.generation > g.newestGen {
		g.newest, g.newestGen = c, o.generation
	}
}

// sameButInstance reports whether a and b are one manifest published by two instances.
func sameButInstance(a, b *apiv1.Manifest) bool {
	if a.FARP != b.FARP || a.Service.Name != b.Service.Name || a.Service.Version != b.Service.Version || len(a.Routes) != len(b.Routes) {
		return false
	}
	if (a.Health == nil) != (b.Health == nil) || a.Health != nil && (a.Health.Path != b.Health.Path || a.Health.Interval != b.Health.Interval ||
		!sameNumber(a.Health.UnhealthyAfter, b.Health.UnhealthyAfter)) {
		return false
	}
	for i, ra := range a.Routes {
		rb := b.Routes[i]
		if ra.Path != rb.Path || !slices.Equal(ra.Methods, rb.Methods) || !slices.Equal(ra.Idempotent, rb.Idempotent) || !sameNumber(ra.Weight, rb.Weight) {
			return false
		}
	}
	return true
}

func sameNumber(a, b *apiv1.Number) bool { return a == b || a != nil && b != nil && *a == *b }

// result is what the analysis of one manifest came to.
type result struct {
	claims    []claim
	rej       *Rejected
	replicaOf int // 1 + the index of the manifest this one repeats but for the instance, or 0
}

// decodeAll returns the manifests decoded: as given when they were, decoded on the cores
// when not (a manifest that does not decode is nil, and rejected in results).
func decodeAll(ms []ManifestInput, results []result) []*apiv1.Manifest {
	parsed := make([]*apiv1.Manifest, len(ms))
	var wg sync.WaitGroup
	for lo, hi := range chunks(len(ms), runtime.GOMAXPROCS(0), minParallelManifests) {
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				if parsed[i] = ms[i].Parsed; parsed[i] == nil {
					parsed[i], results[i].rej = decodeManifest(ms[i].Manifest)
				}
			}
		})
	}
	wg.Wait()
	return parsed
}

// Derive computes the table of in. It never fails: bad manifests are rejected, bad static
// routes are reported by ValidateStatic beforehand.
func Derive(in Input) *Table {
	t := &Table{rejected: []Rejected{}, conflicts: []Conflict{}}
	// Validating and analysing a manifest is independent of every other one but for its
	// replicas: the services are shared between the cores by hash, and each worker finds
	// the replicas among its own services. Results are gathered in input order.
	ms := in.Manifests
	results := make([]result, len(ms))
	parsed := decodeAll(ms, results)
	workers := 1
	if len(ms) >= 2*minParallelManifests {
		workers = runtime.GOMAXPROCS(0)
	}
	if testShards > 0 {
		workers = testShards
	}
	seed := maphash.MakeSeed()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// Replicas of a service version usually publish the same manifest but for the
			// instance: such a manifest is analysed once, and its claims carry every
			// replica as an origin.
			first := make(map[[2]string]int, len(ms)/2/workers)
			for i, m := range parsed {
				if m == nil || workers > 1 && maphash.String(seed, m.Service.Name)%uint64(workers) != uint64(w) {
					continue
				}
				if m.Service.Instance != "" {
					k := [2]string{m.Service.Name, m.Service.Version}
					if r, seen := first[k]; !seen {
						first[k] = i
					} else if sameButInstance(parsed[r], m) {
						results[i].replicaOf = r + 1
						continue
					}
				}
				results[i].claims, results[i].rej = claimsOf(m, ms[i], in.Policy[m.Service.Name])
			}
		})
	}
	wg.Wait()
	n := 0
	for i, r := range results {
		if r.replicaOf > 0 {
			m, rep := parsed[i], results[r.replicaOf-1]
			if rep.rej != nil {
				t.rejected = append(t.rejected, Rejected{Instance: m.Service.Instance, Service: rep.rej.Service, Code: rep.rej.Code, Reason: rep.rej.Reason})
			} else if len(rep.claims) > 0 {
				o := *rep.claims[0].origin
				o.instance, o.endpoint, o.generation = m.Service.Instance, ms[i].Endpoint, ms[i].Generation
				rep.claims[0].origin.replicas = append(rep.claims[0].origin.replicas, &o)
			}
			continue
		}
		n += len(r.claims)
	}
	claims := make([]*claim, 0, n+len(in.Aliases))
	for _, r := range results {
		if r.rej != nil {
			t.rejected = append(t.rejected, *r.rej)
			continue
		}
		for i := range r.claims {
			claims = append(claims, &r.claims[i])
		}
	}
	for _, a := range in.Aliases {
		if c := aliasClaim(a, in.Policy[a.Service]); c != nil {
			claims = append(claims, c)
		}
	}
	slices.SortFunc(t.rejected, func(a, b Rejected) int { return cmp.Compare(a.Instance, b.Instance) })

	// Claims are grouped by path key: the keys are shared between the cores by hash, each
	// groups and sorts its share, and the sorted shares are merged.
	var statics []staticClaim
	for _, st := range in.Static {
		if segs, err := apiv1.ParsePath(st.Path); err == nil {
			statics = append(statics, staticClaim{route: st, segs: segs, key: apiv1.PathKey(segs)})
		}
	}
	shards := 1
	if len(claims) >= 2*minParallelSlots {
		shards = max(1, runtime.GOMAXPROCS(0))
	}
	if testShards > 0 {
		shards = testShards
	}
	sorted := make([][]*slot, shards)
	for sh := range shards {
		wg.Go(func() { sorted[sh] = slotsOf(claims, statics, seed, sh, shards) })
	}
	wg.Wait()
	ordered := sorted[0]
	for _, other := range sorted[1:] {
		ordered = mergeSlots(ordered, other)
	}
	// Each path key's routes and conflicts depend on that key alone: build the two halves of
	// the table on both cores, then join them in order.
	type part struct {
		entries   []*Entry
		conflicts []Conflict
		trie      *node
	}
	var ranges [][2]int
	workers = runtime.GOMAXPROCS(0)
	if testShards > 0 {
		workers = testShards
	}
	for lo, hi := range chunks(len(ordered), workers, minParallelSlots) {
		ranges = append(ranges, [2]int{lo, hi})
	}
	parts := make([]part, max(1, len(ranges)))
	parts[0].trie = &node{} // no slots: the empty trie
	for i, r := range ranges {
		wg.Go(func() {
			p := &parts[i]
			p.entries, p.conflicts = buildEntries(ordered[r[0]:r[1]])
			p.trie = compile(p.entries) // the entries just built are still in the cache
		})
	}
	wg.Wait()
	t.entries = make([]*Entry, 0, len(claims)+len(in.Static))
	for _, p := range parts {
		t.entries = append(t.entries, p.entries...)
		t.conflicts = append(t.conflicts, p.conflicts...)
	}
	// The parts' tries cover distinct keys: merging them shares the nodes of the segments
	// their keys have in common (at least the root).
	t.root = parts[0].trie
	for _, p := range parts[1:] {
		merge(t.root, p.trie)
	}
	return t
}

// buildEntries turns slots, in key order, into table entries and conflicts: per method, the
// static route or the winning group, and who lost.
func buildEntries(slots []*slot) ([]*Entry, []Conflict) {
	var entries []*Entry
	var conflicts []Conflict
	var entryArena arena[Entry]
	var idArena []string
	var buf [8]*group
	for _, sl := range slots {
		k := sl.key
		for mi := range apiv1.Methods { // byte order of methods: the table's order within a key
			gs := buf[:0]
			for g := sl.first; g != nil; g = g.next {
				if g.mi == mi {
					gs = append(gs, g)
				}
			}
			var static *Entry
			if sl.static != nil {
				static = sl.static[mi]
			}
			if len(gs) == 0 && static == nil {
				continue
			}
			for _, g := range gs {
				if len(g.upstreams) > 1 {
					slices.SortFunc(g.upstreams, func(a, b Upstream) int { return cmp.Compare(a.Instance, b.Instance) })
				}
			}
			if len(gs) > 1 {
				for _, g := range gs {
					if g.ver == nil {
						g.ver, _ = semver.StrictNewVersion(g.newest.version) // valid: the manifest was
					}
				}
				slices.SortFunc(gs, func(a, b *group) int {
					if c := b.ver.Compare(a.ver); c != 0 {
						return c
					}
					if c := cmp.Compare(b.newest.weight, a.newest.weight); c != 0 {
						return c
					}
					return cmp.Compare(a.seniority, b.seniority)
				})
			}
			var e *Entry
			var losers []string
			if static != nil {
				e = static
				for _, g := range gs {
					losers = append(losers, g.label())
				}
			} else {
				w := gs[0]
				if len(idArena) < len(w.upstreams) {
					idArena = make([]string, max(arenaBlock, len(w.upstreams)))
				}
				ids := idArena[:len(w.upstreams):len(w.upstreams)]
				idArena = idArena[len(w.upstreams):]
				for i, u := range w.upstreams {
					ids[i] = u.Instance
				}
				e = entryArena.new()
				n := w.newest
				*e = Entry{Route: Route{Pattern: n.pattern, Method: apiv1.Methods[mi], Source: "dynamic", Service: w.service, Version: n.version,
					Instances: ids, Idempotent: n.idempotent}, Key: k, Rewrite: w.rewrite, Segments: n.segs,
					Upstreams: w.upstreams, IdempotentRetry: n.idempotent, weight: n.weight}
				e.Weight = &e.weight
				for _, g := range gs[1:] {
					losers = append(losers, g.label())
				}
			}
			entries = append(entries, e)
			if len(losers) > 0 {
				slices.Sort(losers)
				winner := "static"
				if e.Source == "dynamic" {
					winner = e.Service + "@" + e.Version
				}
				conflicts = append(conflicts, Conflict{Pattern: e.Pattern, Method: e.Method, Winner: winner, Losers: losers, key: k})
			}
		}
	}
	return entries, conflicts
}

// granted reports whether a route path (valid by the route rules) lies inside one of the
// prefixes a policy grants its service: "/" for every path, else a path of literal
// segments, a trailing "/" ignored. A malformed prefix, or one with a parameter, grants
// nothing. The test is on the text: the path's leading segments are the prefix's exactly
// when the path starts with the prefix and goes on, if at all, with a "/".
func granted(path string, prefixes []string) bool {
	for _, pre := range prefixes {
		if pre == "/" {
			return true
		}
		if pre = strings.TrimSuffix(pre, "/"); pre == "/" { // "//"
			return true
		}
		literal := strings.HasPrefix(pre, "/") && !strings.HasSuffix(pre, "/") && !strings.Contains(pre, "//") && !strings.ContainsAny(pre, "{}")
		if literal && strings.HasPrefix(path, pre) && (len(path) == len(pre) || path[len(pre)] == '/') {
			return true
		}
	}
	return false
}

// claimsOf validates manifest m, published as mi, and returns its claims, or why it is
// rejected.
func claimsOf(m *apiv1.Manifest, mi ManifestInput, prefixes []string) ([]claim, *Rejected) {
	reject := func(code, reason string) *Rejected {
		return &Rejected{Instance: m.Service.Instance, Service: m.Service.Name, Code: code, Reason: reason}
	}
	ps, infos := m.Analyze()
	if len(ps) > 0 {
		return nil, reject(ps[0].Code, ps[0].Path+": "+ps[0].Message)
	}
	n := 0
	for _, r := range m.Routes {
		n += len(r.Methods)
	}
	o := &origin{service: m.Service.Name, version: m.Service.Version,
		instance: m.Service.Instance, endpoint: mi.Endpoint, generation: mi.Generation}
	out := make([]claim, 0, n) // one allocation for the manifest's claims
	for i, r := range m.Routes {
		segs := infos[i].Segments
		if !granted(r.Path, prefixes) {
			return nil, reject(apiv1.CodePathNotAuthorized, fmt.Sprintf("path %q is outside every prefix granted to %q", r.Path, m.Service.Name))
		}
		for _, meth := range r.Methods {
			out = append(out, claim{key: infos[i].Key, mi: apiv1.MethodIndex(meth), pattern: r.Path, segs: segs,
				weight: r.WeightOr(100), idempotent: slices.Contains(r.Idempotent, meth), origin: o})
		}
	}
	return out, nil
}

// aliasClaim turns a public path into a POST claim; an alias outside the service's
// prefixes, or with a malformed path or version, claims nothing.
func aliasClaim(a Alias, prefixes []string) *claim {
	segs, err := apiv1.ParsePath(a.Path)
	_, verr := semver.StrictNewVersion(a.Version)
	if err != nil || verr != nil || !granted(a.Path, prefixes) {
		return nil
	}
	return &claim{key: apiv1.PathKey(segs), mi: apiv1.MethodIndex("POST"), pattern: a.Path, segs: segs, weight: 100,
		origin: &origin{service: a.Service, version: a.Version, instance: a.Instance, endpoint: a.Endpoint,
			generation: a.Generation, rewrite: "/v1/capabilities/" + a.CapabilityID + "/invoke"}}
}

// decodeManifest decodes a manifest; a value of the wrong JSON type rejects it with the
// code of the section it is in.
func decodeManifest(raw json.RawMessage) (*apiv1.Manifest, *Rejected) {
	var m apiv1.Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	err := dec.Decode(&m)
	if err == nil {
		return &m, nil
	}
	var loose struct {
		Service struct {
			Name     any `json:"name"`
			Instance any `json:"instance"`
		} `json:"service"`
	}
	json.Unmarshal(raw, &loose)
	name, _ := loose.Service.Name.(string)
	inst, _ := loose.Service.Instance.(string)
	code := apiv1.CodeInvalidService
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		switch {
		case te.Field == "farp":
			code = apiv1.CodeUnsupportedVersion
		case strings.HasPrefix(te.Field, "health"):
			code = apiv1.CodeInvalidHealth
		case strings.HasPrefix(te.Field, "routes"):
			code = apiv1.CodeInvalidRoute
		}
	}
	return nil, &Rejected{Instance: inst, Service: name, Code: code, Reason: err.Error()}
}

// Canonical returns the canonical form of the table.
func (t *Table) Canonical() Canonical {
	c := Canonical{Routes: make([]Route, len(t.entries)), Rejected: t.rejected, Conflicts: t.conflicts}
	for i, e := range t.entries {
		c.Routes[i] = e.Route
	}
	return c
}

// Entries returns the routes with what serving them needs, in canonical order.
func (t *Table) Entries() []*Entry { return t.entries }

// ValidateStatic checks static routes: a path by the route rules, methods from the known
// set, an absolute http(s) upstream, and no (key, method) twice.
func ValidateStatic(routes []StaticRoute) error {
	var errs []error
	seen := map[[2]string]bool{}
	for i, s := range routes {
		segs, err := apiv1.ParsePath(s.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("static route %d: %w", i, err))
			continue
		}
		if len(s.Methods) == 0 {
			errs = append(errs, fmt.Errorf("static route %d (%s): no methods", i, s.Path))
		}
		for _, m := range s.Methods {
			if !slices.Contains([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}, m) {
				errs = append(errs, fmt.Errorf("static route %d (%s): method %q", i, s.Path, m))
			}
			k := [2]string{apiv1.PathKey(segs), m}
			if seen[k] {
				errs = append(errs, fmt.Errorf("static route %d: %s %s is declared twice", i, m, s.Path))
			}
			seen[k] = true
		}
		if !strings.HasPrefix(s.Upstream, "http://") && !strings.HasPrefix(s.Upstream, "https://") {
			errs = append(errs, fmt.Errorf("static route %d (%s): upstream %q is not an http(s) URL", i, s.Path, s.Upstream))
		}
	}
	return errors.Join(errs...)
}

// minParallelManifests is the fewest manifests per worker worth a goroutine.
const minParallelManifests = 512

// chunks splits [0, n) into at most workers contiguous ranges of at least least items
// each (one range when n is smaller).
func chunks(n, workers, least int) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		w := max(1, min(workers, n/max(1, least)))
		size := (n + w - 1) / w
		for lo := 0; lo < n; lo += size {
			if !yield(lo, lo+min(size, n-lo)) {
				return
			}
		}
	}
}

// arenaBlock is how many values an arena allocates at once.
const arenaBlock = 1024

// arena hands out pointers to zero values allocated arenaBlock at a time: one
// allocation, instead of one each, for the many small values of a derivation.
type arena[T any] struct{ block []T }

func (a *arena[T]) new() *T {
	if len(a.block) == cap(a.block) {
		a.block = make([]T, 0, arenaBlock)
	}
	a.block = a.block[:len(a.block)+1]
	return &a.block[len(a.block)-1]
}
