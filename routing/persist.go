package routing

import (
	"hash/maphash"
	"slices"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// A Deriver's trie is persistent: a change makes new nodes on its key's path and shares the
// rest with the tables before it. A node with many literal children keeps them in shards,
// so that a change copies one shard's map and the array of shards, not every child.

// litShards are the literal children of a node, by the hash of the segment, each shard
// sorted by value: a change copies the list of shards and one shard. With n children there
// are about √n shards of about √n children: a change copies some 2√n edges (15 KB at
// 100,000 children), not n.
type litShards struct {
	n      int      // children
	shards [][]edge // a power of two of them
	epoch  uint64   // the commit that made it
}

var shardSeed = maphash.MakeSeed()

func (sh *litShards) shardOf(value string) int {
	return int(maphash.String(shardSeed, value) & uint64(len(sh.shards)-1))
}

func byValue(e edge, v string) int { return strings.Compare(e.value, v) }

// get returns the child for value, or nil.
func (sh *litShards) get(value string) *node {
	es := sh.shards[sh.shardOf(value)]
	if i, ok := slices.BinarySearchFunc(es, value, byValue); ok {
		return es[i].next
	}
	return nil
}

// set returns a copy of sh with value's child next (nil: none); past 4 children a shard on
// average squared, the children are dealt into twice as many shards.
func (sh *litShards) set(value string, next *node, epoch uint64) *litShards {
	out := sh // made by this commit: changed in place
	if sh.epoch != epoch {
		out = &litShards{n: sh.n, shards: slices.Clone(sh.shards), epoch: epoch}
	}
	k := out.shardOf(value)
	es := out.shards[k]
	i, ok := slices.BinarySearchFunc(es, value, byValue)
	switch {
	case ok && next == nil:
		es = slices.Delete(slices.Clone(es), i, i+1)
		out.n--
	case ok:
		es = slices.Clone(es)
		es[i].next = next
	case next != nil:
		es = slices.Insert(slices.Clip(es), i, edge{value, next})
		out.n++
	}
	out.shards[k] = es
	if l := len(out.shards); out.n > 4*l*l {
		grown := shardsOf(out.all(), out.n)
		grown.epoch = epoch
		return grown
	}
	return out
}

// all yields every child.
func (sh *litShards) all() func(yield func(string, *node) bool) {
	return func(yield func(string, *node) bool) {
		for _, es := range sh.shards {
			for _, e := range es {
				if !yield(e.value, e.next) {
					return
				}
			}
		}
	}
}

// shardsOf deals n children into about √n shards.
func shardsOf(children func(yield func(string, *node) bool), n int) *litShards {
	l := 1
	for l*l < n {
		l *= 2
	}
	sh := &litShards{shards: make([][]edge, l)}
	for v, nd := range children {
		k := sh.shardOf(v)
		sh.shards[k] = append(sh.shards[k], edge{v, nd})
		sh.n++
	}
	for k := range sh.shards {
		slices.SortFunc(sh.shards[k], func(a, b edge) int { return strings.Compare(a.value, b.value) })
	}
	return sh
}

// with returns a copy of n in which the pattern of segs (from segment i on) has set, nil
// removing it; nodes left empty are dropped (with returns nil for an empty node). Nodes
// made by this commit (epoch) are not yet in any table: they are changed in place, so that
// the keys of one change copy the nodes they share once.
func (n *node) with(segs []apiv1.Segment, i int, set *byMethod, epoch uint64) *node {
	c := n
	if n == nil || n.epoch != epoch {
		c = &node{}
		if n != nil {
			*c = *n
		}
		c.epoch = epoch
	}
	if i == len(segs) {
		c.end = set
		return c.orNil()
	}
	switch s := segs[i]; s.Kind {
	case apiv1.Wildcard: // the last segment
		c.wildcard = set
	case apiv1.Param:
		c.param = c.param.with(segs, i+1, set, epoch)
	case apiv1.Literal:
		var child *node
		if n != nil {
			child = n.child(s.Value)
		}
		c.setChild(s.Value, child.with(segs, i+1, set, epoch), epoch)
	}
	return c.orNil()
}

// orNil returns n, or nil when it holds nothing.
func (n *node) orNil() *node {
	if n.end == nil && n.wildcard == nil && n.param == nil && len(n.lits) == 0 && n.literal == nil && n.shards == nil {
		return nil
	}
	return n
}

// setChild makes next (nil: none) c's literal child for value, copying the container it
// changes: c is a fresh copy, its containers still shared.
func (c *node) setChild(value string, next *node, epoch uint64) {
	if c.literal != nil { // a node derived whole: its map moves to shards once
		lit := c.literal
		c.literal, c.shards = nil, shardsOf(func(yield func(string, *node) bool) {
			for v, nd := range lit {
				if !yield(v, nd) {
					return
				}
			}
		}, len(lit))
	}
	if c.shards != nil {
		c.shards = c.shards.set(value, next, epoch)
		return
	}
	i := slices.IndexFunc(c.lits, func(e edge) bool { return e.value == value })
	switch {
	case i >= 0 && next == nil:
		c.lits = slices.Delete(slices.Clone(c.lits), i, i+1)
		if len(c.lits) == 0 {
			c.lits = nil
		}
	case i >= 0:
		c.lits = slices.Clone(c.lits)
		c.lits[i].next = next
	case next == nil:
	case len(c.lits) < maxEdges:
		c.lits = append(slices.Clip(c.lits), edge{value, next})
	default:
		lits := c.lits
		c.lits, c.shards = nil, shardsOf(func(yield func(string, *node) bool) {
			for _, e := range lits {
				if !yield(e.value, e.next) {
					return
				}
			}
		}, len(lits)+1).set(value, next, epoch)
	}
}
