package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
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
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/routing"
)

// greyStack is meshflows dev with more gateways and more jms providers, publishing through
// the gateways: the stack the grey-failure tests run on.
type greyStack struct {
	t        *testing.T
	reg      string
	gateways []string
	// endpoints maps the endpoint of each jms provider started here (and dev's) to its zone
	endpoints map[string]string
	ctx       context.Context
	g         *errgroup.Group
	sent      atomic.Int64
}

// newGreyStack starts meshflows dev and extra gateways beside its own (each wrapping its
// upstream transport with wrap[i] when given).
func newGreyStack(t *testing.T, extraGateways int, wrap ...func(http.RoundTripper) http.RoundTripper) *greyStack {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	url := func(offset int) string { return "http://127.0.0.1:" + strconv.Itoa(base+offset) }
	pctx, stop := context.WithCancel(context.Background())
	s := &greyStack{t: t, reg: url(devRegistryOffset), gateways: []string{url(devGatewayOffset)},
		endpoints: map[string]string{url(devProviderOffsetJMS): "a"}, ctx: pctx, g: &errgroup.Group{}}
	t.Cleanup(func() { stop(); s.g.Wait() })
	for i := range extraGateways {
		ln := s.listen()
		f := gatewayFlags{insecure: true, registries: []string{s.reg}, cacheTTL: discovery.DefaultTTL,
			outcomeWindow: 10 * time.Second, policy: routing.Policy{"egress-jms": {"/api/messaging/jms"}}}
		if i < len(wrap) {
			f.wrapTransport = wrap[i]
		}
		if err := startGateway(pctx, s.g, &f, ln, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		s.gateways = append(s.gateways, "http://"+ln.Addr().String())
	}
	return s
}

func (s *greyStack) listen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	return ln
}

// provider starts a jms provider in zone with faults and returns its endpoint.
func (s *greyStack) provider(zone string, faults messaging.Faults) string {
	ln := s.listen()
	if err := startExampleProvider(s.ctx, s.g, exampleProviderOptions{kind: "jms", zone: zone, registries: []string{s.reg}, faults: faults},
		ln, slog.New(slog.DiscardHandler)); err != nil {
		s.t.Fatal(err)
	}
	ep := "http://" + ln.Addr().String()
	s.endpoints[ep] = zone
	return ep
}

func (s *greyStack) publish(gw string) {
	resp, err := http.Post(gw+"/api/messaging/jms/publish", "application/json", bytes.NewReader([]byte(`{"destination":"grey","payload":1}`)))
	if err == nil {
		resp.Body.Close()
	}
}

// everyNth is a fault's draw that fails exactly one publish in n (the share the error rate
// says), not a binomial share of them: the grey-failure tests measure the rule, not luck —
// a 4 % replica's drawn errors at 300 requests range from 2 % to 6 %, and how long the rule
// takes with them.
func everyNth(n int64) func() float64 {
	var i atomic.Int64
	return func() float64 {
		if i.Add(1)%n == 0 {
			return 0
		}
		return 0.99
	}
}

// received counts the messages a provider holds.
func received(provider string) int {
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

// everyGatewaySends waits until publishes through every gateway reached each of eps.
func (s *greyStack) everyGatewaySends(what string, eps map[string]string) {
	registrytest.Until(s.t, what, func() bool {
		for _, gw := range s.gateways {
			s.publish(gw)
		}
		for ep := range eps {
			if received(ep) <= 0 {
				return false
			}
		}
		return true
	})
}

// load publishes about perSecond a second, spread over the gateways in turn, until the test
// ends.
func (s *greyStack) load(perSecond int) {
	workers := max(4, perSecond/5) // each at 5 a second at most: a slow answer holds up little
	lctx, stop := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	s.t.Cleanup(func() { stop(); wg.Wait() })
	for w := range workers {
		wg.Go(func() {
			tick := time.NewTicker(time.Second * time.Duration(workers) / time.Duration(perSecond))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-lctx.Done():
					return
				case <-tick.C:
					s.publish(s.gateways[(w+i)%len(s.gateways)])
					s.sent.Add(1)
				}
			}
		})
	}
}

type member struct {
	id, zone, state string
	weight          int
}

// members answers the jms providers of messaging.publish by endpoint (include=all).
func (s *greyStack) members() map[string]member {
	var d apiv1.DiscoveryResponse
	getJSON(s.t, s.reg+"/v1/discovery/capabilities?capability_id=messaging.publish&provider=jms&include=all", &d)
	out := map[string]member{}
	for _, e := range d.Capabilities {
		out[e.Endpoint] = member{e.InstanceID, e.Zone, e.Eligibility, e.Weight}
	}
	return out
}

// explain answers the eligibility of instance id.
func (s *greyStack) explain(id string) apiv1.Explanation {
	var ex apiv1.Explanation
	getJSON(s.t, s.reg+"/v1/services/"+id+"/eligibility", &ex)
	return ex
}

// reported answers how many requests each reporter reported about id over the outlier window.
func (s *greyStack) reported(id string) map[string]int {
	out := map[string]int{}
	if ex := s.explain(id); ex.Outcomes != nil {
		for _, r := range ex.Outcomes.Reporters {
			out[r.Reporter] = r.Requests
		}
	}
	return out
}

func (s *greyStack) reasons(id string) []string {
	var out []string
	for _, r := range s.explain(id).Reasons {
		out = append(out, r.Code)
	}
	return out
}

// outOfRotation: out of rotation by a verdict on it (unknown, before its probes admit it, is not)
func outOfRotation(state string) bool {
	return state == apiv1.EligibilityWithdrawn || state == apiv1.EligibilityQuarantined
}

// watch polls the members every half second for d: every healthy one (all but bad) out of
// rotation fails the test; it returns how long after the start bad first met done (0: never).
func (s *greyStack) watch(d time.Duration, bad string, done func(member) bool) time.Duration {
	began := time.Now()
	for time.Since(began) < d {
		time.Sleep(500 * time.Millisecond)
		for ep, m := range s.members() {
			switch {
			case ep == bad && done != nil && done(m):
				return time.Since(began)
			case ep != bad && s.endpoints[ep] != "" && outOfRotation(m.state):
				s.t.Errorf("healthy %s (zone %s) is %s: %v", m.id, m.zone, m.state, s.reasons(m.id))
			}
		}
	}
	return 0
}

// TestGreyFailureBehindOneGateway: meshflows dev — one gateway, the only reporter — with six
// jms providers in zones a and b, one of them answering 500 to 4 % of its publishes (one in
// 25, not a binomial draw: the test measures the rule, not luck), and
// about 50 publishes a second through the gateway. Nobody contradicts the one gateway, so
// its pooled evidence stands alone: the faulty one is out of rotation with
// OUTLIER_RELATIVE within 60 s of the traffic starting, and no healthy one is ever
// withdrawn. Then a zone c of three providers failing 5 % each joins: the zone is reported
// on /v1/discovery/health within 60 s, and none of its instances is ejected (inside the zone
// they are alike). Times are logged; the bounds only end a broken test.
func TestGreyFailureBehindOneGateway(t *testing.T) {
	s := newGreyStack(t, 0)
	s.provider("a", messaging.Faults{})
	bad := s.provider("a", messaging.Faults{ErrorRate: 0.04, Rand: everyNth(25)})
	for range 3 {
		s.provider("b", messaging.Faults{})
	}
	s.everyGatewaySends("the gateway sends to the six jms providers", s.endpoints)
	s.load(50)
	ejected := s.watch(60*time.Second, bad, func(m member) bool {
		return m.state == apiv1.EligibilityWithdrawn && strings.Contains(strings.Join(s.reasons(m.id), ","), health.ReasonOutlierRelative)
	})
	if ejected == 0 {
		t.Fatalf("the 4 %% replica %s is not out of rotation 60 s after the traffic started: %+v", bad, s.members()[bad])
	}
	t.Logf("behind one gateway at 50/s, the 4 %% replica was ejected with %s %s after the traffic started", health.ReasonOutlierRelative, ejected.Round(100*time.Millisecond))

	// a whole zone failing 5 %
	zoneC := map[string]string{}
	for range 3 {
		zoneC[s.provider("c", messaging.Faults{ErrorRate: 0.05, Rand: everyNth(20)})] = "c"
	}
	s.everyGatewaySends("the gateway sends to zone c", zoneC)
	began := time.Now()
	for {
		if time.Since(began) > 60*time.Second {
			t.Fatal("zone c, failing 5 % as a whole, is not reported 60 s after it joined")
		}
		time.Sleep(500 * time.Millisecond)
		for ep, m := range s.members() {
			if zoneC[ep] != "" && outOfRotation(m.state) {
				t.Errorf("zone c's %s is %s: a zone outlier ejects none of its instances (%v)", m.id, m.state, s.reasons(m.id))
			}
		}
		resp, err := http.Get(s.reg + "/v1/discovery/health")
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
	t.Logf("%d publishes sent", s.sent.Load())
}

// brokenPath answers 500 to every request a gateway sends to one endpoint while broken is
// set: that gateway's path to the instance is broken, nobody else's.
type brokenPath struct {
	next   http.RoundTripper
	host   atomic.Value // string: host:port of the instance
	broken atomic.Bool
	failed atomic.Int64
}

func (b *brokenPath) RoundTrip(req *http.Request) (*http.Response, error) {
	if h, _ := b.host.Load().(string); b.broken.Load() && req.URL.Host == h {
		if req.Body != nil {
			io.Copy(io.Discard, req.Body)
			req.Body.Close()
		}
		b.failed.Add(1)
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("broken path")), Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
	}
	return b.next.RoundTrip(req)
}

// TestOneGatewaysBrokenPathWithdrawsNothing: meshflows dev with two more gateways (three
// reporters), six healthy jms providers and about 50 publishes a second spread over the
// three. Once the gateways have reported a while, one gateway's path to one instance breaks
// (every request it sends there fails). Pooled, the instance looks like an outlier; without
// that gateway it does not, and the other two reported plenty about it: nothing is
// withdrawn for 40 s, by the relative rule or the absolute one.
func TestOneGatewaysBrokenPathWithdrawsNothing(t *testing.T) {
	t.Parallel() // it waits on reports, not on the CPU: beside the other waiting tests
	path := &brokenPath{}
	s := newGreyStack(t, 2, func(next http.RoundTripper) http.RoundTripper { path.next = next; return path })
	s.provider("a", messaging.Faults{})
	victim := s.provider("a", messaging.Faults{})
	for range 3 {
		s.provider("b", messaging.Faults{})
	}
	s.everyGatewaySends("the three gateways send to the six jms providers", s.endpoints)
	path.host.Store(strings.TrimPrefix(victim, "http://"))
	s.load(50)
	// the other gateways' reports build up until together they have reported 150 requests
	// about the victim (over outlier_min_volume); then the path breaks
	broken := "gateway@" + strings.TrimPrefix(s.gateways[1], "http://")
	registrytest.Until(t, "the two other gateways reported 150 requests about the victim", func() bool {
		others := 0
		for r, n := range s.reported(s.members()[victim].id) {
			if r != broken {
				others += n
			}
		}
		return others >= 150
	})
	if t.Failed() {
		return
	}
	path.broken.Store(true)
	s.watch(40*time.Second, "", nil)
	if n := path.failed.Load(); n < 50 {
		t.Errorf("only %d requests went down the broken path: the test did not break anything", n)
	}
	m := s.members()[victim]
	t.Logf("one gateway of three failed %d requests to %s over 40 s; it stayed %s (%v); %d publishes sent", path.failed.Load(), m.id, m.state, s.reasons(m.id), s.sent.Load())
}

// TestALatencyOutlierLosesWeight: a registry (outlier window 20 s), one gateway reporting
// every 2 s, five jms providers and a sixth answering 200 ms late, about 100 publishes a
// second: the gateway reports each instance's p99 and the slow one is degraded with
// OUTLIER_LATENCY (weight 50 at most) — 30 s is the target, the time is logged and 60 s ends
// a broken test — never withdrawn,
// no other one touched. Once its latency is gone it serves at full weight again.
func TestALatencyOutlierLosesWeight(t *testing.T) {
	regPort, gwPort := freeport.Port(t), freeport.Port(t)
	reg := "http://127.0.0.1:" + strconv.Itoa(regPort)
	gw := "http://127.0.0.1:" + strconv.Itoa(gwPort)
	startCommand(t, reg+"/healthz", "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(regPort), "--sweep-interval", "100ms",
		"--outlier-window", "20s", "--log-level", "error")
	startPolicyGateway(t, reg, gwPort, "path_prefixes: {egress-jms: [/api/messaging/jms]}\n", "--outcome-window", "2s")
	s := &greyStack{t: t, reg: reg, gateways: []string{gw}, endpoints: map[string]string{}, ctx: context.Background()}
	start := func(latency string) string {
		port := freeport.Port(t)
		ep := "http://127.0.0.1:" + strconv.Itoa(port)
		startCommand(t, ep+"/metrics", "example-provider", "--kind", "jms", "--registry", reg, "--listen", "127.0.0.1:"+strconv.Itoa(port),
			"--latency", latency, "--log-level", "error")
		s.endpoints[ep] = "a"
		return ep
	}
	slow := start("200ms")
	for range 5 {
		start("0s")
	}
	s.everyGatewaySends("the gateway sends to the six jms providers", s.endpoints)
	s.load(100)
	var withdrawn error
	degraded := s.watch(60*time.Second, slow, func(m member) bool {
		if outOfRotation(m.state) {
			withdrawn = errors.New(m.state + " " + strings.Join(s.reasons(m.id), ","))
			return true
		}
		return m.state == apiv1.EligibilityDegraded && m.weight <= 50 && strings.Contains(strings.Join(s.reasons(m.id), ","), health.ReasonOutlierLatency)
	})
	switch {
	case withdrawn != nil:
		t.Fatalf("the slow instance was withdrawn (%v): a latency outlier only loses weight", withdrawn)
	case degraded == 0:
		t.Fatalf("the slow instance is not degraded for latency 60 s after the traffic started: %+v %v", s.members()[slow], s.reasons(s.members()[slow].id))
	}
	t.Logf("the 200 ms instance was degraded with %s %s after the traffic started", health.ReasonOutlierLatency, degraded.Round(100*time.Millisecond))
	resp, err := http.Post(slow+"/admin/faults", "application/json", strings.NewReader(`{}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("ending the latency: %v %v", err, resp)
	}
	resp.Body.Close()
	restored := s.watch(90*time.Second, slow, func(m member) bool { return m.state == apiv1.EligibilityServing && m.weight == 100 })
	if restored == 0 {
		t.Fatalf("90 s after its latency ended the instance is %+v %v, want serving at 100", s.members()[slow], s.reasons(s.members()[slow].id))
	}
	t.Logf("its latency gone, it served at 100 again %s later (the pooled p99 leaves the 20 s window, then one window under the bounds)", restored.Round(100*time.Millisecond))
}
