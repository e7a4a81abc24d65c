package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/deadline"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/tracing"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes    = 64 << 10
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultGzipMinBytes is the smallest answer sent gzip-compressed. Below it, on a local
	// network, decompressing costs a Go client more (37 µs for a 39 KB answer) than the bytes
	// saved; Kubernetes' API server draws its line at 128 KB for the same reason.
	DefaultGzipMinBytes = 64 << 10
	// MaxWait bounds a long poll's wait (docs/reference/api.md: at most 5 minutes).
	MaxWait = 5 * time.Minute
	// DefaultWait is a long poll's wait when the request names an index but no wait.
	DefaultWait = 30 * time.Second
	// DefaultPollSpacing is Config.PollSpacing's default: a view's answer takes the registry
	// at most about a tenth of its time to build, however fast the view changes.
	DefaultPollSpacing = 10
	// DefaultMaxAnswerInstances is Config.MaxAnswerInstances's default.
	DefaultMaxAnswerInstances = 10_000
	// DefaultMaxDeltaBytes is Config.MaxDeltaBytes's default.
	DefaultMaxDeltaBytes = 256 << 20
)

// Config configures a Server. The zero value gets the defaults.
type Config struct {
	// MaxBodyBytes limits request bodies (default 64 KiB); larger ones get 413.
	MaxBodyBytes int64
	// BodyTimeout bounds reading a request body (default 10 s): a client that sends its body
	// slowly gets 408 instead of holding a connection and a handler.
	BodyTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown (default 10 s).
	ShutdownTimeout time.Duration
	// Logger receives server errors; nil is silent.
	Logger *slog.Logger
	// Registerer receives the server's metrics; Gatherer, when set, is served at /metrics.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Now is the clock (default time.Now).
	Now func() time.Time
	// GzipMinBytes is the smallest discovery or routes answer sent gzip-compressed to a
	// client that accepts it (default DefaultGzipMinBytes; negative: never compressed).
	GzipMinBytes int64
	// MaxAnswerInstances bounds the entries of an unfiltered discovery answer (no
	// capability_id, no service_name) sent whole: a larger one must be paged (limit,
	// page_token) and is refused with 400 naming them. Each distinct such query would
	// otherwise build and keep an answer of the whole fleet (37 MB at 100,000 instances).
	// Delta watches (delta=true), which the DNS and xDS servers keep on the whole fleet, are
	// not bound by it (MaxDeltaBytes bounds what their answers keep). Default
	// DefaultMaxAnswerInstances; negative: no bound.
	MaxAnswerInstances int
	// MaxDeltaBytes bounds the encoded delta-watch answers kept for the watchers that ask
	// the same query at the same revision: a reset is the whole answer, and delta watches are
	// not bound by MaxAnswerInstances, so each distinct query that resets would otherwise keep
	// its whole answer. Past the bound the least recently asked queries are dropped (their
	// next watcher has its answer built again). Default DefaultMaxDeltaBytes.
	MaxDeltaBytes int64
	// PollSpacing spaces the answers long polls get for a view that is costly to build: a
	// long poll that would have the answer built anew, within PollSpacing times as long as
	// its last build took after that build, is held until then (within its wait), and the
	// changes meanwhile come in one answer (default DefaultPollSpacing; negative: never).
	// A whole-fleet watcher (a DNS or xDS server) asks again at each change, and a
	// registration storm changes the fleet thousands of times a second: unspaced, a watcher
	// that asks again at once had the registry build the fleet's answer 60 times while
	// 30,000 instances registered, renewed and left; spaced, 11. Answers built in under a
	// millisecond of CPU (BuildClock) are never held for, and no hold is longer than 5 s.
	PollSpacing float64
	// Sleep waits for d or until ctx ends (default a timer): the hold of PollSpacing.
	Sleep func(ctx context.Context, d time.Duration)
	// BuildClock times the builds of answers for PollSpacing. Nil (the default) times them by
	// the CPU time of the thread that builds (the Linux thread clock; the wall clock Now
	// elsewhere): on a busy machine a build's wall time is mostly waiting for a core, and
	// holding every poll for ten times that held a third of the answers for 180-320 ms, some
	// for seconds. Tests set a clock of their own.
	BuildClock func() time.Duration

	// Authenticator, when set, makes every endpoint but /healthz, /readyz and /metrics
	// require a credential and Policy decide what each identity may do. Nil runs the
	// registry open (--insecure).
	Authenticator Authenticator
	Policy        Policy
	// Delegators are the identities that may act on incidents on behalf of another (the
	// console's, --console-identity): the registry then judges, and records, the identity
	// they name (apiv1.HeaderActingFor). Anyone else naming one is refused.
	Delegators []string
	// Limiter rate-limits registrations per identity (nil: unlimited).
	Limiter Limiter
	// Audit, when set, receives one line per request to every /v1 endpoint.
	Audit Auditor
	// Incidents, when set, is served at /v1/incidents (nil: 501).
	Incidents *incident.Log
	// Journal, when set, is served at /v1/events (nil: 501).
	Journal *journal.Journal
	// History, when set, is served at /v1/metrics/history: the last hour of the registry's
	// key series (nil: 501).
	History MetricsHistory
	// Tracing, when on, serves every API request in a server span named by its route
	// (register, heartbeat — sampled —, deregister and the drain handshake, discovery).
	Tracing *tracing.Tracing
}

// MetricsHistory is the registry's recent history of its key series (history.History).
type MetricsHistory interface {
	Snapshot() *apiv1.MetricsHistory
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = 10 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.GzipMinBytes == 0 {
		c.GzipMinBytes = DefaultGzipMinBytes
	}
	if c.PollSpacing == 0 {
		c.PollSpacing = DefaultPollSpacing
	}
	if c.MaxAnswerInstances == 0 {
		c.MaxAnswerInstances = DefaultMaxAnswerInstances
	}
	if c.Sleep == nil {
		c.Sleep = func(ctx context.Context, d time.Duration) { deadline.Sleep(ctx, d) } // a hold cut short by its request's end is over
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	if c.Authenticator != nil && c.Policy == nil {
		return errors.New("an authenticator needs a policy (--rbac)")
	}
	if c.MaxDeltaBytes < 0 {
		return fmt.Errorf("max delta cache bytes %d is negative", c.MaxDeltaBytes)
	}
	if c.MaxBodyBytes < 1024 {
		return fmt.Errorf("max body bytes %d is under 1024", c.MaxBodyBytes)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown timeout %s is negative", c.ShutdownTimeout)
	}
	if math.IsNaN(c.PollSpacing) || math.IsInf(c.PollSpacing, 0) {
		return fmt.Errorf("poll spacing %v is not a number", c.PollSpacing)
	}
	return nil
}

// Server serves the registry API of one Registry.
type Server struct {
	cfg       Config
	reg       *registry.Registry
	mux       *http.ServeMux
	cache     *answerCache
	deltas    *deltaLog
	pages     *pageStore // listings of paged requests (limit, page_token)
	queries   queryMemo  // discovery query strings already parsed
	metrics   *metrics
	startedAt time.Time
}

// New returns a Server for reg.
func New(reg *registry.Registry, cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, reg: reg, mux: http.NewServeMux(), cache: newAnswerCache(cfg.Now, cfg.BuildClock), deltas: newDeltaLog(cfg.MaxDeltaBytes), pages: newPageStore(), metrics: m, startedAt: cfg.Now()}
	s.deltas.held, s.deltas.evicted = func(n int64) { m.deltaHeld.Set(float64(n)) }, m.deltaEvicted.Inc
	s.routes()
	return s, nil
}

// ServeHTTP serves the registry API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Run listens on addr and serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends. On shutdown it first wakes every long poll (they
// answer with the current state), then waits up to ShutdownTimeout for requests to finish.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	return httpapi.Serve(ctx, srv, ln, httpapi.Shutdown{Timeout: s.cfg.ShutdownTimeout, CancelRequests: true})
}
