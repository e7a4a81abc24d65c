package server

import (
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/meshflows/meshflows/internal/registry"
)

// A discovery request's query string is parsed, checked for unknown parameters, turned into
// a registry.Query and written in canonical form before the answer cache is even asked; a
// fleet polling the same few queries paid that on every request. queryMemo remembers the
// outcome for the query strings that parsed without error, ask no page and are no long poll
// (whose index moves with every revision, and which waits anyway): it depends on the string
// alone.

// The memo's bounds: past maxMemoQueries, a flood of distinct query strings starts it over;
// a query string longer than maxMemoQueryLen (a service name of a megabyte) is parsed each
// time, so that the memo holds at most about a megabyte.
const (
	maxMemoQueries  = 1024
	maxMemoQueryLen = 512
)

// discoveryQuery is a parsed discovery query string. Shared read-only.
type discoveryQuery struct {
	v   url.Values
	q   *registry.Query
	key string // registry.CanonicalQuery: the answer cache's key
}

// queryMemo maps raw query strings to what they parse to. It is safe for concurrent use.
type queryMemo struct {
	m sync.Map // raw query string -> *discoveryQuery
	n atomic.Int64
}

// load returns what raw parses to, when it is remembered.
func (qm *queryMemo) load(raw string) (*discoveryQuery, bool) {
	if d, ok := qm.m.Load(raw); ok {
		return d.(*discoveryQuery), true
	}
	return nil, false
}

// store remembers that raw parses to d, unless raw is too long to hold.
func (qm *queryMemo) store(raw string, d *discoveryQuery) {
	if len(raw) > maxMemoQueryLen {
		return
	}
	if qm.n.Add(1) > maxMemoQueries {
		qm.m.Clear()
		qm.n.Store(0)
	}
	qm.m.Store(raw, d)
}

// parseDiscovery parses the query string of a discovery request, or takes what it parsed to
// from the memo: the query, its canonical key, and the page it asks for (paged).
func (s *Server) parseDiscovery(r *http.Request) (d *discoveryQuery, pg paging, paged bool, err error) {
	raw := r.URL.RawQuery
	if d, ok := s.queries.load(raw); ok {
		return d, paging{}, false, nil
	}
	v := r.URL.Query()
	if err := registry.UnknownParameters(v, registry.CapabilitiesListing); err != nil {
		return nil, paging{}, false, err
	}
	q, err := registry.ParseQuery(v)
	if err != nil {
		return nil, paging{}, false, err
	}
	d = &discoveryQuery{v: v, q: q, key: registry.CanonicalQuery(v)}
	if pg, paged, err = parsePaging(v, d.key); err != nil {
		return nil, paging{}, false, err
	}
	if !paged && v.Get("index") == "" {
		s.queries.store(raw, d)
	}
	return d, pg, paged, nil
}
