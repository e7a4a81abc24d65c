package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// The page store's bounds: past any of them the oldest listings are dropped, and their next
// pages answer 410 PAGE_EXPIRED. maxPagedItems bounds the items across its listings;
// maxPagedListings and maxPagedKeyBytes bound the listings themselves, which an empty one
// (a query matching nothing, paged at every revision) would not move the item count for, and
// their keys (a query's values, up to a megabyte each).
const (
	maxPagedItems    = 500_000
	maxPagedListings = 4096
	maxPagedKeyBytes = 16 << 20
)

// pageToken is what a next_page_token carries: the listing (a hash of its query) and the
// state it was cut from, and where the next page starts.
type pageToken struct {
	Query    uint64 `json:"q"`
	Epoch    string `json:"e"`
	Revision int64  `json:"r"`
	Complete bool   `json:"c"`
	Offset   int    `json:"o"`
}

func (t pageToken) state() registry.State {
	return registry.State{Epoch: t.Epoch, Revision: t.Revision, Complete: t.Complete}
}

func (t pageToken) encode() string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodePageToken reads a page_token of a client: anything but a token the registry wrote
// is a 400.
func decodePageToken(s string) (pageToken, error) {
	var t pageToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.Offset < 0 || t.Epoch == "" {
		return pageToken{}, apiv1.InvalidRequest([]apiv1.Detail{{Path: "page_token", Message: "not a page token this registry wrote; start the listing again without it"}})
	}
	return t, nil
}

// paging is a listing request's limit and page token.
type paging struct {
	limit int
	token *pageToken
}

// parsePaging reads limit and page_token; ok is false when the request is not paged.
func parsePaging(v url.Values, query string) (p paging, ok bool, err error) {
	ls, ts := v.Get("limit"), v.Get("page_token")
	if ls == "" && ts == "" {
		return paging{}, false, nil
	}
	var ds []apiv1.Detail
	p.limit = apiv1.MaxLimit
	if ls != "" {
		var bad []apiv1.Detail
		p.limit, bad = parseLimit(ls, 1)
		ds = append(ds, bad...)
	}
	if ts != "" {
		t, err := decodePageToken(ts)
		if err != nil {
			return paging{}, false, err
		}
		if t.Query != queryHash(query) {
			ds = append(ds, apiv1.Detail{Path: "page_token", Message: "belongs to a listing with other parameters; ask with the parameters of its first page"})
		}
		if v.Get("index") != "" {
			ds = append(ds, apiv1.Detail{Path: "index", Message: "a long poll asks for a first page, not with page_token"})
		}
		p.token = &t
	}
	if len(ds) > 0 {
		return paging{}, false, apiv1.InvalidRequest(ds)
	}
	return p, true, nil
}

// parseLimit reads a limit parameter of least to apiv1.MaxLimit: a listing's page (from 1)
// or a catalog summary's instances (from 0). A bad one comes with the detail that says so.
func parseLimit(s string, least int) (int, []apiv1.Detail) {
	n, err := strconv.Atoi(s)
	if err != nil || n < least || n > apiv1.MaxLimit {
		return n, []apiv1.Detail{{Path: "limit", Message: fmt.Sprintf("must be an integer from %d to %d, got %q", least, apiv1.MaxLimit, s)}}
	}
	return n, nil
}

func queryHash(query string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(query))
	return h.Sum64()
}

// listing is one answer's items, kept while its pages are asked for.
type listing struct {
	state   registry.State
	items   any // a discovery answer's []registry.Entry, or the catalog's []*registry.Record
	n       int
	removed []apiv1.Removal
}

// pageStore keeps the listings that paged requests cut their pages from, so that every page
// of a listing comes from one revision. It holds at most maxPagedItems items in at most
// maxPagedListings listings under keys of at most maxPagedKeyBytes; the oldest listings go
// first.
type pageStore struct {
	mu       sync.Mutex
	m        map[string]*listing
	order    []string // keys, oldest first
	items    int
	keyBytes int
}

func newPageStore() *pageStore { return &pageStore{m: map[string]*listing{}} }

func pageKey(query string, st registry.State) string {
	return query + "\x00" + st.Epoch + "/" + strconv.FormatInt(st.Revision, 10) + "/" + strconv.FormatBool(st.Complete)
}

// load returns the listing of query at st: kept, or built now when st is the current state
// (current); nil when it is gone (an older state, dropped).
func (p *pageStore) load(query string, st registry.State, current bool, build func() *listing) *listing {
	key := pageKey(query, st)
	p.mu.Lock()
	defer p.mu.Unlock() // building under the lock makes concurrent first pages build once
	if l := p.m[key]; l != nil {
		return l
	}
	if !current {
		return nil
	}
	l := build()
	if l.state != st {
		key = pageKey(query, l.state) // the registry moved while building: file it under its state
		if old := p.m[key]; old != nil {
			return old
		}
	}
	p.m[key] = l
	p.order = append(p.order, key)
	p.items += l.n
	p.keyBytes += len(key)
	for (p.items > maxPagedItems || len(p.order) > maxPagedListings || p.keyBytes > maxPagedKeyBytes) && len(p.order) > 1 {
		oldest := p.order[0]
		p.order = p.order[1:]
		p.items -= p.m[oldest].n
		p.keyBytes -= len(oldest)
		delete(p.m, oldest)
	}
	return l
}

// page answers one page of a paged listing: the listing is the token's, or the current
// state's for a first page; a listing no longer held is 410 PAGE_EXPIRED.
func (s *Server) page(query string, pg paging, build func() *listing, answer func(l *listing, from, to int, next string) (any, error)) (any, error) {
	st, offset := s.reg.State(), 0
	if pg.token != nil {
		st, offset = pg.token.state(), pg.token.Offset
		st.Region = s.reg.State().Region
	}
	l := s.pages.load(query, st, st == s.reg.State(), build)
	if l == nil {
		return nil, apiv1.Errorf(http.StatusGone, apiv1.CodePageExpired,
			"the listing this page_token continues (revision %d) is no longer held; start again without page_token", st.Revision)
	}
	from := min(offset, l.n)
	to := min(from+pg.limit, l.n)
	next := ""
	if to < l.n {
		next = pageToken{Query: queryHash(query), Epoch: l.state.Epoch, Revision: l.state.Revision, Complete: l.state.Complete, Offset: to}.encode()
	}
	return answer(l, from, to, next)
}
