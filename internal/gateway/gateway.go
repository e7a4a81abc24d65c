package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/endpoint"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/tracing"
	"github.com/meshflows/meshflows/routing"
)

// Config configures a Gateway.
type Config struct {
	// Discovery reads the registry's routes view (the gateway calls WatchRoutes on it).
	Discovery *discovery.Client
	// Static routes win over every dynamic claim.
	Static []routing.StaticRoute
	// Policy returns the path prefixes each service may claim; it is called at every
	// derivation, so a reloaded policy applies at the next one.
	Policy func() routing.Policy
	// PolicyCheck is how often the gateway checks whether Policy changed, and asks its
	// Transport to close upstream connections idle for too long (default 2 s).
	PolicyCheck time.Duration
	// Transport sends requests upstream (default: a tuned keep-alive transport).
	Transport http.RoundTripper
	// Tracing, when on, makes a server span of every proxied request (named by its route's
	// pattern) and a client span of every upstream attempt, and propagates the trace to the
	// provider (traceparent); nil or off traces nothing and costs nothing.
	Tracing *tracing.Tracing
	// UpstreamTimeout is how long the default Transport waits for an upstream's answer
	// headers once the request is written (default 30 s): past it the client gets 504.
	UpstreamTimeout time.Duration
	// Endpoints is the address policy of the default Transport: it does not connect to a
	// link-local or metadata address unless the policy allows its range.
	Endpoints endpoint.Policy
	// ID names the gateway in the drain handshake (default "gateway"); every gateway of a
	// fleet needs its own.
	ID string
	// AckInterval is how often the gateway repeats its acknowledgement, which keeps it
	// counted as live by the registry (default 10 s; it also acks after every new table, and
	// more often when the registry's answer asks for it).
	AckInterval time.Duration
	// MaxBufferedBody is the largest request body read whole before the request goes
	// upstream (default 1 MiB): a client that sends its body slowly holds no upstream
	// connection, and an idempotent request can be retried on another instance. Larger
	// bodies are streamed (and not retried).
	MaxBufferedBody int64
	// BodyTimeout bounds reading a buffered body (default 10 s; past it the client gets 408
	// and its connection is closed) and, for a streamed body, each wait for its next bytes.
	BodyTimeout time.Duration
	// MaxBodyBytes is the largest request body a route takes when its manifest declares no
	// capabilities.max_body_bytes (default DefaultMaxBodyBytes): a larger one is answered 413
	// before anything goes upstream, by its Content-Length or once that many bytes of a
	// chunked body arrived.
	MaxBodyBytes int64
	// MaxStale bounds, by path prefix, how old a last-known-good view the routes under the
	// prefix may be served from while the registry is unreachable (the policy file's
	// max_stale); a route's own max_stale (its manifest) applies too, and the strictest
	// wins. Past it the route answers 503 STALE_VIEW_EXPIRED with Retry-After; every other
	// route keeps serving.
	MaxStale map[string]time.Duration
	// PanicThreshold: a route with fewer than this share of its upstreams in rotation uses
	// all of them (default 0.5, as the registry's --panic-threshold).
	PanicThreshold float64
	// StateDir, when set, keeps the last routes view on disk (written atomically when the
	// table's inputs change, read at start): a gateway restarted while the registry is away
	// serves what it served before, marked X-Cache-Source: snapshot with its age.
	StateDir string
	// OutcomeWindow is how often the gateway reports its per-instance outcomes (ok,
	// errors, connect failures) to the registry as passive evidence (default 10 s; negative:
	// never).
	OutcomeWindow time.Duration
	// Reporter, when set, tells the registry about new route conflicts and rejected
	// manifests and about routes without an eligible upstream for a minute (a route
	// incident), checked every ReportInterval (default 5 s); the owner runs it.
	Reporter       *report.Reporter
	ReportInterval time.Duration
	// Admin authorises the admin endpoints: DELETE /v1/discovery/invalidate needs the
	// gateway_admin permission, and GET /v1/gateway/routes shows callers without it only a
	// summary. Nil leaves them open (meshflows dev, --insecure).
	Admin      Authorizer
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
	// RoutesVerifyEvery is how many row changes the incremental derivation applies between
	// two full derivations that check it (default DefaultRoutesVerifyEvery; negative: never).
	RoutesVerifyEvery int
}

// Authorizer says whether a request may do perm: the caller's identity, or a 401 or 403
// *apiv1.Error.
type Authorizer interface {
	Authorize(r *http.Request, perm string) (string, error)
}

// state is one derived table and what it was derived from.
type state struct {
	table     *routing.Table
	revision  int64
	epoch     string
	policy    string // fingerprint of the policy it was derived with
	derivedAt time.Time
	inputs    string // the manifests and public paths (by incarnation) and policy derived from
	serving   map[*routing.Entry]*serving
	// inflight counts the requests being served on this table (see Gateway.enter).
	inflight atomic.Int64
	// staticOnly: no routes view yet (the registry has not answered, nothing saved): only
	// the static routes are served, and other paths are 503, not 404.
	staticOnly bool
	// gone are earlier tables that held dynamic routes this one lacks, newest first, each
	// until its time: a request for such a route is 503 with Retry-After (its last upstream
	// went away), not 404 (it never existed).
	gone []goneTable
}

// goneTable is a table whose vanished routes answer 503 until until.
type goneTable struct {
	table *routing.Table
	until time.Time
}

// goneRouteKeep is how long a route whose last upstream went away answers 503, and
// maxGoneTables how many earlier tables are kept for that.
const (
	goneRouteKeep = 5 * time.Minute
	maxGoneTables = 8
)

// goneFrom returns the tables a state derived at now after prev keeps for vanished routes:
// prev's own, when t lacks a dynamic route of prev's, and those of prev's still in time.
func goneFrom(prev *state, t *routing.Table, now time.Time) []goneTable {
	if prev == nil {
		return nil
	}
	var out []goneTable
	if prev.table != t {
		type route struct{ key, method string }
		have := make(map[route]bool, len(t.Entries()))
		for _, e := range t.Entries() {
			have[route{e.Key, e.Method}] = true
		}
		for _, e := range prev.table.Entries() {
			if e.Source == "dynamic" && !have[route{e.Key, e.Method}] {
				out = append(out, goneTable{table: prev.table, until: now.Add(goneRouteKeep)})
				break
			}
		}
	}
	for _, g := range prev.gone {
		if len(out) < maxGoneTables && now.Before(g.until) {
			out = append(out, g)
		}
	}
	return out
}

// freshness is the source of the table and its age, refreshed by Run so that requests
// read one atomic instead of locking the discovery view.
type freshness struct {
	source discovery.Source
	age    time.Duration
	// validAt is when the view was last known valid (now - age at the update): a route's
	// max_stale is judged against it at each request, on the gateway's clock
	validAt time.Time
	header  string // X-Route-Table-Age value, when snapshot
	// expired: the registry has been away longer than the stale allowance (--max-stale), or
	// the view restored at start is older than that: dynamic routes answer 503.
	expired bool
}

// Gateway serves requests by the current table.
type Gateway struct {
	cfg     Config
	metrics *metrics
	health  *routeHealth // per route: requests and failures over 24 hours
	state   atomic.Pointer[state]
	proxy   *proxy
	admin   *http.ServeMux                         // the gateway's own endpoints (see adminRoutes)
	routes  atomic.Pointer[discovery.RoutesResult] // the inputs of the current table
	fresh   atomic.Pointer[freshness]
	ackNow  chan struct{} // capacity 1: a burst of new tables is one acknowledgement
	// retry (capacity 1): a request refused on its route's max_stale asks Run to ask the
	// registry again now, a second apart at most, so that the route serves again within a
	// second of the registry's return (the watch backs off up to 5 s between tries)
	retry chan struct{}

	// deriveMu makes derivations one at a time, so that a slower one never replaces the
	// table of a newer view.
	deriveMu sync.Mutex
	tables   *tables // the incremental derivation (under deriveMu)
	tableSeq int64   // counts the tables derived (under deriveMu)
	// retired are the replaced tables some request may still be served on, oldest first:
	// until they drain, the gateway acknowledges the revision of the oldest of them.
	retiredMu sync.Mutex
	retired   []*state

	talliesMu sync.Mutex
	tallies   map[incarnation]*tally // outcomes of the current window, per incarnation

	invalidateMu sync.Mutex
	lastRefetch  *refetch // the last invalidation's refetch (see Invalidate)

	reported reported // what reportTable last reported (Run's goroutine only)
}

// New returns a Gateway; it serves its static routes at once, and the routes the registry's
// manifests give once Run has a routes view (from the registry, or saved in StateDir).
func New(cfg Config) (*Gateway, error) {
	if cfg.Discovery == nil {
		return nil, errors.New("gateway: no discovery client")
	}
	if err := routing.ValidateStatic(cfg.Static); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if cfg.BodyTimeout < 0 || cfg.MaxBufferedBody < 0 || cfg.MaxBodyBytes < 0 || cfg.UpstreamTimeout < 0 {
		return nil, fmt.Errorf("gateway: body timeout %s, max buffered body %d, max body bytes %d and upstream timeout %s must not be negative",
			cfg.BodyTimeout, cfg.MaxBufferedBody, cfg.MaxBodyBytes, cfg.UpstreamTimeout)
	}
	if cfg.Policy == nil {
		cfg.Policy = func() routing.Policy { return routing.Policy{} }
	}
	if cfg.PolicyCheck == 0 {
		cfg.PolicyCheck = 2 * time.Second
	}
	if cfg.Transport == nil {
		cfg.Transport = NewTransportFor(cfg.Endpoints, cfg.UpstreamTimeout)
	}
	if cfg.ID == "" {
		cfg.ID = "gateway"
	}
	if cfg.AckInterval == 0 {
		cfg.AckInterval = 10 * time.Second
	}
	if cfg.OutcomeWindow == 0 {
		cfg.OutcomeWindow = 10 * time.Second
	}
	if cfg.PanicThreshold == 0 {
		cfg.PanicThreshold = 0.5
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = 10 * time.Second
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBufferedBody == 0 {
		cfg.MaxBufferedBody = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RoutesVerifyEvery == 0 {
		cfg.RoutesVerifyEvery = DefaultRoutesVerifyEvery
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = 5 * time.Second
	}
	g := &Gateway{cfg: cfg, ackNow: make(chan struct{}, 1), retry: make(chan struct{}, 1), tallies: map[incarnation]*tally{}}
	m, err := newMetrics(cfg.Registerer, g)
	if err != nil {
		return nil, err
	}
	g.metrics = m
	if g.health, err = newRouteHealth(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("register gateway metrics: %w", err)
	}
	g.proxy = newProxy(cfg.Transport, cfg.MaxBufferedBody, cfg.BodyTimeout, m, cfg.Logger, cfg.Now)
	g.proxy.maxBody = cfg.MaxBodyBytes
	if cfg.Tracing.On() {
		g.proxy.tracer, g.proxy.propagator = cfg.Tracing.Tracer, cfg.Tracing.Propagator
		g.proxy.failures = failureReports{reporter: cfg.Reporter, gateway: cfg.ID, now: cfg.Now, last: map[string]time.Time{}}
	}
	g.admin = g.adminRoutes()
	g.derive() // the static table, from the first second: it needs no registry
	return g, nil
}

// Run keeps the table current until ctx ends: a long-poll watch of the routes view, and a
// re-derivation when the policy changes.
func (g *Gateway) Run(ctx context.Context) error {
	if g.cfg.StateDir != "" {
		switch r, at, err := g.loadRoutes(); {
		case err != nil:
			g.cfg.Logger.Warn("the saved routes view is unreadable; starting without it", slog.Any("error", err))
		case r != nil && g.cfg.Discovery.RestoreRoutes(r, at):
			g.routes.Store(r)
			g.derive()
			g.cfg.Logger.Info("serving the saved routes view until the registry answers", slog.Time("saved_at", at),
				slog.Int64("registry_revision", r.Revision), slog.Int("manifests", len(r.Manifests)))
		}
	}
	done := make(chan error, 1)
	go func() {
		var saved string // the inputs last written to the state dir
		done <- g.cfg.Discovery.WatchRoutes(ctx, func(r *discovery.RoutesResult) {
			g.routes.Store(r)
			g.derive()
			if st := g.state.Load(); g.cfg.StateDir != "" && st != nil && st.inputs != saved {
				if err := g.saveRoutes(r); err != nil {
					g.cfg.Logger.Warn("saving the routes view failed", slog.String("state_dir", g.cfg.StateDir), slog.Any("error", err))
				} else {
					saved = st.inputs
				}
			}
		})
	}()
	retries := make(chan struct{})
	defer func() { <-retries }()
	go func() { // asks the registry again when a route refuses on its max_stale
		defer close(retries)
		for {
			select {
			case <-ctx.Done():
				return
			case <-g.retry:
			}
			if err := g.refetch(ctx); err == nil {
				g.updateFreshness()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	t := time.NewTicker(g.cfg.PolicyCheck)
	defer t.Stop()
	fresh := time.NewTicker(250 * time.Millisecond)
	defer fresh.Stop()
	var reports <-chan time.Time
	if g.cfg.Reporter != nil {
		t := time.NewTicker(g.cfg.ReportInterval)
		defer t.Stop()
		reports = t.C
	}
	ackEvery := g.cfg.AckInterval
	acks := time.NewTicker(ackEvery)
	defer acks.Stop()
	var drain <-chan time.Time // set while an older table still serves requests
	var outcomes <-chan time.Time
	if g.cfg.OutcomeWindow > 0 {
		t := time.NewTicker(g.cfg.OutcomeWindow)
		defer t.Stop()
		outcomes = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return <-done
		case <-outcomes:
			g.ReportOutcomes(ctx)
		case <-g.ackNow:
			drain = g.ackOrPoll(ctx, &ackEvery, acks)
		case <-acks.C:
			drain = g.ackOrPoll(ctx, &ackEvery, acks)
		case <-drain:
			drain = g.ackOrPoll(ctx, &ackEvery, acks)
		case <-fresh.C:
			g.updateFreshness()
		case <-reports:
			g.reportTable(g.cfg.Now())
		case <-t.C:
			if st := g.state.Load(); st != nil && st.policy != fingerprint(g.cfg.Policy()) {
				g.derive()
			}
			if s, ok := g.cfg.Transport.(staleCloser); ok {
				s.CloseStale()
			}
		}
	}
}

// staleCloser is a transport that closes the pooled connections idle for too long when
// asked (Transport): the gateway asks every PolicyCheck, so that they go without traffic.
type staleCloser interface{ CloseStale() }

// drainPoll is how often the gateway looks again whether the requests on a replaced table
// have finished, to acknowledge the current one.
const drainPoll = 10 * time.Millisecond

// ackOrPoll acknowledges, and returns when to look again if an older table still serves
// requests (nil when not). When the registry asks for acknowledgements more often than every
// (it counts a gateway live for three of its intervals), the ticker follows it.
func (g *Gateway) ackOrPoll(ctx context.Context, every *time.Duration, acks *time.Ticker) <-chan time.Time {
	current, advised := g.ack(ctx)
	if advised > 0 && advised < *every {
		*every = advised
		acks.Reset(advised)
	}
	if current {
		return nil
	}
	return time.After(drainPoll)
}

// ack tells the registry which revision the gateway has applied: that of the current table
// once every request that started on an older table has finished (one that picked an
// instance before the instance's withdrawal may not have reached it yet), else that of the
// oldest table still serving requests. It reports whether it acknowledged the current
// table. A table merged from a warming-up registry's incomplete answers is acknowledged too:
// those answers list every instance the registry removed in its epoch and the merge drops
// them, so the table holds no withdrawn instance — and the registry learns at once that this
// gateway is live.
func (g *Gateway) ack(ctx context.Context) (current bool, advised time.Duration) {
	st := g.state.Load()
	if st == nil || st.staticOnly {
		return true, 0 // nothing of the registry's applied yet
	}
	g.retiredMu.Lock()
	g.retired = slices.DeleteFunc(g.retired, func(old *state) bool { return old.inflight.Load() == 0 })
	applied := st
	if len(g.retired) > 0 {
		applied = g.retired[0]
	}
	g.retiredMu.Unlock()
	resp, err := g.cfg.Discovery.Ack(ctx, g.cfg.ID, applied.epoch, applied.revision)
	if err != nil {
		if ctx.Err() == nil {
			g.cfg.Logger.Warn("drain acknowledgement failed", slog.Any("error", err))
		}
		return applied == st, 0
	}
	return applied == st, time.Duration(resp.AckIntervalSeconds) * time.Second
}

// enter returns the current table with the request counted in it. A table replaced between
// the load and the count is let go and the new one taken: once a replaced table's count is
// zero, no request can still start on it.
func (g *Gateway) enter() *state {
	for {
		st := g.state.Load()
		if st == nil {
			return nil
		}
		st.inflight.Add(1)
		if g.state.Load() == st {
			return st
		}
		st.inflight.Add(-1)
	}
}

// updateFreshness reads the discovery view's state into the atomic the requests read.
func (g *Gateway) updateFreshness() {
	st, age := g.cfg.Discovery.RoutesState()
	f := &freshness{source: discovery.SourceFresh, age: age, validAt: g.cfg.Now().Add(-age)}
	if st == discovery.StateStale || st == discovery.StateExpired {
		f.source, f.header = discovery.SourceSnapshot, strconv.Itoa(int(age/time.Second))
	}
	f.expired = st == discovery.StateExpired
	if old := g.fresh.Load(); old != nil && old.expired != f.expired {
		if f.expired {
			g.cfg.Logger.Warn("the last-known-good routes view is past --max-stale: dynamic routes answer 503 STALE_VIEW_EXPIRED until the registry answers (static routes are still served)",
				slog.Duration("age", age))
		} else {
			g.cfg.Logger.Info("the routes view is current again: dynamic routes are served")
		}
	}
	g.fresh.Store(f)
}

// invalidateSpacing is how long a refetch's result answers later invalidations: a flood of
// DELETE /v1/discovery/invalidate becomes at most one registry request a second.
const invalidateSpacing = time.Second

// refetch is one invalidation's refetch, which concurrent and closely following calls join.
type refetch struct {
	done chan struct{}
	end  time.Time // when it finished
	err  error
}

// Invalidate makes the discovery client ask the registry again at once; the current
// table stays until a valid answer replaces it. At most one refetch is in flight: calls
// while it runs, or within a second after it succeeded, get its result.
func (g *Gateway) Invalidate(ctx context.Context) error {
	g.invalidateMu.Lock()
	f := g.lastRefetch
	// a new refetch unless one runs, or one succeeded within the spacing (a failed one is
	// shared only by the calls that joined it: the next call may find the registry back)
	if f == nil || (f.end != time.Time{} && (f.err != nil || g.cfg.Now().Sub(f.end) >= invalidateSpacing)) {
		f = &refetch{done: make(chan struct{})}
		g.lastRefetch = f
		g.invalidateMu.Unlock()
		f.err = g.refetch(context.WithoutCancel(ctx)) // joiners wait for it, whoever started it
		g.invalidateMu.Lock()
		f.end = g.cfg.Now()
		close(f.done)
		g.invalidateMu.Unlock()
		return f.err
	}
	g.invalidateMu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *Gateway) refetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g.cfg.Discovery.Invalidate()
	r, err := g.cfg.Discovery.Routes(ctx)
	if err != nil {
		return err
	}
	if r.Source == discovery.SourceSnapshot {
		return errors.New("the registry did not answer; the last-known-good view is kept")
	}
	g.routes.Store(r)
	g.derive()
	return nil
}

// derive builds the serving state from the current inputs and swaps it in. The table is
// derived again only when the manifests, public paths or policy changed; a change of
// eligibility alone (a verdict, a weight, a panic) only re-picks each route's upstreams.
func (g *Gateway) derive() {
	g.deriveMu.Lock()
	defer g.deriveMu.Unlock()
	r := g.routes.Load()
	staticOnly := r == nil
	if staticOnly {
		r = &discovery.RoutesResult{}
	}
	policy := g.cfg.Policy()
	fp := fingerprint(policy)
	start := g.cfg.Now()
	prev := g.state.Load()
	t, rederived, rows := g.tableFor(r, policy)
	if prev == nil || prev.table != t {
		rederived = true
	}
	if rederived {
		g.tableSeq++
	}
	inputs := fmt.Sprintf("%s/%d", r.RegistryEpoch, g.tableSeq)
	st := &state{table: t, revision: r.Revision, epoch: r.RegistryEpoch, policy: fp, inputs: inputs,
		derivedAt: g.cfg.Now(), serving: make(map[*routing.Entry]*serving, len(t.Entries())), staticOnly: staticOnly}
	if !rederived {
		st.derivedAt = prev.derivedAt
	}
	st.gone = goneFrom(prev, t, g.cfg.Now())
	verdicts, gens := verdictsOf(r)
	g.talliesMu.Lock()
	tallies := make(map[incarnation]*tally, len(g.tallies))
	for k, v := range g.tallies {
		if gens[k.instance] == k.generation {
			tallies[k] = v // counts of incarnations the registry no longer holds would be ignored there
		}
	}
	stats := g.health.keep(t.Entries())
	for _, e := range t.Entries() {
		sv := g.servingFor(e, verdicts, gens, tallies)
		sv.health = stats[routeName(e)]
		st.serving[e] = sv
	}
	g.tallies = tallies
	g.talliesMu.Unlock()
	// A new table is news (INFO); upstreams re-picked for a change of eligibility alone — a
	// slow start ramps once a second — are not (DEBUG). Said before the table serves, so that
	// whoever sees the table finds its line written.
	level := slog.LevelDebug
	if rederived {
		level = slog.LevelInfo
	}
	if g.cfg.Logger.Enabled(context.Background(), level) {
		msg := "upstreams re-picked (eligibility changed)"
		if rederived {
			msg = "routing table derived"
		}
		attrs := []slog.Attr{slog.Int64("registry_revision", r.Revision), slog.Int("routes", len(t.Entries())),
			slog.Int("rejected", len(t.Rejected())), slog.Int("conflicts", len(t.Conflicts())),
			slog.String("took", g.cfg.Now().Sub(start).String())}
		if rows != nil { // applied incrementally: which rows changed (the first few)
			attrs = append(attrs, slog.Int("rows_changed", len(rows)), slog.Any("rows", rowNames(rows, 5)))
		}
		g.cfg.Logger.LogAttrs(context.Background(), level, msg, attrs...)
	}
	g.state.Store(st)
	if prev != nil {
		g.retiredMu.Lock()
		g.retired = append(g.retired, prev)
		g.retiredMu.Unlock()
	}
	g.updateFreshness()
	select {
	case g.ackNow <- struct{}{}:
	default:
	}
}

// input builds the derivation's input from a routes view.
func (g *Gateway) input(r *discovery.RoutesResult, policy routing.Policy) routing.Input {
	return routing.InputFromView(g.cfg.Static, policy, r.Manifests, r.PublicPaths)
}

func fingerprint(p routing.Policy) string {
	// A policy is replaced whole when its file is reloaded, never changed in place: the same
	// map is the same policy, printed once (at 10,000 services printing it was a tenth of a
	// routes change's work).
	id := reflect.ValueOf(p).UnsafePointer()
	if last := lastFingerprint.Load(); last != nil && last.id == id && id != nil {
		return last.text
	}
	text := fmt.Sprint(p) // fmt prints maps in key order: equal policies print alike
	lastFingerprint.Store(&policyPrint{id: id, text: text})
	return text
}

// policyPrint is a policy map's identity and its fingerprint.
type policyPrint struct {
	id   unsafe.Pointer
	text string
}

var lastFingerprint atomic.Pointer[policyPrint]

// adminRoutes is the route table of the gateway's own endpoints.
func (g *Gateway) adminRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+apiv1.PathGatewayRoutes, knownParams(g.serveRoutes))
	mux.HandleFunc("GET "+apiv1.PathGatewayRouteHealth, knownParams(g.serveRouteHealth, "format"))
	mux.HandleFunc("DELETE "+apiv1.PathInvalidate, knownParams(g.serveInvalidate))
	mux.HandleFunc("GET "+apiv1.PathInvalidate, knownParams(g.serveInvalidate))
	mux.HandleFunc("/", httpapi.NotRouted(mux))
	return mux
}

// knownParams refuses, as the registry does, a request with a query parameter the endpoint
// does not take (400 UNKNOWN_PARAMETER naming each): a misspelled one is never ignored.
func knownParams(h http.HandlerFunc, known ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var ds []apiv1.Detail
		for k := range r.URL.Query() {
			if !slices.Contains(known, k) {
				ds = append(ds, apiv1.Detail{Path: k, Message: "not a parameter of this endpoint"})
			}
		}
		if len(ds) > 0 {
			slices.SortFunc(ds, func(a, b apiv1.Detail) int { return strings.Compare(a.Path, b.Path) })
			httpapi.WriteError(w, &apiv1.Error{Status: http.StatusBadRequest, Code: apiv1.CodeUnknownParameter,
				Message: fmt.Sprintf("%d unknown query parameter(s)", len(ds)), Details: ds})
			return
		}
		h(w, r)
	}
}

// ServeHTTP serves the gateway: its own endpoints (adminRoutes), everything else by the
// table.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == apiv1.PathGatewayRoutes || r.URL.Path == apiv1.PathInvalidate || r.URL.Path == apiv1.PathGatewayRouteHealth {
		g.admin.ServeHTTP(w, r)
		return
	}
	st := g.enter()
	defer st.inflight.Add(-1)
	f := g.fresh.Load()
	if f != nil && f.source == discovery.SourceSnapshot {
		w.Header()["X-Cache-Source"] = snapshotHeader
		w.Header().Set("X-Route-Table-Age", f.header)
	} else {
		w.Header()["X-Cache-Source"] = freshHeader
	}
	m := st.table.Match(r.Method, r.URL.Path)
	if f != nil && f.expired && m.Entry != nil && m.Entry.Source != "static" {
		g.metrics.count(m.Entry.Source, http.StatusServiceUnavailable)
		g.metrics.stale.Inc()
		select {
		case g.retry <- struct{}{}:
		default:
		}
		w.Header().Set("Retry-After", "5")
		httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeStaleViewExpired,
			"route %s %s comes from a view %s old, past the gateway's --max-stale: the registry has not answered since; static routes are still served",
			m.Entry.Method, m.Entry.Pattern, f.age.Truncate(time.Second)))
		return
	}
	switch m.Status {
	case http.StatusNotFound:
		if st.staticOnly {
			g.metrics.count("none", 503)
			httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable,
				"no route for %s %s yet: the registry has not answered, and only static routes are served", r.Method, m.Path))
			return
		}
		if e := st.goneRoute(r.Method, m.Path, g.cfg.Now()); e != nil {
			g.metrics.count("dynamic", 503)
			w.Header().Set("Retry-After", "5")
			httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable,
				"route %s %s of %s has no upstream left: its last instance went away", e.Method, e.Pattern, e.Service))
			return
		}
		g.metrics.count("none", 404)
		httpapi.WriteError(w, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no route for %s %s", r.Method, m.Path))
		return
	case http.StatusMethodNotAllowed:
		g.metrics.count("none", 405)
		w.Header().Set("Allow", joinComma(m.Allow))
		httpapi.WriteError(w, apiv1.Errorf(http.StatusMethodNotAllowed, apiv1.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, m.Path))
		return
	}
	sv := st.serving[m.Entry]
	if f != nil && f.source == discovery.SourceSnapshot && sv.maxStale > 0 {
		if age := g.cfg.Now().Sub(f.validAt); age > sv.maxStale {
			g.metrics.count(m.Entry.Source, http.StatusServiceUnavailable)
			g.metrics.stale.Inc()
			sv.health.record(g.cfg.Now(), http.StatusServiceUnavailable)
			select {
			case g.retry <- struct{}{}:
			default:
			}
			w.Header().Set("Retry-After", "5")
			httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeStaleViewExpired,
				"route %s %s declares max_stale %s and its view is %s old: the registry has not answered since, and this route needs prompt revocation; other routes are still served",
				m.Entry.Method, m.Entry.Pattern, sv.maxStale, age.Truncate(time.Second)))
			return
		}
	}
	if len(sv.upstreams) == 0 {
		sv.health.record(g.cfg.Now(), http.StatusServiceUnavailable)
		w.Header().Set("Retry-After", "5")
		httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "route %s %s has no eligible upstream", m.Entry.Method, m.Entry.Pattern))
		return
	}
	g.proxy.serve(w, r, m, sv)
}

// Header values shared by every response (header maps hold slices; these are never changed).
var (
	freshHeader    = []string{string(discovery.SourceFresh)}
	snapshotHeader = []string{string(discovery.SourceSnapshot)}
)

// source says whether the table comes from a fresh view or the last-known-good one.
func (g *Gateway) source() (discovery.Source, time.Duration) {
	g.updateFreshness()
	f := g.fresh.Load()
	return f.source, f.age
}

// refusing counts the routes of st that refuse requests now on staleness: every dynamic one
// past --max-stale, else those past their own max_stale while the view is last-known-good.
func (g *Gateway) refusing(st *state) int {
	f := g.fresh.Load()
	if f == nil || f.source != discovery.SourceSnapshot {
		return 0
	}
	age := g.cfg.Now().Sub(f.validAt)
	n := 0
	for _, e := range st.table.Entries() {
		if e.Source == "static" {
			continue
		}
		if sv := st.serving[e]; f.expired || (sv != nil && sv.maxStale > 0 && age > sv.maxStale) {
			n++
		}
	}
	return n
}

func (g *Gateway) serveRoutes(w http.ResponseWriter, r *http.Request) {
	st := g.state.Load()
	if st == nil {
		httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "no routing table yet"))
		return
	}
	source, age := g.source()
	if g.cfg.Admin != nil {
		if _, err := g.cfg.Admin.Authorize(r, auth.GatewayAdmin); err != nil {
			httpapi.WriteJSON(w, http.StatusOK, routing.RoutesSummary{Summary: true, RefusingCount: g.refusing(st), RouteCount: len(st.table.Entries()), RejectedCount: len(st.table.Rejected()),
				ConflictCount: len(st.table.Conflicts()), Source: string(source), AgeSeconds: int64(age / time.Second), RegistryRevision: st.revision,
				RegistryEpoch: st.epoch, DerivedAt: st.derivedAt.UTC(), FullTable: "the routes are shown to the gateway_admin permission only: " + httpapi.AsError(err).Message})
			return
		}
	}
	canonical := st.table.Canonical() // made for this answer: the routes page is rare, a table change is not
	ans := routing.RoutesAnswer{Canonical: canonical, Source: string(source), AgeSeconds: int64(age / time.Second), RegistryRevision: st.revision,
		RegistryEpoch: st.epoch, DerivedAt: st.derivedAt.UTC(), Reasons: map[string]string{}, RefusingCount: g.refusing(st)}
	for _, rj := range canonical.Rejected {
		ans.Reasons[rj.Instance] = rj.Reason
	}
	ans.Serving = servingAnswer(st)
	httpapi.WriteJSON(w, http.StatusOK, ans)
}

func (g *Gateway) serveInvalidate(w http.ResponseWriter, r *http.Request) {
	if g.cfg.Admin != nil {
		if _, err := g.cfg.Admin.Authorize(r, auth.GatewayAdmin); err != nil {
			httpapi.WriteError(w, err)
			return
		}
	}
	if err := g.Invalidate(r.Context()); err != nil {
		httpapi.WriteError(w, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "refetch failed, the last-known-good table stays: %v", err))
		return
	}
	st := g.state.Load()
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"registry_revision": st.revision, "routes": len(st.table.Entries())})
}

// servingAnswer is what each dynamic route of st sends to now, with the weights.
func servingAnswer(st *state) map[string]map[string]int {
	out := map[string]map[string]int{}
	for e, sv := range st.serving {
		if sv == nil || e.Source != "dynamic" {
			continue
		}
		ups := make(map[string]int, len(sv.upstreams))
		for _, u := range sv.upstreams {
			ups[u.instance] = u.weight
		}
		out[e.Method+" "+e.Pattern] = ups
	}
	return out
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}

// goneRoute returns the dynamic route of an earlier table that matches the request and that
// this table lost (its last upstream went away), or nil.
func (st *state) goneRoute(method, path string, now time.Time) *routing.Entry {
	for _, g := range st.gone {
		if !now.Before(g.until) {
			continue
		}
		if m := g.table.Match(method, path); m.Entry != nil && m.Entry.Source == "dynamic" {
			return m.Entry
		}
	}
	return nil
}
