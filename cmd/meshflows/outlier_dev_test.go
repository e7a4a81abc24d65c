package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/providers/messaging"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/routing"
)

// TestGreyFailureOnARealStack: meshflows dev with a second gateway (two reporters), six jms
// providers in zones a and b — one of them answering 500 to 4 % of its publishes — and
// publishes through both gateways at about 240 a second (40 an instance). The faulty one is
// out of rotation with OUTLIER_RELATIVE within 60 s of the traffic starting; no healthy one
// is ever withdrawn. Then a zone c of three providers failing 5 % each joins: the zone is
// reported on /v1/discovery/health within 60 s, and none of its instances is ejected (inside
// the zone they are alike). Times are logged; the bounds only end a broken test.
func TestGreyFailureOnARealStack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	url := func(offset int) string { return "http://127.0.0.1:" + strconv.Itoa(base+offset) }
	reg := url(devRegistryOffset)
	pctx, stop := context.WithCancel(context.Background())
	var g errgroup.Group
	t.Cleanup(func() { stop(); g.Wait() })
	quiet := slog.New(slog.DiscardHandler)
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	gln := listen()
	gw2 := gatewayFlags{insecure: true, registries: []string{reg}, cacheTTL: discovery.DefaultTTL, maxStale: discovery.DefaultStaleAllowance,
		outcomeWindow: 10 * time.Second, policy: routing.Policy{"egress-jms": {"/api/messaging/jms"}}}
	if err := startGateway(pctx, &g, &gw2, gln, quiet); err != nil {
		t.Fatal(err)
	}
	gateways := []string{url(devGatewayOffset), "http://" + gln.Addr().String()}
	// endpoint -> zone of each provider started here, and which is faulty
	endpoints := map[string]string{url(devProviderOffsetJMS): "a"}
	start := func(zone string, errorRate float64) string {
		ln := listen()
		if err := startExampleProvider(pctx, &g, exampleProviderOptions{kind: "jms", zone: zone, registries: []string{reg},
			faults: messaging.Faults{ErrorRate: errorRate}}, ln, quiet); err != nil {
			t.Fatal(err)
		}
		ep := "http://" + ln.Addr().String()
		endpoints[ep] = zone
		return ep
	}
	start("a", 0)
	bad := start("a", 0.04)
	for range 3 {
		start("b", 0)
	}
	received := func(provider string) int {
		resp, err := http.Get(provider + "/api/messaging/jms/messages?destination=grey")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var m struct {
			Messages []json.RawMessage `json:"messages"`
		}
		json.NewDecoder(resp.Body).Decode(&m)
		return len(m.Messages)
	}
	var sent sync.Map // gateway -> *atomic.Int64, for the log
	publish := func(gw string) {
		resp, err := http.Post(gw+"/api/messaging/jms/publish", "application/json", bytes.NewReader([]byte(`{"destination":"grey","payload":1}`)))
		if err == nil {
			resp.Body.Close()
		}
	}
	everyoneServes := func(eps map[string]string) func() bool {
		return func() bool {
			for _, gw := range gateways {
				publish(gw)
			}
			for ep := range eps {
				if received(ep) <= 0 {
					return false
				}
			}
			return true
		}
	}
	registrytest.Until(t, "both gateways send to the six jms providers", everyoneServes(endpoints))

	// the load: 8 workers, 30 publishes a second each, alternating gateways
	lctx, stopLoad := context.WithCancel(pctx)
	var load sync.WaitGroup
	t.Cleanup(func() { stopLoad(); load.Wait() })
	for w := range 8 {
		load.Go(func() {
			tick := time.NewTicker(time.Second / 30)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-lctx.Done():
					return
				case <-tick.C:
					gw := gateways[(w+i)%2]
					publish(gw)
					n, _ := sent.LoadOrStore(gw, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
			}
		})
	}
	type member struct{ id, zone, state string }
	members := func() map[string]member { // by endpoint
		resp, err := http.Get(reg + "/v1/discovery/capabilities?capability_id=messaging.publish&provider=jms&include=all")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var d apiv1.DiscoveryResponse
		json.NewDecoder(resp.Body).Decode(&d)
		out := map[string]member{}
		for _, e := range d.Capabilities {
			out[e.Endpoint] = member{e.InstanceID, e.Zone, e.Eligibility}
		}
		return out
	}
	reasons := func(id string) []string {
		resp, err := http.Get(reg + "/v1/services/" + id + "/eligibility")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var ex apiv1.Explanation
		json.NewDecoder(resp.Body).Decode(&ex)
		var out []string
		for _, r := range ex.Reasons {
			out = append(out, r.Code)
		}
		return out
	}
	// out of rotation by a verdict on it (unknown, before its probes admit it, is not)
	withdrawn := func(state string) bool {
		return state == apiv1.EligibilityWithdrawn || state == apiv1.EligibilityQuarantined
	}
	began := time.Now()
	var ejectedAfter time.Duration
	for ejectedAfter == 0 {
		if time.Since(began) > 60*time.Second {
			t.Fatalf("the 4 %% replica %s is not out of rotation 60 s after the traffic started: %+v", bad, members()[bad])
		}
		time.Sleep(500 * time.Millisecond)
		for ep, m := range members() {
			switch {
			case ep == bad && m.state == apiv1.EligibilityWithdrawn && strings.Contains(strings.Join(reasons(m.id), ","), health.ReasonOutlierRelative):
				ejectedAfter = time.Since(began)
			case ep != bad && endpoints[ep] != "" && withdrawn(m.state):
				t.Errorf("healthy %s (zone %s) is %s: %v", m.id, m.zone, m.state, reasons(m.id))
			}
		}
	}
	t.Logf("the 4 %% replica was ejected with %s %s after the traffic started", health.ReasonOutlierRelative, ejectedAfter.Round(100*time.Millisecond))

	// a whole zone failing 5 %
	zoneC := map[string]string{}
	for range 3 {
		zoneC[start("c", 0.05)] = "c"
	}
	registrytest.Until(t, "both gateways send to zone c", everyoneServes(zoneC))
	began = time.Now()
	for {
		if time.Since(began) > 60*time.Second {
			t.Fatal("zone c, failing 5 % as a whole, is not reported 60 s after it joined")
		}
		time.Sleep(500 * time.Millisecond)
		for ep, m := range members() {
			if zoneC[ep] != "" && withdrawn(m.state) {
				t.Errorf("zone c's %s is %s: a zone outlier ejects none of its instances (%v)", m.id, m.state, reasons(m.id))
			}
		}
		resp, err := http.Get(reg + "/v1/discovery/health")
		if err != nil {
			continue
		}
		var h apiv1.HealthResponse
		json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if len(h.ZoneOutliers) > 0 {
			if z := h.ZoneOutliers[0]; len(h.ZoneOutliers) != 1 || z.Zone != "c" || z.CapabilityID != "messaging.publish" {
				t.Fatalf("zone_outliers = %+v, want zone c of messaging.publish alone", h.ZoneOutliers)
			}
			t.Logf("zone c reported %s after it served: %d errors in %d requests against %.2f%% elsewhere",
				time.Since(began).Round(100*time.Millisecond), h.ZoneOutliers[0].Errors, h.ZoneOutliers[0].Requests, 100*h.ZoneOutliers[0].Baseline)
			break
		}
	}
	sent.Range(func(k, v any) bool { t.Logf("%s: %d publishes", k, v.(*atomic.Int64).Load()); return true })
}
