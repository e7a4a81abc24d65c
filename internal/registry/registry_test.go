package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

type fixture struct {
	reg   *registry.Registry
	clock *registrytest.Clock
	prom  *prometheus.Registry
}

func newFixture(t testing.TB, cfg registry.Config) *fixture {
	t.Helper()
	clock := registrytest.NewClock(registrytest.Epoch0)
	prom := prometheus.NewRegistry()
	cfg.Now, cfg.Registerer = clock.Now, prom
	reg, err := registry.New(memstore.New(clock.Now), cfg)
	if err != nil {
		t.Fatalf("registry.New: %v", err)
	}
	return &fixture{reg: reg, clock: clock, prom: prom}
}

func request(id, service string, caps ...apiv1.Capability) *apiv1.RegisterRequest {
	if len(caps) == 0 {
		caps = []apiv1.Capability{capability("messaging.publish", "jms", "1.0.0", "")}
	}
	return &apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "0.1.3",
		Endpoint: "http://" + id + ":8080", Zone: "a", Capabilities: caps}
}

func capability(id, provider, version, metadata string) apiv1.Capability {
	c := apiv1.Capability{CapabilityID: id, Provider: provider, CapabilityVersion: version, ContractSchemaVersion: "1.0"}
	if metadata != "" {
		c.Metadata = json.RawMessage(metadata)
	}
	return c
}

func mustRegister(t testing.TB, f *fixture, req *apiv1.RegisterRequest) *apiv1.RegisterResponse {
	t.Helper()
	resp, err := f.reg.Register(context.Background(), req)
	if err != nil {
		t.Fatalf("Register(%s): %v", req.InstanceID, err)
	}
	return resp
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second})

	// register
	r1 := mustRegister(t, f, request("jms-1", "egress-jms"))
	want := &apiv1.RegisterResponse{Accepted: true, LeaseTTLSeconds: 90, HeartbeatIntervalSeconds: 30, Generation: 1,
		RegistryEpoch: f.reg.State().Epoch}
	if diff := cmp.Diff(want, r1); diff != "" {
		t.Fatalf("Register (-want +got):\n%s", diff)
	}

	// heartbeat extends the lease
	f.clock.Advance(60 * time.Second)
	hb, err := f.reg.Heartbeat(ctx, "jms-1", &apiv1.HeartbeatRequest{Generation: 1})
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if wantExp := registrytest.Epoch0.Add(150 * time.Second); !hb.LeaseExpiresAt.Equal(wantExp) {
		t.Errorf("lease_expires_at = %v, want %v", hb.LeaseExpiresAt, wantExp)
	}
	f.clock.Advance(89 * time.Second)
	if n, err := f.reg.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep before expiry = %d, %v; want 0", n, err)
	}

	// a heartbeat naming another generation is 410
	if _, err := f.reg.Heartbeat(ctx, "jms-1", &apiv1.HeartbeatRequest{Generation: 7}); !errors.Is(err, registry.ErrGenerationMismatch) {
		t.Errorf("Heartbeat(generation 7) = %v, want ErrGenerationMismatch", err)
	}

	// the lease ends: eviction, then 404 for the heartbeat
	f.clock.Advance(time.Second)
	if n, err := f.reg.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep at expiry = %d, %v; want 1", n, err)
	}
	if _, err := f.reg.Heartbeat(ctx, "jms-1", &apiv1.HeartbeatRequest{Generation: 1}); !errors.Is(err, registry.ErrInstanceNotFound) {
		t.Errorf("Heartbeat after eviction = %v, want ErrInstanceNotFound", err)
	}

	// re-register: a new, higher generation
	r2 := mustRegister(t, f, request("jms-1", "egress-jms"))
	if r2.Generation <= r1.Generation {
		t.Errorf("re-registration generation %d, want > %d", r2.Generation, r1.Generation)
	}
	if _, err := f.reg.Heartbeat(ctx, "jms-1", &apiv1.HeartbeatRequest{Generation: r2.Generation, Health: "degraded"}); err != nil {
		t.Errorf("Heartbeat of the new generation: %v", err)
	}
	in, err := f.reg.Instance("jms-1")
	if err != nil || in.Health != "degraded" || in.Generation != r2.Generation {
		t.Errorf("Instance = %+v, %v; want degraded at generation %d", in, err, r2.Generation)
	}

	metrics := `
# HELP meshflows_registry_stale_evictions_total Instances evicted because their lease expired.
# TYPE meshflows_registry_stale_evictions_total counter
meshflows_registry_stale_evictions_total 1
# HELP meshflows_registry_register_success_total Registrations accepted.
# TYPE meshflows_registry_register_success_total counter
meshflows_registry_register_success_total 2
# HELP meshflows_registry_active_instances Instances with a live registration.
# TYPE meshflows_registry_active_instances gauge
meshflows_registry_active_instances 1
# HELP meshflows_instances_without_readiness Instances nothing says are ready to serve: no probe class (the manifest declares no health endpoint) and no runtime reporting readiness; they are in rotation on their registration and heartbeats alone (readiness none).
# TYPE meshflows_instances_without_readiness gauge
meshflows_instances_without_readiness 1
`
	if err := testutil.GatherAndCompare(f.prom, strings.NewReader(metrics),
		"meshflows_registry_stale_evictions_total", "meshflows_registry_register_success_total", "meshflows_registry_active_instances",
		"meshflows_instances_without_readiness"); err != nil {
		t.Error(err)
	}
	fails := `
# HELP meshflows_registry_heartbeat_fail_total Heartbeats refused, by reason (invalid, not_found, generation_mismatch, forbidden, store).
# TYPE meshflows_registry_heartbeat_fail_total counter
meshflows_registry_heartbeat_fail_total{reason="forbidden"} 0
meshflows_registry_heartbeat_fail_total{reason="generation_mismatch"} 1
meshflows_registry_heartbeat_fail_total{reason="invalid"} 0
meshflows_registry_heartbeat_fail_total{reason="not_found"} 1
meshflows_registry_heartbeat_fail_total{reason="store"} 0
`
	if err := testutil.GatherAndCompare(f.prom, strings.NewReader(fails), "meshflows_registry_heartbeat_fail_total"); err != nil {
		t.Error(err)
	}
}

func TestDeregisterFencing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, registry.Config{})
	old := mustRegister(t, f, request("jms-1", "egress-jms"))
	cur := mustRegister(t, f, request("jms-1", "egress-jms"))
	if err := f.reg.Deregister(ctx, "jms-1", old.Generation); !errors.Is(err, registry.ErrGenerationMismatch) {
		t.Fatalf("late Deregister = %v, want ErrGenerationMismatch", err)
	}
	if _, err := f.reg.Instance("jms-1"); err != nil {
		t.Fatalf("the new incarnation is gone after a late deregister: %v", err)
	}
	if err := f.reg.Deregister(ctx, "jms-1", cur.Generation); err != nil {
		t.Fatalf("Deregister(current): %v", err)
	}
	if err := f.reg.Deregister(ctx, "jms-1", 0); !errors.Is(err, registry.ErrInstanceNotFound) {
		t.Errorf("Deregister(unknown) = %v, want ErrInstanceNotFound", err)
	}
}

func TestRegisterInvalidChangesNothing(t *testing.T) {
	f := newFixture(t, registry.Config{})
	mustRegister(t, f, request("jms-1", "egress-jms"))
	before := f.reg.State()
	bad := request("jms-1", "egress-jms", capability("messaging.publish", "jms", "1.x", ""))
	_, err := f.reg.Register(context.Background(), bad)
	var ae *apiv1.Error
	if !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidRequest {
		t.Fatalf("Register(bad) = %v, want INVALID_REQUEST", err)
	}
	if after := f.reg.State(); after != before {
		t.Errorf("state changed after a rejected registration: %+v -> %+v", before, after)
	}
	if in, _ := f.reg.Instance("jms-1"); in.Capabilities[0].CapabilityVersion != "1.0.0" {
		t.Errorf("the rejected registration replaced the record: %+v", in.Capabilities)
	}
}

func TestWarmUpComplete(t *testing.T) {
	f := newFixture(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second})
	if f.reg.State().Complete {
		t.Fatal("a registry that started empty is complete at once")
	}
	f.clock.Advance(89 * time.Second)
	if f.reg.Query(&registry.Query{}).Complete {
		t.Fatal("complete before one lease TTL passed")
	}
	if err := testutil.GatherAndCompare(f.prom, strings.NewReader(completeGauge+"meshflows_registry_complete 0\n"), "meshflows_registry_complete"); err != nil {
		t.Errorf("in warm-up: %v", err)
	}
	f.clock.Advance(time.Second)
	if !f.reg.Query(&registry.Query{}).Complete {
		t.Fatal("not complete after one lease TTL")
	}
	if err := testutil.GatherAndCompare(f.prom, strings.NewReader(completeGauge+"meshflows_registry_complete 1\n"), "meshflows_registry_complete"); err != nil {
		t.Errorf("after warm-up: %v", err)
	}
}

const completeGauge = `# HELP meshflows_registry_complete 1 when discovery answers are complete, 0 inside the warm-up window after an empty start.
# TYPE meshflows_registry_complete gauge
`

func TestQueryOrderAndFilters(t *testing.T) {
	f := newFixture(t, registry.Config{})
	mustRegister(t, f, request("r-1", "egress-rabbitmq", capability("messaging.publish", "rabbitmq", "1.0.0", "")))
	mustRegister(t, f, request("j-1", "egress-jms", capability("messaging.publish", "jms", "1.0.0", "")))
	mustRegister(t, f, request("j-2", "egress-jms", capability("messaging.publish", "jms", "1.0.0", `{"priority": 5}`)))
	mustRegister(t, f, request("j-3", "egress-jms", capability("messaging.publish", "jms", "1.10.0", "")))
	mustRegister(t, f, request("j-4", "egress-jms", capability("messaging.publish", "jms", "1.2.0", ""),
		capability("messaging.publish", "jms", "2.0.0-rc.1", ""), capability("audit.write", "jms", "1.0.0", "")))
	mustRegister(t, f, request("j-5", "egress-jms", capability("messaging.publish", "jms", "1.0.0", "")))
	tests := []struct {
		query string
		want  []string
	}{
		// capability_id, provider, priority desc, version desc (numeric), generation asc
		{"capability_id=messaging.publish", []string{
			"j-2@1.0.0", "j-4@2.0.0-rc.1", "j-3@1.10.0", "j-4@1.2.0", "j-1@1.0.0", "j-5@1.0.0", "r-1@1.0.0"}},
		{"", []string{"j-4@1.0.0", "j-2@1.0.0", "j-4@2.0.0-rc.1", "j-3@1.10.0", "j-4@1.2.0", "j-1@1.0.0", "j-5@1.0.0", "r-1@1.0.0"}},
		{"provider=rabbitmq", []string{"r-1@1.0.0"}},
		{"capability_id=messaging.publish&version=>=1.1 <2.0", []string{"j-3@1.10.0", "j-4@1.2.0"}},
		{"capability_id=messaging.publish&version=>=1.1,<2.0", []string{"j-3@1.10.0", "j-4@1.2.0"}},
		{"capability_id=messaging.publish&version=1.10.x || >=2.0.0-0", []string{"j-4@2.0.0-rc.1", "j-3@1.10.0"}},
		{"capability_id=messaging.publish&min_version=1.2", []string{"j-4@2.0.0-rc.1", "j-3@1.10.0", "j-4@1.2.0"}},
		{"service_name=egress-rabbitmq&zone=a", []string{"r-1@1.0.0"}},
		{"zone=b", nil},
		{"capability_id=audit.write", []string{"j-4@1.0.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			v, _ := url.ParseQuery(tt.query)
			q, err := registry.ParseQuery(v)
			if err != nil {
				t.Fatalf("ParseQuery: %v", err)
			}
			var got []string
			for _, e := range f.reg.Query(q).Entries {
				got = append(got, e.Record.InstanceID+"@"+e.Capability().CapabilityVersion)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Query(%s) (-want +got):\n%s", tt.query, diff)
			}
		})
	}
}

func TestParseQueryRejectsMalformedVersions(t *testing.T) {
	for _, q := range []string{"version=abc", "version=>=1.0 <<2", "min_version=one", "version=%20", "min_version=1.0&version=1.2.3.4"} {
		t.Run(q, func(t *testing.T) {
			v, _ := url.ParseQuery(q)
			_, err := registry.ParseQuery(v)
			var ae *apiv1.Error
			if !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidRequest || len(ae.Details) == 0 {
				t.Errorf("ParseQuery(%s) = %v, want INVALID_REQUEST with details", q, err)
			}
		})
	}
}

func TestWaitWakesOnChange(t *testing.T) {
	f := newFixture(t, registry.Config{})
	rev := f.reg.State().Revision
	woke := make(chan int64)
	go func() { woke <- f.reg.Wait(context.Background(), "", rev, time.Hour) }()
	for f.reg.Watchers() == 0 { // the waiter is parked before the change is made
		time.Sleep(time.Millisecond)
	}
	mustRegister(t, f, request("jms-1", "egress-jms"))
	if got := <-woke; got != rev+1 {
		t.Errorf("Wait woke at revision %d, want %d", got, rev+1)
	}
	// an index that is not the current revision answers at once
	if got := f.reg.Wait(context.Background(), "", rev, time.Hour); got != rev+1 {
		t.Errorf("Wait(old index) = %d, want %d at once", got, rev+1)
	}
	if got := f.reg.Wait(context.Background(), "", rev+1000, time.Hour); got != rev+1 {
		t.Errorf("Wait(future index) = %d, want %d at once", got, rev+1)
	}
	if got := f.reg.Wait(context.Background(), "another-epoch", rev+1000, time.Hour); got != rev+1 {
		t.Errorf("Wait(index of another epoch) = %d, want %d at once", got, rev+1)
	}
	// An index ahead of this replica in its own epoch (a consumer that failed over from a
	// replica further along the same history) waits for a change past it: nothing newer is here.
	epoch := f.reg.State().Epoch
	go func() { woke <- f.reg.Wait(context.Background(), epoch, rev+2, time.Hour) }()
	for f.reg.Watchers() == 0 {
		time.Sleep(time.Millisecond)
	}
	mustRegister(t, f, request("jms-2", "egress-jms")) // rev+2: not past the index yet
	mustRegister(t, f, request("jms-3", "egress-jms"))
	if got := <-woke; got != rev+3 {
		t.Errorf("Wait(own epoch, index ahead) woke at %d, want %d", got, rev+3)
	}
	rev += 2
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := f.reg.Wait(ctx, "", rev+1, time.Hour); got != rev+1 {
		t.Errorf("Wait(cancelled) = %d", got)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := newFixture(t, registry.Config{SnapshotDir: dir, LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second})
	f.clock.Advance(90 * time.Second) // past the warm-up: snapshots are written
	mustRegister(t, f, request("j-1", "egress-jms", capability("messaging.publish", "jms", "1.0.0", `{"priority": 2, "public_paths": ["/p"]}`)))
	r2 := mustRegister(t, f, request("r-1", "egress-rabbitmq", capability("messaging.publish", "rabbitmq", "1.0.0", "")))
	f.clock.Advance(30 * time.Second)
	f.reg.Heartbeat(ctx, "r-1", &apiv1.HeartbeatRequest{Generation: r2.Generation, Health: "degraded"})
	f.clock.Advance(10 * time.Second) // j-1 has 50 s of its lease left, r-1 80 s
	before := f.reg.Catalog()
	wrote, err := f.reg.WriteSnapshot(ctx)
	if err != nil {
		t.Fatalf("WriteSnapshot: %v", err)
	}
	if wrote.Instances != 2 || wrote.Capabilities != 2 || filepath.Dir(wrote.Path) != dir {
		t.Errorf("WriteSnapshot = %+v", wrote)
	}

	// A new registry restores it an hour later: a new epoch in warm-up, the same revision and
	// generations, each lease with the time it had left, every instance marked restored.
	g := newFixture(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second})
	g.clock.Advance(time.Hour)
	if _, err := g.reg.RestoreSnapshot(ctx, wrote.Path); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	after := g.reg.Catalog()
	restoredAt := g.clock.Now()
	before.RegistryEpoch = restoredAt.UTC().Format(time.RFC3339Nano)
	for i, left := range []time.Duration{50 * time.Second, 80 * time.Second} {
		before.Instances[i].LeaseExpiresAt = restoredAt.Add(left)
		before.Instances[i].Restored = true
	}
	// compared as the wire sees them (metadata is compacted on the way out)
	bj, _ := json.MarshalIndent(before, "", " ")
	aj, _ := json.MarshalIndent(after, "", " ")
	if diff := cmp.Diff(string(bj), string(aj)); diff != "" {
		t.Errorf("catalog after restore (-before +after):\n%s", diff)
	}
	if st := g.reg.State(); st.Complete || st.Epoch == before.RegistryEpoch && st.Epoch == wrote.RegistryEpoch {
		t.Errorf("restored state %+v: want a new epoch, warming up", st)
	}
	rev := g.reg.State().Revision
	if _, err := g.reg.Heartbeat(ctx, "r-1", &apiv1.HeartbeatRequest{Generation: r2.Generation, Health: "degraded"}); err != nil {
		t.Errorf("heartbeat of a restored instance: %v", err)
	}
	if in, _ := g.reg.Instance("r-1"); in.Restored || g.reg.State().Revision <= rev {
		t.Errorf("after its heartbeat r-1 is still marked restored (%v) or the revision did not move (%d)", in.Restored, g.reg.State().Revision)
	}
	if r3 := mustRegister(t, g, request("x-1", "other")); r3.Generation <= r2.Generation {
		t.Errorf("generation after restore %d, want > %d", r3.Generation, r2.Generation)
	}
	got := g.reg.Query(&registry.Query{CapabilityID: "messaging.publish"}).Entries
	if len(got) != 3 || got[0].Capability().Priority != 2 || !got[0].Wire().Restored {
		t.Errorf("restored capabilities lost their parsed metadata or mark: %d entries, %+v", len(got), got[0].Wire())
	}
	// j-1 never heartbeats: its lease ends 50 s after the restore, inside the warm-up, and the
	// incomplete answers say it was removed.
	g.clock.Advance(50 * time.Second)
	if n, err := g.reg.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep after the restored lease ended = %d, %v; want j-1 evicted", n, err)
	}
	if ans := g.reg.Query(&registry.Query{}); ans.Complete || cmp.Diff([]apiv1.Removal{{InstanceID: "j-1", Generation: 1}}, ans.Removed) != "" {
		t.Errorf("answer after the eviction: complete %v, removed %+v; want incomplete, j-1 removed", ans.Complete, ans.Removed)
	}
}

// TestSnapshotFileIsTheSnapshot: WriteSnapshot writes its file one instance at a time; the
// file must say what encoding/json would have written of Snapshot(), HTML-sensitive text, a
// manifest and metadata with spaces included, and an empty registry's file an empty list.
func TestSnapshotFileIsTheSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		reqs []*apiv1.RegisterRequest
	}{
		{"empty", nil},
		{"varied", func() []*apiv1.RegisterRequest {
			odd := request("odd-1", "svc-odd", capability("messaging.publish", "jms", "1.0.0", `{ "priority" : 2, "note": "<a & \"b\" é>" }`),
				capability("webhook.send", "http", "2.1.0", ""))
			odd.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "svc-odd", Instance: odd.InstanceID, Version: "0.1.3"},
				Routes: []apiv1.ManifestRoute{{Path: "/odd/{id}", Methods: []string{"GET"}}}}
			return []*apiv1.RegisterRequest{request("j-1", "egress-jms"), odd, request("r-1", "egress-rabbitmq")}
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, registry.Config{SnapshotDir: t.TempDir()})
			f.clock.Advance(registry.DefaultLeaseTTL) // past the warm-up
			for _, req := range tc.reqs {
				mustRegister(t, f, req)
			}
			want := f.reg.Snapshot()
			wrote, err := f.reg.WriteSnapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(wrote.Path)
			if err != nil {
				t.Fatal(err)
			}
			// what the two say, as values: encoding/json escapes HTML, even inside metadata
			var got, wantDecoded any
			wj, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(json.Unmarshal(b, &got), json.Unmarshal(wj, &wantDecoded)); err != nil {
				t.Fatalf("%v in\n%s", err, b)
			}
			if diff := cmp.Diff(wantDecoded, got); diff != "" {
				t.Errorf("the file says something else than Snapshot() (-Snapshot() +file):\n%s", diff)
			}
			if !bytes.HasSuffix(b, []byte("]}\n")) || !bytes.Contains(b, []byte(`"instances":[`)) {
				t.Errorf("the file does not end its list as encoding/json does, or has no list:\n%s", b)
			}
		})
	}
}

// TestSnapshotsRotateAndRestoreLatest: every snapshot is a new file, the newest SnapshotKeep
// are kept, none is written during a warm-up, and RestoreLatest takes the newest that reads.
func TestSnapshotsRotateAndRestoreLatest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := newFixture(t, registry.Config{SnapshotDir: dir, SnapshotKeep: 3, LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
	if _, err := f.reg.WriteSnapshot(ctx); !errors.Is(err, registry.ErrWarmingUp) {
		t.Fatalf("a snapshot during the warm-up: %v, want ErrWarmingUp", err)
	}
	f.clock.Advance(30 * time.Second)
	var paths []string
	for i := range 5 {
		mustRegister(t, f, request(fmt.Sprintf("i-%d", i), "svc"))
		w, err := f.reg.WriteSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, w.Path)
		f.clock.Advance(time.Second)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if diff := cmp.Diff(paths[2:], files); diff != "" {
		t.Fatalf("kept snapshots (-want +got):\n%s", diff)
	}
	// the newest is unreadable (a crash mid-copy, a full disk): the one before it is restored
	if err := os.WriteFile(paths[4], []byte(`{"registry_epoch":`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newFixture(t, registry.Config{SnapshotDir: dir, LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second})
	s, path, err := g.reg.RestoreLatest(ctx)
	if err != nil || path != paths[3] || s.InstanceCount != 4 {
		t.Fatalf("RestoreLatest = %v %q %v; want %s with 4 instances", s, path, err, paths[3])
	}
	// an empty dir (every first start with --restore-snapshot auto): said plainly, not as
	// the "%!w(<nil>)" of a nil error wrapped
	emptyDir := t.TempDir()
	empty := newFixture(t, registry.Config{SnapshotDir: emptyDir})
	if _, _, err := empty.reg.RestoreLatest(ctx); !errors.Is(err, registry.ErrNoSnapshot) || err.Error() != "no valid snapshot in "+emptyDir+": it holds none" {
		t.Fatalf("RestoreLatest of an empty dir: %v, want ErrNoSnapshot saying it holds none", err)
	}
	// a dir of unreadable ones says why each was skipped
	for _, p := range paths[2:] {
		if err := os.WriteFile(p, []byte(`{`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := g.reg.RestoreLatest(ctx); !errors.Is(err, registry.ErrNoSnapshot) || strings.Contains(err.Error(), "%!") || !strings.Contains(err.Error(), filepath.Base(paths[2])) {
		t.Fatalf("RestoreLatest of unreadable snapshots: %v, want ErrNoSnapshot naming each", err)
	}
}

func TestRestoreRefusesBadFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inst := `{"instance_id":"a","service_name":"svc","service_version":"1.0.0","endpoint":"http://a","generation":3,"health":"ok",
		"capabilities":[{"capability_id":"a.b","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p"}]}`
	tests := map[string]string{
		"missing":           filepath.Join(dir, "nope.json"),
		"not json":          write("garbage.json", "{"),
		"no epoch":          write("noepoch.json", `{"revision":1,"instances":[]}`),
		"invalid instance":  write("invalid.json", `{"registry_epoch":"e","instances":[`+strings.Replace(inst, `"1.0.0"`, `"1.x"`, 1)+`]}`),
		"duplicate":         write("dup.json", `{"registry_epoch":"e","instances":[`+inst+`,`+inst+`]}`),
		"generation absent": write("nogen.json", `{"registry_epoch":"e","instances":[`+strings.Replace(inst, `"generation":3`, `"generation":0`, 1)+`]}`),
	}
	for name, path := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, registry.Config{})
			mustRegister(t, f, request("keep", "svc"))
			if _, err := f.reg.RestoreSnapshot(ctx, path); err == nil {
				t.Fatal("RestoreSnapshot accepted a bad file")
			}
			if _, err := f.reg.Instance("keep"); err != nil {
				t.Errorf("a refused restore changed the state: %v", err)
			}
		})
	}
	f := newFixture(t, registry.Config{})
	if _, err := f.reg.WriteSnapshot(ctx); !errors.Is(err, registry.ErrNoSnapshotDir) {
		t.Errorf("WriteSnapshot without a dir = %v, want ErrNoSnapshotDir", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  registry.Config
		ok   bool
	}{
		{"defaults", registry.Config{}, true},
		{"short ttl gets a fitting interval", registry.Config{LeaseTTL: 3 * time.Second}, true},
		{"interval not under ttl", registry.Config{LeaseTTL: 10 * time.Second, HeartbeatInterval: 10 * time.Second}, false},
		{"ttl under a second", registry.Config{LeaseTTL: time.Millisecond, HeartbeatInterval: time.Microsecond}, false},
		{"interval not whole seconds", registry.Config{LeaseTTL: 3 * time.Second, HeartbeatInterval: 1500 * time.Millisecond}, false},
		{"snapshot interval without dir", registry.Config{SnapshotInterval: time.Minute}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := registry.New(memstore.New(nil), tt.cfg)
			if (err == nil) != tt.ok {
				t.Errorf("New(%+v) error = %v, want ok=%v", tt.cfg, err, tt.ok)
			}
		})
	}
}

func TestRoutesInputs(t *testing.T) {
	f := newFixture(t, registry.Config{})
	req := request("j-1", "egress-jms", capability("messaging.publish", "jms", "1.0.0", `{"public_paths":["/api/messaging/jms/publish"]}`))
	req.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-jms", Instance: "j-1", Version: "0.1.3"},
		Routes: []apiv1.ManifestRoute{{Path: "/api/messaging/jms/publish", Methods: []string{"POST"}}}}
	gen := mustRegister(t, f, req).Generation
	mustRegister(t, f, request("r-1", "egress-rabbitmq"))
	got := f.reg.Routes()
	if len(got.Manifests) != 1 || got.Manifests[0].InstanceID != "j-1" || got.Manifests[0].Generation != gen {
		t.Errorf("Routes().Manifests = %+v", got.Manifests)
	}
	want := []apiv1.PublicPath{{Path: "/api/messaging/jms/publish", CapabilityID: "messaging.publish", Provider: "jms",
		InstanceID: "j-1", ServiceName: "egress-jms", Endpoint: "http://j-1:8080", Generation: gen}}
	if diff := cmp.Diff(want, got.PublicPaths); diff != "" {
		t.Errorf("Routes().PublicPaths (-want +got):\n%s", diff)
	}
}

// TestRegistrationEvents: what the journal says of a registration during the warm-up, of one
// after it, and of a new incarnation — type, message and attributes.
func TestRegistrationEvents(t *testing.T) {
	j := journal.New(0, nil)
	f := newFixture(t, registry.Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second, Journal: j})
	a1 := mustRegister(t, f, request("a", "egress-jms"))
	f.clock.Advance(30 * time.Second) // the warm-up is over
	b := mustRegister(t, f, request("b", "egress-jms", capability("messaging.publish", "jms", "1.0.0", ""), capability("messaging.consume", "jms", "1.0.0", "")))
	a2 := mustRegister(t, f, request("a", "egress-jms"))
	type event struct {
		Type, Subject, Message string
		Attrs                  map[string]any
	}
	want := []event{
		{apiv1.EventRegistered, "a", fmt.Sprintf("a (egress-jms) registered at http://a:8080, generation %d during the registry's warm-up", a1.Generation),
			map[string]any{"capabilities": 1.0, "endpoint": "http://a:8080", "generation": float64(a1.Generation), "service_name": "egress-jms", "warm_up": true}},
		{apiv1.EventRegistered, "b", fmt.Sprintf("b (egress-jms) registered at http://b:8080, generation %d", b.Generation),
			map[string]any{"capabilities": 2.0, "endpoint": "http://b:8080", "generation": float64(b.Generation), "service_name": "egress-jms"}},
		{apiv1.EventReregistered, "a", fmt.Sprintf("a (egress-jms) re-registered, generation %d replaces %d: a new incarnation replaced the registered one (the provider restarted or lost its lease)", a2.Generation, a1.Generation),
			map[string]any{"capabilities": 1.0, "endpoint": "http://a:8080", "generation": float64(a2.Generation), "previous_generation": float64(a1.Generation),
				"reason": "a new incarnation replaced the registered one (the provider restarted or lost its lease)", "service_name": "egress-jms"}},
	}
	es, _ := j.Find(journal.Query{})
	var got []event
	for _, e := range es {
		got = append(got, event{e.Type, e.Subject, e.Message, e.Attrs})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func ExampleParseConstraint() {
	c, _ := registry.ParseConstraint(">=1.0, <2.0")
	fmt.Println(c)
	// Output: >=1.0 <2.0
}

func TestThousandsOfWaitersWakeOnOneChange(t *testing.T) {
	const waiters = 5000
	f := newFixture(t, registry.Config{})
	rev := f.reg.State().Revision
	woke := make(chan int64, waiters)
	for range waiters {
		go func() { woke <- f.reg.Wait(context.Background(), "", rev, time.Hour) }()
	}
	for f.reg.Watchers() < waiters {
		time.Sleep(time.Millisecond)
	}
	mustRegister(t, f, request("jms-1", "egress-jms"))
	for range waiters {
		if got := <-woke; got != rev+1 {
			t.Fatalf("a waiter woke at revision %d, want %d", got, rev+1)
		}
	}
	if n := f.reg.Watchers(); n != 0 {
		t.Errorf("Watchers() = %d after every waiter woke", n)
	}
}

func TestRunSweepsAndSnapshots(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, registry.Config{SweepInterval: time.Millisecond, SnapshotInterval: time.Millisecond, SnapshotDir: dir})
	f.clock.Advance(registry.DefaultLeaseTTL - time.Second) // still warming up
	mustRegister(t, f, request("jms-1", "egress-jms"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.reg.Run(ctx) }()
	// The loop's own tickers are real; nothing here is timed (the bound only ends a broken test).
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
		}
	}
	snapshots := func() int { m, _ := filepath.Glob(filepath.Join(dir, "*.json")); return len(m) }
	time.Sleep(20 * time.Millisecond) // twenty ticks inside the warm-up
	if n := snapshots(); n != 0 {
		t.Fatalf("%d snapshots written during the warm-up", n)
	}
	f.clock.Advance(time.Second)
	eventually("a snapshot once complete", func() bool { return snapshots() > 0 })
	f.clock.Advance(registry.DefaultLeaseTTL)
	eventually("jms-1 evicted", func() bool { _, err := f.reg.Instance("jms-1"); return err != nil })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if n := snapshots(); n > registry.DefaultSnapshotKeep {
		t.Errorf("%d snapshots kept, want at most %d", n, registry.DefaultSnapshotKeep)
	}
	mfs, err := f.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sweeps uint64
	for _, mf := range mfs {
		if mf.GetName() == "meshflows_registry_sweep_duration_seconds" {
			sweeps = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if sweeps < 2 { // the eviction's, and one at least before it
		t.Errorf("meshflows_registry_sweep_duration_seconds counts %d sweeps, want every sweep Run made", sweeps)
	}
}

func TestOwnership(t *testing.T) {
	f := newFixture(t, registry.Config{})
	asA := registry.WithCaller(context.Background(), registry.Caller{Identity: "egress-jms"})
	asB := registry.WithCaller(context.Background(), registry.Caller{Identity: "intruder"})
	asAdmin := registry.WithCaller(context.Background(), registry.Caller{Identity: "ops", Admin: true})
	resp, err := f.reg.Register(asA, request("jms-1", "egress-jms"))
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := f.reg.Instance("jms-1"); in.Owner != "egress-jms" {
		t.Errorf("owner = %q", in.Owner)
	}
	hb := &apiv1.HeartbeatRequest{Generation: resp.Generation}
	if _, err := f.reg.Heartbeat(asB, "jms-1", hb); !errors.Is(err, registry.ErrForbidden) {
		t.Errorf("someone else's heartbeat = %v, want ErrForbidden", err)
	}
	if _, err := f.reg.Heartbeat(asAdmin, "jms-1", hb); !errors.Is(err, registry.ErrForbidden) {
		t.Errorf("an admin's heartbeat = %v, want ErrForbidden (only the owner keeps a lease alive)", err)
	}
	if _, err := f.reg.Register(asB, request("jms-1", "egress-jms")); !errors.Is(err, registry.ErrForbidden) {
		t.Errorf("someone else's re-registration = %v, want ErrForbidden", err)
	}
	if err := f.reg.Deregister(asB, "jms-1", 0); !errors.Is(err, registry.ErrForbidden) {
		t.Errorf("someone else's deregister = %v, want ErrForbidden", err)
	}
	if _, err := f.reg.Heartbeat(asA, "jms-1", hb); err != nil {
		t.Errorf("the owner's heartbeat: %v", err)
	}
	if err := f.reg.Deregister(asAdmin, "jms-1", 0); err != nil {
		t.Errorf("an admin's deregister: %v", err)
	}
}

// TestActivityIsSummarised: registrations and heartbeats have no INFO line each; Run writes
// one summary line of them instead (and none for a quiet interval).
func TestActivityIsSummarised(t *testing.T) {
	var logs registrytest.SyncBuffer
	f := newFixture(t, registry.Config{SummaryInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	for i := range 100 {
		reg := mustRegister(t, f, request(fmt.Sprintf("jms-%d", i), "egress-jms"))
		if _, err := f.reg.Heartbeat(context.Background(), fmt.Sprintf("jms-%d", i), &apiv1.HeartbeatRequest{Generation: reg.Generation}); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(logs.String(), `"msg":"register"`) {
		t.Fatalf("a line per registration at INFO:\n%s", logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.reg.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "registry activity"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no summary line")
		}
	}
	time.Sleep(30 * time.Millisecond) // quiet intervals: no more lines
	cancel()
	<-done
	var lines []string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "registry activity") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"registered":100`) || !strings.Contains(lines[0], `"heartbeats":100`) {
		t.Fatalf("summary lines %q, want one with 100 registrations and 100 heartbeats", lines)
	}
	if !strings.Contains(lines[0], `"over_seconds":0.005,`) {
		t.Errorf("summary line %q, want its period in seconds (over_seconds 0.005), not raw nanoseconds", lines[0])
	}
}

// TestReadinessIsSaid: an instance says what tells the registry it is ready — its probes
// (a manifest health section), its runtime (a registration with readiness runtime, as
// kube-sync sends), or nothing — in the catalog and in discovery; other values are refused.
func TestReadinessIsSaid(t *testing.T) {
	f := newFixture(t, registry.Config{})
	ctx := context.Background()
	none := request("plain-1", "plain")
	runtime := request("kube-1", "kube")
	runtime.Readiness = apiv1.ReadinessRuntime
	probed := request("probed-1", "probed")
	three := apiv1.Number("3")
	probed.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "probed", Instance: "probed-1", Version: "0.1.3"},
		Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: "10s", UnhealthyAfter: &three}, Routes: []apiv1.ManifestRoute{}}
	for _, req := range []*apiv1.RegisterRequest{none, runtime, probed} {
		mustRegister(t, f, req)
	}
	for id, want := range map[string]string{"plain-1": apiv1.ReadinessNone, "kube-1": apiv1.ReadinessRuntime, "probed-1": apiv1.ReadinessProbe} {
		in, err := f.reg.Instance(id)
		if err != nil || in.Readiness != want {
			t.Errorf("%s: readiness %q (%v), want %q", id, in.Readiness, err, want)
		}
	}
	bad := request("bad-1", "bad")
	bad.Readiness = apiv1.ReadinessProbe
	if _, err := f.reg.Register(ctx, bad); err == nil || !strings.Contains(err.Error(), "readiness") {
		t.Errorf("a registration saying readiness probe: %v, want refused naming readiness", err)
	}
}
