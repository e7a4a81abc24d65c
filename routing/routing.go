package routing

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"math/bits"
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

// InputFromView builds a derivation's input from a routes view (the registry's manifests and
// public paths) with the operator's static routes and policy: what a gateway, or any other
// front end serving the same table, derives from.
func InputFromView(static []StaticRoute, policy Policy, manifests []apiv1.ManifestEntry, paths []apiv1.PublicPath) Input {
	in := Input{Static: static, Policy: policy, Manifests: make([]ManifestInput, 0, len(manifests))}
	byInstance := map[string]apiv1.ManifestEntry{}
	for _, m := range manifests {
		in.Manifests = append(in.Manifests, ManifestInput{InstanceID: m.InstanceID, Generation: m.Generation, Endpoint: m.Endpoint, Parsed: m.Manifest})
		byInstance[m.InstanceID] = m
	}
	for _, p := range paths {
		// The routes view names the instance of a public path; its service and version come
		// from the instance's manifest entry (an instance without a manifest has no aliases).
		if m, ok := byInstance[p.InstanceID]; ok {
			in.Aliases = append(in.Aliases, Alias{Path: p.Path, CapabilityID: p.CapabilityID, Service: m.ServiceName,
				Version: m.ServiceVersion, Instance: p.InstanceID, Endpoint: p.Endpoint, Generation: p.Generation})
		}
	}
	return in
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
	// MaxBodyBytes is the largest request body the service takes (its manifest's
	// capabilities.max_body_bytes); 0: the gateway's default.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// Streaming: the service reads bodies as they come (capabilities.streaming).
	Streaming bool `json:"streaming,omitempty"`
	// Schema is the route's schema reference, as the manifest gives it.
	Schema string `json:"schema,omitempty"`
	// MaxStale is the route's own bound on serving from a last-known-good view, as the
	// manifest gives it ("30s"; empty: none declared).
	MaxStale string `json:"max_stale,omitempty"`
}

// Rejected is a manifest that was rejected whole, with the first rule it broke.
type Rejected struct {
	Instance string `json:"instance"`
	Service  string `json:"service"`
	Code     string `json:"code"`
	// Reason says what was wrong, for operators; it is not part of the canonical form.
	Reason string `json:"-"`
}

// RejectedAlias is a public path the table does not serve, and why: its path is malformed, its
// version is not a version, or it lies outside the service's granted prefixes.
type RejectedAlias struct {
	Path     string `json:"path"`
	Instance string `json:"instance"`
	Service  string `json:"service"`
	Code     string `json:"code"`
	Reason   string `json:"reason"`
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
	Routes   []Route    `json:"routes"`
	Rejected []Rejected `json:"rejected"`
	// RejectedAliases are the public paths dropped, each with its reason (absent when none).
	RejectedAliases []RejectedAlias `json:"rejected_aliases,omitempty"`
	Conflicts       []Conflict      `json:"conflicts"`
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
	// Upstreams, sorted by instance (dynamic routes); Route.Upstream for static ones.
	Upstreams []Upstream
	weight    int // what Route.Weight points to, for a dynamic route
}

// Table is a derived routing table. It is immutable and safe for concurrent use.
type Table struct {
	entries   []*Entry // in canonical order
	rejected  []Rejected
	aliases   []RejectedAlias // public paths dropped
	conflicts []Conflict
	root      *node
	// chunked, set on a Deriver's table, holds the entries and conflicts run by run of keys;
	// lazy gathers them into entries and conflicts when they are first asked for.
	chunked []*chunk
	lazy    *sync.Once
}

// gather fills entries and conflicts of a Deriver's table from its chunks, once.
func (t *Table) gather() {
	if t.lazy == nil {
		return
	}
	t.lazy.Do(func() {
		n := 0
		for _, c := range t.chunked {
			n += len(c.entries)
		}
		t.entries = make([]*Entry, 0, n)
		t.conflicts = []Conflict{}
		for _, c := range t.chunked {
			t.entries = append(t.entries, c.entries...)
			t.conflicts = append(t.conflicts, c.conflicts...)
		}
	})
}

var staticIdempotent = map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "PUT": true, "DELETE": true}

// origin is what every claim of one manifest (or alias) shares.
type origin struct {
	service, version   string
	instance, endpoint string
	generation         int64
	rewrite            string
	maxBody            int64 // capabilities.max_body_bytes, 0 when not declared
	streaming          bool
	// replicas are the other instances whose manifest is this one's but for the instance:
	// every claim of this origin is theirs too.
	replicas []*origin
}

// claim is one valid manifest route (or public alias) and the methods it claims.
type claim struct {
	key, pattern string
	hash         uint64 // of the key, by the derivation's seed
	segs         []apiv1.Segment
	weight       int
	schema       string
	maxStale     string
	methods      methodSet // the methods claimed
	idempotent   methodSet // those of them declared idempotent
	*origin
}

// methodSet holds methods as bits, by index in apiv1.Methods.
type methodSet uint8

func (s methodSet) has(mi int) bool { return s&(1<<mi) != 0 }

// sameButInstance reports whether a and b are one manifest published by two instances.
func sameButInstance(a, b *apiv1.Manifest) bool {
	if a.FARP != b.FARP || a.Service.Name != b.Service.Name || a.Service.Version != b.Service.Version || len(a.Routes) != len(b.Routes) {
		return false
	}
	if (a.Health == nil) != (b.Health == nil) || a.Health != nil && (a.Health.Path != b.Health.Path || a.Health.Interval != b.Health.Interval ||
		!sameNumber(a.Health.UnhealthyAfter, b.Health.UnhealthyAfter)) {
		return false
	}
	if a.MaxBodyBytesOr(0) != b.MaxBodyBytesOr(0) || a.IsStreaming() != b.IsStreaming() {
		return false
	}
	for i, ra := range a.Routes {
		rb := b.Routes[i]
		if ra.Path != rb.Path || !slices.Equal(ra.Methods, rb.Methods) || !slices.Equal(ra.Idempotent, rb.Idempotent) || !sameNumber(ra.Weight, rb.Weight) || ra.Schema != rb.Schema || ra.MaxStale != rb.MaxStale {
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
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	defer sc.reuse()
	return derive(in, sc, 0)
}

// derive is Derive with the scratch it uses. fixed, when not 0, is how many workers analyse
// the manifests, how many shards the claims are grouped in and how many workers build the
// entries, whatever the size of the input (1: all of it serial, the reference the sharded
// derivations are tested against); 0 sizes them by the input and the cores.
func derive(in Input, sc *scratch, fixed int) *Table {
	t := &Table{rejected: []Rejected{}, conflicts: []Conflict{}}
	// Validating and analysing a manifest is independent of every other one but for its
	// replicas: the services are shared between the cores by hash, and each worker finds
	// the replicas among its own services. Results are gathered in input order.
	ms := in.Manifests
	workers, shards := 1, 1
	if len(ms) >= 2*minParallelManifests {
		workers = runtime.GOMAXPROCS(0)
	}
	if fixed > 0 {
		workers, shards = fixed, fixed
	}
	sc.fit(workers, max(shards, runtime.GOMAXPROCS(0)))
	results := slices.Grow(sc.results[:0], len(ms))[:len(ms)]
	clear(results)
	sc.results = results
	parsed := decodeAll(ms, results)
	seed := maphash.MakeSeed()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// Replicas of a service version usually publish the same manifest but for the
			// instance: such a manifest is analysed once, and its claims carry every
			// replica as an origin.
			an := &sc.analyses[w]
			if an.first == nil {
				an.first = make(map[[2]string]int, len(ms)/2/workers)
			}
			first := an.first
			defer clear(first)
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
				results[i].claims, results[i].rej = claimsOf(m, ms[i], in.Policy[m.Service.Name], seed, an)
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
				o := sc.origins.new()
				*o = *rep.claims[0].origin
				o.instance, o.endpoint, o.generation, o.replicas = m.Service.Instance, ms[i].Endpoint, ms[i].Generation, nil
				rep.claims[0].origin.replicas = append(rep.claims[0].origin.replicas, o)
			}
			continue
		}
		n += len(r.claims)
	}
	claims := slices.Grow(sc.claims[:0], n+len(in.Aliases))
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
		c, rej := aliasClaim(a, in.Policy[a.Service], seed)
		if rej != nil {
			t.aliases = append(t.aliases, *rej)
			continue
		}
		claims = append(claims, c)
	}
	slices.SortFunc(t.aliases, func(a, b RejectedAlias) int {
		return compareRejectedAliases(a, b)
	})
	sc.claims = claims
	slices.SortFunc(t.rejected, compareRejected)

	// Claims are grouped by path key: the keys are shared between the cores by hash, each
	// groups and sorts its share, and the sorted shares are merged.
	var statics []staticClaim
	for _, st := range in.Static {
		if segs, err := apiv1.ParsePath(st.Path); err == nil {
			key := Key(segs)
			statics = append(statics, staticClaim{route: st, segs: segs, key: key, hash: maphash.String(seed, key)})
		}
	}
	if fixed == 0 && len(claims) >= 2*minParallelSlots {
		shards = runtime.GOMAXPROCS(0)
	}
	sorted := make([][]*slot, shards)
	for sh := range shards {
		wg.Go(func() { sorted[sh] = slotsOf(claims, statics, sh, shards, &sc.groups[sh]) })
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
	if fixed > 0 {
		workers = fixed
	}
	for lo, hi := range chunks(len(ordered), workers, minParallelSlots) {
		ranges = append(ranges, [2]int{lo, hi})
	}
	parts := make([]part, max(1, len(ranges)))
	parts[0].trie = &node{} // no slots: the empty trie
	for i, r := range ranges {
		wg.Go(func() {
			p := &parts[i]
			p.entries, p.conflicts, p.trie = buildEntries(ordered[r[0]:r[1]], 0)
		})
	}
	wg.Wait()
	n = 0
	for _, p := range parts {
		n += len(p.entries)
	}
	t.entries = make([]*Entry, 0, n)
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

// buildEntries turns slots, in key order, into table entries and conflicts — per method,
// the static route or the winning group, and who lost — and the trie of their keys. block,
// when not 0, is how many entries and instance ids to allocate at once (a Deriver's one
// slot: a few), else arenaBlock; with it no trie is built (the Deriver keeps its own).
func buildEntries(slots []*slot, block int) ([]*Entry, []Conflict, *node) {
	entries := make([]*Entry, 0, 2*len(slots)) // most keys have one or two methods
	var conflicts []Conflict
	trie := trieBuilder{rootHint: len(slots) / 4}
	entryArena := arena[Entry]{block: min(block, len(apiv1.Methods))} // a key has a row a method at most
	var idArena []string
	var buf [8]*rival
	for _, sl := range slots {
		k := sl.key
		var set *byMethod // the slot's place in the trie
		present := sl.methods()
		for ; present != 0; present &= present - 1 { // byte order of methods: the table's order within a key
			mi := bits.TrailingZeros8(uint8(present))
			rs := buf[:0]
			for g := sl.first; g != nil; g = g.next {
				if g.methods.has(mi) {
					rs = append(rs, g.rivalFor(mi, &idArena, block))
				}
			}
			var static *Entry
			if sl.static != nil {
				static = sl.static[mi]
			}
			if len(rs) == 0 && static == nil {
				continue
			}
			if len(rs) > 1 {
				for _, r := range rs {
					if r.g.ver == nil {
						r.g.ver, _ = semver.StrictNewVersion(r.g.first.version) // valid: the manifest was
					}
				}
				slices.SortFunc(rs, func(a, b *rival) int {
					if c := b.g.ver.Compare(a.g.ver); c != 0 {
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
				for _, r := range rs {
					losers = append(losers, r.g.label())
				}
			} else {
				w := rs[0]
				e = entryArena.new()
				n := w.newest
				idem := n.idempotent.has(mi)
				*e = Entry{Route: Route{Pattern: n.pattern, Method: apiv1.Methods[mi], Source: "dynamic", Service: n.service, Version: n.version,
					Instances: w.ids, Idempotent: idem, MaxBodyBytes: n.maxBody, Streaming: n.streaming, Schema: n.schema, MaxStale: n.maxStale}, Key: k, Rewrite: w.rewrite,
					Upstreams: w.upstreams, weight: n.weight}
				e.Weight = &e.weight
				for _, r := range rs[1:] {
					losers = append(losers, r.g.label())
				}
			}
			entries = append(entries, e)
			if block == 0 { // a Deriver keeps its own trie
				if set == nil {
					set = trie.setFor(k, sl.segs)
				}
				set[mi] = e
			}
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
	if trie.root == nil {
		trie.root = &node{}
	}
	return entries, conflicts, trie.root
}

// Granted reports whether a route path (valid by the route rules) lies inside one of the
// prefixes a policy grants its service: "/" for every path, else a path of literal
// segments, a trailing "/" ignored. A malformed prefix, or one with a parameter, grants
// nothing. "/v2/assets" grants "/v2/assets", "/v2/assets/{id}" and "/v2/assets/{rest...}",
// not "/v2/assetsx", "/v2/{kind}/x" or "/v2/{rest...}" (PATH_NOT_AUTHORIZED). It is the one
// rule: the gateway's derivation and the registry's RBAC both ask it. The test is on the
// text: the path's leading segments are the prefix's exactly when the path starts with the
// prefix and goes on, if at all, with a "/".
func Granted(path string, prefixes []string) bool {
	for _, pre := range prefixes {
		if pre == "/" {
			return true
		}
		if pre = strings.TrimSuffix(pre, "/"); pre == "/" { // "//"
			return true
		}
		if strings.HasPrefix(path, pre) && (len(path) == len(pre) || path[len(pre)] == '/') && literalPrefix(pre) {
			return true
		}
	}
	return false
}

// literalPrefix reports whether pre, not "/", is a path of literal segments: it starts with
// "/", has no empty segment (no "//", no trailing "/") and no brace.
func literalPrefix(pre string) bool {
	if len(pre) < 2 || pre[0] != '/' || pre[len(pre)-1] == '/' {
		return false
	}
	for i := 1; i < len(pre); i++ {
		if c := pre[i]; c == '{' || c == '}' || c == '/' && pre[i-1] == '/' {
			return false
		}
	}
	return true
}

// claimsOf validates manifest m, published as mi, and returns its claims (their keys
// hashed with seed), or why it is rejected.
func claimsOf(m *apiv1.Manifest, mi ManifestInput, prefixes []string, seed maphash.Seed, an *analysis) ([]claim, *Rejected) {
	reject := func(code, reason string) *Rejected {
		return &Rejected{Instance: m.Service.Instance, Service: m.Service.Name, Code: code, Reason: reason}
	}
	ps, infos := m.Analyze()
	if len(ps) > 0 {
		return nil, reject(ps[0].Code, ps[0].Path+": "+ps[0].Message)
	}
	var o *origin
	if an != nil {
		o = an.origins.new()
	} else {
		o = &origin{}
	}
	*o = origin{service: m.Service.Name, version: m.Service.Version, instance: m.Service.Instance, endpoint: mi.Endpoint, generation: mi.Generation,
		maxBody: m.MaxBodyBytesOr(0), streaming: m.IsStreaming()}
	var out []claim
	if an != nil {
		out = an.claims.take(len(m.Routes))[:0]
	} else {
		out = make([]claim, 0, len(m.Routes))
	}
	keys := newRouteKeys(m.Routes, infos)
	for i, r := range m.Routes {
		if !Granted(r.Path, prefixes) {
			return nil, reject(apiv1.CodePathNotAuthorized, fmt.Sprintf("path %q is outside every prefix granted to %q", r.Path, m.Service.Name))
		}
		key := keys.next(r.Path, infos[i].Segments)
		c := claim{key: key, hash: maphash.String(seed, key), pattern: r.Path, segs: infos[i].Segments, weight: r.WeightOr(100), schema: r.Schema, maxStale: r.MaxStale, origin: o}
		for _, meth := range r.Methods { // valid, and listed once: Analyze said so
			c.methods |= 1 << apiv1.MethodIndex(meth)
		}
		for _, meth := range r.Idempotent { // each one of the methods
			c.idempotent |= 1 << apiv1.MethodIndex(meth)
		}
		out = append(out, c)
	}
	return out, nil
}

// aliasClaim turns a public path into a POST claim; an alias outside the service's
// prefixes, or with a malformed path or version, claims nothing and says why.
func aliasClaim(a Alias, prefixes []string, seed maphash.Seed) (*claim, *RejectedAlias) {
	segs, err := apiv1.ParsePath(a.Path)
	_, verr := semver.StrictNewVersion(a.Version)
	reject := func(code, format string, args ...any) (*claim, *RejectedAlias) {
		return nil, &RejectedAlias{Path: a.Path, Instance: a.Instance, Service: a.Service, Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case err != nil:
		return reject(apiv1.CodeInvalidRoute, "%v", err)
	case verr != nil:
		return reject(apiv1.CodeInvalidService, "service version %q is not a semantic version", a.Version)
	case !Granted(a.Path, prefixes):
		return reject(apiv1.CodePathNotAuthorized, "outside the prefixes granted to service %q (%s)", a.Service, strings.Join(prefixes, ", "))
	}
	key := Key(segs)
	return &claim{key: key, hash: maphash.String(seed, key), methods: 1 << apiv1.MethodIndex("POST"), pattern: a.Path, segs: segs, weight: 100,
		origin: &origin{service: a.Service, version: a.Version, instance: a.Instance, endpoint: a.Endpoint,
			generation: a.Generation, rewrite: apiv1.InvokePath(a.CapabilityID)}}, nil
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
	t.gather()
	c := Canonical{Routes: make([]Route, len(t.entries)), Rejected: t.rejected, RejectedAliases: t.aliases, Conflicts: t.conflicts}
	for i, e := range t.entries {
		c.Routes[i] = e.Route
	}
	return c
}

// Conflicts returns the table's conflicts and Rejected its rejected manifests, in canonical
// order, without the copy of every route Canonical makes.
func (t *Table) Conflicts() []Conflict { t.gather(); return t.conflicts }

func (t *Table) Rejected() []Rejected { return t.rejected }

// Entries returns the routes with what serving them needs, in canonical order.
func (t *Table) Entries() []*Entry { t.gather(); return t.entries }

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
			k := [2]string{Key(segs), m}
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

// compareRejected and compareRejectedAliases are the canonical orders of rejections: a
// total order, so that the table does not depend on the order of its input.
func compareRejected(a, b Rejected) int {
	return cmp.Or(cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.Service, b.Service), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Reason, b.Reason))
}

func compareRejectedAliases(a, b RejectedAlias) int {
	return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.Service, b.Service), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Reason, b.Reason))
}
