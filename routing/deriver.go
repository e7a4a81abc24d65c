package routing

import (
	"cmp"
	"encoding/json"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"sync"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Deriver is an incremental derivation: it holds what Derive computes on the way — each
// manifest's and public path's claims or rejection, the claims and static routes of each
// path key, each key's rows and conflicts — and applies one change at a time in time
// proportional to what the change touches, returning the new table and the rows it changed.
// Derive stays the specification: after any sequence of changes the table equals Derive of
// the input the changes leave (TestDeriverEqualsDerive checks it, change after change).
//
// A Deriver is not safe for concurrent use; the tables it returns are immutable and are.
type Deriver struct {
	seed      maphash.Seed
	policy    Policy
	manifests map[string]*manifestState // by ManifestID
	aliases   map[aliasID]*aliasState
	// byService lists the manifests and aliases of each service, for a policy change.
	byService map[string]*serviceClaims
	static    []StaticRoute
	statics   map[string]*[len(apiv1.Methods)]*Entry // static entries by key
	keys      map[string]*keyState
	order     []*keyState // by key
	chunks    []*chunk    // the table's entries in key order, a run of keys each
	trie      *node       // persistent: a change copies the nodes on its key's path
	rejected  map[string]Rejected
	rejAlias  map[aliasID]RejectedAlias
	// rejectedList and aliasList are the sorted lists of the current table, rebuilt only when
	// a rejection came or went.
	rejectedList []Rejected
	aliasList    []RejectedAlias
	table        *Table
	epoch        uint64 // counts the commits: the trie's nodes made by the current one are its own
	chunkKeys    int    // the most keys of a chunk, set by the first table's size
}

// ManifestID is how a Deriver names a manifest input: its instance id, else the instance
// its manifest names (a manifest that names none, or does not decode, is named by its text).
func ManifestID(mi ManifestInput) string {
	if mi.InstanceID != "" {
		return mi.InstanceID
	}
	if mi.Parsed != nil {
		return mi.Parsed.Service.Instance
	}
	var loose struct {
		Service struct {
			Instance string `json:"instance"`
		} `json:"service"`
	}
	if json.Unmarshal(mi.Manifest, &loose) == nil && loose.Service.Instance != "" {
		return loose.Service.Instance
	}
	return "#" + string(mi.Manifest)
}

type aliasID struct{ path, capability, instance string }

func idOfAlias(a Alias) aliasID { return aliasID{a.Path, a.CapabilityID, a.Instance} }

type manifestState struct {
	in      ManifestInput
	service string // as decoded ("" when it did not decode)
	claims  []*claim
}

type aliasState struct {
	a     Alias
	claim *claim // nil when rejected
}

type serviceClaims struct {
	manifests map[string]*manifestState
	aliases   map[aliasID]*aliasState
}

// keyState is one path key: its claims (of every manifest and alias), and the rows and
// conflicts they and the key's static routes make.
type keyState struct {
	key       string
	segs      []apiv1.Segment
	claims    []*claim // by instance, then generation: a group's upstreams come out sorted
	rows      [len(apiv1.Methods)]*Entry
	conflicts []Conflict
	chunk     *chunk // the chunk of the current table that holds it
}

// chunk is a run of consecutive keys of a table, with their entries and conflicts in
// order. A table is a list of chunks: a change copies the chunks of the keys it touched
// and the list, not the table.
type chunk struct {
	keys      []*keyState
	entries   []*Entry
	conflicts []Conflict
}

// minChunkKeys is the fewest keys a chunk holds before it is split; a large table's chunks
// hold about √keys (Deriver.chunkKeys), so that a change copies as many chunk pointers as it
// copies keys and entries of the chunk it touched.
const minChunkKeys = 64

// RowChange is one (key, method) of a table that a change added, removed or replaced: Old
// is nil for a new row, New for a removed one.
type RowChange struct {
	Key, Method string
	Old, New    *Entry
}

// NewDeriver starts a Deriver at the table of in (derived fully).
func NewDeriver(in Input) *Deriver {
	d := &Deriver{seed: maphash.MakeSeed(), policy: Policy{}, manifests: map[string]*manifestState{}, aliases: map[aliasID]*aliasState{},
		byService: map[string]*serviceClaims{}, statics: map[string]*[len(apiv1.Methods)]*Entry{}, keys: map[string]*keyState{},
		rejected: map[string]Rejected{}, rejAlias: map[aliasID]RejectedAlias{}, trie: &node{}}
	for s, p := range in.Policy {
		d.policy[s] = slices.Clone(p)
	}
	dirty := map[*keyState]bool{}
	d.setStatic(in.Static, dirty)
	for _, mi := range in.Manifests {
		d.putManifest(mi, dirty)
	}
	for _, a := range in.Aliases {
		d.putAlias(a, dirty)
	}
	d.commit(dirty, true)
	return d
}

// Table returns the current table.
func (d *Deriver) Table() *Table { return d.table }

// Change is one change of a derivation's input. Exactly one of its parts is set.
type Change struct {
	// PutManifest adds a manifest, or replaces the one of the same ManifestID.
	PutManifest *ManifestInput
	// DeleteManifest withdraws the manifest of this ManifestID.
	DeleteManifest string
	// PutAlias adds a public path (or replaces the same path, capability and instance);
	// DeleteAlias withdraws one.
	PutAlias, DeleteAlias *Alias
	// Policy sets the prefixes of Service (nil: it may claim nothing): every claim of the
	// service is judged again.
	Policy *PolicyChange
	// Static replaces the static routes.
	Static *[]StaticRoute
}

// PolicyChange is the prefixes of one service.
type PolicyChange struct {
	Service  string
	Prefixes []string
}

// Apply applies changes, in order, and returns the new table and the rows that differ from
// the previous table's (in key and method order).
func (d *Deriver) Apply(changes ...Change) (*Table, []RowChange) {
	dirty := map[*keyState]bool{}
	for _, c := range changes {
		switch {
		case c.PutManifest != nil:
			d.putManifest(*c.PutManifest, dirty)
		case c.DeleteManifest != "":
			d.deleteManifest(c.DeleteManifest, dirty)
		case c.PutAlias != nil:
			d.putAlias(*c.PutAlias, dirty)
		case c.DeleteAlias != nil:
			d.deleteAlias(idOfAlias(*c.DeleteAlias), dirty)
		case c.Policy != nil:
			d.setPolicy(c.Policy.Service, c.Policy.Prefixes, dirty)
		case c.Static != nil:
			d.setStatic(*c.Static, dirty)
		}
	}
	return d.table, d.commit(dirty, false)
}

func (d *Deriver) service(name string) *serviceClaims {
	s := d.byService[name]
	if s == nil {
		s = &serviceClaims{manifests: map[string]*manifestState{}, aliases: map[aliasID]*aliasState{}}
		d.byService[name] = s
	}
	return s
}

func (d *Deriver) keyOf(key string, segs []apiv1.Segment) *keyState {
	k := d.keys[key]
	if k == nil {
		k = &keyState{key: key, segs: segs}
		d.keys[key] = k
	}
	return k
}

func (d *Deriver) putManifest(mi ManifestInput, dirty map[*keyState]bool) {
	id := ManifestID(mi)
	d.deleteManifest(id, dirty)
	m := mi.Parsed
	var rej *Rejected
	if m == nil {
		m, rej = decodeManifest(mi.Manifest)
	}
	st := &manifestState{in: mi}
	if m != nil {
		st.service = m.Service.Name
		var claims []claim
		claims, rej = claimsOf(m, mi, d.policy[m.Service.Name], d.seed, nil)
		for i := range claims {
			c := &claims[i]
			st.claims = append(st.claims, c)
			k := d.keyOf(c.key, c.segs)
			k.add(c)
			dirty[k] = true
		}
		d.service(m.Service.Name).manifests[id] = st
	}
	if rej != nil {
		d.rejected[id] = *rej
		d.rejectedList = nil
	}
	d.manifests[id] = st
}

func (d *Deriver) deleteManifest(id string, dirty map[*keyState]bool) {
	st, ok := d.manifests[id]
	if !ok {
		return
	}
	for _, c := range st.claims {
		k := d.keys[c.key]
		k.remove(c)
		dirty[k] = true
	}
	if s := d.byService[st.service]; s != nil {
		delete(s.manifests, id)
	}
	if _, ok := d.rejected[id]; ok {
		delete(d.rejected, id)
		d.rejectedList = nil
	}
	delete(d.manifests, id)
}

func (d *Deriver) putAlias(a Alias, dirty map[*keyState]bool) {
	id := idOfAlias(a)
	d.deleteAlias(id, dirty)
	st := &aliasState{a: a}
	c, rej := aliasClaim(a, d.policy[a.Service], d.seed)
	if rej != nil {
		d.rejAlias[id] = *rej
		d.aliasList = nil
	} else {
		st.claim = c
		k := d.keyOf(c.key, c.segs)
		k.add(c)
		dirty[k] = true
	}
	d.aliases[id] = st
	d.service(a.Service).aliases[id] = st
}

func (d *Deriver) deleteAlias(id aliasID, dirty map[*keyState]bool) {
	st, ok := d.aliases[id]
	if !ok {
		return
	}
	if st.claim != nil {
		k := d.keys[st.claim.key]
		k.remove(st.claim)
		dirty[k] = true
	}
	if _, ok := d.rejAlias[id]; ok {
		delete(d.rejAlias, id)
		d.aliasList = nil
	}
	delete(d.byService[st.a.Service].aliases, id)
	delete(d.aliases, id)
}

// setPolicy sets service's prefixes and judges its manifests and aliases again.
func (d *Deriver) setPolicy(service string, prefixes []string, dirty map[*keyState]bool) {
	if prefixes == nil {
		delete(d.policy, service)
	} else {
		d.policy[service] = slices.Clone(prefixes)
	}
	s := d.byService[service]
	if s == nil {
		return
	}
	var ms []ManifestInput
	for _, st := range s.manifests {
		ms = append(ms, st.in)
	}
	var as []Alias
	for _, st := range s.aliases {
		as = append(as, st.a)
	}
	for _, mi := range ms {
		d.putManifest(mi, dirty)
	}
	for _, a := range as {
		d.putAlias(a, dirty)
	}
}

// setStatic replaces the static routes; the keys whose static entries changed are dirty.
func (d *Deriver) setStatic(routes []StaticRoute, dirty map[*keyState]bool) {
	next := map[string]*[len(apiv1.Methods)]*Entry{}
	for _, st := range routes {
		segs, err := apiv1.ParsePath(st.Path)
		if err != nil {
			continue
		}
		key := Key(segs)
		set := next[key]
		if set == nil {
			set = &[len(apiv1.Methods)]*Entry{}
			next[key] = set
			d.keyOf(key, segs)
		}
		for _, m := range st.Methods {
			if mi := apiv1.MethodIndex(m); mi >= 0 {
				set[mi] = &Entry{Route: Route{Pattern: st.Path, Method: m, Source: "static", Upstream: st.Upstream,
					Idempotent: staticIdempotent[m]}, Key: key, Upstreams: []Upstream{{Instance: "static", Endpoint: st.Upstream}}}
			}
		}
	}
	for key, set := range next {
		if old := d.statics[key]; old == nil || !sameStatic(old, set) {
			dirty[d.keys[key]] = true
		}
	}
	for key := range d.statics {
		if next[key] == nil {
			dirty[d.keys[key]] = true
		}
	}
	d.static, d.statics = slices.Clone(routes), next
}

func sameStatic(a, b *[len(apiv1.Methods)]*Entry) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || a[i] != nil && a[i].Route.Pattern != b[i].Route.Pattern || a[i] != nil && a[i].Upstream != b[i].Upstream {
			return false
		}
	}
	return true
}

// rebuild computes k's rows and conflicts from its claims and static routes, as Derive does
// for one slot.
func (d *Deriver) rebuild(k *keyState) {
	sl := &slot{key: k.key, segs: k.segs}
	if set := d.statics[k.key]; set != nil {
		s := *set
		sl.static = &s
	}
	// The claims' order does not change the rows: precedence (version, weight, seniority)
	// is a total order of the groups, generations being unique, and a group's rows come from
	// its newest claim. In instance order, a group's upstreams need no sorting.
	claims := k.claims
	for _, c := range claims {
		sl.add(c, func(c *claim) *group {
			return &group{first: c, methods: c.methods, uniform: true, all: newRival(c, make([]Upstream, 0, len(claims)))}
		})
	}
	entries, conflicts, _ := buildEntries([]*slot{sl}, len(claims)+1)
	k.rows = [len(apiv1.Methods)]*Entry{}
	for _, e := range entries {
		k.rows[apiv1.MethodIndex(e.Method)] = e
	}
	k.conflicts = conflicts
}

// empty reports whether k holds nothing.
func (k *keyState) empty() bool {
	for _, e := range k.rows {
		if e != nil {
			return false
		}
	}
	return true
}

// commit rebuilds the dirty keys, places them in the table's order, and makes the new table;
// all says that every key is new (the first table).
func (d *Deriver) commit(dirty map[*keyState]bool, all bool) []RowChange {
	var changes []RowChange
	var touched []*keyState
	for k := range dirty {
		if k == nil {
			continue
		}
		old := k.rows
		d.rebuild(k)
		for mi := range old {
			if old[mi] != k.rows[mi] && !sameEntry(old[mi], k.rows[mi]) {
				changes = append(changes, RowChange{Key: k.key, Method: apiv1.Methods[mi], Old: old[mi], New: k.rows[mi]})
			} else if old[mi] != nil {
				k.rows[mi] = old[mi] // the same row: the table keeps its entry
			}
		}
		touched = append(touched, k)
	}
	slices.SortFunc(changes, func(a, b RowChange) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(apiv1.MethodIndex(a.Method), apiv1.MethodIndex(b.Method)))
	})
	if all {
		d.order = d.order[:0]
		for _, k := range d.keys {
			if !k.empty() {
				d.order = append(d.order, k)
			}
		}
		slices.SortFunc(d.order, func(a, b *keyState) int { return cmp.Compare(a.key, b.key) })
		d.chunks = nil
		d.chunkKeys = max(minChunkKeys, int(math.Sqrt(float64(len(d.order)))))
		for lo := 0; lo < len(d.order); lo += d.chunkKeys {
			d.chunks = append(d.chunks, d.newChunk(d.order[lo:min(len(d.order), lo+d.chunkKeys)]))
		}
		b := trieBuilder{rootHint: len(d.order) / 4}
		for _, k := range d.order {
			*b.setFor(k.key, k.segs) = byMethod(k.rows)
		}
		d.trie = b.root // nil without keys

	} else {
		d.place(touched)
	}
	for _, k := range touched { // forget what nothing claims
		if len(k.claims) == 0 && d.statics[k.key] == nil {
			delete(d.keys, k.key)
		}
	}
	d.table = d.tableNow()
	return changes
}

// sameEntry reports whether two rows are equal as rows of a table (the routes they serve and
// the upstreams they serve them with).
func sameEntry(a, b *Entry) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Key == b.Key && a.Rewrite == b.Rewrite && a.weight == b.weight && sameRoute(a.Route, b.Route) && slices.Equal(a.Upstreams, b.Upstreams)
}

func sameRoute(a, b Route) bool {
	return a.Pattern == b.Pattern && a.Method == b.Method && a.Source == b.Source && a.Upstream == b.Upstream && a.Service == b.Service &&
		a.Version == b.Version && slices.Equal(a.Instances, b.Instances) && a.Idempotent == b.Idempotent &&
		(a.Weight == nil) == (b.Weight == nil) && (a.Weight == nil || *a.Weight == *b.Weight) &&
		a.MaxBodyBytes == b.MaxBodyBytes && a.Streaming == b.Streaming && a.Schema == b.Schema && a.MaxStale == b.MaxStale
}

func setOf(k *keyState) *byMethod {
	if k.empty() {
		return nil
	}
	s := byMethod(k.rows)
	return &s
}

// place puts the touched keys in the table's order: a key that holds rows now is in its
// chunk (a new key is inserted, splitting a full chunk), one that holds none leaves it; each
// chunk touched is copied, and the trie gets each key's new set.
func (d *Deriver) place(touched []*keyState) {
	d.epoch++
	// The chunks of the current table are never written: those touched are replaced in a
	// new list (the table before keeps the old one).
	changed := map[int]*chunk{} // chunk index -> its keys now
	slices.SortFunc(touched, func(a, b *keyState) int { return cmp.Compare(a.key, b.key) })
	for _, k := range touched {
		d.trie = d.trie.with(k.segs, 0, setOf(k), d.epoch)
		i := d.chunkFor(k.key)
		c := changed[i]
		if c == nil {
			c = &chunk{}
			if i >= 0 {
				c.keys = slices.Clone(d.chunks[i].keys)
			}
		}
		at, found := slices.BinarySearchFunc(c.keys, k.key, func(x *keyState, key string) int { return cmp.Compare(x.key, key) })
		switch {
		case found && k.empty():
			c.keys = slices.Delete(c.keys, at, at+1)
		case !found && !k.empty():
			c.keys = slices.Insert(c.keys, at, k)
		case !found:
			continue // empty before and after
		}
		changed[i] = c
	}
	if len(changed) == 0 {
		return
	}
	chunks := make([]*chunk, 0, len(d.chunks)+len(changed))
	if c := changed[-1]; c != nil { // no chunk before: the first
		chunks = d.split(chunks, c.keys)
	}
	for i, c := range d.chunks {
		if nc := changed[i]; nc != nil {
			chunks = d.split(chunks, nc.keys)
		} else {
			chunks = append(chunks, c)
		}
	}
	d.chunks = chunks
}

// split appends keys to chunks as chunks of at most d.chunkKeys keys.
func (d *Deriver) split(chunks []*chunk, keys []*keyState) []*chunk {
	for lo := 0; lo < len(keys); lo += d.chunkKeys {
		chunks = append(chunks, d.newChunk(keys[lo:min(len(keys), lo+d.chunkKeys)]))
	}
	return chunks
}

// chunkFor returns the index of the chunk key belongs in: the last whose first key is not
// after it (the first chunk for a key before them all); -1 without chunks.
func (d *Deriver) chunkFor(key string) int {
	if len(d.chunks) == 0 {
		return -1
	}
	i := sort.Search(len(d.chunks), func(i int) bool {
		c := d.chunks[i]
		return len(c.keys) > 0 && c.keys[0].key > key
	})
	return max(0, i-1)
}

// newChunk makes the chunk of keys (in order), its entries and conflicts gathered.
func (d *Deriver) newChunk(keys []*keyState) *chunk {
	c := &chunk{keys: slices.Clone(keys)}
	for _, k := range c.keys {
		k.chunk = c
		for _, e := range k.rows {
			if e != nil {
				c.entries = append(c.entries, e)
			}
		}
		c.conflicts = append(c.conflicts, k.conflicts...)
	}
	return c
}

// tableNow is the table of the current state: the chunks, the trie, and the rejections.
func (d *Deriver) tableNow() *Table {
	if d.rejectedList == nil {
		d.rejectedList = make([]Rejected, 0, len(d.rejected))
		for _, r := range d.rejected {
			d.rejectedList = append(d.rejectedList, r)
		}
		slices.SortFunc(d.rejectedList, compareRejected)
	}
	if d.aliasList == nil && len(d.rejAlias) > 0 {
		d.aliasList = make([]RejectedAlias, 0, len(d.rejAlias))
		for _, r := range d.rejAlias {
			d.aliasList = append(d.aliasList, r)
		}
		slices.SortFunc(d.aliasList, func(a, b RejectedAlias) int {
			return compareRejectedAliases(a, b)
		})
	}
	root := d.trie
	if root == nil {
		root = &node{}
	}
	return &Table{chunked: d.chunks, rejected: d.rejectedList, aliases: d.aliasList, root: root, lazy: &sync.Once{}}
}

// claimOrder is the order of a key's claims: by instance, then generation and pattern.
func claimOrder(a, b *claim) int {
	return cmp.Or(cmp.Compare(a.instance, b.instance), cmp.Compare(a.generation, b.generation), cmp.Compare(a.pattern, b.pattern))
}

// add files c among k's claims, in order.
func (k *keyState) add(c *claim) {
	i, _ := slices.BinarySearchFunc(k.claims, c, claimOrder)
	k.claims = slices.Insert(k.claims, i, c)
}

// remove takes c from k's claims.
func (k *keyState) remove(c *claim) {
	i, _ := slices.BinarySearchFunc(k.claims, c, claimOrder)
	for ; i < len(k.claims); i++ {
		if k.claims[i] == c {
			k.claims = slices.Delete(k.claims, i, i+1)
			return
		}
	}
}
