package discovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// The delta watches: Watch and WatchRoutes by delta, WatchDeltas, against registries with and
// without them.

// recording wraps a handler and keeps the query of every discovery request.
type recording struct {
	h       http.Handler
	mu      sync.Mutex
	queries []url.Values
	// old, when set, answers delta=true as a registry that predates delta watches
	old bool
}

func (r *recording) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.queries = append(r.queries, req.URL.Query())
	old := r.old
	r.mu.Unlock()
	if old && req.URL.Query().Has("delta") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":{"code":"UNKNOWN_PARAMETER","message":"unknown parameter","details":[{"path":"delta","message":"not a parameter of this endpoint"}]}}`))
		return
	}
	r.h.ServeHTTP(w, req)
}

// newRecorded is a registry behind a recording front (answering as one without delta watches
// when old), and a discovery client of the front.
func newRecorded(t *testing.T, old bool) (*registrytest.Server, *recording, *discovery.Client) {
	t.Helper()
	s := registrytest.NewServer(t, registry.Config{})
	rec := &recording{h: s.Config.Handler, old: old}
	front := httptest.NewServer(rec)
	t.Cleanup(front.Close)
	c, err := discovery.New(discovery.Config{Registries: []string{front.URL}})
	if err != nil {
		t.Fatal(err)
	}
	return s, rec, c
}

// expectDeltas checks the requests of a watch through r after changes: against a registry
// with delta watches, the first whole and the others deltas; against an old one (old), one
// delta refused and whole answers.
func (r *recording) expectDeltas(t *testing.T, old bool, changes int) {
	t.Helper()
	delta, full := r.deltas()
	switch {
	case !old && (delta < changes || full > 1):
		t.Errorf("%d delta and %d whole-answer requests, want the first alone whole", delta, full)
	case old && (delta != 1 || full < changes):
		t.Errorf("against an old registry: %d delta and %d whole-answer requests, want one delta refused", delta, full)
	}
}

// answerOf decodes the registry's answer at url into out.
func answerOf(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func (r *recording) deltas() (delta, full int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.queries {
		if q.Get("delta") == "true" {
			delta++
		} else {
			full++
		}
	}
	return delta, full
}

// TestWatchWithDeltas: Watch asks for the changes since its view (delta=true) and its view
// stays the registry's whole answer; against a registry that refuses delta=true it watches
// whole answers instead.
func TestWatchWithDeltas(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old registry %v", old), func(t *testing.T) {
			s, rec, c := newRecorded(t, old)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			changes := make(chan *discovery.Result, 64)
			done := make(chan error, 1)
			go func() { done <- c.Watch(ctx, publish, func(r *discovery.Result) { changes <- r }) }()
			<-changes
			var want []string
			for i := range 10 {
				for s.Registry.Watchers() == 0 { // the poll is parked
					time.Sleep(time.Millisecond)
				}
				id := fmt.Sprintf("jms-%d", i)
				registerOne(t, s.Registry, id)
				want = append(want, id)
				got := <-changes
				var answer apiv1.DiscoveryResponse
				answerOf(t, s.URL+"/v1/discovery/capabilities?capability_id=messaging.publish", &answer)
				if got.Revision != answer.Revision || !cmp.Equal(ids(got.Entries), want) {
					t.Fatalf("view at %d holds %v, want %v at %d", got.Revision, ids(got.Entries), want, answer.Revision)
				}
				for j := range got.Entries { // the order too
					if got.Entries[j].InstanceID != answer.Capabilities[j].InstanceID {
						t.Fatalf("view order %v, answer's %v", ids(got.Entries), ids(answer.Capabilities))
					}
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Watch = %v", err)
			}
			rec.expectDeltas(t, old, 10)
		})
	}
}

// keptCopy is a consumer's copy of an answer, kept by Delta.Apply.
type keptCopy map[keptKey]apiv1.CapabilityEntry

type keptKey struct{ id, capability, provider, version string }

func (k keptCopy) Len() int { return len(k) }

func (k keptCopy) Reset(entries []apiv1.CapabilityEntry) {
	clear(k)
	for _, e := range entries {
		k.Put(e)
	}
}

func (k keptCopy) Drop(id string, generation int64) {
	for key, e := range k {
		if key.id == id && e.Generation <= generation {
			delete(k, key)
		}
	}
}

func (k keptCopy) Put(e apiv1.CapabilityEntry) {
	k[keptKey{e.InstanceID, e.CapabilityID, e.Provider, e.CapabilityVersion}] = e
}

// TestWatchDeltas: a consumer that keeps its own copy from WatchDeltas alone (by Delta.Apply)
// holds the registry's answer after every change — through the warm-up (merged resets) and
// its end (a reset), and against a registry without delta watches (every answer a reset).
func TestWatchDeltas(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old registry %v", old), func(t *testing.T) {
			s, _, c := newRecorded(t, old)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			kept := keptCopy{}
			deltas := make(chan *discovery.Delta, 64)
			done := make(chan error, 1)
			go func() { done <- c.WatchDeltas(ctx, publish, func(d *discovery.Delta) { deltas <- d }) }()
			check := func(what string) {
				t.Helper()
				for {
					d := <-deltas
					d.Apply(kept)
					var answer apiv1.DiscoveryResponse
					answerOf(t, s.URL+"/v1/discovery/capabilities?capability_id=messaging.publish", &answer)
					if d.Revision < answer.Revision || d.Complete != answer.Complete {
						continue // a change made before the last is still coming
					}
					var got []string
					for k := range kept {
						got = append(got, k.id)
					}
					sort.Strings(got)
					if want := ids(answer.Capabilities); !cmp.Equal(got, want) {
						t.Fatalf("%s: the consumer keeps %v, the registry answers %v", what, got, want)
					}
					return
				}
			}
			check("first answer")
			for i := range 5 {
				for s.Registry.Watchers() == 0 {
					time.Sleep(time.Millisecond)
				}
				registerOne(t, s.Registry, fmt.Sprintf("jms-%d", i))
				check(fmt.Sprintf("registration %d", i))
			}
			for s.Registry.Watchers() == 0 {
				time.Sleep(time.Millisecond)
			}
			if err := s.Registry.Deregister(context.Background(), "jms-0", 0); err != nil {
				t.Fatal(err)
			}
			check("a deregistration")
			s.Clock.Advance(registry.DefaultLeaseTTL) // the warm-up ends (no sweep runs: the leases stay)
			for s.Registry.Watchers() == 0 {
				time.Sleep(time.Millisecond)
			}
			registerOne(t, s.Registry, "jms-9")
			check("after the warm-up")
			cancel()
			if err := <-done; err != nil {
				t.Errorf("WatchDeltas = %v", err)
			}
		})
	}
}

// TestDeltaState: what a WatchDeltas handed its consumer is uninitialized until the first
// answer, fresh while the polls succeed, stale (last-known-good) once the registry stops
// answering, and expired past the stale allowance.
func TestDeltaState(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	front, srv := newFront(t, s.Config.Handler)
	c, clk := newClient(t, srv.URL, discovery.Config{WatchWait: 50 * time.Millisecond, RetryInterval: 10 * time.Millisecond,
		StaleAllowance: time.Minute})
	if st, _ := c.DeltaState(publish); st != discovery.StateUninitialized {
		t.Fatalf("before any watch: %s", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	first := make(chan struct{}, 1)
	go func() {
		done <- c.WatchDeltas(ctx, publish, func(*discovery.Delta) {
			select {
			case first <- struct{}{}:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchDeltas = %v", err)
		}
	}()
	<-first
	if st, age := c.DeltaState(publish); st != discovery.StateFresh || age != 0 {
		t.Fatalf("after the first answer: %s, %s old", st, age)
	}
	front.set(down)
	registrytest.Until(t, "the view goes stale", func() bool {
		st, _ := c.DeltaState(publish)
		return st == discovery.StateStale
	})
	clk.Advance(2 * time.Minute)
	if st, age := c.DeltaState(publish); st != discovery.StateExpired || age != 2*time.Minute {
		t.Fatalf("past the stale allowance: %s, %s old", st, age)
	}
	front.set(s.Config.Handler)
	registrytest.Until(t, "the view is fresh again", func() bool {
		st, age := c.DeltaState(publish)
		return st == discovery.StateFresh && age == 0
	})
}

// TestWatchRoutes: WatchRoutes asks for the changes since its view (delta=true), and its
// view stays the registry's whole routes answer, in its order, through registrations in
// several services and a deregistration; against a registry that refuses delta=true it
// watches whole answers instead.
func TestWatchRoutes(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old registry %v", old), func(t *testing.T) {
			s, rec, c := newRecorded(t, old)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			changes := make(chan *discovery.RoutesResult, 16)
			done := make(chan error, 1)
			go func() { done <- c.WatchRoutes(ctx, func(r *discovery.RoutesResult) { changes <- r }) }()
			<-changes
			check := func(change func()) {
				t.Helper()
				for s.Registry.Watchers() == 0 { // the poll is parked
					time.Sleep(time.Millisecond)
				}
				change()
				got := <-changes
				var answer apiv1.RoutesResponse
				answerOf(t, s.URL+"/v1/discovery/routes", &answer)
				if got.Revision != answer.Revision || !cmp.Equal(got.Manifests, answer.Manifests) || !cmp.Equal(got.PublicPaths, answer.PublicPaths) {
					t.Fatalf("view at %d: %+v; the registry's answer at %d: %+v", got.Revision, got.Routes, answer.Revision, answer)
				}
			}
			gens := map[string]int64{}
			for i := range 6 {
				id, service := fmt.Sprintf("jms-%d", i), fmt.Sprintf("svc-%d", 5-i) // each before the last in the answer
				meta := json.RawMessage(fmt.Sprintf(`{"public_paths":["/api/%d/a","/api/%d/b"]}`, i, i))
				req := apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "0.1.3", Endpoint: "http://" + id + ":8080",
					Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms", Metadata: meta}},
					Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: service, Instance: id, Version: "0.1.3"},
						Routes: []apiv1.ManifestRoute{{Path: fmt.Sprintf("/api/%d/a", i), Methods: []string{"POST"}}}}}
				check(func() {
					resp, err := s.Registry.Register(context.Background(), &req)
					if err != nil {
						t.Fatal(err)
					}
					gens[id] = resp.Generation
				})
			}
			check(func() {
				if err := s.Registry.Deregister(context.Background(), "jms-2", gens["jms-2"]); err != nil {
					t.Fatal(err)
				}
			})
			cancel()
			if err := <-done; err != nil {
				t.Errorf("WatchRoutes = %v", err)
			}
			rec.expectDeltas(t, old, 7)
		})
	}
}
