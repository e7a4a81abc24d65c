package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// RegistryConfig configures a load run against a registry.
type RegistryConfig struct {
	// URL is the registry's base URL, e.g. http://127.0.0.1:7400.
	URL string
	// Instances to register (default 1,000), each with three capabilities, in services of
	// ServiceSize instances (default 100).
	Instances   int
	ServiceSize int
	// Concurrency of the register, heartbeat and discovery phases (default 32).
	Concurrency int
	// Queries is the number of discovery queries for one service (default 2,000).
	Queries int
	// QueryConcurrency of the discovery phase (default Concurrency); 1 measures unloaded
	// latency.
	QueryConcurrency int
	// Changes is the number of deregistrations timed until a long-polling watcher sees them
	// (default 200, at most Instances).
	Changes int
	// OpTimeout bounds one request (default 10 s).
	OpTimeout time.Duration
	// Client is the HTTP client (default: one with enough idle connections).
	Client *http.Client
	// ServerPID, when set, is the registry's process on this machine: each phase then
	// reports the server's CPU time per operation, read from /proc/PID/stat — the figure that
	// says how good the server is when the load driver shares its cores.
	ServerPID int
	// EtcdEndpoints, when set, are the client URLs of an etcd the same workload then runs
	// against, after the registry, for a comparison from one run; EtcdPID is its process
	// (its CPU per operation, as ServerPID). Keys go under EtcdPrefix (default /bench/) and
	// leases last EtcdTTL (default 15 min).
	EtcdEndpoints []string
	EtcdPID       int
	EtcdPrefix    string
	EtcdTTL       time.Duration
	// FloorCommand, when set, starts a floor server (ServeFloor) for the kind given as its
	// last argument, reading its answers as JSON on its standard input and printing its URL
	// on the first line of its standard output. The registration, heartbeat and discovery
	// phases then run against each floor server, in a process of its own and measured as the
	// registry is, after the registry (and etcd): what a server that does no work costs on
	// this machine, from the same run.
	FloorCommand []string
}

func (c *RegistryConfig) setDefaults() {
	c.URL = strings.TrimRight(c.URL, "/")
	if c.Instances == 0 {
		c.Instances = 1000
	}
	if c.ServiceSize == 0 {
		c.ServiceSize = 100
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Queries == 0 {
		c.Queries = 2000
	}
	if c.QueryConcurrency == 0 {
		c.QueryConcurrency = c.Concurrency
	}
	if c.Changes == 0 {
		c.Changes = 200
	}
	c.Changes = min(c.Changes, c.Instances)
	if c.OpTimeout == 0 {
		c.OpTimeout = 10 * time.Second
	}
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = "/bench/"
	}
	if c.EtcdTTL == 0 {
		c.EtcdTTL = 15 * time.Minute
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.Concurrency * 2, MaxIdleConns: c.Concurrency * 2}}
	}
}

// Validate reports a configuration that cannot run.
func (c *RegistryConfig) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("registry URL %q: want http(s)://host:port", c.URL)
	}
	for _, e := range c.EtcdEndpoints {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("etcd endpoint %q: want http(s)://host:port", e)
		}
	}
	if err := errors.Join(checkPID("--server-pid", c.ServerPID), checkPID("--etcd-pid", c.EtcdPID)); err != nil {
		return err
	}
	if c.EtcdTTL < time.Second {
		return fmt.Errorf("etcd lease TTL %s: at least 1s", c.EtcdTTL)
	}
	if c.Instances < 1 || c.Concurrency < 1 || c.ServiceSize < 1 || c.Queries < 0 || c.Changes < 0 {
		return errors.New("instances, concurrency and service size must be positive; queries and changes not negative")
	}
	return nil
}

// RegistryReport is the outcome of RunRegistry.
type RegistryReport struct {
	URL         string  `json:"url"`
	Instances   int     `json:"instances"`
	Concurrency int     `json:"concurrency"`
	Phases      []Phase `json:"phases"`
	// Warnings say what makes the figures doubtful (for example leases that ended while the
	// run was still registering).
	Warnings []string `json:"warnings,omitempty"`
	// Etcd is the same workload against a raw etcd in the same run (with EtcdEndpoints).
	Etcd *EtcdReport `json:"etcd,omitempty"`
	// Floor is the registration, heartbeat and discovery phases against servers that do no
	// work, in the same run (with FloorCommand).
	Floor []FloorReport `json:"floor,omitempty"`
}

// EtcdReport is the etcd side of a comparison run.
type EtcdReport struct {
	Endpoints []string `json:"endpoints"`
	Phases    []Phase  `json:"phases"`
}

type benchInstance struct {
	id, service string
	req         *apiv1.RegisterRequest
	value       string       // the registration document, for etcd
	handle      atomic.Int64 // the registry's generation, or the etcd lease
}

// target is what a load run drives: the registry over HTTP, or a raw etcd.
type target interface {
	register(ctx context.Context, in *benchInstance) error
	heartbeat(ctx context.Context, in *benchInstance) error
	// discover returns how many instances of service it finds.
	discover(ctx context.Context, service string) (int, error)
	deregister(ctx context.Context, in *benchInstance) error
	// watch arms a watcher of service and returns a function that waits for the next change.
	watch(ctx context.Context, service string) (func() error, error)
}

// RunRegistry registers cfg.Instances instances, heartbeats each once, runs discovery
// queries for one service, times deregistrations until a watcher sees each, and finally
// deregisters what it registered — against the registry, then, with cfg.EtcdEndpoints,
// the same workload against a raw etcd (lease + put, keep-alive, range, watch). Every loop
// is bounded by its counts and by ctx.
func RunRegistry(ctx context.Context, cfg RegistryConfig) (*RegistryReport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := &RegistryReport{URL: cfg.URL, Instances: cfg.Instances, Concurrency: cfg.Concurrency}
	rt, err := newRegistryTarget(cfg, cfg.URL)
	if err != nil {
		return nil, err
	}
	rt.keep = len(cfg.FloorCommand) > 0
	rep.Phases, err = runWorkload(ctx, cfg, rt, cfg.ServerPID)
	if w, ok := leaseWarning(rep.Phases, time.Duration(rt.leaseTTL.Load())*time.Second); ok {
		rep.Warnings = append(rep.Warnings, w)
	}
	if err != nil {
		return rep, err
	}
	if len(cfg.EtcdEndpoints) > 0 {
		if rep.Etcd, err = runEtcd(ctx, cfg); err != nil {
			return rep, err
		}
	}
	if rt.keep {
		rep.Floor, err = runFloors(ctx, cfg, rt.answers)
	}
	return rep, err
}

// runEtcd runs the workload against the raw etcd of cfg.
func runEtcd(ctx context.Context, cfg RegistryConfig) (*EtcdReport, error) {
	et, err := newEtcdTarget(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer et.close()
	rep := &EtcdReport{Endpoints: cfg.EtcdEndpoints}
	rep.Phases, err = runWorkload(ctx, cfg, et, cfg.EtcdPID)
	return rep, err
}

// runWorkload runs the phases against t; pid is the server process whose CPU is measured.
func runWorkload(ctx context.Context, cfg RegistryConfig, t target, pid int) ([]Phase, error) {
	insts := benchInstances(cfg, "b")
	d := &driver{cfg: cfg, pid: pid}
	phases, err := d.exchanges(ctx, t, insts)
	if err != nil {
		return phases, err
	}
	phases = append(phases, d.propagation(ctx, t, insts[:cfg.Changes]))
	phases = append(phases, d.parallel(ctx, "deregister", len(insts)-cfg.Changes, func(ctx context.Context, i int) error {
		return t.deregister(ctx, insts[cfg.Changes+i])
	}))
	return phases, nil
}

// benchInstances returns cfg.Instances instances, named after run (its prefix, then the time).
func benchInstances(cfg RegistryConfig, prefix string) []*benchInstance {
	run := prefix + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	insts := make([]*benchInstance, cfg.Instances)
	for i := range insts {
		insts[i] = newBenchInstance(run, i, cfg.ServiceSize)
	}
	return insts
}

// exchanges runs the phases of single exchanges against t: registration, heartbeat and
// discovery (of the first instance's service). Every registration failing ends it with an
// error after the first.
func (d *driver) exchanges(ctx context.Context, t target, insts []*benchInstance) ([]Phase, error) {
	phases := []Phase{d.parallel(ctx, "register", len(insts), func(ctx context.Context, i int) error {
		return t.register(ctx, insts[i])
	})}
	if p := phases[0]; p.Errors == p.Ops+p.Errors {
		return phases, fmt.Errorf("every registration failed: %s", p.FirstError)
	}
	phases = append(phases, d.parallel(ctx, "heartbeat", len(insts), func(ctx context.Context, i int) error {
		return t.heartbeat(ctx, insts[i])
	}))
	service := insts[0].service
	want := min(d.cfg.ServiceSize, len(insts))
	phases = append(phases, d.parallelN(ctx, "discovery", d.cfg.Queries, d.cfg.QueryConcurrency, func(ctx context.Context, _ int) error {
		got, err := t.discover(ctx, service)
		if err == nil && got != want {
			err = fmt.Errorf("discovery returned %d entries, want %d", got, want)
		}
		return err
	}))
	return phases, nil
}

func newBenchInstance(run string, i, serviceSize int) *benchInstance {
	in := &benchInstance{id: fmt.Sprintf("%s-%d", run, i), service: fmt.Sprintf("%s-svc-%d", run, i/serviceSize)}
	req := apiv1.RegisterRequest{
		InstanceID: in.id, ServiceName: in.service, ServiceVersion: "1.4.2",
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", 20000+i%40000), Zone: "a",
		Capabilities: []apiv1.Capability{
			{CapabilityID: "bench.read", CapabilityVersion: "2.0.0", ContractSchemaVersion: "1.0", Provider: "grpc",
				Metadata: json.RawMessage(`{"owner":"team-bench","build":"1234"}`)},
			{CapabilityID: "bench.write", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http",
				Metadata: json.RawMessage(`{"path":"/v1/orders"}`)},
			{CapabilityID: "bench.audit", CapabilityVersion: "1.3.0", ContractSchemaVersion: "1.0", Provider: "kafka"},
		},
	}
	in.req = &req
	doc, _ := json.Marshal(req) // the same document etcd stores
	in.value = string(doc)
	return in
}

// leaseWarning says when the registration phase (the first) lasted the registry's lease TTL
// or longer (0: not known): the first instances' leases ended before their heartbeat, so the
// heartbeat figures are not those of a healthy fleet.
func leaseWarning(phases []Phase, ttl time.Duration) (string, bool) {
	if ttl <= 0 || len(phases) == 0 || phases[0].Duration < ttl {
		return "", false
	}
	return fmt.Sprintf("registering took %s, longer than the registry's lease TTL (%s): the first instances' leases ended before their heartbeat (restart the registry with a longer --lease-ttl, or run fewer --instances)",
		phases[0].Duration.Round(time.Second), ttl), true
}

// registryTarget drives a registry through its HTTP API.
type registryTarget struct {
	c        *client.Client
	timeout  time.Duration
	leaseTTL atomic.Int64 // seconds, as the registry told the registrations
	// keep has the first answer of each kind kept in answers, for the floor servers: each
	// field is written once, under its Once.
	keep                       bool
	answers                    FloorAnswers
	registered, renewed, found sync.Once
}

// newRegistryTarget returns the target of the registry at url.
func newRegistryTarget(cfg RegistryConfig, url string) (*registryTarget, error) {
	c, err := client.New(client.Config{Registries: []string{url}, HTTPClient: cfg.Client, Timeout: cfg.OpTimeout})
	if err != nil {
		return nil, err
	}
	return &registryTarget{c: c, timeout: cfg.OpTimeout}, nil
}

// keepAnswer keeps, when r keeps answers, the first answer in *to: the JSON of v, or v
// itself when it is the answer's bytes.
func (r *registryTarget) keepAnswer(once *sync.Once, to *[]byte, v any) {
	if !r.keep {
		return
	}
	once.Do(func() {
		if b, ok := v.([]byte); ok {
			*to = b
			return
		}
		*to, _ = json.Marshal(v) // an answer the client decoded encodes again
	})
}

func (r *registryTarget) register(ctx context.Context, in *benchInstance) error {
	resp, err := r.c.Register(ctx, in.req)
	if err != nil {
		return err
	}
	in.handle.Store(resp.Generation)
	r.leaseTTL.Store(resp.LeaseTTLSeconds)
	r.keepAnswer(&r.registered, &r.answers.Register, resp)
	return nil
}

func (r *registryTarget) heartbeat(ctx context.Context, in *benchInstance) error {
	resp, err := r.c.Heartbeat(ctx, in.id, &apiv1.HeartbeatRequest{Generation: in.handle.Load(), Health: apiv1.HealthOK})
	if err == nil {
		r.keepAnswer(&r.renewed, &r.answers.Heartbeat, resp)
	}
	return err
}

func (r *registryTarget) query(service string) url.Values {
	return url.Values{"capability_id": {"bench.read"}, "service_name": {service}}
}

func (r *registryTarget) discover(ctx context.Context, service string) (int, error) {
	// Count the entries instead of decoding them: the load generator shares the machine
	// with the registry and must not be the bottleneck.
	raw, err := r.c.Raw(ctx, client.Request{Method: http.MethodGet, Path: apiv1.PathCapabilities, Query: r.query(service), Timeout: r.timeout})
	if err != nil {
		return 0, err
	}
	r.keepAnswer(&r.found, &r.answers.Discovery, raw)
	// removals the registry reports during its warm-up come after the entries
	entries, _, _ := bytes.Cut(raw, []byte(`"removed":`))
	return bytes.Count(entries, []byte(`"instance_id"`)), nil
}

func (r *registryTarget) deregister(ctx context.Context, in *benchInstance) error {
	return r.c.Deregister(ctx, in.id, in.handle.Load())
}

func (r *registryTarget) watch(ctx context.Context, service string) (func() error, error) {
	q := r.query(service)
	cur, err := r.c.Capabilities(ctx, q, client.Poll{})
	if err != nil {
		return nil, err
	}
	seen := make(chan error, 1)
	go func() {
		next, err := r.c.Capabilities(ctx, q, client.Poll{Epoch: cur.RegistryEpoch, Index: cur.Revision, Wait: 30 * time.Second})
		if err == nil && next.Revision == cur.Revision {
			err = errors.New("the long poll ended without a change")
		}
		seen <- err
	}()
	// Let the poll reach the server and park before the change; the latency is measured
	// from the change, so this pause is not part of it.
	time.Sleep(20 * time.Millisecond)
	return func() error { return <-seen }, nil
}

type driver struct {
	cfg RegistryConfig
	pid int // the server process measured (0: none)
}

// parallel runs op for 0..n-1 on cfg.Concurrency workers and times each call.
func (d *driver) parallel(ctx context.Context, name string, n int, op func(ctx context.Context, i int) error) Phase {
	return d.parallelN(ctx, name, n, d.cfg.Concurrency, op)
}

// parallelN is parallel on workers workers.
func (d *driver) parallelN(ctx context.Context, name string, n, workers int, op func(ctx context.Context, i int) error) (p Phase) {
	m := startMeter(d.pid)
	defer func() { m.stop(&p) }()
	rec := newRecorder(name, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, max(n, 1)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				start := time.Now()
				err := op(ctx, i)
				rec.record(time.Since(start), err)
			}
		})
	}
	wg.Wait()
	return rec.phase()
}

// propagation deregisters each instance in turn and times how long a watcher of the
// service takes to see the change.
func (d *driver) propagation(ctx context.Context, t target, insts []*benchInstance) (p Phase) {
	m := startMeter(d.pid)
	defer func() { m.stop(&p) }()
	rec := newRecorder("propagation", len(insts))
	for _, in := range insts {
		if ctx.Err() != nil {
			break
		}
		wait, err := t.watch(ctx, in.service)
		if err != nil {
			rec.record(0, err)
			continue
		}
		start := time.Now()
		if err := t.deregister(ctx, in); err != nil {
			wait()
			rec.record(0, err)
			continue
		}
		err = wait()
		rec.record(time.Since(start), err)
	}
	return rec.phase()
}
