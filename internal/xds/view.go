package xds

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
)

// entryKey names an entry of the capabilities view as a delta does.
type entryKey struct{ instance, capability, provider, version string }

func keyOf(e *apiv1.CapabilityEntry) entryKey {
	return entryKey{e.InstanceID, e.CapabilityID, e.Provider, e.CapabilityVersion}
}

// member is one entry of a cluster, with its endpoint (ok false: the entry's endpoint has no
// host and port).
type member struct {
	key entryKey
	ep  endpoint
	ok  bool
}

// capsIndex is the capabilities view as the server keeps it to update by change: the entries
// by instance, and each cluster's members in the view's order, so that a change rebuilds the
// clusters it touched alone (the whole view is 120,000 entries at 60,000 instances, and an
// evacuation changes 667 of them a second).
type capsIndex struct {
	entries  map[entryKey]held
	byInst   map[string]map[entryKey]struct{}
	clusters map[string][]member
	// served holds each cluster's endpoints as its assignment was last built from them, in
	// the assignment's order: a cluster whose endpoints did not change is not built again;
	// parts holds that assignment's encoded localities, one per endpoint of served, for the
	// next build to share (packedAssignment).
	served map[string][]endpoint
	parts  map[string][]part
	// moved, while a delta is applied (apply), notes the clusters it changed other than by
	// the weights of members that stay: the others' changes can wait (Config.WeightDelay).
	moved map[string]struct{}
	// rank is each region's place in a regional server's order (home 0): its endpoints'
	// xDS priorities come after those of the regions before it. off are the regions
	// switched off: their endpoints are in no assignment.
	rank map[string]int
	off  map[string]bool
}

func newCapsIndex() *capsIndex {
	return &capsIndex{entries: map[entryKey]held{}, byInst: map[string]map[entryKey]struct{}{},
		clusters: map[string][]member{}, served: map[string][]endpoint{}, parts: map[string][]part{}}
}

// reset makes the index hold entries, and returns every cluster name it held or holds.
func (x *capsIndex) reset(entries []apiv1.CapabilityEntry) map[string]struct{} {
	dirty := make(map[string]struct{}, len(x.clusters))
	for n := range x.clusters {
		dirty[n] = struct{}{}
	}
	served, parts, moved, rank, off := x.served, x.parts, x.moved, x.rank, x.off
	*x = *newCapsIndex()
	x.served, x.parts = served, parts // what the resources were built from stays true of them
	x.moved, x.rank, x.off = moved, rank, off
	for _, e := range entries {
		x.put(e, dirty)
	}
	for n := range dirty {
		x.touch(n, dirty, false) // a whole view: nothing waits
	}
	return dirty
}

// apply folds a delta in (discovery.Delta.Apply) and returns the clusters it touched, and of
// those the ones it changed other than by weights alone.
func (x *capsIndex) apply(d *discovery.Delta) (dirty, moved map[string]struct{}) {
	t := touching{x: x, dirty: map[string]struct{}{}}
	x.moved = map[string]struct{}{}
	defer func() { x.moved = nil }()
	d.Apply(&t)
	t.flush()
	return t.dirty, x.moved
}

// touch notes a change of cluster n in dirty, and in moved unless only weights changed.
func (x *capsIndex) touch(n string, dirty map[string]struct{}, weightOnly bool) {
	dirty[n] = struct{}{}
	if !weightOnly && x.moved != nil {
		x.moved[n] = struct{}{}
	}
}

// touching is the index as a discovery.Keeper that notes the clusters each call touches.
//
// Its drops wait for the end of the delta (flush): a delta names every instance it changed
// among those to drop, at their current generation, and puts their entries again, so an
// entry whose weight moved (a ramp's step, the most common change there is) was removed from
// its clusters and inserted again. Put replaces it in place instead, and flush drops what
// the delta did not put again.
type touching struct {
	x     *capsIndex
	dirty map[string]struct{}
	drops map[string]int64      // instance → the generation at or below which its entries go
	kept  map[entryKey]struct{} // entries put since their instance's drop: they stay
}

func (t *touching) Len() int { return len(t.x.entries) }

func (t *touching) Reset(entries []apiv1.CapabilityEntry) {
	t.flush()
	for n := range t.x.reset(entries) {
		t.dirty[n] = struct{}{}
	}
}

func (t *touching) Drop(id string, generation int64) {
	if t.drops == nil {
		t.drops, t.kept = map[string]int64{}, map[entryKey]struct{}{}
	}
	if g, ok := t.drops[id]; !ok || generation > g {
		t.drops[id] = generation
	}
}

func (t *touching) Put(e apiv1.CapabilityEntry) {
	if _, ok := t.drops[e.InstanceID]; ok {
		t.kept[keyOf(&e)] = struct{}{}
	}
	t.x.put(e, t.dirty)
}

// flush drops the entries of the instances dropped, at or below their generations, that were
// not put again since.
func (t *touching) flush() {
	for id, g := range t.drops {
		for k := range t.x.byInst[id] {
			if _, kept := t.kept[k]; !kept && t.x.entries[k].generation <= g {
				t.x.remove(k, t.dirty)
			}
		}
	}
	t.drops, t.kept = nil, nil
}

// compareMembers orders a cluster's members as its assignment lists their endpoints
// (compareEndpoints), those without one last: an assignment is built from them as they are.
// Members whose endpoints tie (two capabilities of one instance) make the same message; their
// keys order them.
func compareMembers(a, b *member) int {
	if a.ok != b.ok {
		if a.ok {
			return -1
		}
		return 1
	}
	if a.ok {
		if c := compareEndpoints(a.ep, b.ep); c != 0 {
			return c
		}
	}
	k, l := a.key, b.key
	return cmp.Or(cmp.Compare(k.instance, l.instance), cmp.Compare(k.capability, l.capability), cmp.Compare(k.provider, l.provider), cmp.Compare(k.version, l.version))
}

// held is what the index keeps of an entry: its generation, and its member of its clusters.
// Not the entry: its metadata, lease and the rest were most of the server's heap, for
// nothing an assignment says.
type held struct {
	generation int64
	m          member
}

// clustersOf are the clusters an entry of key k is an endpoint of: its capability's, and its
// provider's of it.
func clustersOf(k entryKey) [2]string {
	return [2]string{ClusterName(k.capability, ""), ClusterName(k.capability, k.provider)}
}

func (x *capsIndex) put(e apiv1.CapabilityEntry, dirty map[string]struct{}) {
	x.putIn("", e, dirty)
}

// putIn is put of an entry of region (its instance id already prefixed with the region).
func (x *capsIndex) putIn(region string, e apiv1.CapabilityEntry, dirty map[string]struct{}) {
	k := keyOf(&e)
	m := member{key: k}
	m.ep, m.ok = endpointOf(e)
	m.ep.region, m.ep.rank = region, x.rank[region]
	h := held{generation: e.Generation, m: m}
	if old, ok := x.entries[k]; ok {
		if x.replace(old.m, m, dirty) {
			x.entries[k] = h
			return
		}
		x.remove(k, dirty)
	}
	x.entries[k] = h
	ids := x.byInst[e.InstanceID]
	if ids == nil {
		ids = map[entryKey]struct{}{}
		x.byInst[e.InstanceID] = ids
	}
	ids[k] = struct{}{}
	for _, n := range clustersOf(k) {
		ms := x.clusters[n]
		i := sort.Search(len(ms), func(j int) bool { return compareMembers(&m, &ms[j]) < 0 })
		x.clusters[n] = slices.Insert(ms, i, m)
		x.touch(n, dirty, false)
	}
}

// replace puts m in place of om (a member of the same key) in each of its clusters, when it
// keeps its place in their order there (a new weight or health, the usual change of an
// entry: a ramp's step), and reports whether it did; a cluster is touched only when its
// member changed. Otherwise the caller removes om and inserts m: a search and a copy of the
// cluster each, where this is a search.
func (x *capsIndex) replace(om, m member, dirty map[string]struct{}) bool {
	names := clustersOf(m.key)
	var at [len(names)]int
	for c, n := range names {
		ms := x.clusters[n]
		i := x.indexOf(n, &om)
		if i < 0 || i > 0 && compareMembers(&ms[i-1], &m) >= 0 || i+1 < len(ms) && compareMembers(&m, &ms[i+1]) >= 0 {
			return false
		}
		at[c] = i
	}
	if om == m {
		return true // the same endpoint: no cluster changes
	}
	weighed := om.ok && m.ok && om.ep.weight != m.ep.weight && withWeight(om.ep, m.ep.weight) == m.ep
	for c, n := range names {
		x.clusters[n][at[c]] = m
		x.touch(n, dirty, weighed)
	}
	return true
}

// indexOf returns the index of member m in cluster n (members are unique and in
// compareMembers' order), or -1.
func (x *capsIndex) indexOf(n string, m *member) int {
	ms := x.clusters[n]
	i := sort.Search(len(ms), func(j int) bool { return compareMembers(m, &ms[j]) <= 0 })
	if i < len(ms) && ms[i].key == m.key {
		return i
	}
	return -1
}

func (x *capsIndex) remove(k entryKey, dirty map[string]struct{}) {
	h := x.entries[k]
	delete(x.entries, k)
	if ids := x.byInst[k.instance]; ids != nil {
		delete(ids, k)
		if len(ids) == 0 {
			delete(x.byInst, k.instance)
		}
	}
	for _, n := range clustersOf(k) {
		ms := x.clusters[n]
		if i := x.indexOf(n, &h.m); i >= 0 {
			ms = slices.Delete(ms, i, i+1)
		}
		if len(ms) == 0 {
			delete(x.clusters, n)
		} else {
			x.clusters[n] = ms
		}
		x.touch(n, dirty, false)
	}
}

// withWeight is e at weight w.
func withWeight(e endpoint, w uint32) endpoint {
	e.weight = w
	return e
}

// keeps reports whether cluster n is served (res holds it) and keeps an endpoint: a change of
// its members changes its assignment alone, which can wait (the members with an endpoint
// come first).
func (x *capsIndex) keeps(res map[resourcev3.Type]map[string]types.Resource, n string) bool {
	_, had := res[resourcev3.ClusterType][n]
	ms := x.clusters[n]
	return had && len(ms) > 0 && ms[0].ok
}

// build puts the resources of cluster n, as Resources builds them from the whole view, in
// res (and removes them when the cluster has no endpoint left), and reports whether they
// changed: not when its endpoints are those its assignment was built from.
func (x *capsIndex) build(res map[resourcev3.Type]map[string]types.Resource, n string) (bool, error) {
	ms := x.clusters[n]
	eps := make([]endpoint, 0, len(ms))
	for i := range ms {
		if ms[i].ok && !x.off[ms[i].ep.region] {
			eps = append(eps, ms[i].ep)
		}
	}
	if len(eps) == 0 {
		_, had := res[resourcev3.ClusterType][n]
		for _, typ := range []resourcev3.Type{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType} {
			delete(res[typ], n)
		}
		delete(x.served, n)
		delete(x.parts, n)
		return had, nil
	}
	// the members are in the assignment's order already
	_, had := res[resourcev3.ClusterType][n]
	if had && slices.Equal(eps, x.served[n]) {
		return false, nil
	}
	cla, parts, err := packedAssignment(n, eps, x.served[n], x.parts[n])
	if err != nil {
		return false, err
	}
	x.served[n], x.parts[n] = eps, parts
	if had {
		res[resourcev3.EndpointType][n] = cla // the cluster and its listener stay
		return true, nil
	}
	if err := putClusterOnly(res, n); err != nil {
		return false, err
	}
	res[resourcev3.EndpointType][n] = cla
	return true, nil
}

// sortedNames returns the names of a set, sorted.
func sortedNames(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// regionKeeper is the index as the discovery.Keeper of one region's deltas, in a regional
// server: its instances are named REGION/ID in the index (instance ids are unique within a
// registry only), and a reset replaces that region's entries alone.
type regionKeeper struct {
	t      *touching
	region string
}

func (k regionKeeper) prefix() string { return k.region + "/" }

func (k regionKeeper) Len() int {
	n := 0
	for id, keys := range k.t.x.byInst {
		if strings.HasPrefix(id, k.prefix()) {
			n += len(keys)
		}
	}
	return n
}

func (k regionKeeper) Reset(entries []apiv1.CapabilityEntry) {
	k.t.flush()
	x := k.t.x
	for id, keys := range x.byInst {
		if strings.HasPrefix(id, k.prefix()) {
			for key := range keys {
				x.remove(key, k.t.dirty)
			}
		}
	}
	for _, e := range entries {
		e.InstanceID = k.prefix() + e.InstanceID
		x.putIn(k.region, e, k.t.dirty)
	}
}

func (k regionKeeper) Drop(id string, generation int64) { k.t.Drop(k.prefix()+id, generation) }

func (k regionKeeper) Put(e apiv1.CapabilityEntry) {
	e.InstanceID = k.prefix() + e.InstanceID
	if _, ok := k.t.drops[e.InstanceID]; ok {
		k.t.kept[keyOf(&e)] = struct{}{}
	}
	k.t.x.putIn(k.region, e, k.t.dirty)
}

// applyIn is apply for a delta of region's registry (regionKeeper).
func (x *capsIndex) applyIn(region string, d *discovery.Delta) (dirty, moved map[string]struct{}) {
	t := touching{x: x, dirty: map[string]struct{}{}}
	x.moved = map[string]struct{}{}
	defer func() { x.moved = nil }()
	d.Apply(regionKeeper{t: &t, region: region})
	t.flush()
	return t.dirty, x.moved
}
