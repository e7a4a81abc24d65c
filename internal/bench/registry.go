package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
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
	body        []byte
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
	d := &driver{cfg: cfg}

	rep.Phases = append(rep.Phases, d.parallel(ctx, "register", len(insts), func(ctx context.Context, i int) error {
		var resp apiv1.RegisterResponse
		if err := d.do(ctx, http.MethodPost, apiv1.PathRegister, insts[i].body, 200, &resp); err != nil {
			return err
		}
		insts[i].generation.Store(resp.Generation)
		return nil
	}))
	if p := rep.Phases[0]; p.Errors == p.Ops+p.Errors {
		return rep, fmt.Errorf("every registration failed: %s", p.FirstError)
	}
	rep.Phases = append(rep.Phases, d.parallel(ctx, "heartbeat", len(insts), func(ctx context.Context, i int) error {
		body := []byte(`{"generation":` + strconv.FormatInt(insts[i].generation.Load(), 10) + `,"health":"ok"}`)
		return d.do(ctx, http.MethodPut, apiv1.HeartbeatPath(insts[i].id), body, 200, nil)
	}))
	target := insts[0].service
	query := apiv1.PathCapabilities + "?capability_id=bench.read&service_name=" + target
	want := min(cfg.ServiceSize, cfg.Instances)
	rep.Phases = append(rep.Phases, d.parallelN(ctx, "discovery", cfg.Queries, cfg.QueryConcurrency, func(ctx context.Context, _ int) error {
		// Count the entries instead of decoding them: the load generator shares the machine
		// with the registry and must not be the bottleneck.
		var raw json.RawMessage
		if err := d.do(ctx, http.MethodGet, query, nil, 200, &raw); err != nil {
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
		return d.do(ctx, http.MethodDelete, apiv1.InstancePath(in.id)+"?"+apiv1.GenerationQuery(in.generation.Load()).Encode(), nil, 204, nil)
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
	in.body, _ = json.Marshal(req)
	return in
}

type driver struct {
	cfg RegistryConfig
}

// do sends one request and decodes a JSON answer into out (when not nil).
func (d *driver) do(ctx context.Context, method, path string, body []byte, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.OpTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.cfg.URL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d: %.200s", method, path, resp.StatusCode, b)
	}
	switch out := out.(type) {
	case nil:
		return nil
	case *json.RawMessage:
		*out = b
		return nil
	default:
		return json.Unmarshal(b, out)
	}
}

// parallel runs op for 0..n-1 on cfg.Concurrency workers and times each call.
func (d *driver) parallel(ctx context.Context, name string, n int, op func(ctx context.Context, i int) error) Phase {
	return d.parallelN(ctx, name, n, d.cfg.Concurrency, op)
}

// parallelN is parallel on workers workers.
func (d *driver) parallelN(ctx context.Context, name string, n, workers int, op func(ctx context.Context, i int) error) Phase {
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
func (d *driver) watch(ctx context.Context, query string, insts []*benchInstance) Phase {
	rec := newRecorder("propagation", len(insts))
	for _, in := range insts {
		if ctx.Err() != nil {
			break
		}
		var cur apiv1.DiscoveryResponse
		if err := d.do(ctx, http.MethodGet, query, nil, 200, &cur); err != nil {
			rec.record(0, err)
			continue
		}
		seen := make(chan error, 1)
		go func() {
			var next apiv1.DiscoveryResponse
			err := d.do(ctx, http.MethodGet, query+"&index="+strconv.FormatInt(cur.Revision, 10)+"&wait=30s", nil, 200, &next)
			if err == nil && next.Revision == cur.Revision {
				err = errors.New("the long poll ended without a change")
			}
			seen <- err
		}()
		// Let the poll reach the server and park before the change; the latency is measured
		// from the deregistration, so this pause is not part of it.
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		err := d.do(ctx, http.MethodDelete, apiv1.InstancePath(in.id)+"?"+apiv1.GenerationQuery(in.generation.Load()).Encode(), nil, 204, nil)
		if err != nil {
			<-seen
			rec.record(0, err)
			continue
		}
		err = <-seen
		rec.record(time.Since(start), err)
	}
	return rec.phase()
}
