// Package regions_test runs three regions on loopback — each a registry with two providers
// and a gateway, processes of the meshflows binary — and a three-member etcd cluster as the
// routing control, and checks every case of the regions contract from outside: which region
// served each request (X-MeshFlows-Region), and what failed.
package regions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

// dwell is the gateways' --region-return-dwell: long enough for the shares of a step to be
// measured within 2 points at the load the test sends.
const dwell = 8 * time.Second

// outage is how long region a's registry stays down (the contract's 10 minutes:
// MESHFLOWS_REGIONS_OUTAGE=10m).
func outage(t *testing.T) time.Duration {
	if s := os.Getenv("MESHFLOWS_REGIONS_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	return 20 * time.Second
}

// build compiles the meshflows binary once.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshflows")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/meshflows/meshflows/cmd/meshflows")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is a process of the stack.
type proc struct {
	cmd  *exec.Cmd
	once sync.Once
}

func (p *proc) kill() {
	p.once.Do(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
}

type stack struct {
	t   *testing.T
	bin string
	rc  []string // the routing control's client URLs
	dir string
	pki string // the CA and the certificates (meshflows certs)
}

// rcFlags are the routing-control flags of identity: its own client certificate.
func (s *stack) rcFlags(identity string) []string {
	s.t.Helper()
	cert := filepath.Join(s.pki, identity+".pem")
	if _, err := os.Stat(cert); err != nil {
		if out, err := exec.Command(s.bin, "certs", "issue", "--dir", s.pki, "--identity", identity).CombinedOutput(); err != nil {
			s.t.Fatalf("certs issue %s: %v\n%s", identity, err, out)
		}
	}
	return []string{"--routing-control", strings.Join(s.rc, ","), "--routing-control-ca", filepath.Join(s.pki, "ca.pem"),
		"--routing-control-cert", cert, "--routing-control-key", filepath.Join(s.pki, identity+"-key.pem")}
}

// start runs the binary with args until the test ends, and waits for url to answer.
func (s *stack) start(url string, args ...string) *proc {
	s.t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", args[0], time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stderr, cmd.Stdout = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	p := &proc{cmd: cmd}
	s.t.Cleanup(func() { p.kill(); logf.Close() })
	until(s.t, 30*time.Second, args[0]+" serves "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode < 500
	})
	return p
}

// region runs a registry with args (on port) and two jms providers.
func (s *stack) registry(name string, port int, extra ...string) *proc {
	args := append([]string{"registry", "--insecure", "--region", name, "--listen", addr(port), "--log-level", "warn"}, extra...)
	return s.start(url(port)+"/healthz", args...)
}

func (s *stack) provider(reg string, port int) *proc {
	return s.start(url(port)+"/healthz", "example-provider", "--kind", "jms", "--registry", reg, "--listen", addr(port), "--log-level", "warn")
}

func (s *stack) gateway(home string, reg string, port int, peers map[string]string, priority []string) *proc {
	policy := filepath.Join(s.dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("path_prefixes: {egress-jms: [/api/messaging/jms]}\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	args := []string{"gateway", "--insecure", "--registry", reg, "--listen", addr(port), "--policy", policy, "--log-level", "warn",
		"--region", home, "--region-priority", strings.Join(priority, ","), "--region-return-dwell", dwell.String()}
	for _, p := range priority {
		args = append(args, "--peer-registry", p+"="+peers[p])
	}
	args = append(args, s.rcFlags("gateway-"+home)...)
	return s.start(url(port)+apiv1.PathGatewayRegions, args...)
}

// regionalPublish is a one-step workflow: publish to the jms provider of whichever region.
const regionalPublish = `name: regional-publish
invocation: {type: http}
validation: {provider_strict: false}
steps:
  - id: publish
    type: service_call
    step_version: "1.1"
    capability: {id: messaging.publish, provider: jms, capability_version: ">=1.0 <2.0"}
    request: {destination: regions, payload_from: input}
    timeout: 5s
`

// orchestrator runs a regional orchestrator of home with regionalPublish published.
func (s *stack) orchestrator(home, reg string, port int, peers map[string]string, priority []string) string {
	args := []string{"orchestrator", "--insecure", "--registry", reg, "--listen", addr(port), "--log-level", "warn", "--workflows-dir", filepath.Join(s.dir, "orchestrator-"+home),
		"--region", home, "--region-priority", strings.Join(priority, ",")}
	for _, p := range priority {
		args = append(args, "--peer-registry", p+"="+peers[p])
	}
	args = append(args, s.rcFlags("orchestrator-"+home)...)
	s.start(url(port)+"/v1/workflows", args...)
	for _, call := range []struct{ path, ctype, body string }{
		{"/v1/workflows", "application/yaml", regionalPublish},
		{"/v1/workflows/regional-publish/publish", "", ""},
	} {
		resp, err := client.Post(url(port)+call.path, call.ctype, strings.NewReader(call.body))
		if err != nil {
			s.t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			s.t.Fatalf("POST %s: %s %s", call.path, resp.Status, body)
		}
	}
	return url(port)
}

// runOn runs regionalPublish on the orchestrator orch, and returns the instance its step
// called.
func runOn(t *testing.T, orch string) string {
	t.Helper()
	resp, err := client.Post(orch+"/v1/workflows/regional-publish/run", "application/json", strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var run apiv1.Run
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil || resp.StatusCode != http.StatusOK || len(run.Steps) != 1 {
		t.Fatalf("run: %s %v %+v", resp.Status, err, run)
	}
	return run.Steps[0].InstanceID
}

// xds runs a regional xDS server of home.
func (s *stack) xds(home, reg string, port int, peers map[string]string, priority []string) string {
	args := []string{"xds", "--insecure", "--registry", reg, "--listen", addr(port), "--log-level", "warn",
		"--region", home, "--region-priority", strings.Join(priority, ",")}
	for _, p := range priority {
		args = append(args, "--peer-registry", p+"="+peers[p])
	}
	args = append(args, s.rcFlags("xds-"+home)...)
	cmd := exec.Command(s.bin, args...)
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("xds-%d.log", time.Now().UnixNano())))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	p := &proc{cmd: cmd}
	s.t.Cleanup(func() { p.kill(); logf.Close() })
	return addr(port)
}

// eds asks the xDS server at target for the assignment of messaging.publish over one ADS
// stream and returns its localities as "PRIORITY REGION", in order, once want says they are
// what it waits for (or the last ones after 20 s).
func eds(t *testing.T, target string, want func([]string) bool) []string {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got = func() []string {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
			if err != nil {
				return nil
			}
			if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "regions-test"}, TypeUrl: resourcev3.EndpointType,
				ResourceNames: []string{"messaging.publish"}}); err != nil {
				return nil
			}
			resp, err := st.Recv()
			if err != nil {
				return nil
			}
			var out []string
			for _, r := range resp.GetResources() {
				var cla endpointv3.ClusterLoadAssignment
				if err := r.UnmarshalTo(&cla); err != nil {
					t.Fatal(err)
				}
				for _, l := range cla.GetEndpoints() {
					out = append(out, fmt.Sprintf("%d %s", l.GetPriority(), l.GetLocality().GetRegion()))
				}
			}
			return out
		}()
		if want(got) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
	return got
}

// region runs `meshflows region ARGS` against the routing control.
func (s *stack) region(args ...string) (string, error) {
	cmd := exec.Command(s.bin, append(append([]string{"region"}, args...), s.rcFlags("operator")...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
func url(port int) string  { return "http://" + addr(port) }

func until(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// record is one request through a gateway.
type record struct {
	at, end time.Time
	region  string
	code    int
}

// load sends publishes through one gateway from workers goroutines, each pausing pause
// between requests, until stopped, and keeps what happened.
type load struct {
	gw      string
	started time.Time
	mu      sync.Mutex
	recs    []record
	stop    chan struct{}
	wg      sync.WaitGroup
}

var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func startLoad(gw string, workers int, pause time.Duration) *load {
	l := &load{gw: gw, stop: make(chan struct{}), started: time.Now()}
	for range workers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				rec := record{at: start}
				resp, err := client.Post(gw+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"regions","payload":1}`))
				if err == nil {
					rec.code, rec.region = resp.StatusCode, resp.Header.Get("X-MeshFlows-Region")
					resp.Body.Close()
				}
				rec.end = time.Now()
				l.mu.Lock()
				l.recs = append(l.recs, rec)
				l.mu.Unlock()
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	return l
}

func (l *load) halt() { close(l.stop); l.wg.Wait() }

// since returns the records of requests started at or after from.
func (l *load) since(from time.Time) []record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []record
	for _, r := range l.recs {
		if !r.at.Before(from) {
			out = append(out, r)
		}
	}
	return out
}

func failed(recs []record) int {
	n := 0
	for _, r := range recs {
		if r.code != http.StatusAccepted {
			n++
		}
	}
	return n
}

func byRegion(recs []record) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		out[r.region]++
	}
	return out
}

// lastTo is when the last request served by region started (zero: none).
func lastTo(recs []record, region string) time.Time {
	var last time.Time
	for _, r := range recs {
		if r.region == region && r.at.After(last) {
			last = r.at
		}
	}
	return last
}

func status(t *testing.T, gw string) apiv1.GatewayRegions {
	t.Helper()
	resp, err := client.Get(gw + apiv1.PathGatewayRegions)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st apiv1.GatewayRegions
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// blackhole accepts connections and never answers: a region with no route to the others.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// TestThreeRegions runs the regions contract's cases on one stack, in an order where each
// leaves the stack as the next needs it.
func TestThreeRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three regions of processes and a three-member etcd cluster")
	}
	s := &stack{t: t, bin: build(t), dir: t.TempDir()}
	if d := os.Getenv("MESHFLOWS_REGIONS_LOGS"); d != "" { // keep the processes' logs there
		s.dir = d
	}
	// the routing control takes clients with a certificate of the CA only (mTLS): operators
	// and gateways each have their own
	s.pki = filepath.Join(s.dir, "pki")
	if out, err := exec.Command(s.bin, "certs", "init", "--dir", s.pki).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	cl := etcdtest.StartCluster(t, 3, etcdtest.ClientTLS(transport.TLSInfo{CertFile: filepath.Join(s.pki, "server.pem"),
		KeyFile: filepath.Join(s.pki, "server-key.pem"), TrustedCAFile: filepath.Join(s.pki, "ca.pem"), ClientCertAuth: true}))
	s.rc = cl.Endpoints
	for _, r := range []string{"a", "b", "c"} {
		if out, err := s.region("on", r, "--reason", "setup"); err != nil {
			t.Fatalf("region on %s: %v\n%s", r, err, out)
		}
	}
	if out, err := s.region("configure", "--change-min-interval", "1s", "--min-regions-on", "1", "--reason", "a test changes regions often"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// region b's registry keeps its state in etcd (--store etcd); a's and c's in memory
	storeB := etcdtest.Start(t)
	regs := map[string]string{}
	regProcs := map[string]*proc{}
	regPorts := map[string]int{}
	provs := map[string][]*proc{}
	instances := map[string][]string{} // each region's providers' instance ids

	for _, r := range []string{"a", "b", "c"} {
		regPorts[r] = freeport.Port(t)
		regs[r] = url(regPorts[r])
		var extra []string
		if r == "b" {
			extra = []string{"--store", "etcd", "--etcd-endpoints", storeB.Endpoint}
		}
		regProcs[r] = s.registry(r, regPorts[r], extra...)
		for range 2 {
			port := freeport.Port(t)
			provs[r] = append(provs[r], s.provider(regs[r], port))
			instances[r] = append(instances[r], "egress-jms-"+strconv.Itoa(port))
		}
	}
	priority := map[string][]string{"a": {"b", "c"}, "b": {"c", "a"}, "c": {"a", "b"}}
	gws := map[string]string{}
	for _, r := range []string{"a", "b", "c"} {
		port := freeport.Port(t)
		s.gateway(r, regs[r], port, regs, priority[r])
		gws[r] = url(port)
	}
	orch := s.orchestrator("a", regs["a"], freeport.Port(t), regs, priority["a"])
	xdsA := s.xds("a", regs["a"], freeport.Port(t), regs, priority["a"])
	loads := map[string]*load{}
	for _, r := range []string{"a", "b", "c"} {
		until(t, 30*time.Second, "gateway "+r+" publishes in its region", func() bool {
			resp, err := client.Post(gws[r]+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"regions","payload":1}`))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusAccepted && resp.Header.Get("X-MeshFlows-Region") == r
		})
		loads[r] = startLoad(gws[r], 2, 20*time.Millisecond)
	}
	t.Cleanup(func() {
		for _, l := range loads {
			l.halt()
		}
	})
	// while the providers of a region are admitted, its pool passes through panic (one of
	// two in rotation) and spills, as it should: wait for the steady state
	until(t, 30*time.Second, "every gateway serving only its region for 2 s", func() bool {
		for r, l := range loads {
			recs := l.since(time.Now().Add(-2 * time.Second))
			if time.Since(l.started) < 2*time.Second || byRegion(recs)[r] != len(recs) {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second)

	t.Run("each region serves its own traffic", func(t *testing.T) {
		// the orchestrator reads through its cache (30 s): a's pool, not ready while its
		// providers were admitted, may have been read before they were
		until(t, 45*time.Second, "the orchestrator of a calling a's providers", func() bool { return slices.Contains(instances["a"], runOn(t, orch)) })
		// the xDS server of a: a's endpoints at priority 0, then b's, then c's
		want := []string{"0 a", "0 a", "1 b", "1 b", "2 c", "2 c"}
		if got := eds(t, xdsA, func(got []string) bool { return slices.Equal(got, want) }); !slices.Equal(got, want) {
			t.Errorf("xDS of a: localities %v, want %v", got, want)
		}
		from := time.Now().Add(-2 * time.Second)
		for r, l := range loads {
			recs := l.since(from)
			if got := byRegion(recs); got[r] != len(recs) || failed(recs) > 0 {
				t.Errorf("gateway %s: %v, %d failed", r, got, failed(recs))
				for _, x := range recs {
					if x.region != r {
						t.Logf("  %s to %s (%d)", x.at.Format("15:04:05.000"), x.region, x.code)
					}
				}
			}
		}
	})

	t.Run("a region with no route to the others routes its own traffic", func(t *testing.T) {
		hole := blackhole(t)
		port := freeport.Port(t)
		start := time.Now()
		s.gateway("c", regs["c"], port, map[string]string{"a": hole, "b": hole}, []string{"a", "b"})
		t.Logf("gateway with unreachable peers serving after %s", time.Since(start).Round(time.Millisecond))
		until(t, 20*time.Second, "the isolated gateway publishes", func() bool {
			resp, err := client.Post(url(port)+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"regions","payload":1}`))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusAccepted
		})
		l := startLoad(url(port), 2, 10*time.Millisecond)
		time.Sleep(3 * time.Second)
		l.halt()
		recs := l.since(time.Time{})
		var durs []time.Duration
		for _, r := range recs {
			durs = append(durs, r.end.Sub(r.at))
		}
		slices.Sort(durs)
		p99 := durs[len(durs)*99/100]
		t.Logf("%d requests, %v, p99 %s", len(recs), byRegion(recs), p99)
		if got := byRegion(recs); got["c"] != len(recs) || failed(recs) > 0 {
			t.Errorf("%v, %d failed", got, failed(recs))
		}
		if p99 > 250*time.Millisecond {
			t.Errorf("p99 %s: the request path waits on something", p99)
		}
	})

	t.Run("region off a", func(t *testing.T) {
		if out, err := s.region("off", "a", "--reason", "drill: region off"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		off := time.Now()
		time.Sleep(3 * time.Second)
		for r, l := range loads {
			recs := l.since(off)
			last := lastTo(recs, "a")
			if !last.IsZero() {
				t.Logf("gateway %s: last request to a %s after region off", r, last.Sub(off).Round(time.Millisecond))
			}
			if !last.IsZero() && last.Sub(off) > 2*time.Second {
				t.Errorf("gateway %s sent to a %s after region off", r, last.Sub(off))
			}
			if n := failed(recs); n > 0 {
				t.Errorf("gateway %s: %d failed requests", r, n)
			}
		}
		if got := byRegion(loads["a"].since(off.Add(2 * time.Second))); got["a"] > 0 || got["b"] == 0 || got["c"] > 0 {
			t.Errorf("gateway a after region off: %v, want b only", got)
		}
		if id := runOn(t, orch); !slices.Contains(instances["b"], id) {
			t.Errorf("with a off, the orchestrator of a called %s, not one of b's %v", id, instances["b"])
		}
		want := []string{"0 b", "0 b", "1 c", "1 c"}
		if got := eds(t, xdsA, func(got []string) bool { return slices.Equal(got, want) }); !slices.Equal(got, want) {
			t.Errorf("xDS of a with a off: localities %v, want %v", got, want)
		}
	})

	t.Run("region on a: the way back is capped", func(t *testing.T) {
		heavy := startLoad(gws["a"], 6, 0)
		defer heavy.halt()
		time.Sleep(500 * time.Millisecond)
		if out, err := s.region("on", "a", "--reason", "drill over"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// the steps as gateway a shows them, polled
		type step struct {
			share float64
			since time.Time
		}
		var steps []step
		deadline := time.Now().Add(time.Duration(len([]float64{.01, .05, .25, .5})+2) * (dwell + 2*time.Second))
		for time.Now().Before(deadline) {
			st := status(t, gws["a"]).Regions[0]
			if (len(steps) == 0 && st.Share > 0) || (len(steps) > 0 && steps[len(steps)-1].share != st.Share) {
				since := st.StepSince
				if !st.Ramping {
					since = time.Now()
				}
				steps = append(steps, step{st.Share, since})
				if st.Share == 1 {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		var shares []float64
		for _, s := range steps {
			shares = append(shares, s.share)
		}
		t.Logf("steps %v", shares)
		if want := []float64{0.01, 0.05, 0.25, 0.5, 1}; !slices.Equal(shares, want) {
			t.Fatalf("steps %v, want %v", shares, want)
		}
		for i, s := range steps[:len(steps)-1] {
			end := steps[i+1].since
			if d := end.Sub(s.since); d < dwell {
				t.Errorf("step %v held %s, under the dwell %s", s.share, d, dwell)
			}
			// the requests well inside the step (the poll sees a step up to 50 ms late)
			recs := heavy.since(s.since.Add(300 * time.Millisecond))
			var in []record
			for _, r := range recs {
				if r.end.Before(end.Add(-100 * time.Millisecond)) {
					in = append(in, r)
				}
			}
			got := byRegion(in)
			share := float64(got["a"]) / float64(len(in))
			t.Logf("step %v: %d requests, a's share %.4f (%v)", s.share, len(in), share, got)
			if share < s.share-0.02 || share > s.share+0.02 {
				t.Errorf("step %v: a's share %.4f, beyond ±2 points", s.share, share)
			}
			if n := failed(in); n > 0 {
				t.Errorf("step %v: %d failed", s.share, n)
			}
		}
	})

	t.Run("the last region on cannot be switched off", func(t *testing.T) {
		time.Sleep(1100 * time.Millisecond) // the change interval since a's
		for _, r := range []string{"b", "c"} {
			if out, err := s.region("off", r, "--reason", "drill: leave a alone"); err != nil {
				t.Fatalf("off %s: %v\n%s", r, err, out)
			}
		}
		for _, force := range []bool{false, true} {
			args := []string{"off", "a", "--reason", "drill: the last one"}
			if force {
				args = append(args, "--force")
			}
			out, err := s.region(args...)
			if err == nil || !strings.Contains(strings.ToUpper(out), apiv1.CodeRegionUnsafe) {
				t.Errorf("force %v: %v\n%s", force, err, out)
			}
		}
		out, err := s.region("status", "-o", "json", "--audit", "2")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var st apiv1.RegionStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !slices.Equal(st.On, []string{"a"}) || len(st.Audit) != 2 || st.Audit[0].Outcome != "refused" || st.Audit[1].Outcome != "refused" || !st.Audit[1].Force ||
			st.Audit[1].By != "operator" || st.Regions["b"].By != "operator" {
			t.Errorf("status after the refusals: %+v", st)
		}
		time.Sleep(1100 * time.Millisecond)
		for _, r := range []string{"b", "c"} {
			if out, err := s.region("on", r, "--reason", "drill over"); err != nil {
				t.Fatalf("on %s: %v\n%s", r, err, out)
			}
		}
		// b and c come back at their own gateways over the dwell steps
		until(t, time.Duration(5)*(dwell+2*time.Second), "b and c back at their whole share", func() bool {
			return status(t, gws["b"]).Regions[0].Share == 1 && status(t, gws["c"]).Regions[0].Share == 1
		})
	})

	t.Run("region a's registry killed", func(t *testing.T) {
		regProcs["a"].kill()
		down := time.Now()
		d := outage(t)
		time.Sleep(d)
		recs := loads["a"].since(down)
		t.Logf("registry a down %s: gateway a %d requests, %v, %d failed; a's view %s", d, len(recs), byRegion(recs), failed(recs), status(t, gws["a"]).Regions[0].ViewSource)
		if got := byRegion(recs); got["a"] != len(recs) || failed(recs) > 0 {
			t.Errorf("gateway a with its registry down: %v, %d failed", got, failed(recs))
		}
		regProcs["a"] = s.registry("a", regPorts["a"])
		until(t, 60*time.Second, "gateway a's view fresh again", func() bool { return status(t, gws["a"]).Regions[0].ViewSource == "fresh" })
	})

	t.Run("every provider of a killed", func(t *testing.T) {
		// the providers are back in the restarted registry (they find out at their next
		// heartbeat), and in rotation
		until(t, 90*time.Second, "a's providers registered again", func() bool {
			resp, err := client.Get(regs["a"] + apiv1.PathServices)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var c apiv1.CatalogResponse
			return json.NewDecoder(resp.Body).Decode(&c) == nil && len(c.Instances) == 2
		})
		until(t, 60*time.Second, "gateway a serving in a", func() bool {
			recs := loads["a"].since(time.Now().Add(-time.Second))
			return len(recs) > 0 && byRegion(recs)["a"] == len(recs)
		})
		for _, p := range provs["a"] {
			p.kill()
		}
		lost := time.Now()
		time.Sleep(7 * time.Second)
		recs := loads["a"].since(lost)
		last := lastTo(recs, "a")
		var failedAfter int
		for _, r := range recs {
			if r.code != http.StatusAccepted {
				failedAfter++
			}
		}
		lastSaid := "none after the kill"
		if !last.IsZero() {
			lastSaid = last.Sub(lost).Round(time.Millisecond).String() + " after the kill"
		}
		t.Logf("providers of a killed: last request to a %s, %d of %d failed, %v", lastSaid, failedAfter, len(recs), byRegion(recs))
		if !last.IsZero() && last.Sub(lost) > 5*time.Second {
			t.Errorf("gateway a sent to a %s after its last provider died", last.Sub(lost))
		}
		if got := byRegion(loads["a"].since(lost.Add(5 * time.Second))); got["b"] == 0 || got["a"] > 0 {
			t.Errorf("gateway a past 5 s: %v, want b", got)
		}
		for _, r := range []string{"b", "c"} {
			if n := failed(loads[r].since(lost)); n > 0 {
				t.Errorf("gateway %s: %d failed", r, n)
			}
		}
	})

	t.Run("region on a while a fails: the way back is held", func(t *testing.T) {
		// a's providers are gone (the case before); two that answer 500 to half their
		// publishes take their place
		for range 2 {
			port := freeport.Port(t)
			s.start(url(port)+"/healthz", "example-provider", "--kind", "jms", "--registry", regs["a"], "--listen", addr(port),
				"--log-level", "warn", "--error-rate", "0.5")
		}
		until(t, 30*time.Second, "gateway a serving in a again", func() bool {
			recs := loads["a"].since(time.Now().Add(-500 * time.Millisecond))
			return byRegion(recs)["a"] > 0
		})
		if out, err := s.region("off", "a", "--reason", "drill: a fails"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		time.Sleep(1100 * time.Millisecond)
		heavy := startLoad(gws["a"], 6, 0)
		defer heavy.halt()
		if out, err := s.region("on", "a", "--reason", "drill: back too early"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		until(t, 5*time.Second, "a on its way back at gateway a", func() bool { return status(t, gws["a"]).Regions[0].Ramping })
		time.Sleep(2*dwell + time.Second)
		st := status(t, gws["a"]).Regions[0]
		t.Logf("a after %s on its way back: share %v, step %d, held %v, outlier %v, %d requests, %d errors", 2*dwell+time.Second, st.Share, st.Step, st.Held, st.Outlier, st.Requests, st.Errors)
		if !st.Held || st.Step != 0 || st.Share != 0.01 {
			t.Errorf("a's way back was not held at its first step: %+v", st)
		}
		// out again, for the next case: nothing goes to a
		time.Sleep(time.Second)
		if out, err := s.region("off", "a", "--reason", "drill over"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for r, gw := range gws {
			until(t, 5*time.Second, "gateway "+r+" sees a off", func() bool {
				for _, reg := range status(t, gw).Regions {
					if reg.Region == "a" {
						return !reg.On
					}
				}
				return false
			})
		}
	})

	t.Run("the routing control loses two of three members", func(t *testing.T) {
		before := map[string]map[string]bool{} // each gateway's switches before
		for r, gw := range gws {
			before[r] = map[string]bool{}
			for _, reg := range status(t, gw).Regions {
				before[r][reg.Region] = reg.On
			}
		}
		lead := cl.Leader()
		time.Sleep(time.Second) // past the requests a's last way back still had
		from := time.Now()
		cl.Kill((lead + 1) % 3)
		cl.Kill((lead + 2) % 3)
		for r, gw := range gws {
			until(t, 15*time.Second, "gateway "+r+" says the signal is stale", func() bool { return status(t, gw).Signal.Stale })
		}
		time.Sleep(2 * time.Second)
		for r, l := range loads {
			recs := l.since(from)
			st := status(t, gws[r])
			t.Logf("gateway %s without quorum: %v, %d failed, stale %v (%s)", r, byRegion(recs), failed(recs), st.Signal.Stale, st.Signal.Error)
			for _, reg := range st.Regions {
				if reg.On != before[r][reg.Region] {
					t.Errorf("gateway %s: region %s on %v without quorum, %v before", r, reg.Region, reg.On, before[r][reg.Region])
				}
			}
			if failed(recs) > 0 {
				t.Errorf("gateway %s: %d failed", r, failed(recs))
			}
		}
	})
}
