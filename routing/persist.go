package routing

import (
	"hash/maphash"
	"slices"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// A Deriver's trie is persistent: a change makes new nodes on its key's path and shares the
// rest with the tables before it. A node with many literal children keeps them in shards,
// so that a change copies one shard's map and the array of shards, not every child.

// litShards are the literal children of a node, by the hash of the segment.
type litShards [shardCount]map[string]*node

const shardCount = 256

var shardSeed = maphash.MakeSeed()

func shardOf(value string) int { return int(maphash.String(shardSeed, value) % shardCount) }

// with returns a copy of n in which the pattern of segs (from segment i on) has set, nil
// removing it; nodes left empty are dropped (with returns nil for an empty node).
func (n *node) with(segs []apiv1.Segment, i int, set *byMethod) *node {
	c := &node{}
	if n != nil {
		*c = *n
	}
	if i == len(segs) {
		c.end = set
		return c.orNil()
	}
	switch s := segs[i]; s.Kind {
	case apiv1.Wildcard: // the last segment
		c.wildcard = set
	case apiv1.Param:
		c.param = c.param.with(segs, i+1, set)
	case apiv1.Literal:
		var child *node
		if n != nil {
			child = n.child(s.Value)
		}
		c.setChild(s.Value, child.with(segs, i+1, set))
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
func (c *node) setChild(value string, next *node) {
	if c.literal != nil { // a node derived whole: its map moves to shards once
		sh := &litShards{}
		for v, nd := range c.literal {
			k := shardOf(v)
			if sh[k] == nil {
				sh[k] = map[string]*node{}
			}
			sh[k][v] = nd
		}
		c.literal, c.shards = nil, sh
	}
	if c.shards != nil {
		sh := *c.shards
		k := shardOf(value)
		m := make(map[string]*node, len(sh[k])+1)
		for v, nd := range sh[k] {
			m[v] = nd
		}
		if next == nil {
			delete(m, value)
		} else {
			m[value] = next
		}
		if len(m) == 0 {
			m = nil
		}
		sh[k] = m
		c.shards = &sh
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
		sh := &litShards{}
		for _, e := range c.lits {
			k := shardOf(e.value)
			if sh[k] == nil {
				sh[k] = map[string]*node{}
			}
			sh[k][e.value] = e.next
		}
		k := shardOf(value)
		if sh[k] == nil {
			sh[k] = map[string]*node{}
		}
		sh[k][value] = next
		c.lits, c.shards = nil, sh
	}
}
