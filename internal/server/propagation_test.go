package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// The second half of the withdrawal budget: a withdrawal verdict is timed until each watcher
// that held an answer from before it is released with it — at once for a watcher parked on
// the capability, and the time it took for one that came back later with the old index; a
// watcher that holds an answer with the withdrawal already observes nothing.
func TestWithdrawalPropagationIsTimedPerWatcher(t *testing.T) {
	metrics := prometheus.NewRegistry()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s := registrytest.NewServer(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second, Eligibility: m, Registerer: metrics})
	s.Clock.Advance(90 * time.Second) // past the warm-up
	ctx := t.Context()
	req := apiv1.RegisterRequest{InstanceID: "jms-1", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://10.0.0.1:8080",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	for _, id := range []string{"jms-2", "jms-3", "jms-4"} { // enough in rotation that one withdrawn is no panic
		other := req
		other.InstanceID, other.Endpoint = id, "http://10.0.0.9:"+id[4:]
		if _, err := s.Registry.Register(ctx, &other); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.Registry.Register(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	st := s.Registry.State()
	// pollE long-polls the capability from index; it may run in a goroutine of its own
	pollE := func(index int64, wait string) (int, int64, error) {
		r, err := http.Get(fmt.Sprintf("%s/v1/discovery/capabilities?capability_id=messaging.publish&index=%d&epoch=%s&wait=%s", s.URL, index, st.Epoch, wait))
		if err != nil {
			return 0, 0, err
		}
		defer r.Body.Close()
		var ans apiv1.DiscoveryResponse
		if err := json.NewDecoder(r.Body).Decode(&ans); err != nil {
			return 0, 0, err
		}
		return len(ans.Capabilities), ans.Revision, nil
	}
	poll := func(index int64, wait string) (int, int64) {
		t.Helper()
		n, rev, err := pollE(index, wait)
		if err != nil {
			t.Fatal(err)
		}
		return n, rev
	}
	parked := make(chan int64, 1)
	go func() { _, rev, _ := pollE(st.Revision, "5s"); parked <- rev }()
	registrytest.Until(t, "the watcher is parked", func() bool { return s.Registry.Watchers() == 1 })
	if _, err := s.Registry.Heartbeat(ctx, "jms-1", &apiv1.HeartbeatRequest{Generation: resp.Generation, Health: "failing"}); err != nil {
		t.Fatal(err)
	}
	after := <-parked
	count, sum := histogram(t, metrics, "meshflows_withdrawal_propagation_seconds")
	for tries := 0; count == 0 && tries < 10; tries++ {
		// the heartbeat's own change of the record may release the watcher before the
		// monitor publishes the withdrawal: the watcher, back at once, gets it next
		_, after = poll(after, "5s")
		count, sum = histogram(t, metrics, "meshflows_withdrawal_propagation_seconds")
	}
	if count != 1 || sum != 0 {
		t.Fatalf("after the parked watcher: %d observations, sum %gs; want 1, 0s (the fake clock did not move)", count, sum)
	}
	s.Clock.Advance(2 * time.Second)
	if n, _ := poll(st.Revision, "5s"); n != 3 { // a watcher back late with the old index
		t.Fatalf("the late watcher got %d entries, want 3: the withdrawn one gone", n)
	}
	count, sum = histogram(t, metrics, "meshflows_withdrawal_propagation_seconds")
	if count != 2 || sum != 2 {
		t.Fatalf("after the late watcher: %d observations, sum %gs; want 2, 2s", count, sum)
	}
	go pollE(after, "300ms") // holds the withdrawal already: parks, observes nothing
	registrytest.Until(t, "the up-to-date watcher is parked", func() bool { return s.Registry.Watchers() == 1 })
	if count, _ = histogram(t, metrics, "meshflows_withdrawal_propagation_seconds"); count != 2 {
		t.Fatalf("an up-to-date watcher observed: %d observations", count)
	}
}

func histogram(t *testing.T, g prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.Metric[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}
