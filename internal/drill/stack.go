package drill

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/faultproxy"
)

// Port plan of a drill: offsets from Config.BasePort, every one on 127.0.0.1.
const (
	portRegistry     = 0
	portGateway      = 1 // and 2
	portDNS          = 3
	portDNSMetrics   = 4
	portXDS          = 5
	portXDSMetrics   = 6
	portOrchestrator = 7
	portPrometheus   = 8
	portImpostor     = 9
	portProxy        = 10 // 10..10+len(instances)-1: the endpoints instances register
	portProvider     = 30 // 30..: where the providers listen, behind their proxies
	portPlanSize     = 50
)

// instance is one example provider of the drill's fleet, behind its fault proxy.
type instance struct {
	ID    string // egress-KIND-<proxy port>
	Kind  string // jms (3 per zone) or rabbitmq (2 per zone)
	Zone  string
	Proxy *faultproxy.Proxy
	port  int // where the provider listens
	proc  *process
}

// process is one meshflows process the drill started.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Stack is the drill's throwaway deployment: a registry in mTLS with an RBAC file, two
// gateways, the DNS and xDS servers, an orchestrator and 15 example providers in three zones,
// each behind a fault proxy; every process is owned by the stack and stopped by Close.
type Stack struct {
	cfg       Config
	dir       string
	certs     string
	rbac      string
	procs     []*process
	mu        sync.Mutex
	Instances []*instance
	Registry  string   // https://127.0.0.1:N
	Gateways  []string // https://127.0.0.1:N
	DNS       string   // 127.0.0.1:N
	XDS       string
	Admin     *http.Client // the drill's identity: admin, gateway admin, xDS
	Anonymous *http.Client // TLS with no client certificate
	TLS       *tls.Config  // the drill's
	// Prometheus is the base URL of the Prometheus the drill started ("" when none is installed).
	Prometheus string

	hook        *webhook // the owners' webhook
	owners      string   // the owners file the registry is given
	proxyCtx    context.Context
	proxyCancel context.CancelFunc
	proxyWG     sync.WaitGroup
}

func (s *Stack) addr(offset int) string {
	return "127.0.0.1:" + strconv.Itoa(s.cfg.BasePort+offset)
}

// identities of the drill's deployment, each with a client certificate.
var identities = []string{"egress-jms", "egress-rabbitmq", "gateway", "dns", "xds", "orchestrator", "drill", "prometheus"}

const rbacPolicy = `# the drill's deployment: each identity only what it needs
identities:
  egress-jms: [provider-jms]
  egress-rabbitmq: [provider-rabbitmq]
  gateway: [gateway]
  dns: [consumer]
  xds: [consumer]
  orchestrator: [orchestrator]
  prometheus: [consumer]
  drill: [operator]
roles:
  provider-jms: {capabilities: ["messaging.publish"], path_prefixes: ["/api/messaging/jms"]}
  provider-rabbitmq: {capabilities: ["messaging.publish"], path_prefixes: ["/api/messaging/rabbitmq"]}
  gateway: {discover: true, gateway: true}
  consumer: {discover: true}
  orchestrator: {discover: true}
  operator: {admin: true, gateway_admin: true, discover: true, xds: true, workflows: [read, write, run]}
`

const gatewayPolicy = "path_prefixes: {egress-jms: [/api/messaging/jms], egress-rabbitmq: [/api/messaging/rabbitmq]}\n"

// Start brings the stack up: certificates and the RBAC file in a directory of its own, the
// registry, the consumers, then the fleet; it returns once every instance is in rotation at
// every gateway. On error, whatever started is stopped.
func Start(ctx context.Context, cfg Config) (s *Stack, err error) {
	s = &Stack{cfg: cfg}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
			s = nil
		}
	}()
	if err := checkPorts(cfg.BasePort); err != nil {
		return s, err
	}
	s.dir, err = os.MkdirTemp("", "meshflows-drill-")
	if err != nil {
		return s, err
	}
	s.certs = filepath.Join(s.dir, "certs")
	now := time.Now()
	if err := auth.InitDir(s.certs, now); err != nil {
		return s, fmt.Errorf("certificates: %w", err)
	}
	for _, id := range identities {
		if _, _, err := auth.IssueInDir(s.certs, id, "", now, 0); err != nil {
			return s, fmt.Errorf("certificate of %s: %w", id, err)
		}
	}
	s.rbac = filepath.Join(s.dir, "rbac.yaml")
	policy := filepath.Join(s.dir, "gateway-policy.yaml")
	if err := errors.Join(os.WriteFile(s.rbac, []byte(rbacPolicy), 0o600), os.WriteFile(policy, []byte(gatewayPolicy), 0o600)); err != nil {
		return s, err
	}
	s.TLS, err = client.TLSConfig(s.cert("ca"), s.cert("drill"), s.key("drill"))
	if err != nil {
		return s, err
	}
	s.Admin = client.HTTPClient(s.TLS)
	s.Admin.Timeout = 5 * time.Second
	anon := s.TLS.Clone()
	anon.Certificates = nil
	s.Anonymous = client.HTTPClient(anon)
	s.Anonymous.Timeout = 5 * time.Second

	s.proxyCtx, s.proxyCancel = context.WithCancel(context.WithoutCancel(ctx))
	if s.owners, err = s.startWebhook(); err != nil {
		return s, fmt.Errorf("owners' webhook: %w", err)
	}
	s.Registry = "https://" + s.addr(portRegistry)
	if err := s.startRegistry(ctx); err != nil {
		return s, err
	}
	for i := range 2 {
		gw := s.addr(portGateway + i)
		if _, err := s.spawn(ctx, fmt.Sprintf("gateway-%d", i+1), "https://"+gw+"/v1/gateway/routes", "gateway", "--listen", gw,
			"--tls-cert", s.cert("server"), "--tls-key", s.key("server"), "--client-ca", s.cert("ca"), "--rbac", s.rbac, "--policy", policy,
			"--registry", s.Registry, "--registry-ca", s.cert("ca"), "--registry-cert", s.cert("gateway"), "--registry-key", s.key("gateway")); err != nil {
			return s, err
		}
		s.Gateways = append(s.Gateways, "https://"+gw)
	}
	s.DNS = s.addr(portDNS)
	if _, err := s.spawn(ctx, "dns", "http://"+s.addr(portDNSMetrics)+"/metrics", "dns", "--listen", s.DNS, "--metrics-listen", s.addr(portDNSMetrics),
		"--registry", s.Registry, "--registry-ca", s.cert("ca"), "--registry-cert", s.cert("dns"), "--registry-key", s.key("dns")); err != nil {
		return s, err
	}
	s.XDS = s.addr(portXDS)
	if _, err := s.spawn(ctx, "xds", "http://"+s.addr(portXDSMetrics)+"/metrics", "xds", "--listen", s.XDS, "--metrics-listen", s.addr(portXDSMetrics),
		"--tls-cert", s.cert("server"), "--tls-key", s.key("server"), "--client-ca", s.cert("ca"), "--rbac", s.rbac, "--policy", policy,
		"--registry", s.Registry, "--registry-ca", s.cert("ca"), "--registry-cert", s.cert("xds"), "--registry-key", s.key("xds")); err != nil {
		return s, err
	}
	if _, err := s.spawn(ctx, "orchestrator", "https://"+s.addr(portOrchestrator)+"/healthz", "orchestrator", "--listen", s.addr(portOrchestrator),
		"--tls-cert", s.cert("server"), "--tls-key", s.key("server"), "--client-ca", s.cert("ca"), "--rbac", s.rbac,
		"--registry", s.Registry, "--registry-ca", s.cert("ca"), "--registry-cert", s.cert("orchestrator"), "--registry-key", s.key("orchestrator")); err != nil {
		return s, err
	}
	zones := []string{"a", "b", "c"}
	n := 0
	for _, kind := range []struct {
		name    string
		perZone int
	}{{"jms", 3}, {"rabbitmq", 2}} {
		for _, z := range zones {
			for range kind.perZone {
				in, err := s.startInstance(ctx, kind.name, z, n)
				if err != nil {
					return s, err
				}
				s.Instances = append(s.Instances, in)
				n++
			}
		}
	}
	if err := s.startPrometheus(ctx); err != nil {
		return s, err
	}
	return s, nil
}

func (s *Stack) cert(id string) string { return filepath.Join(s.certs, id+".pem") }
func (s *Stack) key(id string) string  { return filepath.Join(s.certs, id+"-key.pem") }

func (s *Stack) startRegistry(ctx context.Context) error {
	args := []string{"registry", "--listen", s.addr(portRegistry), "--tls-cert", s.cert("server"), "--tls-key", s.key("server"),
		"--client-ca", s.cert("ca"), "--rbac", s.rbac, "--audit-log", filepath.Join(s.dir, "audit.jsonl"),
		"--lease-ttl", s.cfg.LeaseTTL.String(), "--heartbeat-interval", s.cfg.HeartbeatInterval.String(),
		// every trial's quarantine is told, not only the first of the hour
		"--owners", s.owners, "--notify-every", "1s"}
	if s.cfg.Quick { // the way back of an evacuation in 30 s, not 3 minutes
		args = append(args, "--return-dwell", "10s")
	}
	if s.cfg.Store == "etcd" {
		args = append(args, "--store", "etcd", "--etcd-endpoints", s.cfg.EtcdEndpoints)
	}
	_, err := s.spawn(ctx, "registry", s.Registry+"/healthz", args...)
	return err
}

// startInstance starts the n-th provider of the fleet behind its fault proxy.
func (s *Stack) startInstance(ctx context.Context, kind, zone string, n int) (*instance, error) {
	in := &instance{Kind: kind, Zone: zone, port: s.cfg.BasePort + portProvider + n}
	proxyAddr := s.addr(portProxy + n)
	in.ID = "egress-" + kind + "-" + strconv.Itoa(s.cfg.BasePort+portProxy+n)
	p, err := faultproxy.New(faultproxy.Config{Listen: proxyAddr, Upstream: "127.0.0.1:" + strconv.Itoa(in.port)})
	if err != nil {
		return nil, err
	}
	in.Proxy = p
	s.proxyWG.Go(func() { p.Run(s.proxyCtx) })
	in.proc, err = s.spawnProvider(ctx, in.ID, kind, zone, in.port, "http://"+proxyAddr)
	return in, err
}

// spawnProvider starts an example provider listening on port and registering endpoint.
func (s *Stack) spawnProvider(ctx context.Context, name, kind, zone string, port int, endpoint string) (*process, error) {
	listen := "127.0.0.1:" + strconv.Itoa(port)
	id := "egress-" + kind
	return s.spawn(ctx, name, "http://"+listen+"/healthz", "example-provider", "--kind", kind, "--zone", zone, "--listen", listen,
		"--advertise", endpoint, "--registry", s.Registry, "--ca", s.cert("ca"), "--tls-cert", s.cert(id), "--tls-key", s.key(id))
}

// spawn starts the meshflows process name with args and waits until ready answers 200.
func (s *Stack) spawn(ctx context.Context, name, ready string, args ...string) (*process, error) {
	logf, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	args = append(args, "--log-level", "warn")
	cmd := exec.Command(s.cfg.Executable, args...)
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	if err := s.waitReady(ctx, p, ready); err != nil {
		return p, err
	}
	return p, nil
}

func (s *Stack) waitReady(ctx context.Context, p *process, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := s.Admin.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start (%v): see %s", p.name, p.err, filepath.Join(s.dir, p.name+".log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after 30 s (%v): see %s", p.name, url, err, filepath.Join(s.dir, p.name+".log"))
		}
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and kills the process if it has not ended 10 s later.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot end
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// Close stops every process the stack started (providers first, the registry last), the
// proxies, and removes its directory unless Config.Keep.
func (s *Stack) Close() error {
	s.mu.Lock()
	procs := append([]*process(nil), s.procs...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].name == "registry" {
			continue
		}
		wg.Go(procs[i].stop)
	}
	wg.Wait()
	for _, p := range procs {
		p.stop()
	}
	if s.proxyCancel != nil {
		s.proxyCancel()
		s.proxyWG.Wait()
	}
	if s.dir != "" && !s.cfg.Keep {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// Dir is where the stack keeps its certificates, RBAC file, audit log and process logs.
func (s *Stack) Dir() string { return s.dir }

// checkPorts binds every port of the plan once, so that a busy one fails the drill at once.
func checkPorts(base int) error {
	if base < 1024 || base+portPlanSize > 65535 {
		return fmt.Errorf("--base-port %d: the plan needs %d..%d", base, base, base+portPlanSize)
	}
	for off := range portPlanSize {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
		if err != nil {
			return fmt.Errorf("port %d of the drill's plan: %w (pick another --base-port)", base+off, err)
		}
		ln.Close()
	}
	return nil
}

// restartRegistry starts the registry again after a kill.
func (s *Stack) restartRegistry(ctx context.Context) error { return s.startRegistry(ctx) }

// registryProc is the registry process running now.
func (s *Stack) registryProc() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.procs) - 1; i >= 0; i-- {
		if s.procs[i].name == "registry" {
			return s.procs[i]
		}
	}
	return nil
}
