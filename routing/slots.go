package routing

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// slot is one path key: per method the static route, and the claimant groups (one per
// service and version). Most keys have one group.
type slot struct {
	key         string
	hash        uint64                      // of the key, divided by the shards
	first, last *group                      // the claimant groups, in the order they came
	static      *[len(apiv1.Methods)]*Entry // the static route of each method, when there is one
	segs        []apiv1.Segment             // the segments of one of its patterns: the key's shape
}

// methods returns the methods some group or static route of sl claims.
func (sl *slot) methods() methodSet {
	var ms methodSet
	for g := sl.first; g != nil; g = g.next {
		ms |= g.methods
	}
	if sl.static != nil {
		for mi, e := range sl.static {
			if e != nil {
				ms |= 1 << mi
			}
		}
	}
	return ms
}

// staticClaim is a static route, parsed.
type staticClaim struct {
	route StaticRoute
	segs  []apiv1.Segment
	key   string
	hash  uint64 // of the key, by the derivation's seed
}

// slotsOf groups the claims and static routes whose key falls in shard (of shards, by hash)
// into slots, and returns them sorted by key.
func slotsOf(claims []*claim, statics []staticClaim, shard, shards int, sc *grouping) []*slot {
	// The slots are found by their key's hash, the one that picks the shard, in an
	// open-addressing table grown when half full: each cell holds 32 more bits of the hash
	// and the slot's place in ordered, so that a probe rarely reads a slot, and the table
	// holds no pointers for the collector to scan.
	size := 1 << bits.Len(uint(max(64, 2*len(claims)/shards))) // a power of 2
	table := sc.table
	if cap(table) >= size {
		table = table[:size]
		clear(table)
	} else {
		table = make([]cell, size)
	}
	ordered := slices.Grow(sc.ordered[:0], len(claims)/shards+len(claims)/shards/8+len(statics))
	slotArena, groupArena := &sc.slots, &sc.groups
	var upstreamArena []Upstream // the routes keep them: not scratch
	place := func(h uint64, at int) {
		mask := uint64(len(table) - 1)
		i := h & mask
		for table[i].at != 0 {
			i = (i + 1) & mask
		}
		table[i] = cell{uint32(h >> 32), uint32(at + 1)}
	}
	// slotOf returns the slot of key (of hash h), or nil when key is another shard's.
	slotOf := func(key string, h uint64, segs []apiv1.Segment) *slot {
		if h%uint64(shards) != uint64(shard) {
			return nil
		}
		h /= uint64(shards)
		mask := uint64(len(table) - 1)
		for i := h & mask; table[i].at != 0; i = (i + 1) & mask {
			if c := table[i]; c.tag == uint32(h>>32) && ordered[c.at-1].key == key {
				return ordered[c.at-1]
			}
		}
		sl := slotArena.new()
		sl.key, sl.hash, sl.segs = key, h, segs
		ordered = append(ordered, sl)
		if 2*len(ordered) > len(table) {
			table = make([]cell, 2*len(table))
			for i, o := range ordered {
				place(o.hash, i)
			}
		} else {
			place(h, len(ordered)-1)
		}
		return sl
	}
	newGroup := func(c *claim) *group {
		// Upstreams are carved from a shared block: one allocation for many groups. A group
		// that outgrows its share (other manifests of its version) is copied.
		n := 1 + len(c.replicas)
		if len(upstreamArena) < n {
			upstreamArena = make([]Upstream, max(arenaBlock, n))
		}
		g := groupArena.new()
		*g = group{first: c, methods: c.methods, uniform: true, all: newRival(c, upstreamArena[:0:n])}
		upstreamArena = upstreamArena[n:]
		return g
	}
	for _, c := range claims {
		sl := slotOf(c.key, c.hash, c.segs)
		if sl == nil {
			continue
		}
		sl.add(c, newGroup)
	}
	for _, st := range statics {
		sl := slotOf(st.key, st.hash, st.segs)
		if sl == nil {
			continue
		}
		if sl.static == nil {
			sl.static = &[len(apiv1.Methods)]*Entry{}
		}
		for _, m := range st.route.Methods {
			if mi := apiv1.MethodIndex(m); mi >= 0 {
				sl.static[mi] = &Entry{Route: Route{Pattern: st.route.Path, Method: m, Source: "static", Upstream: st.route.Upstream,
					Idempotent: staticIdempotent[m]}, Key: sl.key, Upstreams: []Upstream{{Instance: "static", Endpoint: st.route.Upstream}}}
			}
		}
	}
	sc.table, sc.ordered = table, ordered
	sc.keys, sc.tmp, sc.sorted = sortSlots(ordered, sc.keys, sc.tmp, sc.sorted)
	return sc.sorted
}

// add files claim c in sl's group of its service and version, the group made by newGroup
// (its first claim c, its rival started) and linked last when sl has none yet.
func (sl *slot) add(c *claim, newGroup func(c *claim) *group) {
	var g *group
	for x := sl.first; x != nil; x = x.next {
		if x.first.service == c.service && x.first.version == c.version {
			g = x
			break
		}
	}
	if g == nil {
		g = newGroup(c)
		g.all.g = g
		if sl.last == nil {
			sl.first = g
		} else {
			sl.last.next = g
		}
		sl.last = g
	} else {
		g.more = append(g.more, c)
		g.uniform = g.uniform && c.methods == g.first.methods
		g.methods |= c.methods
	}
	g.all.addClaim(c)
}

// cell is a cell of slotsOf's table: 32 more bits of the hash of a key, and where its slot
// is (1 + its index in the slots, 0 for an empty cell).
type cell struct{ tag, at uint32 }

// sortKey is a slot to sort: its key's first 16 bytes, big-endian, zero-padded, and its
// index. It holds no pointer, so that the sort moves it without write barriers.
type sortKey struct {
	hi, lo uint64
	at     int
}

// sortSlots sorts slots by key, with keys, tmp and out as its buffers, and returns them
// (out holding the slots in order). The keys' first 16 bytes, copied next to each slot's
// index, are sorted by radix; only slots whose keys share those bytes are then compared,
// by key.
func sortSlots(slots []*slot, keys, tmp []sortKey, out []*slot) ([]sortKey, []sortKey, []*slot) {
	keys = slices.Grow(keys[:0], len(slots))[:len(slots)]
	tmp = slices.Grow(tmp[:0], len(slots))[:len(slots)]
	for i, sl := range slots {
		var b [16]byte
		copy(b[:], sl.key)
		keys[i] = sortKey{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), i}
	}
	sorted := radixSort(keys, tmp)
	for lo := 0; lo < len(sorted); {
		hi := lo + 1
		for hi < len(sorted) && sorted[hi].hi == sorted[lo].hi && sorted[hi].lo == sorted[lo].lo {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(sorted[lo:hi], func(a, b sortKey) int { return strings.Compare(slots[a.at].key, slots[b.at].key) })
		}
		lo = hi
	}
	out = slices.Grow(out[:0], len(slots))
	for _, k := range sorted {
		out = append(out, slots[k.at])
	}
	return keys, tmp, out
}

// radixSort sorts keys by (hi, lo), a byte at a time from the last, with tmp (as long as
// keys) for room, and returns whichever of the two holds the result. A byte that is the
// same in every key is skipped.
func radixSort(keys, tmp []sortKey) []sortKey {
	if len(keys) < 2 {
		return keys
	}
	src, dst := keys, tmp
	for pass := range 16 {
		shift := uint(8 * (pass % 8))
		word := func(k *sortKey) uint64 {
			if pass < 8 {
				return k.lo
			}
			return k.hi
		}
		var count [256]int
		for i := range src {
			count[byte(word(&src[i])>>shift)]++
		}
		if count[byte(word(&src[0])>>shift)] == len(src) {
			continue
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for i := range src {
			d := byte(word(&src[i]) >> shift)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	return src
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

// minParallelSlots is the fewest path keys per worker worth a goroutine.
const minParallelSlots = 2048

// group is the claims of one (key, service, version): replicas, and the manifests other
// instances publish for that version.
type group struct {
	first   *claim
	more    []*claim  // the further claims, in the order they came (rarely any)
	methods methodSet // every method some claim claims
	// uniform: every claim claims the same methods, so that all (the group's instances,
	// newest claim and seniority over every claim) is its rival for each of them.
	uniform bool
	all     rival
	sorted  bool            // all's upstreams are sorted and its ids set
	ver     *semver.Version // parsed only when the group has rivals
	next    *group          // the slot's next group
}

func (g *group) label() string { return g.first.service + "@" + g.first.version }

// rival is a group as a claimant of one method: its instances, and the claim of the newest
// generation, which gives the route its pattern, weight and idempotency.
type rival struct {
	g         *group
	newest    *claim
	newestGen int64
	seniority int64  // lowest generation
	rewrite   string // the newest claim's, as its pattern and weight are
	upstreams []Upstream
	ids       []string // the upstreams' instances, once sorted
}

// newRival starts a rival at claim c, its instances to be appended to upstreams.
func newRival(c *claim, upstreams []Upstream) rival {
	return rival{newest: c, newestGen: c.generation, seniority: c.generation, rewrite: c.rewrite, upstreams: upstreams}
}

// addClaim counts claim c, made by its origin and the origin's replicas, into r.
func (r *rival) addClaim(c *claim) {
	r.add(c, c.origin)
	for _, o := range c.replicas {
		r.add(c, o)
	}
}

// add counts claim c, made by origin o (c's own or one of its replicas), into r.
func (r *rival) add(c *claim, o *origin) {
	r.upstreams = append(r.upstreams, Upstream{Instance: o.instance, Endpoint: o.endpoint})
	r.seniority = min(r.seniority, o.generation)
	if o.generation > r.newestGen {
		r.newest, r.newestGen, r.rewrite = c, o.generation, c.rewrite
	}
}

// rivalFor returns g as a claimant of method mi, its upstreams sorted.
func (g *group) rivalFor(mi int, ids *[]string, block int) *rival {
	if g.uniform {
		if !g.sorted {
			g.all.sort(ids, block)
			g.sorted = true
		}
		return &g.all
	}
	r := &rival{}
	for _, c := range append([]*claim{g.first}, g.more...) {
		if !c.methods.has(mi) {
			continue
		}
		if r.newest == nil {
			*r = newRival(c, nil)
		}
		r.addClaim(c)
	}
	r.g = g
	r.sort(ids, block)
	return r
}

// sort sorts r's upstreams by instance and sets its ids, carved from *ids (refilled block,
// or arenaBlock, at a time).
func (r *rival) sort(ids *[]string, block int) {
	switch u := r.upstreams; {
	case len(u) == 2: // two replicas, the most common group
		if u[1].Instance < u[0].Instance {
			u[0], u[1] = u[1], u[0]
		}
	case len(u) > 2:
		slices.SortFunc(u, func(a, b Upstream) int { return cmp.Compare(a.Instance, b.Instance) })
	}
	n := len(r.upstreams)
	if len(*ids) < n {
		*ids = make([]string, max(cmp.Or(block, arenaBlock), n))
	}
	r.ids = (*ids)[:n:n]
	*ids = (*ids)[n:]
	for i, u := range r.upstreams {
		r.ids[i] = u.Instance
	}
}
