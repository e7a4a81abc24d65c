package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
)

// FuzzPageToken: a page_token is untrusted input; whatever it holds, decoding never panics,
// and a token that decodes encodes back to itself.
func FuzzPageToken(f *testing.F) {
	f.Add(pageToken{Query: 7, Epoch: "e", Revision: 3, Complete: true, Offset: 10}.encode())
	f.Add("")
	f.Add("eyJ9")
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := decodePageToken(s)
		if err != nil {
			return
		}
		again, err := decodePageToken(tok.encode())
		if err != nil || again != tok {
			t.Fatalf("%q decoded to %+v, which round-trips to %+v, %v", s, tok, again, err)
		}
	})
}

// TestPageStoreIsBounded: listings past maxPagedItems push out the oldest, whose pages then
// expire; a listing of the current state is built once however often it is asked for.
func TestPageStoreIsBounded(t *testing.T) {
	p := newPageStore()
	builds := 0
	listingOf := func(rev int64, n int) func() *listing {
		return func() *listing {
			builds++
			return &listing{state: registry.State{Epoch: "e", Revision: rev}, n: n}
		}
	}
	st := func(rev int64) registry.State { return registry.State{Epoch: "e", Revision: rev} }
	p.load("q", st(1), true, listingOf(1, maxPagedItems/2))
	p.load("q", st(1), true, listingOf(1, maxPagedItems/2))
	if builds != 1 {
		t.Errorf("the same listing was built %d times", builds)
	}
	p.load("q", st(2), true, listingOf(2, maxPagedItems/2))
	if p.load("q", st(1), false, nil) == nil {
		t.Error("revision 1's listing was dropped while the store held no more than its bound")
	}
	p.load("q", st(3), true, listingOf(3, maxPagedItems/2))
	if p.load("q", st(1), false, nil) != nil {
		t.Error("revision 1's listing is still held past the bound")
	}
	if p.load("q", st(3), false, nil) == nil || p.items > maxPagedItems {
		t.Errorf("the store holds %d items (bound %d), the newest listing held: %v", p.items, maxPagedItems, p.load("q", st(3), false, nil) != nil)
	}
}

// TestPageStoreBoundsEmptyListings: listings of no items — a query matching nothing, paged
// at every revision, or with values of a megabyte — are bounded too: by their number and by
// their keys' bytes (before, only items counted, and such listings were never dropped).
func TestPageStoreBoundsEmptyListings(t *testing.T) {
	tests := []struct {
		name  string
		query func(i int) string
		n     int
	}{
		{"a query matching nothing, paged at each revision", func(int) string { return "service_name=gone&limit=10" }, 3 * maxPagedListings},
		{"queries with values of a megabyte", func(i int) string { return fmt.Sprint(i, strings.Repeat("s", 1<<20)) }, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPageStore()
			for i := range tt.n {
				st := registry.State{Epoch: "e", Revision: int64(i + 1)}
				p.load(tt.query(i), st, true, func() *listing { return &listing{state: st} })
				keyBytes := 0
				for k := range p.m {
					keyBytes += len(k)
				}
				if len(p.m) > maxPagedListings || keyBytes > maxPagedKeyBytes || len(p.order) != len(p.m) {
					t.Fatalf("after %d listings the store holds %d (%d in order) under %d bytes of keys; bounds %d and %d",
						i+1, len(p.m), len(p.order), keyBytes, maxPagedListings, maxPagedKeyBytes)
				}
			}
			last := registry.State{Epoch: "e", Revision: int64(tt.n)}
			if p.load(tt.query(tt.n-1), last, false, nil) == nil {
				t.Error("the newest listing is not held")
			}
		})
	}
}

// TestAnswerCacheIsBoundedInBytes: however many large answers are cached, the cache holds
// at most maxCachedBytes of bodies (before, only the count was bounded: 4,096 answers).
func TestAnswerCacheIsBoundedInBytes(t *testing.T) {
	c := newAnswerCache(time.Now, nil)
	body := make([]byte, 40<<20) // an unfiltered answer at 100,000 instances is about 37 MB
	for i := range 20 {
		c.put(string(rune('a'+i)), &encoded{state: registry.State{Epoch: "e", Revision: 1}, body: body})
		if c.bytes > maxCachedBytes {
			t.Fatalf("after %d answers the cache holds %d bytes, over its bound of %d", i+1, c.bytes, maxCachedBytes)
		}
	}
	c.put("a", &encoded{state: registry.State{Epoch: "e", Revision: 2}, body: body[:10]})
	if got := c.get("a", registry.State{Epoch: "e", Revision: 2}); got == nil {
		t.Error("the newest answer is not cached")
	}
}

// TestAnswerCacheCountsItsKeys: answers to queries with long values (a service name of a
// megabyte has an empty answer and a key of a megabyte) are bounded by the keys' bytes too.
func TestAnswerCacheCountsItsKeys(t *testing.T) {
	c := newAnswerCache(time.Now, nil)
	long := strings.Repeat("s", 1<<20)
	for i := range 400 { // 400 MB of keys, under the count bound of 4,096 answers
		c.put(fmt.Sprint(i, long), &encoded{state: registry.State{Epoch: "e", Revision: 1}, body: []byte(`{}`)})
		held := 0
		for k, e := range c.m {
			held += len(k) + len(e.body)
		}
		if held > maxCachedBytes {
			t.Fatalf("after %d answers the cache holds %d bytes of keys and answers, over its bound of %d", i+1, held, maxCachedBytes)
		}
	}
}
