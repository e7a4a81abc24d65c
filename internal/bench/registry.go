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
}

type benchInstance struct {
	id, service string
	req         *apiv1.RegisterRequest
	generation  atomic.Int64
}

// RunRegistry registers cfg.Instances instances, heartbeats each once, runs discovery
// queries for one service, times deregistrations until a long-polling watcher sees each,
// and finally deregisters what it registered. Every loop is bounded by its counts and by ctx.
func RunRegistry(ctx context.Context, cfg RegistryConfig) (*RegistryReport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	run := "b" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	insts := make([]*benchInstance, cfg.Instances)
	for i := range insts {
		insts[i] = newBenchInstance(run, i, cfg.ServiceSize)
	}
	rep := &RegistryReport{URL: cfg.URL, Instances: cfg.Instances, Concurrency: cfg.Concurrency}
	c, err := client.New(client.Config{Registries: []string{cfg.URL}, HTTPClient: cfg.Client, Timeout: cfg.OpTimeout})
	if err != nil {
		return nil, err
	}
	d := &driver{cfg: cfg, c: c}

	rep.Phases = append(rep.Phases, d.parallel(ctx, "register", len(insts), func(ctx context.Context, i int) error {
		resp, err := d.c.Register(ctx, insts[i].req)
		if err != nil {
			return err
		}
		insts[i].generation.Store(resp.Generation)
		return nil
	}))
	if p := rep.Phases[0]; p.Errors == p.Ops+p.Errors {
		return rep, fmt.Errorf("every registration failed: %s", p.FirstError)
	}
	rep.Phases = append(rep.Phases, d.parallel(ctx, "heartbeat", len(insts), func(ctx context.Context, i int) error {
		_, err := d.c.Heartbeat(ctx, insts[i].id, &apiv1.HeartbeatRequest{Generation: insts[i].generation.Load(), Health: apiv1.HealthOK})
		return err
	}))
	target := insts[0].service
	query := url.Values{"capability_id": {"bench.read"}, "service_name": {target}}
	want := min(cfg.ServiceSize, cfg.Instances)
	rep.Phases = append(rep.Phases, d.parallelN(ctx, "discovery", cfg.Queries, cfg.QueryConcurrency, func(ctx context.Context, _ int) error {
		// Count the entries instead of decoding them: the load generator shares the machine
		// with the registry and must not be the bottleneck.
		raw, err := d.c.Raw(ctx, client.Request{Method: http.MethodGet, Path: apiv1.PathCapabilities, Query: query, Timeout: cfg.OpTimeout})
		if err != nil {
			return err
		}
		if got := bytes.Count(raw, []byte(`"instance_id"`)); got != want {
			return fmt.Errorf("discovery returned %d entries, want %d", got, want)
		}
		return nil
	}))
	rep.Phases = append(rep.Phases, d.watch(ctx, query, insts[:cfg.Changes]))
	rep.Phases = append(rep.Phases, d.parallel(ctx, "deregister", len(insts)-cfg.Changes, func(ctx context.Context, i int) error {
		in := insts[cfg.Changes+i]
		return d.c.Deregister(ctx, in.id, in.generation.Load())
	}))
	return rep, nil
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
	return in
}

type driver struct {
	cfg RegistryConfig
	c   *client.Client
}

// parallel runs op for 0..n-1 on cfg.Concurrency workers and times each call.
func (d *driver) parallel(ctx context.Context, name string, n int, op func(ctx context.Context, i int) error) Phase {
	return d.parallelN(ctx, name, n, d.cfg.Concurrency, op)
}

// parallelN is parallel on workers workers.
func (d *driver) parallelN(ctx context.Context, name string, n, workers int, op func(ctx context.Context, i int) error) (p Phase) {
	cpu := startCPU(d.cfg.ServerPID)
	defer func() { cpu.stop(&p) }()
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

// watch deregisters each instance in turn and times how long a long-polling watcher of the
// query takes to see the change: the propagation latency.
func (d *driver) watch(ctx context.Context, query url.Values, insts []*benchInstance) (p Phase) {
	cpu := startCPU(d.cfg.ServerPID)
	defer func() { cpu.stop(&p) }()
	rec := newRecorder("propagation", len(insts))
	for _, in := range insts {
		if ctx.Err() != nil {
			break
		}
		cur, err := d.c.Capabilities(ctx, query, client.Poll{})
		if err != nil {
			rec.record(0, err)
			continue
		}
		seen := make(chan error, 1)
		go func() {
			next, err := d.c.Capabilities(ctx, query, client.Poll{Epoch: cur.RegistryEpoch, Index: cur.Revision, Wait: 30 * time.Second})
			if err == nil && next.Revision == cur.Revision {
				err = errors.New("the long poll ended without a change")
			}
			seen <- err
		}()
		// Let the poll reach the server and park before the change; the latency is measured
		// from the deregistration, so this pause is not part of it.
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		if err := d.c.Deregister(ctx, in.id, in.generation.Load()); err != nil {
			<-seen
			rec.record(0, err)
			continue
		}
		err = <-seen
		rec.record(time.Since(start), err)
	}
	return rec.phase()
}
