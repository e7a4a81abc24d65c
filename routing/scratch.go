package routing

import (
	"cmp"
	"sync"
)

// arenaBlock is how many values an arena allocates at once.
const arenaBlock = 1024

// arena hands out zero values allocated arenaBlock at a time: one allocation, instead of
// one each, for the many small values of a derivation. An arena kept in a scratch is used
// again by the next derivation: reuse makes it hand out the same memory, cleared block by
// block as it is reached.
type arena[T any] struct {
	block  int // values a block holds at least (0: arenaBlock)
	blocks [][]T
	cur    int // the block values are handed out of
	used   int // values handed out of blocks[cur]
	dirty  int // blocks[:dirty] hold values of an earlier use
}

func (a *arena[T]) new() *T { return &a.take(1)[0] }

// take returns n contiguous zero values (a slice without room to grow into its neighbours).
func (a *arena[T]) take(n int) []T {
	for {
		if a.cur == len(a.blocks) {
			a.blocks = append(a.blocks, make([]T, max(cmp.Or(a.block, arenaBlock), n)))
		}
		b := a.blocks[a.cur]
		if a.used == 0 && a.cur < a.dirty {
			clear(b)
		}
		if a.used+n <= len(b) {
			a.used += n
			return b[a.used-n : a.used : a.used]
		}
		a.cur, a.used = a.cur+1, 0
	}
}

// reuse makes the arena hand out its memory again; values handed out before must no
// longer be used.
func (a *arena[T]) reuse() {
	touched := a.cur
	if a.used > 0 {
		touched++
	}
	a.dirty = max(a.dirty, touched)
	a.cur, a.used = 0, 0
}

// scratch is what a derivation needs only while it runs: the claims, their origins, the
// slots and groups, and the tables and lists that order them. A pool keeps it for the
// next derivation (a gateway derives at every change) rather than leaving the collector
// tens of megabytes of garbage each time; until it is used again it still refers to the
// inputs of its last derivation.
type scratch struct {
	results  []result
	claims   []*claim
	origins  arena[origin] // the replicas' origins
	analyses []analysis    // one per worker analysing manifests
	groups   []grouping    // one per shard of path keys
}

// analysis is a manifest-analysing worker's scratch.
type analysis struct {
	claims  arena[claim]
	origins arena[origin]
	first   map[[2]string]int // per service and version, the first manifest seen
}

// grouping is a shard's scratch for slotsOf.
type grouping struct {
	slots   arena[slot]
	groups  arena[group]
	table   []cell
	ordered []*slot // in the order they came
	keys    []sortKey
	tmp     []sortKey
	sorted  []*slot // in key order
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// fit makes room in sc for the workers and shards of a derivation.
func (sc *scratch) fit(workers, shards int) {
	for len(sc.analyses) < workers {
		sc.analyses = append(sc.analyses, analysis{})
	}
	for len(sc.groups) < shards {
		sc.groups = append(sc.groups, grouping{})
	}
}

// reuse makes sc's arenas hand out their memory again: what the last derivation took from
// them must no longer be used (its table takes nothing from them).
func (sc *scratch) reuse() {
	sc.origins.reuse()
	for i := range sc.analyses {
		sc.analyses[i].claims.reuse()
		sc.analyses[i].origins.reuse()
	}
	for i := range sc.groups {
		sc.groups[i].slots.reuse()
		sc.groups[i].groups.reuse()
	}
}
