package messaging

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/provider"
	"go.opentelemetry.io/otel/trace"
)

// CapabilityID is the capability every messaging example offers.
const CapabilityID = "messaging.publish"

// ServiceVersion is the examples' service version.
const ServiceVersion = "0.1.3"

// Config configures a messaging provider.
type Config struct {
	// Kind is the provider name: "jms" or "rabbitmq". It names the service (egress-KIND),
	// the capability's provider and the API paths (/api/messaging/KIND/…).
	Kind string
	// InstanceID defaults to egress-KIND-<port of Endpoint>.
	InstanceID string
	// Endpoint is the URL the provider is reached at, as registered.
	Endpoint string
	Zone     string
	// Metadata is added to the capability's metadata (validate_supported is always set).
	Metadata map[string]any
	// Lint returns kind-specific diagnostics for a publish request (warnings, say).
	Lint func(req *PublishRequest) []apiv1.Diagnostic
	// Now is the clock of published_at (default time.Now).
	Now func() time.Time
}

// PublishRequest is the body of POST /api/messaging/KIND/publish and the request of an
// invocation of messaging.publish.
type PublishRequest struct {
	Destination string            `json:"destination"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// Message is a published message.
type Message struct {
	MessageID   string            `json:"message_id"`
	Destination string            `json:"destination"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	PublishedAt time.Time         `json:"published_at"`
}

// PublishResult is the answer to a publish.
type PublishResult struct {
	MessageID   string `json:"message_id"`
	Destination string `json:"destination"`
}

// Provider is one example messaging provider: its broker, HTTP surface and registration.
type Provider struct {
	cfg       Config
	published prometheus.Counter
	tracer    trace.Tracer // nil: no spans
	reg       *prometheus.Registry

	mu       sync.Mutex
	seq      int
	messages []Message

	agent atomic.Pointer[provider.Agent] // while Run keeps it registered

	healthInterval time.Duration // the manifest's health.interval (SetHealthInterval; default 1 s)

	faults   atomic.Pointer[Faults] // nil: none (SetFaults)
	injected prometheus.Counter

	// warm-up (SetWarmup): the provider registers not ready, and says it is ready warmup
	// after Run starts; a publish that arrives before is answered 503 and counted
	warmup      time.Duration
	ready       atomic.Bool
	beforeReady prometheus.Counter
}

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.Kind == "" || strings.ContainsAny(cfg.Kind, "/ ") {
		return nil, fmt.Errorf("messaging provider: kind %q", cfg.Kind)
	}
	if cfg.InstanceID == "" {
		port := "0"
		if i := strings.LastIndex(cfg.Endpoint, ":"); i >= 0 {
			port = cfg.Endpoint[i+1:]
		}
		cfg.InstanceID = "egress-" + cfg.Kind + "-" + port
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Provider{cfg: cfg, reg: prometheus.NewRegistry()}
	p.published = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meshflows", Subsystem: "example_provider",
		Name: "published_total", Help: "Messages published.", ConstLabels: prometheus.Labels{"kind": cfg.Kind}})
	p.injected = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meshflows", Subsystem: "example_provider",
		Name: "injected_faults_total", Help: "Publishes answered 500 on purpose (--error-rate).", ConstLabels: prometheus.Labels{"kind": cfg.Kind}})
	p.beforeReady = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meshflows", Subsystem: "example_provider",
		Name: "requests_before_ready_total", Help: "Publishes that arrived while the provider was still warming up (answered 503): with publish-when-ready, none should.", ConstLabels: prometheus.Labels{"kind": cfg.Kind}})
	p.reg.MustRegister(p.published, p.injected, p.beforeReady)
	p.ready.Store(true) // until a Run with a warm-up says otherwise
	if reg := p.Registration(); reg.Validate() != nil {
		err := reg.Validate()
		return nil, fmt.Errorf("messaging provider: %w", err)
	}
	return p, nil
}

// Metrics is the provider's own Prometheus registry, served at /metrics; give it to the
// agent's Config.Registerer so its metrics are served too.
func (p *Provider) Metrics() *prometheus.Registry { return p.reg }

func (p *Provider) serviceName() string { return "egress-" + p.cfg.Kind }

func (p *Provider) publishPath() string  { return "/api/messaging/" + p.cfg.Kind + "/publish" }
func (p *Provider) messagesPath() string { return "/api/messaging/" + p.cfg.Kind + "/messages" }

// Registration is what the provider registers: messaging.publish@1.0.0 and a manifest with
// its two routes.
func (p *Provider) Registration() apiv1.RegisterRequest {
	meta := map[string]any{"validate_supported": true, "validate_endpoint": apiv1.ValidatePath(CapabilityID),
		"max_payload_bytes": 1048576}
	for k, v := range p.cfg.Metadata {
		meta[k] = v
	}
	rawMeta, _ := json.Marshal(meta)
	return apiv1.RegisterRequest{
		InstanceID: p.cfg.InstanceID, ServiceName: p.serviceName(), ServiceVersion: ServiceVersion,
		Endpoint: p.cfg.Endpoint, Zone: p.cfg.Zone,
		Capabilities: []apiv1.Capability{{CapabilityID: CapabilityID, CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0",
			Provider: p.cfg.Kind, Metadata: rawMeta}},
		Manifest: &apiv1.Manifest{
			FARP:    apiv1.FARPVersion,
			Service: apiv1.ManifestService{Name: p.serviceName(), Instance: p.cfg.InstanceID, Version: ServiceVersion},
			// A short interval: the registry probes at it from the first probe on, and two ok probes
			// admit, so meshflows dev serves its providers within two seconds.
			Health: &apiv1.ManifestHealth{Path: "/healthz", Interval: p.interval(), UnhealthyAfter: apiv1.Int(3)},
			// The gateway refuses a larger publish itself (413), before it reaches us.
			Capabilities: &apiv1.ManifestCapabilities{MaxBodyBytes: apiv1.Int(MaxPublishBody)},
			Routes: []apiv1.ManifestRoute{
				{Path: p.publishPath(), Methods: []string{"POST"}, Schema: PublishSchemaPath},
				{Path: p.messagesPath(), Methods: []string{"GET"}, Idempotent: []string{"GET"}},
			},
		},
	}
}

// Handler serves the provider's whole HTTP surface.
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+p.publishPath(), p.handlePublish)
	mux.HandleFunc("GET "+p.messagesPath(), p.handleMessages)
	mux.Handle(apiv1.PathCapabilityPrefix, provider.NewHandler(provider.Capability{ID: CapabilityID, Validate: p.validate, Invoke: p.invoke}))
	mux.HandleFunc("GET "+PublishSchemaPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/schema+json")
		io.WriteString(w, publishSchema)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		provider.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "instance_id": p.cfg.InstanceID})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /admin/health", p.handleHealth)
	mux.HandleFunc("POST /admin/faults", p.handleFaults)
	mux.HandleFunc("/", provider.NotRouted(mux))
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// every answer names the instance that gave it: a consumer (or a drill) sees who served
		w.Header().Set("X-Instance", p.cfg.InstanceID)
		mux.ServeHTTP(w, r)
	})
	return httpapi.Traced(p.tracer, "", named) // the gateway's or the orchestrator's trace goes on here
}

// SetTracer makes Handler serve every request in a server span of tracer, continuing the
// caller's trace (nil: no spans). Call it before Run.
func (p *Provider) SetTracer(tracer trace.Tracer) { p.tracer = tracer }

// handleHealth sets what the provider's heartbeats report ({"health": "ok"|"degraded"|
// "failing"}), from loopback only: a user flips it to watch the registry lower the
// instance's weight (degraded) or withdraw it (failing).
func (p *Provider) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !loopbackOnly(w, r) {
		return
	}
	var body struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&body); err != nil {
		provider.WriteError(w, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, `want {"health": "ok"|"degraded"|"failing"}: %v`, err))
		return
	}
	a := p.agent.Load()
	if a == nil {
		provider.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "the provider is not running its registration agent"))
		return
	}
	if err := a.SetHealth(body.Health); err != nil {
		provider.WriteError(w, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "%v", err))
		return
	}
	provider.WriteJSON(w, http.StatusOK, map[string]string{"health": body.Health, "note": "sent with the next heartbeat"})
}

// PublishSchemaPath is where a provider serves the JSON Schema of its publish request, the
// reference its manifest's publish route carries.
const PublishSchemaPath = "/schemas/publish.json"

// publishSchema is the JSON Schema of PublishRequest.
const publishSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "publish request",
  "type": "object",
  "required": ["destination"],
  "properties": {
    "destination": {"type": "string", "minLength": 1},
    "payload": {},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}}
  }
}
`

// MaxPublishBody is the largest publish request the example providers read; a larger one is
// 413 PAYLOAD_TOO_LARGE.
const MaxPublishBody = 1 << 20

// SetWarmup makes the provider warm up for d when Run starts: it registers not ready
// (publish when ready: the registry answers it nowhere, not even as the first member of a
// brand-new service) and tells its agent it is ready once d has passed. 0, the default, is
// ready at once. Call it before Run.
func (p *Provider) SetWarmup(d time.Duration) { p.warmup = d }

// SetHealthInterval sets the health.interval its manifest declares (default 1 s), before Run:
// the registry probes at it, never at another.
func (p *Provider) SetHealthInterval(d time.Duration) { p.healthInterval = d }

// interval is the manifest's health.interval.
func (p *Provider) interval() string {
	if p.healthInterval <= 0 {
		return "1s"
	}
	return p.healthInterval.String()
}

// Ready reports whether the provider has finished warming up.
func (p *Provider) Ready() bool { return p.ready.Load() }

// RequestsBeforeReady is how many publishes arrived while the provider was warming up.
func (p *Provider) RequestsBeforeReady() int { return int(counterValue(p.beforeReady)) }

func (p *Provider) handlePublish(w http.ResponseWriter, r *http.Request) {
	if !p.ready.Load() {
		p.beforeReady.Inc()
		provider.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "warming up: not ready to publish yet"))
		return
	}
	var req PublishRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxPublishBody)).Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			provider.WriteError(w, apiv1.Errorf(http.StatusRequestEntityTooLarge, apiv1.CodePayloadTooLarge, "a publish request is at most %d bytes", mbe.Limit))
			return
		}
		provider.WriteError(w, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "body is not a publish request: %v", err))
		return
	}
	if err := p.fault(r.Context()); err != nil {
		provider.WriteError(w, err)
		return
	}
	res, err := p.Publish(&req)
	if err != nil {
		provider.WriteError(w, err)
		return
	}
	provider.WriteJSON(w, http.StatusAccepted, res)
}

func (p *Provider) handleMessages(w http.ResponseWriter, r *http.Request) {
	provider.WriteJSON(w, http.StatusOK, map[string][]Message{"messages": p.Messages(r.URL.Query().Get("destination"))})
}

// Publish stores a message; an empty destination is a 400 INVALID_REQUEST.
func (p *Provider) Publish(req *PublishRequest) (*PublishResult, error) {
	if strings.TrimSpace(req.Destination) == "" {
		return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "destination", Message: "must not be empty"}})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	m := Message{MessageID: p.cfg.Kind + "-" + strconv.Itoa(p.seq), Destination: req.Destination, Payload: req.Payload,
		Headers: req.Headers, PublishedAt: p.cfg.Now().UTC()}
	p.messages = append(p.messages, m)
	p.published.Inc()
	return &PublishResult{MessageID: m.MessageID, Destination: m.Destination}, nil
}

// Messages returns the messages published to destination (all when empty), oldest first.
func (p *Provider) Messages(destination string) []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []Message{}
	for _, m := range p.messages {
		if destination == "" || m.Destination == destination {
			out = append(out, m)
		}
	}
	return out
}

func (p *Provider) validate(_ context.Context, req *apiv1.ValidateRequest) ([]apiv1.Diagnostic, error) {
	var pr PublishRequest
	if len(req.Step.Request) > 0 {
		if err := json.Unmarshal(req.Step.Request, &pr); err != nil {
			return []apiv1.Diagnostic{{Severity: apiv1.SeverityError, Code: "REQUEST_NOT_AN_OBJECT",
				Message: "the step's request is not a publish request: " + err.Error(), Path: "request"}}, nil
		}
	}
	var diags []apiv1.Diagnostic
	if strings.TrimSpace(pr.Destination) == "" {
		diags = append(diags, apiv1.Diagnostic{Severity: apiv1.SeverityError, Code: "DESTINATION_REQUIRED",
			Message: "a destination is required", Path: "request.destination"})
	}
	if p.cfg.Lint != nil {
		diags = append(diags, p.cfg.Lint(&pr)...)
	}
	return diags, nil
}

func (p *Provider) invoke(ctx context.Context, req *apiv1.InvokeRequest) (any, error) {
	if err := p.fault(ctx); err != nil {
		return nil, err
	}
	var pr PublishRequest
	if len(req.Request) > 0 {
		if err := json.Unmarshal(req.Request, &pr); err != nil {
			return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "request", Message: "not a publish request: " + err.Error()}})
		}
	}
	if len(req.Payload) > 0 {
		pr.Payload = req.Payload
	}
	return p.Publish(&pr)
}

// Run serves the provider on ln and keeps it registered until ctx ends; then it
// deregisters first and stops serving after, so that no consumer is sent to a closed port.
func (p *Provider) Run(ctx context.Context, ln net.Listener, agentCfg provider.Config, logger *slog.Logger) error {
	agentCfg.Registration = p.Registration()
	if agentCfg.Registerer == nil {
		agentCfg.Registerer = p.reg
	}
	agentCfg.PublishWhenReady = true // registered not ready until the warm-up is over
	agent, err := provider.New(agentCfg)
	if err != nil {
		return err
	}
	p.agent.Store(agent)
	defer p.agent.Store(nil)
	p.ready.Store(p.warmup <= 0)
	warm := time.NewTimer(p.warmup)
	defer warm.Stop()
	warmed := make(chan struct{})
	defer func() { <-warmed }()
	go func() {
		defer close(warmed)
		select {
		case <-ctx.Done():
		case <-warm.C:
			p.ready.Store(true)
			agent.Ready()
			logger.Info("example provider ready", slog.String("instance_id", p.cfg.InstanceID), slog.Duration("warmup", p.warmup))
		}
	}()
	srv := &http.Server{Handler: httpapi.BodyTimeout(p.Handler(), httpapi.DefaultBodyTimeout), ReadHeaderTimeout: 10 * time.Second}
	// Serve until the agent has deregistered and drained (it returns after ctx ends), not
	// merely until ctx ends: traffic keeps coming while the gateways withdraw the instance.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- httpapi.Serve(serveCtx, srv, ln, httpapi.Shutdown{Timeout: 5 * time.Second}) }()
	agentErr := agent.Run(ctx)
	stopServing()
	serveErr := <-served
	logger.Info("example provider stopped", slog.String("instance_id", p.cfg.InstanceID))
	return errors.Join(agentErr, serveErr)
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
