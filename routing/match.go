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
	literal  map[string]*node
	param    *node
	end      map[string]*Entry // patterns that end here, by method
	wildcard map[string]*Entry // {rest...} at this depth, by method
}

func compile(entries []*Entry) *node {
	root := &node{}
	for _, e := range entries {
		n := root
		for _, s := range e.Segments {
			switch s.Kind {
			case apiv1.Literal:
				if n.literal == nil {
					n.literal = map[string]*node{}
				}
				next := n.literal[s.Value]
				if next == nil {
					next = &node{}
					n.literal[s.Value] = next
				}
				n = next
			case apiv1.Param:
				if n.param == nil {
					n.param = &node{}
				}
				n = n.param
			case apiv1.Wildcard:
				if n.wildcard == nil {
					n.wildcard = map[string]*Entry{}
				}
				n.wildcard[e.Method] = e
				n = nil
			}
		}
		if n != nil {
			if n.end == nil {
				n.end = map[string]*Entry{}
			}
			n.end[e.Method] = e
		}
	}
	return root
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
	var segs []string
	if p != "/" {
		segs = strings.Split(p[1:], "/")
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

// find returns the most specific entry for method under n for the remaining segments.
func (n *node) find(segs []string, method string) *Entry {
	if len(segs) == 0 {
		if e := n.end[method]; e != nil {
			return e
		}
		return n.wildcard[method]
	}
	if next := n.literal[segs[0]]; next != nil {
		if e := next.find(segs[1:], method); e != nil {
			return e
		}
	}
	if n.param != nil {
		if e := n.param.find(segs[1:], method); e != nil {
			return e
		}
	}
	return n.wildcard[method]
}

// methods calls add with the method of every pattern under n that matches the segments.
func (n *node) methods(segs []string, add func(string)) {
	for m := range n.wildcard {
		add(m)
	}
	if len(segs) == 0 {
		for m := range n.end {
			add(m)
		}
		return
	}
	if next := n.literal[segs[0]]; next != nil {
		next.methods(segs[1:], add)
	}
	if n.param != nil {
		n.param.methods(segs[1:], add)
	}
}
