package nameserver_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/nameserver"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/testtool"
)

// env is a registry with the eligibility engine, and a name server over it on loopback.
type env struct {
	reg  *registrytest.Server
	addr string // host:port, UDP and TCP
	gens map[string]int64
	prom *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvVia(t, nil)
}

// newEnvVia is newEnv with the discovery client set by opt (its registry URL, clock and stale
// allowance; the name server takes the same allowance), when not nil.
func newEnvVia(t *testing.T, opt func(e *env, c *discovery.Config)) *env {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{SlowStart: time.Nanosecond}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{reg: registrytest.NewServer(t, registry.Config{Eligibility: m}), gens: map[string]int64{}, prom: prometheus.NewRegistry()}
	e.reg.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up
	dcfg := discovery.Config{Registries: []string{e.reg.URL}, WatchWait: 200 * time.Millisecond, RequestTimeout: time.Second,
		RetryInterval: 50 * time.Millisecond}
	if opt != nil {
		opt(e, &dcfg)
	}
	disc, err := discovery.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := nameserver.New(nameserver.Config{Discovery: disc, Registerer: e.prom, StaleAllowance: dcfg.StaleAllowance})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln := udpAndTCP(t)
	e.addr = pc.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return e
}

// udpAndTCP binds one free loopback port for both UDP and TCP. A port free for UDP may be
// taken for TCP by another process: then it tries another.
func udpAndTCP(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var last error
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
		last = err
	}
	t.Fatalf("no port free for both UDP and TCP: %v", last)
	return nil, nil
}

func (e *env) register(t *testing.T, id, service, provider, version, endpoint string, priority int) {
	t.Helper()
	req := apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "1.0.0", Endpoint: endpoint,
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: version, ContractSchemaVersion: "1.0", Provider: provider,
			Metadata: []byte(fmt.Sprintf(`{"priority":%d}`, priority))}}}
	resp, err := e.reg.Registry.Register(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	e.gens[id] = resp.Generation
}

// settle lets the registry's clock pass a sweep: verdicts (slow start, health) take effect.
func (e *env) settle(t *testing.T) {
	t.Helper()
	e.reg.Clock.Advance(time.Second)
	if _, err := e.reg.Registry.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *env) health(t *testing.T, id, h string) {
	t.Helper()
	if _, err := e.reg.Registry.Heartbeat(context.Background(), id, &apiv1.HeartbeatRequest{Generation: e.gens[id], Health: h}); err != nil {
		t.Fatal(err)
	}
}

// resolver is Go's resolver pointed at the server (it falls back to TCP on a truncated
// answer).
func (e *env) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, e.addr)
	}}
}

// exchange sends one query over UDP.
func (e *env) exchange(t *testing.T, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(m, e.addr)
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return r
}

func srvTargets(t *testing.T, r *net.Resolver, name string) []string {
	t.Helper()
	_, srvs, err := r.LookupSRV(context.Background(), "", "", name)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for _, s := range srvs {
		out = append(out, fmt.Sprintf("%s:%d p%d w%d", s.Target, s.Port, s.Priority, s.Weight))
	}
	slices.Sort(out)
	return out
}

func TestNameForms(t *testing.T) {
	e := newEnv(t)
	e.register(t, "jms-1", "egress-jms", "jms", "1.2.0", "http://127.0.0.1:7410", 10)
	e.register(t, "rmq-1", "egress-rabbitmq", "rabbitmq", "2.0.0", "http://[::1]:7411", 0)
	e.register(t, "hook-1", "egress-webhook", "webhook", "1.0.0", "https://hooks.example.com", 0)
	e.settle(t) // out of slow start: weight 100
	r := e.resolver()
	registrytest.Until(t, "the view reaches the server", func() bool { return len(srvTargets(t, r, "messaging.publish.cap.meshflows.")) == 3 })
	tests := []struct {
		name string
		want []string
	}{
		{"messaging.publish.cap.meshflows.", []string{"hooks.example.com.:443 p100 w100", "jms-1.inst.meshflows.:7410 p90 w100", "rmq-1.inst.meshflows.:7411 p100 w100"}},
		{"MESSAGING.Publish.CAP.meshflows.", []string{"hooks.example.com.:443 p100 w100", "jms-1.inst.meshflows.:7410 p90 w100", "rmq-1.inst.meshflows.:7411 p100 w100"}},
		{"_jms.messaging.publish.cap.meshflows.", []string{"jms-1.inst.meshflows.:7410 p90 w100"}},
		{"v2.messaging.publish.cap.meshflows.", []string{"rmq-1.inst.meshflows.:7411 p100 w100"}},
		{"_rabbitmq.v2.messaging.publish.cap.meshflows.", []string{"rmq-1.inst.meshflows.:7411 p100 w100"}},
		{"egress-jms.svc.meshflows.", []string{"jms-1.inst.meshflows.:7410 p90 w100"}},
		{"rmq-1.inst.meshflows.", []string{"rmq-1.inst.meshflows.:7411 p100 w100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := srvTargets(t, r, tt.name); !slices.Equal(got, tt.want) {
				t.Errorf("SRV = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("A and AAAA", func(t *testing.T) {
		ips, err := r.LookupIP(context.Background(), "ip", "messaging.publish.cap.meshflows.")
		var got []string
		for _, ip := range ips {
			got = append(got, ip.String())
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, []string{"127.0.0.1", "::1"}) {
			t.Errorf("addresses = %v %v", got, err)
		}
	})
	t.Run("TXT", func(t *testing.T) {
		txt, err := r.LookupTXT(context.Background(), "messaging.publish.cap.meshflows.")
		if err != nil || !strings.Contains(strings.Join(txt, " "), "source=fresh") || !strings.Contains(strings.Join(txt, " "), "in_rotation=3") {
			t.Errorf("TXT = %v %v", txt, err)
		}
	})
	t.Run("rcodes", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			qtype uint16
			rcode int
			n     int
		}{
			{"nothing.here.cap.meshflows.", dns.TypeSRV, dns.RcodeNameError, 0},
			{"not-a-capability.cap.meshflows.", dns.TypeSRV, dns.RcodeNameError, 0},
			{"v7.messaging.publish.cap.meshflows.", dns.TypeSRV, dns.RcodeSuccess, 0}, // known name, none: NODATA
			{"hook-1.inst.meshflows.", dns.TypeA, dns.RcodeSuccess, 0},                // a host name endpoint has no address of ours
			{"www.example.com.", dns.TypeA, dns.RcodeRefused, 0},
			{"messaging.publish.cap.meshflows.", dns.TypeANY, dns.RcodeSuccess, 1}, // RFC 8482
		} {
			m := e.exchange(t, c.name, c.qtype)
			if m.Rcode != c.rcode || len(m.Answer) != c.n || !m.Authoritative && c.rcode != dns.RcodeRefused {
				t.Errorf("%s %s: rcode %s, %d answers, want %s and %d", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[m.Rcode], len(m.Answer), dns.RcodeToString[c.rcode], c.n)
			}
		}
	})
}

// Only instances in rotation answer; a group in panic answers everyone; the registry
// stopped, answers continue from the last-known-good view and say so.
func TestEligibilityAndOutage(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		e.register(t, fmt.Sprint("jms-", i), "egress-jms", "jms", "1.0.0", fmt.Sprintf("http://127.0.0.1:%d", 7410+i), 0)
	}
	r := e.resolver()
	name := "egress-jms.svc.meshflows."
	registrytest.Until(t, "three instances answer", func() bool { return len(srvTargets(t, r, name)) == 3 })
	start := time.Now()
	e.register(t, "jms-late", "egress-jms", "jms", "1.0.0", "http://127.0.0.1:7499", 0)
	registrytest.Until(t, "a provider registered meanwhile answers", func() bool { return len(srvTargets(t, r, name)) == 4 })
	t.Logf("a registration answered by DNS after %s", time.Since(start).Round(time.Millisecond))
	e.health(t, "jms-0", apiv1.HealthFailing) // withdrawn: 3 of 4 in rotation
	registrytest.Until(t, "the withdrawn instance stops answering", func() bool {
		got := srvTargets(t, r, name)
		return len(got) == 3 && !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "jms-0.") })
	})
	e.health(t, "jms-1", apiv1.HealthFailing)
	e.health(t, "jms-2", apiv1.HealthFailing) // 1 of 4 in rotation: panic, everyone answers
	registrytest.Until(t, "panic answers everyone", func() bool { return len(srvTargets(t, r, name)) == 4 })
	e.reg.Close() // the registry goes away
	registrytest.Until(t, "answers say they come from the snapshot", func() bool {
		txt, _ := r.LookupTXT(context.Background(), name)
		return strings.Contains(strings.Join(txt, " "), "source=snapshot")
	})
	if got := srvTargets(t, r, name); len(got) != 4 {
		t.Errorf("from last-known-good: %v", got)
	}
	m := e.exchange(t, name, dns.TypeSRV)
	if len(m.Answer) == 0 || m.Answer[0].Header().Ttl > 5 {
		t.Errorf("answer from the snapshot: %v", m)
	}
}

// 100 instances do not fit 512 bytes: UDP answers are truncated, and the resolver gets them
// all over TCP.
func TestTruncationAndTCP(t *testing.T) {
	e := newEnv(t)
	for i := range 100 {
		e.register(t, fmt.Sprintf("jms-%03d", i), "egress-jms", "jms", "1.0.0", fmt.Sprintf("http://127.0.0.1:%d", 20000+i), 0)
	}
	r := e.resolver()
	registrytest.Until(t, "all 100 over TCP", func() bool { return len(srvTargets(t, r, "messaging.publish.cap.meshflows.")) == 100 })
	m := e.exchange(t, "messaging.publish.cap.meshflows.", dns.TypeSRV)
	if !m.Truncated || len(m.Answer) >= 100 {
		t.Errorf("UDP answer with %d records, truncated %v: want the TC bit and fewer", len(m.Answer), m.Truncated)
	}
	testtool.Need(t, "apt-get install bind9-dnsutils", "dig")
	host, port, _ := net.SplitHostPort(e.addr)
	out, err := exec.Command("dig", "@"+host, "-p", port, "+short", "SRV", "messaging.publish.cap.meshflows.").CombinedOutput()
	if n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; err != nil || n != 100 {
		t.Errorf("dig (retrying over TCP itself): %d answers, %v\n%s", n, err, out)
	}
	out, err = exec.Command("dig", "@"+host, "-p", port, "+noall", "+comments", "nothing.cap.meshflows.", "SRV").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "status: NXDOMAIN") {
		t.Errorf("dig NXDOMAIN: %v\n%s", err, out)
	}
}

// TestBadInput: garbage datagrams, a compression loop, a 64 KiB TCP message, names at the
// length limit, labels that are no capability ids and a flood of random names: the server
// answers FORMERR/NXDOMAIN or drops, and still answers afterwards.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	e.register(t, "jms-1", "egress-jms", "jms", "1.0.0", "http://127.0.0.1:7410", 0)
	r := e.resolver()
	registrytest.Until(t, "the view reaches the server", func() bool {
		got := srvTargets(t, r, "messaging.publish.cap.meshflows.")
		return len(got) == 1 && strings.HasPrefix(got[0], "jms-1.") // not an error line
	})
	udp, err := net.Dial("udp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for _, pkt := range [][]byte{
		{0},
		[]byte("not dns at all, just bytes"),
		{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 33, 0, 1}, // a name pointing at itself
		make([]byte, 4096),
	} {
		udp.Write(pkt)
	}
	tcp, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2+65535)
	big[0], big[1] = 0xff, 0xff
	tcp.Write(big)
	tcp.Close()
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + ".x" + strings.Repeat("d", 41) + ".cap.meshflows."
	for _, name := range []string{long, "Not_A-Capability!.cap.meshflows.", "_.cap.meshflows.", "a..b.cap.meshflows."} {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeSRV)
		if resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, e.addr); err == nil && resp.Rcode != dns.RcodeNameError && resp.Rcode != dns.RcodeFormatError {
			t.Errorf("%q: %s, want NXDOMAIN or FORMERR", name, dns.RcodeToString[resp.Rcode])
		}
	}
	for i := range 2000 { // random names: answered NXDOMAIN, nothing kept
		e.exchange(t, fmt.Sprintf("x%d.y%d.cap.meshflows.", i, i*7), dns.TypeSRV)
	}
	if got := srvTargets(t, r, "messaging.publish.cap.meshflows."); len(got) != 1 || !strings.HasPrefix(got[0], "jms-1.") {
		t.Errorf("after the abuse: %v", got)
	}
}

// TestLargeNamesOverTCP: a name with thousands of instances in rotation answers over TCP
// with as many records as fit in a DNS message's 64 KiB, the most preferred first, the same
// ones each time; over UDP with TC set, so that a resolver retries over TCP and gets them.
func TestLargeNamesOverTCP(t *testing.T) {
	e := newEnv(t)
	const n = 2000
	for i := range n {
		priority := 0
		if i%100 == 7 {
			priority = 10 // 20 preferred instances: SRV priority 90, before every other
		}
		e.register(t, fmt.Sprintf("jms-%04d", i), "egress-jms", "jms", "1.0.0", fmt.Sprintf("http://10.0.%d.%d:7410", i/250, i%250+1), priority)
	}
	e.settle(t)
	const name = "messaging.publish.cap.meshflows."
	q := func(net string) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeSRV)
		r, _, err := (&dns.Client{Net: net, Timeout: 5 * time.Second}).Exchange(m, e.addr)
		if err != nil {
			t.Fatalf("SRV over %s: %v", net, err)
		}
		return r
	}
	registrytest.Until(t, "the whole view reaches the server", func() bool {
		txt, err := e.resolver().LookupTXT(context.Background(), name)
		return err == nil && strings.Contains(strings.Join(txt, " "), fmt.Sprintf("in_rotation=%d", n))
	})
	udp := q("udp")
	if !udp.Truncated {
		t.Errorf("UDP answer of %d instances: TC not set (%d records)", n, len(udp.Answer))
	}
	tcp := q("tcp")
	if tcp.Rcode != dns.RcodeSuccess || tcp.Truncated || len(tcp.Answer) < 500 {
		t.Fatalf("TCP answer: rcode %s, TC %v, %d records; want NOERROR, no TC, hundreds of records", dns.RcodeToString[tcp.Rcode], tcp.Truncated, len(tcp.Answer))
	}
	tcp.Compress = true // as it came
	if wire, _ := tcp.Pack(); len(wire) > dns.MaxMsgSize {
		t.Errorf("TCP answer of %d bytes, over %d", len(wire), dns.MaxMsgSize)
	}
	for i, rr := range tcp.Answer[:20] {
		if s := rr.(*dns.SRV); s.Priority != 90 {
			t.Errorf("record %d has priority %d: the 20 preferred instances (priority 90) come first (%d records)", i, s.Priority, len(tcp.Answer))
			break
		}
	}
	again := q("tcp")
	if len(again.Answer) != len(tcp.Answer) || again.Answer[len(again.Answer)-1].String() != tcp.Answer[len(tcp.Answer)-1].String() {
		t.Errorf("two TCP answers differ: %d and %d records", len(tcp.Answer), len(again.Answer))
	}
	for _, transport := range []string{"udp", "tcp"} {
		if got := testutil.ToFloat64(counterOf(t, e.prom, "meshflows_dns_truncated_total", transport)); got < 1 {
			t.Errorf("meshflows_dns_truncated_total{transport=%q} = %v, want the truncations counted", transport, got)
		}
	}
	// Go's resolver follows TC to TCP and gets the records.
	_, srvs, err := e.resolver().LookupSRV(context.Background(), "", "", name)
	if err != nil || len(srvs) < 500 {
		t.Errorf("LookupSRV: %d records, %v", len(srvs), err)
	}
}

// counterOf is the counter name{transport} gathered from reg, as a collector testutil reads.
func counterOf(t *testing.T, reg *prometheus.Registry, name, transport string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "transport" && l.GetValue() == transport {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
}

// TestStaleBoundIsChosen: the decisive pair for DNS names, on an injected clock. A registry
// outage: a name server at the default settings answers its names from the last-known-good
// view past 10 minutes; one given --max-stale 30s answers SERVFAIL past 30 s and answers
// again once the registry is back (how soon is logged).
func TestStaleBoundIsChosen(t *testing.T) {
	clk := &testtool.OffsetClock{}
	var down atomic.Bool
	front := func(e *env, c *discovery.Config) {
		f := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			e.reg.Config.Handler.ServeHTTP(w, r)
		}))
		t.Cleanup(f.Close)
		c.Registries, c.Now = []string{f.URL}, clk.Now
	}
	open := newEnvVia(t, front)
	bounded := newEnvVia(t, func(e *env, c *discovery.Config) { front(e, c); c.StaleAllowance = 30 * time.Second })
	name := "egress-jms.svc.meshflows."
	for _, e := range []*env{open, bounded} {
		e.register(t, "jms-0", "egress-jms", "jms", "1.0.0", "http://127.0.0.1:7410", 0)
		registrytest.Until(t, "the name answers", func() bool { return len(srvTargets(t, e.resolver(), name)) == 1 })
	}
	down.Store(true)
	registrytest.Until(t, "both answer from the snapshot", func() bool {
		for _, e := range []*env{open, bounded} {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeTXT)
			r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).Exchange(m, e.addr)
			if err != nil || !strings.Contains(fmt.Sprint(r.Answer), "source=snapshot") {
				return false
			}
		}
		return true
	})
	clk.Advance(31 * time.Second)
	if m := bounded.exchange(t, name, dns.TypeSRV); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("with --max-stale 30s, 31 s into the outage: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	clk.Advance(11 * time.Minute)
	if m := open.exchange(t, name, dns.TypeSRV); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("at the default, 11 min into the outage: %s %v, want the last-known-good answer", dns.RcodeToString[m.Rcode], m.Answer)
	}
	down.Store(false)
	back := time.Now()
	registrytest.Until(t, "the bounded server answers again", func() bool {
		return bounded.exchange(t, name, dns.TypeSRV).Rcode == dns.RcodeSuccess
	})
	t.Logf("answered again %s after the registry's return", time.Since(back).Round(time.Millisecond)) // measured, not asserted
}
