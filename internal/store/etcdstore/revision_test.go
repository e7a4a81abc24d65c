package etcdstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/etcdstore"
)

// unwatched connects a store replica over prefix and does not run it: its view is what it
// read, and what it writes itself, until the test runs it.
func unwatched(t *testing.T, cli *clientv3.Client, prefix string) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestARevisionHoldsEveryEarlierWrite: a revision a replica answers at holds every write etcd
// made up to it, its own and other replicas' alike. A replica's own registration lands in its
// view at once, but its revision may show only once the watch has brought in what other
// replicas wrote before it: were it to show at once, an answer at that revision would miss
// their writes, and — answers being cached, and long polls woken, by revision — go on missing
// them after they arrive, until some later change.
func TestARevisionHoldsEveryEarlierWrite(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/prefix%d/", prefixes.Add(1))
	ctx := context.Background()
	a, b := unwatched(t, cli, prefix), unwatched(t, cli, prefix) // A has not seen what B writes
	other, own := record("other"), record("own")
	if err := b.Register(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := a.Register(ctx, own); err != nil {
		t.Fatal(err)
	}
	if own.Generation <= other.Generation {
		t.Fatalf("generations %d (own) and %d (other): want own's later", own.Generation, other.Generation)
	}
	if _, ok := a.Get("own"); !ok {
		t.Error("A does not read its own registration at once")
	}
	without, _ := a.Watch() // the revision A answers at before the watch brings B's write
	if _, ok := a.Get("other"); ok {
		t.Fatal("A holds B's write without a watch: the test does not test what it says")
	}
	if without >= other.Generation {
		t.Errorf("A answers at revision %d without B's write of revision %d", without, other.Generation)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Until(t, "A's revision reaches its own registration", func() bool { rev, _ := a.Watch(); return rev >= own.Generation })
	if _, ok := a.Get("other"); !ok {
		t.Errorf("A answers at revision %d without B's write of revision %d", own.Generation, other.Generation)
	}
	if got := a.Query(&registry.Query{CapabilityID: "a.b"}); len(got) != 2 {
		t.Errorf("A's answer holds %d entries, want 2", len(got))
	}
}

// TestAConsumerOfOneReplicaSeesAnotherReplicasEarlierWrite is the same at the seam a consumer
// meets, over HTTP: replica A, whose watch lags, answers a discovery request after its own
// registration and before another replica's earlier one has reached it. The consumer's
// conditional request and its long poll from that answer must both bring the other
// replica's instance once the watch does, not the cached answer again.
func TestAConsumerOfOneReplicaSeesAnotherReplicasEarlierWrite(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/consumer%d/", prefixes.Add(1))
	ctx := context.Background()
	open := func() (*etcdstore.Store, *registry.Registry) {
		s := unwatched(t, cli, prefix)
		reg, err := registry.New(s, registry.Config{LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s, reg
	}
	storeA, regA := open()
	_, regB := open()
	srv, err := server.New(regA, server.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	register := func(reg *registry.Registry, id string) {
		t.Helper()
		req := &apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://" + id, Zone: "a",
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
		if _, err := reg.Register(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	register(regB, "other")
	register(regA, "own")

	url := hs.URL + "/v1/discovery/capabilities?capability_id=messaging.publish"
	type answer struct {
		status    int
		etag      string
		revision  int64
		instances []string
	}
	get := func(url, etag string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode, etag: resp.Header.Get("ETag")}
		if resp.StatusCode != http.StatusOK {
			return a
		}
		var d apiv1.DiscoveryResponse
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		a.revision = d.Revision
		for _, c := range d.Capabilities {
			a.instances = append(a.instances, c.InstanceID)
		}
		slices.Sort(a.instances)
		return a
	}
	first := get(url, "")
	if first.status != http.StatusOK || slices.Contains(first.instances, "other") {
		t.Fatalf("before A's watch runs: %+v; the test needs an answer without B's instance", first)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- storeA.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	want := []string{"other", "own"}
	poll := get(fmt.Sprintf("%s&index=%d&wait=10s", url, first.revision), "")
	if !slices.Equal(poll.instances, want) {
		t.Errorf("the long poll from revision %d answered revision %d with %v, want %v", first.revision, poll.revision, poll.instances, want)
	}
	if again := get(url, first.etag); again.status != http.StatusOK || !slices.Equal(again.instances, want) {
		t.Errorf("a conditional request with the first answer's ETag %s: status %d, %v; want 200 with %v", first.etag, again.status, again.instances, want)
	}
}
