package nameserver_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/nameserver"
	"github.com/meshflows/meshflows/internal/region"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/routingcontrol"
)

type signal struct {
	v atomic.Pointer[routingcontrol.View]
}

func (s *signal) View() *routingcontrol.View { return s.v.Load() }

func (s *signal) off(regions ...string) {
	v := &routingcontrol.View{Read: true, Signal: apiv1.RoutingSignal{Regions: map[string]apiv1.RegionSwitch{}}}
	for _, r := range regions {
		v.Signal.Regions[r] = apiv1.RegionSwitch{State: apiv1.RegionOff}
	}
	s.v.Store(v)
}

// TestRegionalAnswers: a name is answered with home's members while home is on and has
// some, else with the next region's; a region's members never appear in another's answer.
func TestRegionalAnswers(t *testing.T) {
	regs := map[string]*registrytest.Server{}
	servers := map[string]*nameserver.Server{}
	for _, r := range []string{"a", "b"} {
		m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{SlowStart: time.Nanosecond}})
		if err != nil {
			t.Fatal(err)
		}
		regs[r] = registrytest.NewServer(t, registry.Config{Region: r, Eligibility: m})
		regs[r].Clock.Advance(registry.DefaultLeaseTTL)
		disc, err := discovery.New(discovery.Config{Registries: []string{regs[r].URL}, WatchWait: 200 * time.Millisecond, RequestTimeout: time.Second,
			RetryInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if servers[r], err = nameserver.New(nameserver.Config{Discovery: disc}); err != nil {
			t.Fatal(err)
		}
	}
	sig := &signal{}
	sig.off()
	plan, err := region.NewPlan(region.PlanConfig{Home: "a", Others: []string{"b"}, Signal: sig, Steps: []float64{}})
	if err != nil {
		t.Fatal(err)
	}
	servers["a"].ServeThrough(nameserver.NewRegional(plan, servers))
	pc, ln := udpAndTCP(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- servers["a"].Run(ctx, pc, ln) }()
	go func() { done <- servers["b"].Run(ctx, nil, nil) }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	register := func(r, id, ip string) {
		req := apiv1.RegisterRequest{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://" + ip + ":8080",
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
		if _, err := regs[r].Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
		regs[r].Clock.Advance(time.Second)
		if _, err := regs[r].Registry.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	answer := func() []string {
		m := new(dns.Msg)
		m.SetQuestion("egress-jms.svc.meshflows.", dns.TypeA)
		r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(m, pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		var ips []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				ips = append(ips, a.A.String())
			}
		}
		return ips
	}
	wantSoon := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := answer()
			if len(got) == len(want) && (len(got) == 0 || got[0] == want[0]) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, want %v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	register("b", "b-1", "127.0.0.3")
	wantSoon("home empty: b's members", "127.0.0.3")
	register("a", "a-1", "127.0.0.2")
	wantSoon("home has a member: home's", "127.0.0.2")
	sig.off("a")
	plan.Update()
	wantSoon("home off: b's", "127.0.0.3")
	sig.off("a", "b")
	plan.Update()
	wantSoon("every region off: nothing", []string{}...)
}
