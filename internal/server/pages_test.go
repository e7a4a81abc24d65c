package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

func pagedBody(i int) string {
	return fmt.Sprintf(`{"instance_id":"pub-%02d","service_name":"svc-%d","service_version":"1.0.0","endpoint":"http://127.0.0.1:%d",
"capabilities":[{"capability_id":"messaging.publish","capability_version":"1.%d.0","contract_schema_version":"1.0","provider":"jms"}]}`, i, i%3, 9000+i, i%4)
}

// listAll follows next_page_token from path (which carries limit) and returns every page.
func listAll[T any](t *testing.T, s *registrytest.Server, path string, between func()) []T {
	t.Helper()
	var pages []T
	next := ""
	for i := 0; ; i++ {
		p := path
		if next != "" {
			p += "&page_token=" + url.QueryEscape(next)
		}
		r := do(t, "GET", s.URL+p, "")
		if r.status != 200 {
			t.Fatalf("GET %s = %d %s", p, r.status, r.body)
		}
		var page T
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page)
		var tok struct {
			Next string `json:"next_page_token"`
		}
		json.Unmarshal(r.body, &tok)
		if next = tok.Next; next == "" {
			return pages
		}
		if i == 0 && between != nil {
			between()
		}
	}
}

// TestPagedListings: limit and page_token cut the capabilities answer and the catalog into
// pages that together are exactly the unpaged answer, all from the revision of the first
// page even when the registry moves on in between.
func TestPagedListings(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	s.Clock.Advance(registry.DefaultLeaseTTL)
	for i := range 25 {
		register(t, s, pagedBody(i))
	}
	var whole apiv1.DiscoveryResponse
	json.Unmarshal(do(t, "GET", s.URL+"/v1/discovery/capabilities?capability_id=messaging.publish", "").body, &whole)
	var catalog apiv1.CatalogResponse
	json.Unmarshal(do(t, "GET", s.URL+"/v1/services", "").body, &catalog)
	if len(whole.Capabilities) != 25 || len(catalog.Instances) != 25 {
		t.Fatalf("unpaged: %d entries, %d instances", len(whole.Capabilities), len(catalog.Instances))
	}
	moved := func() { register(t, s, pagedBody(40)) } // a new revision between the first and the second page

	pages := listAll[apiv1.DiscoveryResponse](t, s, "/v1/discovery/capabilities?capability_id=messaging.publish&limit=10", moved)
	var got []apiv1.CapabilityEntry
	for i, p := range pages {
		if p.Revision != whole.Revision || p.RegistryEpoch != whole.RegistryEpoch {
			t.Errorf("page %d is of revision %d, the first of %d", i, p.Revision, whole.Revision)
		}
		got = append(got, p.Capabilities...)
	}
	if len(pages) != 3 {
		t.Errorf("25 entries in pages of 10 = %d pages", len(pages))
	}
	if diff := cmp.Diff(whole.Capabilities, got); diff != "" {
		t.Errorf("the pages differ from the unpaged answer (-unpaged +pages):\n%s", diff)
	}

	cpages := listAll[apiv1.CatalogResponse](t, s, "/v1/services?limit=7", moved)
	var insts []apiv1.Instance
	for _, p := range cpages {
		insts = append(insts, p.Instances...)
	}
	json.Unmarshal(do(t, "GET", s.URL+"/v1/services", "").body, &catalog) // now with pub-40: the pages are of the revision before it
	if len(cpages) != 4 || len(insts) != 26 || insts[0].InstanceID != catalog.Instances[0].InstanceID {
		t.Errorf("catalog in pages of 7: %d pages, %d instances", len(cpages), len(insts))
	}
}

// TestPagingRefusals: every malformed paging request is refused with its code, and a
// page_token whose listing is gone is 410 PAGE_EXPIRED (start again).
func TestPagingRefusals(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	s.Clock.Advance(registry.DefaultLeaseTTL)
	other := registrytest.NewServer(t, registry.Config{}) // another registry: its listing is not held here
	other.Clock.Advance(registry.DefaultLeaseTTL)
	for i := range 5 {
		register(t, s, pagedBody(i))
		register(t, other, pagedBody(i))
	}
	register(t, other, pagedBody(5)) // (the fake clocks give both one epoch: differ by a revision)
	first := func(srv *registrytest.Server, path string) string {
		var p struct {
			Next string `json:"next_page_token"`
		}
		json.Unmarshal(do(t, "GET", srv.URL+path, "").body, &p)
		if p.Next == "" {
			t.Fatalf("%s gave no next_page_token", path)
		}
		return url.QueryEscape(p.Next)
	}
	tok := first(s, "/v1/discovery/capabilities?capability_id=messaging.publish&limit=2")
	foreign := first(other, "/v1/discovery/capabilities?capability_id=messaging.publish&limit=2")
	ctok := first(s, "/v1/services?limit=2")
	for _, tt := range []struct {
		name, path string
		status     int
		code       string
		details    []string
	}{
		{"limit zero", "/v1/discovery/capabilities?limit=0", 400, apiv1.CodeInvalidRequest, []string{"limit"}},
		{"limit too large", "/v1/discovery/capabilities?limit=10001", 400, apiv1.CodeInvalidRequest, []string{"limit"}},
		{"limit not a number", "/v1/services?limit=ten", 400, apiv1.CodeInvalidRequest, []string{"limit"}},
		{"token garbage", "/v1/discovery/capabilities?page_token=%25%25", 400, apiv1.CodeInvalidRequest, []string{"page_token"}},
		{"token of another query", "/v1/discovery/capabilities?capability_id=other.cap&limit=2&page_token=" + tok, 400, apiv1.CodeInvalidRequest, []string{"page_token"}},
		{"catalog token on discovery", "/v1/discovery/capabilities?capability_id=messaging.publish&limit=2&page_token=" + ctok, 400, apiv1.CodeInvalidRequest, []string{"page_token"}},
		{"token with a long poll", "/v1/discovery/capabilities?capability_id=messaging.publish&limit=2&index=1&page_token=" + tok, 400, apiv1.CodeInvalidRequest, []string{"index"}},
		{"listing gone", "/v1/discovery/capabilities?capability_id=messaging.publish&limit=2&page_token=" + foreign, 410, apiv1.CodePageExpired, nil},
		{"catalog misspelled", "/v1/services?limt=2", 400, apiv1.CodeUnknownParameter, []string{"limt"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, "GET", s.URL+tt.path, "")
			if r.status != tt.status {
				t.Fatalf("= %d %s, want %d", r.status, r.body, tt.status)
			}
			e := apiErr(t, r)
			var paths []string
			for _, d := range e.Details {
				paths = append(paths, d.Path)
			}
			if e.Code != tt.code || !cmp.Equal(paths, tt.details) {
				t.Errorf("= %s %v, want %s %v", e.Code, paths, tt.code, tt.details)
			}
		})
	}
	if r := do(t, "GET", s.URL+"/v1/discovery/capabilities?capability_id=messaging.publish&limit=2&page_token="+tok, ""); r.status != 200 {
		t.Errorf("the good token after the refusals = %d %s", r.status, r.body)
	}
}

// TestCatalogWrittenAsMade: an unpaged catalog larger than what the server makes before it
// writes goes out as it is made (no Content-Length), one that fits goes whole with its
// Content-Length, and either way the bytes are what encoding/json writes of the catalog.
func TestCatalogWrittenAsMade(t *testing.T) {
	for _, tc := range []struct {
		name      string
		instances int
		whole     bool
	}{
		{"none", 0, true},
		{"a few", 3, true},
		{"more than a piece", 400, false}, // about 300 bytes each: past 64 KiB
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := registrytest.NewServer(t, registry.Config{})
			for i := range tc.instances {
				if r := do(t, "POST", s.URL+"/v1/services/register", pagedBody(i)); r.status != 200 {
					t.Fatalf("register: %d %s", r.status, r.body)
				}
			}
			want, err := httpapi.Marshal(s.Registry.Catalog())
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(s.URL + "/v1/services")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); resp.StatusCode != 200 || diff != "" {
				t.Errorf("GET /v1/services = %d (-encoding/json +answer):\n%s", resp.StatusCode, diff)
			}
			if whole := resp.ContentLength == int64(len(want)); whole != tc.whole || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Length %d of %d bytes, Content-Type %q; want whole %v, application/json",
					resp.ContentLength, len(want), resp.Header.Get("Content-Type"), tc.whole)
			}
		})
	}
}

// TestPagesListTheFirstPagesRevision: the pages of a listing — the catalog, or a discovery
// answer — list the instances of its first page's revision, each incarnation as it was
// registered then, while an instance's lease is the one it has when its page is read (as an
// unpaged answer has it). The instances changed between the pages are ones the first page
// does not list.
func TestPagesListTheFirstPagesRevision(t *testing.T) {
	type item struct {
		ID    string    `json:"instance_id"`
		Gen   int64     `json:"generation"`
		Lease time.Time `json:"lease_expires_at"`
	}
	type page struct {
		Revision  int64  `json:"revision"`
		Next      string `json:"next_page_token"`
		Instances []item `json:"instances"`
		Entries   []item `json:"capabilities"`
	}
	for _, path := range []string{"/v1/services?limit=4", "/v1/discovery/capabilities?capability_id=messaging.publish&limit=4"} {
		t.Run(path, func(t *testing.T) {
			s := registrytest.NewServer(t, registry.Config{})
			s.Clock.Advance(registry.DefaultLeaseTTL)
			gens := map[string]int64{}
			for i := range 10 {
				gens[fmt.Sprintf("pub-%02d", i)] = register(t, s, pagedBody(i)).Generation
			}
			get := func(p string) page {
				var pg page
				if err := json.Unmarshal(do(t, "GET", s.URL+p, "").body, &pg); err != nil {
					t.Fatal(err)
				}
				pg.Instances = append(pg.Instances, pg.Entries...)
				return pg
			}
			first := get(path)
			onFirst := map[string]bool{}
			for _, it := range first.Instances {
				onFirst[it.ID] = true
			}
			var later []string // in the listing, not on its first page
			for i := range 10 {
				if id := fmt.Sprintf("pub-%02d", i); !onFirst[id] {
					later = append(later, id)
				}
			}
			if len(first.Instances) != 4 || first.Next == "" || len(later) != 6 {
				t.Fatalf("first page: %v, next %q", first.Instances, first.Next)
			}
			// Meanwhile: one renews its lease later, one is replaced by a new incarnation, one
			// deregisters, and pub-10 registers.
			renewedID, replacedID, goneID := later[0], later[1], later[2]
			s.Clock.Advance(10 * time.Second)
			if r := do(t, "PUT", s.URL+"/v1/services/"+renewedID+"/heartbeat", fmt.Sprintf(`{"generation":%d}`, gens[renewedID]), "Content-Type", "application/json"); r.status != 200 {
				t.Fatalf("heartbeat: %d %s", r.status, r.body)
			}
			renewed := s.Clock.Now().Add(registry.DefaultLeaseTTL)
			var n int
			fmt.Sscanf(replacedID, "pub-%d", &n)
			register(t, s, pagedBody(n))
			if r := do(t, "DELETE", s.URL+"/v1/services/"+goneID, ""); r.status != 204 {
				t.Fatalf("deregister: %d %s", r.status, r.body)
			}
			register(t, s, pagedBody(10))
			listed := map[string]item{}
			for next := first.Next; next != ""; {
				pg := get(path + "&page_token=" + url.QueryEscape(next))
				if pg.Revision != first.Revision {
					t.Errorf("a page of revision %d, the first of %d", pg.Revision, first.Revision)
				}
				for _, it := range pg.Instances {
					listed[it.ID] = it
				}
				next = pg.Next
			}
			var ids []string
			for id := range listed {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, later) {
				t.Fatalf("the later pages list %v, want %v (the first page's revision)", ids, later)
			}
			if g := listed[replacedID].Gen; g != gens[replacedID] {
				t.Errorf("%s listed with generation %d, want %d (the incarnation of the listing's revision)", replacedID, g, gens[replacedID])
			}
			if l := listed[renewedID].Lease; !l.Equal(renewed) {
				t.Errorf("%s's lease ends %s on its page, want %s (as renewed)", renewedID, l, renewed)
			}
		})
	}
}
