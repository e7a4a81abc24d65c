package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"pgregory.net/rapid"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

// deltaWatcher is a delta watch of one query: what it holds and at which revision.
type deltaWatcher struct {
	query    string
	epoch    string
	revision int64
	held     []apiv1.CapabilityEntry
	resets   int
}

// poll asks for the changes since what w holds (a long poll that answers at once when
// nothing it watches changed) and applies them.
// fataler is what poll and getJSON need of a test: a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func (w *deltaWatcher) poll(t fataler, base string) {
	t.Helper()
	v, _ := url.ParseQuery(w.query)
	v.Set("delta", "true")
	v.Set("index", fmt.Sprint(w.revision))
	v.Set("wait", "1ns")
	if w.epoch != "" {
		v.Set("epoch", w.epoch)
	}
	var d apiv1.DiscoveryDelta
	getJSON(t, base+"/v1/discovery/capabilities?"+v.Encode(), &d)
	if d.Revision < w.revision && d.RegistryEpoch == w.epoch {
		t.Fatalf("%s: delta at revision %d after %d", w.query, d.Revision, w.revision)
	}
	if d.Reset && w.revision > 0 { // index 0 is a watcher that holds nothing: a reset
		w.resets++
	}
	w.held = d.Apply(w.held)
	w.epoch, w.revision = d.RegistryEpoch, d.Revision
}

func getJSON(t fataler, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", u, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v in %s", u, err, body)
	}
}

// withoutLeases zeroes lease_expires_at, which a delta carries as of the entry's last change.
func withoutLeases(es []apiv1.CapabilityEntry) []apiv1.CapabilityEntry {
	out := make([]apiv1.CapabilityEntry, len(es))
	for i, e := range es {
		e.LeaseExpiresAt = time.Time{}
		out[i] = e
	}
	return out
}

func newDeltaServer(t testing.TB) *registrytest.Server {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return registrytest.NewServer(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second, Eligibility: m})
}

// TestDeltaWatchEqualsTheFullAnswer: after every change of a random sequence —
// registrations (new instances, and new incarnations that change service, capabilities or
// zone), deregistrations, self-reports, passive outcomes that eject, time that ramps slow
// starts, ends leases and ends the warm-up — each delta watcher's view, built from the
// deltas alone, equals the full answer to its query at the same revision (leases aside),
// in the same order.
func TestDeltaWatchEqualsTheFullAnswer(t *testing.T) {
	caps := []apiv1.Capability{
		{CapabilityID: "messaging.publish", Provider: "jms", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"},
		{CapabilityID: "messaging.publish", Provider: "jms", CapabilityVersion: "1.1.0", ContractSchemaVersion: "1.0", Metadata: json.RawMessage(`{"priority":5}`)},
		{CapabilityID: "messaging.publish", Provider: "rabbitmq", CapabilityVersion: "2.0.0", ContractSchemaVersion: "1.0"},
		{CapabilityID: "orders.read", Provider: "db", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"},
	}
	queries := []string{"service_name=svc-a", "capability_id=messaging.publish", "capability_id=messaging.publish&include=all",
		"service_name=svc-b&capability_id=orders.read", ""}
	rapid.Check(t, func(rt *rapid.T) {
		s := newDeltaServer(t)
		defer s.Close()
		gens := map[string]int64{}
		// the eager watchers poll after every change (their polls build the answers the
		// history keeps); the lazy ones now and then, so that a delta folds many changes
		watchers := make([]*deltaWatcher, len(queries))
		lazy := make([]*deltaWatcher, len(queries))
		for i, q := range queries {
			watchers[i], lazy[i] = &deltaWatcher{query: q}, &deltaWatcher{query: q}
		}
		check := func(rt *rapid.T, ws []*deltaWatcher) {
			for _, w := range ws {
				w.poll(rt, s.URL)
				var full apiv1.DiscoveryResponse
				getJSON(rt, s.URL+"/v1/discovery/capabilities?"+w.query, &full)
				if full.Revision != w.revision {
					rt.Fatalf("%q: the full answer is at %d, the delta at %d", w.query, full.Revision, w.revision)
				}
				if diff := cmp.Diff(withoutLeases(full.Capabilities), withoutLeases(w.held)); diff != "" {
					rt.Fatalf("%q at %d: the delta watcher's view differs from the full answer (-full +delta):\n%s", w.query, w.revision, diff)
				}
			}
		}
		ids := []string{"i-1", "i-2", "i-3", "i-4", "i-5", "i-6"}
		actions := fleetActions(s, gens, ids)
		maps.Copy(actions, map[string]func(*rapid.T){
			"register": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				n := rapid.IntRange(1, 3).Draw(rt, "caps")
				picked := rapid.SliceOfNDistinct(rapid.IntRange(0, len(caps)-1), n, n, rapid.ID[int]).Draw(rt, "which")
				req := &apiv1.RegisterRequest{InstanceID: id, ServiceName: rapid.SampledFrom([]string{"svc-a", "svc-b"}).Draw(rt, "service"),
					ServiceVersion: "1.0.0", Endpoint: "http://" + id + ":8080", Zone: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "zone")}
				for _, c := range picked {
					req.Capabilities = append(req.Capabilities, caps[c])
				}
				registerDrawn(rt, s, gens, req)
			},
			"lazy watchers poll": func(rt *rapid.T) { check(rt, lazy) },
			"":                   func(rt *rapid.T) { check(rt, watchers) },
		})
		rt.Repeat(actions)
	})
}

// registerDrawn registers req on s and notes its generation in gens.
func registerDrawn(rt *rapid.T, s *registrytest.Server, gens map[string]int64, req *apiv1.RegisterRequest) {
	resp, err := s.Registry.Register(context.Background(), req)
	if err != nil {
		rt.Fatalf("register %s: %v", req.InstanceID, err)
	}
	gens[req.InstanceID] = resp.Generation
}

// fleetActions are the changes of a delta watch's property tests other than registrations,
// of the instances ids registered at gens on s: deregistrations, self-reports, passive
// outcomes that eject, and time that ramps slow starts, ends leases and the warm-up.
func fleetActions(s *registrytest.Server, gens map[string]int64, ids []string) map[string]func(*rapid.T) {
	ctx := context.Background()
	return map[string]func(*rapid.T){
		"deregister": func(rt *rapid.T) {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			if g, ok := gens[id]; ok {
				if err := s.Registry.Deregister(ctx, id, g); err != nil {
					rt.Fatalf("deregister %s: %v", id, err)
				}
				delete(gens, id)
			}
		},
		"self-report": func(rt *rapid.T) {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			if g, ok := gens[id]; ok {
				h := rapid.SampledFrom([]string{"ok", "degraded", "failing"}).Draw(rt, "health")
				if _, err := s.Registry.Heartbeat(ctx, id, &apiv1.HeartbeatRequest{Generation: g, Health: h}); err != nil {
					rt.Fatalf("heartbeat %s: %v", id, err)
				}
			}
		},
		"outcomes": func(rt *rapid.T) {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			if g, ok := gens[id]; ok {
				if _, err := s.Registry.Outcomes(ctx, &apiv1.OutcomesRequest{GatewayID: "gw", Outcomes: []apiv1.Outcome{
					{InstanceID: id, Generation: g, OK: rapid.IntRange(0, 30).Draw(rt, "ok"), Errors: rapid.IntRange(0, 30).Draw(rt, "errors")}}}); err != nil {
					rt.Fatalf("outcomes %s: %v", id, err)
				}
			}
		},
		"time": func(rt *rapid.T) {
			s.Clock.Advance(time.Duration(rapid.IntRange(1, 40).Draw(rt, "seconds")) * time.Second)
			if _, err := s.Registry.Sweep(ctx); err != nil {
				rt.Fatal(err)
			}
			for id := range gens { // what the sweep evicted is gone
				if _, err := s.Registry.Instance(id); err != nil {
					delete(gens, id)
				}
			}
		},
	}
}

// TestDeltaWatchResets: a watcher whose index is of another epoch, ahead of the registry, or
// 0 gets the whole answer with reset; one behind by many changes gets them all in one delta;
// one that is current gets the change alone.
func TestDeltaWatchResets(t *testing.T) {
	s := newDeltaServer(t)
	ctx := context.Background()
	reg := func(id string) {
		if _, err := s.Registry.Register(ctx, &apiv1.RegisterRequest{InstanceID: id, ServiceName: "svc-a", ServiceVersion: "1.0.0",
			Endpoint: "http://" + id + ":8080", Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", Provider: "db", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"}}}); err != nil {
			t.Fatal(err)
		}
	}
	reg("i-0")
	current := &deltaWatcher{query: "service_name=svc-a"}
	current.poll(t, s.URL)
	behind := &deltaWatcher{query: "service_name=svc-a"}
	behind.poll(t, s.URL)
	for i := range 70 {
		reg(fmt.Sprintf("i-%d", i+1))
		current.poll(t, s.URL)
	}
	behind.poll(t, s.URL)
	if current.resets != 0 || behind.resets != 0 {
		t.Errorf("resets after the first answer: current %d, behind %d; want none", current.resets, behind.resets)
	}
	if len(current.held) != 71 || !cmp.Equal(withoutLeases(current.held), withoutLeases(behind.held)) {
		t.Errorf("current holds %d entries, behind %d; want both the 71", len(current.held), len(behind.held))
	}
	for _, tc := range untoldIndexes(current.revision) {
		var d apiv1.DiscoveryDelta
		getJSON(t, s.URL+"/v1/discovery/capabilities?service_name=svc-a&delta=true&wait=1ns"+tc.params, &d)
		if !d.Reset || len(d.Capabilities) != 71 {
			t.Errorf("%s: reset %v with %d entries, want a reset with the 71", tc.name, d.Reset, len(d.Capabilities))
		}
	}
	// a current watcher after one change gets that change alone
	reg("i-new")
	v := url.Values{"service_name": {"svc-a"}, "delta": {"true"}, "wait": {"1ns"}, "index": {fmt.Sprint(current.revision)}}
	resp, err := http.Get(s.URL + "/v1/discovery/capabilities?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var d apiv1.DiscoveryDelta
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if d.Reset || len(d.Added) != 1 || d.Added[0].InstanceID != "i-new" || len(d.Removed) != 1 || d.Removed[0].InstanceID != "i-new" {
		t.Errorf("after one registration: %s, want i-new alone", body)
	}
	if !strings.Contains(string(body), `"added":[`) || !strings.Contains(string(body), `"updated":[]`) || !strings.Contains(string(body), `"removed":[`) {
		t.Errorf("a delta writes added, updated and removed, even empty: %s", body)
	}
}

// untoldIndexes are the positions of a watcher at revision rev whose changes a delta watch
// cannot tell (query parameters): each gets the whole answer with reset.
func untoldIndexes(rev int64) []struct{ name, params string } {
	return []struct{ name, params string }{
		{"another epoch", "&epoch=another&index=" + fmt.Sprint(rev)},
		{"an index ahead of the registry", fmt.Sprintf("&index=%d", rev+1000)},
		{"index 0", "&index=0"},
	}
}

// TestDeltaWatchBadInput: delta needs an index, a boolean, and no paging; the routes view's
// too.
func TestDeltaWatchBadInput(t *testing.T) {
	s := newDeltaServer(t)
	for _, q := range []string{"capabilities?delta=true", "capabilities?delta=yes&index=0", "capabilities?delta=true&index=0&limit=10",
		"routes?delta=true", "routes?delta=yes&index=0"} {
		resp, err := http.Get(s.URL + "/v1/discovery/" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"delta"`) {
			t.Errorf("%s = %d %s, want 400 naming delta", q, resp.StatusCode, body)
		}
	}
}

// TestDeltaResetsAreBounded: delta watches are not paged, so a reset is the whole answer;
// distinct unfiltered queries that each reset (as anyone may ask: version=>=0.0, >=0.1, …)
// keep their answers for the watchers that follow only within --max-delta-cache-bytes, the
// least recently asked dropped first, and a dropped query is answered again in full.
func TestDeltaResetsAreBounded(t *testing.T) {
	promReg := prometheus.NewRegistry()
	const bound = 64 << 10
	s := registrytest.NewServerWith(t, registry.Config{}, server.Config{Registerer: promReg, MaxDeltaBytes: bound}, registrytest.Epoch0)
	for i := range 100 {
		id := fmt.Sprintf("i-%03d", i)
		if _, err := s.Registry.Register(context.Background(), &apiv1.RegisterRequest{InstanceID: id, ServiceName: "svc-a", ServiceVersion: "1.0.0",
			Endpoint: "http://" + id + ":8080", Capabilities: []apiv1.Capability{{CapabilityID: "orders.read", Provider: "db", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// value reads the single series of the delta cache's gauge or counter
	value := func(name string) float64 {
		t.Helper()
		mf, err := family(promReg, name)
		if err != nil || len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %v, %d series", name, err, len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		if mf.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	reset := func(i int) int {
		t.Helper()
		resp, err := http.Get(s.URL + "/v1/discovery/capabilities?" + url.Values{"version": {fmt.Sprintf(">=0.%d", i)}, "delta": {"true"}, "index": {"0"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var d apiv1.DiscoveryDelta
		if err := json.Unmarshal(body, &d); err != nil || resp.StatusCode != 200 || !d.Reset || len(d.Capabilities) != 100 {
			t.Fatalf("reset %d: %d %v, reset %v with %d entries, want the whole answer", i, resp.StatusCode, err, d.Reset, len(d.Capabilities))
		}
		return len(body)
	}
	largest, peak := 0, 0.0
	for i := range 50 {
		largest = max(largest, reset(i))
		peak = max(peak, value("meshflows_registry_delta_cache_bytes"))
	}
	if peak > bound+float64(largest) {
		t.Errorf("the delta cache held %.0f bytes, over the bound %d and one answer (%d)", peak, bound, largest)
	}
	if n := value("meshflows_registry_delta_cache_evictions_total"); n < 40 {
		t.Errorf("%.0f queries dropped of 50 resets of %d bytes into %d, want most", n, largest, bound)
	}
	reset(0) // dropped long ago: built again, whole
}
