package routing

import (
	"path"
	"slices"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// node is a trie node: one path segment deep. Exploring literal, then parameter, then
// wildcard children visits patterns in specificity order, so the first pattern found that
// has the request's method is the most specific one that does.
type node struct {
	lits     []edge           // literal children, while there are few
	literal  map[string]*node // literal children, once there are many
	shards   *litShards       // or so, in a Deriver's trie (persist.go)
	epoch    uint64           // in a Deriver's trie, the commit that made it
	param    *node
	end      *byMethod // patterns that end here
	wildcard *byMethod // {rest...} at this depth
}

// edge is a literal child.
type edge struct {
	value string
	next  *node
}

// maxEdges is how many literal children a node scans before it keeps a map.
const maxEdges = 8

// byMethod holds one entry per method, by apiv1.MethodIndex.
type byMethod [len(apiv1.Methods)]*Entry

// each calls add with every method that has an entry.
func (b *byMethod) each(add func(string)) {
	if b == nil {
		return
	}
	for mi, e := range b {
		if e != nil {
			add(apiv1.Methods[mi])
		}
	}
}

// get returns the entry for method (nil on a nil set or an unknown method).
func (b *byMethod) get(method string) *Entry {
	if b == nil {
		return nil
	}
	if mi := apiv1.MethodIndex(method); mi >= 0 {
		return b[mi]
	}
	return nil
}

// child returns the literal child for value, or nil.
func (n *node) child(value string) *node {
	if n.literal != nil {
		return n.literal[value]
	}
	if n.shards != nil {
		return n.shards.get(value)
	}
	for _, e := range n.lits {
		if e.value == value {
			return e.next
		}
	}
	return nil
}

// trieBuilder builds a trie; its nodes, method sets and first edges come from arenas.
type trieBuilder struct {
	nodes arena[node]
	sets  arena[byMethod]
	edges arena[edge]
	root  *node
	// rootHint is how many literal children the root may get: the size of its map.
	rootHint int
	prev     string  // the key of the last pattern placed
	path     []*node // path[i] is the node after the first i segments of prev
}

// firstEdges is how many literal children a node has room for before its edges are copied.
const firstEdges = 4

// addChild adds a new literal child for value to n and returns it.
func (b *trieBuilder) addChild(n *node, value string) *node {
	next := b.nodes.new()
	if n.lits == nil && n.literal == nil {
		n.lits = b.edges.take(firstEdges)[:0]
	}
	hint := 0
	if n == b.root {
		hint = b.rootHint
	}
	link(n, value, next, hint)
	return next
}

// link makes next n's literal child for value; a map made for n has room for hint.
func link(n *node, value string, next *node, hint int) {
	switch {
	case n.literal != nil:
		n.literal[value] = next
	case len(n.lits) < maxEdges:
		n.lits = append(n.lits, edge{value, next})
	default:
		n.literal = make(map[string]*node, max(2*maxEdges, hint))
		for _, e := range n.lits {
			n.literal[e.value] = e.next
		}
		n.literal[value] = next
		n.lits = nil
	}
}

// merge adds the patterns of trie b to trie a; b's nodes become a's where a has none. No
// (pattern key, method) may be in both.
func merge(a, b *node) {
	a.end = mergeSets(a.end, b.end)
	a.wildcard = mergeSets(a.wildcard, b.wildcard)
	if a.param == nil {
		a.param = b.param
	} else if b.param != nil {
		merge(a.param, b.param)
	}
	add := func(value string, nb *node) {
		if na := a.child(value); na != nil {
			merge(na, nb)
		} else {
			link(a, value, nb, 0)
		}
	}
	for _, e := range b.lits {
		add(e.value, e.next)
	}
	for value, nb := range b.literal {
		add(value, nb)
	}
}

// mergeSets returns the union of two method sets, reusing one of them.
func mergeSets(a, b *byMethod) *byMethod {
	if a == nil {
		return b
	}
	if b != nil {
		for mi, e := range b {
			if e != nil {
				a[mi] = e
			}
		}
	}
	return a
}

// sharedSegments returns how many leading segments two path keys have in common: the
// segments that end, in both, within their common prefix. A key names parameters "{}",
// so equal text is one trie path; a wildcard, the last segment, leads to no node (the
// caller bounds the count by the nodes it has).
func sharedSegments(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i <= 1 {
		return 0
	}
	c := strings.Count(a[1:i], "/")
	if (i == len(a) || a[i] == '/') && (i == len(b) || b[i] == '/') {
		c++ // the segment ending at i ends there in both
	}
	return c
}

// setFor returns the method set of the pattern of key and segs, creating the nodes on its
// way. Patterns come in key order and share their leading segments with the previous one,
// so the walk resumes from the deepest node the two have in common instead of from the
// root.
func (b *trieBuilder) setFor(key string, segs []apiv1.Segment) *byMethod {
	if b.root == nil {
		b.root = b.nodes.new()
		b.path = []*node{b.root}
	}
	common := min(sharedSegments(key, b.prev), len(segs), len(b.path)-1)
	b.path, b.prev = b.path[:common+1], key
	n := b.path[common]
	for _, s := range segs[common:] {
		switch s.Kind {
		case apiv1.Literal:
			next := n.child(s.Value)
			if next == nil {
				next = b.addChild(n, s.Value)
			}
			n = next
		case apiv1.Param:
			if n.param == nil {
				n.param = b.nodes.new()
			}
			n = n.param
		case apiv1.Wildcard: // the last segment
			if n.wildcard == nil {
				n.wildcard = b.sets.new()
			}
			return n.wildcard
		}
		b.path = append(b.path, n)
	}
	if n.end == nil {
		n.end = b.sets.new()
	}
	return n.end
}

// Match is the outcome of matching a request.
type Match struct {
	// Entry is the route that serves the request, nil for 404 and 405.
	Entry *Entry
	// Status is 0 when Entry is set, else 404 or 405.
	Status int
	// Allow lists, for a 405, the methods of every pattern that matches the path, sorted.
	Allow []string
	// Path is the cleaned request path, the one to forward.
	Path string
}

// CleanPath is the request path the table matches and forwards: '.' and '..' resolved,
// duplicate slashes removed, no trailing slash but for "/".
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	return path.Clean(p)
}

// Match finds the most specific route for method and path.
func (t *Table) Match(method, rawPath string) Match {
	p := CleanPath(rawPath)
	var buf [16]string // most paths have fewer segments: no allocation per request for them
	segs := buf[:0]
	if p != "/" {
		segs = appendSegments(segs, p[1:])
	}
	if e := t.root.find(segs, method); e != nil {
		return Match{Entry: e, Path: p}
	}
	var allow []string
	t.root.methods(segs, func(m string) {
		if !slices.Contains(allow, m) {
			allow = append(allow, m)
		}
	})
	if len(allow) == 0 {
		return Match{Status: 404, Path: p}
	}
	slices.Sort(allow)
	return Match{Status: 405, Allow: allow, Path: p}
}

// appendSegments appends the segments of path, split at every "/", to segs: what
// strings.Split(path, "/") returns, without a slice of its own (Match splits every request's
// path into a buffer on its stack).
func appendSegments(segs []string, path string) []string {
	for {
		seg, rest, more := strings.Cut(path, "/")
		segs = append(segs, seg)
		if !more {
			return segs
		}
		path = rest
	}
}

// find returns the most specific entry for method under n for the remaining segments.
func (n *node) find(segs []string, method string) *Entry {
	if len(segs) == 0 {
		if e := n.end.get(method); e != nil {
			return e
		}
		return n.wildcard.get(method)
	}
	if next := n.child(segs[0]); next != nil {
		if e := next.find(segs[1:], method); e != nil {
			return e
		}
	}
	if n.param != nil {
		if e := n.param.find(segs[1:], method); e != nil {
			return e
		}
	}
	return n.wildcard.get(method)
}

// methods calls add with the method of every pattern under n that matches the segments.
func (n *node) methods(segs []string, add func(string)) {
	n.wildcard.each(add)
	if len(segs) == 0 {
		n.end.each(add)
		return
	}
	if next := n.child(segs[0]); next != nil {
		next.methods(segs[1:], add)
	}
	if n.param != nil {
		n.param.methods(segs[1:], add)
	}
}
