package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// NoStaleBound is a stale allowance without a bound: the last-known-good view is served for
// as long as the registry is away (the default). The view is authoritative for routing; the
// registry advises and is never in the request path.
const NoStaleBound time.Duration = math.MaxInt64

// Defaults of Config.
const (
	DefaultTTL            = 30 * time.Second
	DefaultStaleAllowance = NoStaleBound
	DefaultRetryInterval  = time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultWatchWait      = 30 * time.Second
)

// ErrUnavailable is returned when the registry cannot answer and no last-known-good view
// within the stale allowance exists: nothing is known, so nothing is served.
var ErrUnavailable = errors.New("discovery unavailable")

// UnavailableError is the ErrUnavailable a read returns, with the state and cause.
type UnavailableError struct {
	// State is uninitialized (never answered) or expired (older than the stale allowance).
	State State
	// Age of the last-known-good view, when there is one.
	Age time.Duration
	// Cause is the last refresh's error.
	Cause error
	// MaxStale is the read's own bound when that is what the view is past (0: the client's
	// stale allowance).
	MaxStale time.Duration
}

func (e *UnavailableError) Error() string {
	if e.State == StateExpired && e.MaxStale > 0 {
		return fmt.Sprintf("discovery unavailable: last-known-good view is %s old, past this operation's max_stale %s: %v", e.Age.Round(time.Second), e.MaxStale, e.Cause)
	}
	if e.State == StateExpired {
		return fmt.Sprintf("discovery unavailable: last-known-good view is %s old, past the stale allowance: %v", e.Age.Round(time.Second), e.Cause)
	}
	return fmt.Sprintf("discovery unavailable: the registry has never answered: %v", e.Cause)
}

// Is makes errors.Is(err, ErrUnavailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }

// Config configures a Client.
type Config struct {
	// Registries are registry base URLs; the client fails over to the next on errors.
	Registries []string
	// Consumer names the client in its metrics (label consumer), e.g. "gateway".
	Consumer string
	// Client sends the requests (default: a plain client; each request is bounded by
	// RequestTimeout, long polls by their wait plus RequestTimeout).
	Client *http.Client
	// BearerToken, when set, is sent as "Authorization: Bearer …".
	BearerToken string
	// TTL is how long a view is served from cache without asking the registry (default 30 s).
	TTL time.Duration
	// StaleAllowance is how long the last-known-good view is served when the registry cannot
	// be reached, for the reads that declare no bound of their own (Query.MaxStale); past it,
	// reads fail with ErrUnavailable. 0 (the default) is NoStaleBound: routing never stops on
	// staleness. An operation that needs prompt revocation declares its own, shorter bound.
	StaleAllowance time.Duration
	// RetryInterval is how long after a failed refresh the next read tries again (default
	// 1 s): a registry outage is not hammered by every read.
	RetryInterval time.Duration
	// RequestTimeout bounds each request (default 5 s).
	RequestTimeout time.Duration
	// WatchWait is the long-poll wait of Watch (default 30 s, at most 5 min).
	WatchWait time.Duration
	// FullAnswers makes Watch and WatchRoutes long-poll for the whole answer at every
	// change. By default they ask for the changes since the answer they hold (a delta watch:
	// GET /v1/discovery/capabilities?delta=true, /v1/discovery/routes?delta=true), and fall
	// back to whole answers by themselves when the registry does not know delta watches.
	FullAnswers bool
	// MaxViews bounds the capability views kept, one per distinct query (default
	// DefaultMaxViews): past it the least recently read one goes (a watched one never), and
	// meshflows_discovery_views_evicted_total counts it. Negative: no bound.
	MaxViews int
	// Logger, Registerer: nil is silent / no metrics.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock (default time.Now); Sleep waits between watch retries (default a
	// timer); Rand returns uniform values in [0, 1) for jitter.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration)
	Rand  func() float64
}

func (c *Config) setDefaults() {
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.MaxViews == 0 {
		c.MaxViews = DefaultMaxViews
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.StaleAllowance == 0 {
		c.StaleAllowance = DefaultStaleAllowance
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.WatchWait == 0 {
		c.WatchWait = DefaultWatchWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = func(ctx context.Context, d time.Duration) {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if _, err := client.New(client.Config{Registries: c.Registries}); err != nil {
		errs = append(errs, err)
	}
	if c.TTL < 0 || c.StaleAllowance < 0 || c.RetryInterval < 0 || c.RequestTimeout <= 0 || c.WatchWait <= 0 || c.WatchWait > 5*time.Minute {
		errs = append(errs, errors.New("durations must not be negative, the request timeout positive, the watch wait within (0, 5m]"))
	}
	return errors.Join(errs...)
}

// Query selects capabilities; empty fields do not filter (docs/reference/api.md, discovery query).
type Query struct {
	CapabilityID string
	Provider     string
	ServiceName  string
	Zone         string
	// MinVersion keeps versions >= it; Version is a constraint (">=1.0 <2.0", "1.x || >=3.0").
	MinVersion string
	Version    string
	// IncludeAll asks for the instances out of rotation too, with their verdicts
	// (include=all): a consumer that judges panic on the pool it uses needs them.
	IncludeAll bool
	// MaxStale bounds how old a last-known-good view this read accepts while the registry
	// is unreachable: past it the read fails with an *UnavailableError (state expired) —
	// for an operation that needs prompt revocation (a tenant boundary, an ownership
	// grant). 0: the client's StaleAllowance. The stricter of the two applies. It is not
	// part of the view's key: reads with different bounds share one view.
	MaxStale time.Duration
}

func (q Query) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"capability_id": q.CapabilityID, "provider": q.Provider, "service_name": q.ServiceName,
		"zone": q.Zone, "min_version": q.MinVersion, "version": q.Version} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.IncludeAll {
		v.Set("include", "all")
	}
	return v
}

// Meta is what every Result says about where its view came from.
type Meta struct {
	Source Source
	State  State
	// Age is the time since the view's last successful refresh.
	Age           time.Duration
	RegistryEpoch string
	Revision      int64
	// Complete is false while the view holds answers of a registry still warming up.
	Complete bool
	// Region is the region that answered a read through Regions (empty otherwise).
	Region string
}

// Result is a capabilities view.
type Result struct {
	Meta
	Entries []apiv1.CapabilityEntry
}

// Routes is the routes view: the inputs of route derivation.
type Routes struct {
	Manifests   []apiv1.ManifestEntry
	PublicPaths []apiv1.PublicPath
}

// RoutesResult is a routes view.
type RoutesResult struct {
	Meta
	Routes
}

// Client reads discovery views with a cache. It is safe for concurrent use.
type Client struct {
	cfg     Config
	client  *client.Client
	metrics *metrics

	mu     sync.Mutex
	caps   map[string]*view[[]apiv1.CapabilityEntry] // by canonical query
	used   map[string]uint64                         // by canonical query: the use count at its last read (capsView)
	uses   uint64
	routes *view[Routes]
	// deltas holds, by canonical query, how each WatchDeltas last fared (DeltaState)
	deltas map[string]*deltaState
}

// DefaultMaxViews is Config.MaxViews's default.
const DefaultMaxViews = 1000

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("discovery config: %w", err)
	}
	rc, err := client.New(client.Config{Registries: cfg.Registries, HTTPClient: cfg.Client, BearerToken: cfg.BearerToken, Timeout: cfg.RequestTimeout, Now: cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("discovery config: %w", err)
	}
	c := &Client{cfg: cfg, client: rc, caps: map[string]*view[[]apiv1.CapabilityEntry]{}, used: map[string]uint64{}, deltas: map[string]*deltaState{}}
	m, err := newMetrics(cfg.Registerer, cfg.Consumer, c)
	if err != nil {
		return nil, err
	}
	c.metrics = m
	c.routes = &view[Routes]{kind: routesKind, refused: c.refusedAnswer}
	return c, nil
}

var capsKind = kind[[]apiv1.CapabilityEntry]{
	size: func(es []apiv1.CapabilityEntry) int { return len(es) },
	instances: func(es []apiv1.CapabilityEntry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.InstanceID
		}
		return out
	},
	drop: func(es []apiv1.CapabilityEntry, id string) []apiv1.CapabilityEntry {
		return slices.DeleteFunc(slices.Clone(es), func(e apiv1.CapabilityEntry) bool { return e.InstanceID == id })
	},
	merge: func(lkg, inc []apiv1.CapabilityEntry, removed map[string]bool) []apiv1.CapabilityEntry {
		type key struct{ instance, capability, provider, version string }
		k := func(e apiv1.CapabilityEntry) key {
			return key{e.InstanceID, e.CapabilityID, e.Provider, e.CapabilityVersion}
		}
		known := make(map[string]bool, len(lkg))
		for _, e := range lkg {
			known[e.InstanceID] = true
		}
		seen := make(map[key]bool, len(inc))
		out := make([]apiv1.CapabilityEntry, 0, len(inc)+len(lkg))
		for _, e := range inc {
			if e.Restored && !known[e.InstanceID] {
				continue // known only from a snapshot, and gone from what this view knew
			}
			out = append(out, e)
			seen[k(e)] = true
		}
		for _, e := range lkg {
			if !seen[k(e)] && !removed[e.InstanceID] {
				out = append(out, e)
			}
		}
		return out
	},
}

var routesKind = kind[Routes]{
	size: func(r Routes) int { return len(r.Manifests) + len(r.PublicPaths) },
	merge: func(lkg, inc Routes, removed map[string]bool) Routes {
		known := make(map[string]bool, len(lkg.Manifests))
		for _, m := range lkg.Manifests {
			known[m.InstanceID] = true
		}
		out := Routes{Manifests: make([]apiv1.ManifestEntry, 0, len(inc.Manifests)+len(lkg.Manifests))}
		have, skip := map[string]bool{}, map[string]bool{}
		for _, m := range inc.Manifests {
			if m.Restored && !known[m.InstanceID] {
				skip[m.InstanceID] = true // known only from a snapshot, and gone from what this view knew
				continue
			}
			out.Manifests = append(out.Manifests, m)
			have[m.InstanceID] = true
		}
		for _, m := range lkg.Manifests {
			if !have[m.InstanceID] && !removed[m.InstanceID] {
				out.Manifests = append(out.Manifests, m)
			}
		}
		type pk struct{ path, instance string }
		paths := map[pk]bool{}
		for _, p := range inc.PublicPaths {
			if !skip[p.InstanceID] {
				out.PublicPaths = append(out.PublicPaths, p)
				paths[pk{p.Path, p.InstanceID}] = true
			}
		}
		for _, p := range lkg.PublicPaths {
			if !paths[pk{p.Path, p.InstanceID}] && !have[p.InstanceID] && !removed[p.InstanceID] {
				out.PublicPaths = append(out.PublicPaths, p)
			}
		}
		return out
	},
}

func (c *Client) capsView(key string) *view[[]apiv1.CapabilityEntry] {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uses++
	c.used[key] = c.uses
	v := c.caps[key]
	if v == nil {
		v = &view[[]apiv1.CapabilityEntry]{kind: capsKind, refused: c.refusedAnswer}
		c.caps[key] = v
		if max := c.cfg.MaxViews; max > 0 && len(c.caps) > max {
			c.evictLocked(key)
		}
	}
	return v
}

// evictLocked drops the least recently read view other than keep's and the watched ones.
// It scans the views: it runs only when a new query's view passes the bound.
func (c *Client) evictLocked(keep string) {
	oldest, at := "", uint64(0)
	for k, v := range c.caps {
		if k == keep || v.watchers.Load() > 0 {
			continue
		}
		if u := c.used[k]; oldest == "" || u < at {
			oldest, at = k, u
		}
	}
	if oldest != "" {
		delete(c.caps, oldest)
		delete(c.used, oldest)
		c.metrics.evicted.Inc()
	}
}

// Unreachable tells the client that a connection to an instance was refused. While the
// registry warms up after a restart, a view keeps the instances it knew before and the
// registry has not named yet (they may not have re-registered yet); one of those that
// refuses connections is a provider that went away while the registry was down, and no
// answer will ever remove it: it is dropped from every capability view now, instead of at
// the end of the warm-up. An instance the registry answers for, or any instance of a
// complete view, is kept (the registry judges those). It returns how many views dropped it.
func (c *Client) Unreachable(instanceID string) int {
	c.mu.Lock()
	views := make([]*view[[]apiv1.CapabilityEntry], 0, len(c.caps))
	for _, v := range c.caps {
		views = append(views, v)
	}
	c.mu.Unlock()
	n := 0
	for _, v := range views {
		if v.forget(instanceID) {
			n++
		}
	}
	if n > 0 {
		c.metrics.forgotten.Inc()
	}
	return n
}

// Capabilities returns the capabilities that match q, from cache within the TTL, from the
// registry otherwise, and from the last-known-good view while the registry is unreachable.
func (c *Client) Capabilities(ctx context.Context, q Query) (*Result, error) {
	vals := q.values()
	v := c.capsView(vals.Encode())
	a, meta, err := read(ctx, c, v, func(ctx context.Context) (answer[[]apiv1.CapabilityEntry], error) {
		return c.fetchCapabilities(ctx, vals, position{index: -1})
	})
	if err != nil {
		return nil, err
	}
	if err := c.tooStale(meta, q.MaxStale, v); err != nil {
		return nil, err
	}
	return &Result{Meta: meta, Entries: a.body}, nil
}

// tooStale is the *UnavailableError of a read whose own bound (maxStale) a stale view is
// past; nil when it is within it, fresh, or the read declares none.
func (c *Client) tooStale(meta Meta, maxStale time.Duration, v interface{ cause() error }) error {
	if maxStale <= 0 || meta.State != StateStale || meta.Age <= maxStale {
		return nil
	}
	c.metrics.staleRefused.Inc()
	return &UnavailableError{State: StateExpired, Age: meta.Age, Cause: v.cause(), MaxStale: maxStale}
}

// Refresh is Capabilities from the registry now, whatever the TTL: the view of q is asked
// for again (concurrent refreshes of one query share one request), and while the registry
// is unreachable the last-known-good rules apply as in Capabilities.
func (c *Client) Refresh(ctx context.Context, q Query) (*Result, error) {
	vals := q.values()
	c.capsView(vals.Encode()).invalidate()
	return c.Capabilities(ctx, q)
}

// Routes returns the routes view (manifests and public paths) with the same rules.
func (c *Client) Routes(ctx context.Context) (*RoutesResult, error) {
	a, meta, err := read(ctx, c, c.routes, func(ctx context.Context) (answer[Routes], error) {
		return c.fetchRoutes(ctx, position{index: -1})
	})
	if err != nil {
		return nil, err
	}
	return &RoutesResult{Meta: meta, Routes: a.body}, nil
}

// read serves a view by the cache rules.
func read[T any](ctx context.Context, c *Client, v *view[T], fetch func(context.Context) (answer[T], error)) (*answer[T], Meta, error) {
	now := c.cfg.Now()
	v.mu.Lock()
	// Within the TTL the view is served as is; after a failed refresh the registry is asked
	// again only every RetryInterval, unless the view is no longer usable at all.
	useCache := v.lkg != nil && !v.invalid && now.Sub(v.lkgAt) <= c.cfg.StaleAllowance &&
		((v.lastErr == nil && now.Sub(v.lkgAt) < c.cfg.TTL) || (v.lastErr != nil && now.Sub(v.checkedAt) < c.cfg.RetryInterval))
	v.mu.Unlock()
	source := SourceCache
	if useCache {
		c.metrics.hits.Inc()
	} else {
		c.metrics.misses.Inc()
		source = SourceFresh
		if _, err := v.refresh(ctx, c.cfg.Now, fetch); err != nil {
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "discovery refresh failed", slog.Any("error", err))
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	st, age := v.snapshotLocked(c.cfg.Now(), c.cfg.StaleAllowance)
	switch st {
	case StateUninitialized, StateExpired:
		return nil, Meta{}, &UnavailableError{State: st, Age: age, Cause: v.lastErr}
	case StateStale:
		source = SourceSnapshot
		c.metrics.staleServed.Inc()
	}
	a := v.lkg
	return a, Meta{Source: source, State: st, Age: age, RegistryEpoch: a.epoch, Revision: a.revision, Complete: a.complete}, nil
}

// Invalidate drops every cached view's freshness: the next read asks the registry. The
// last-known-good views are kept until a valid answer replaces them.
func (c *Client) Invalidate() {
	c.mu.Lock()
	views := make([]interface{ invalidate() }, 0, len(c.caps)+1)
	for _, v := range c.caps {
		views = append(views, v)
	}
	views = append(views, c.routes)
	c.mu.Unlock()
	for _, v := range views {
		v.invalidate()
	}
}

func (v *view[T]) invalidate() {
	v.mu.Lock()
	v.invalid = true
	v.mu.Unlock()
}

// Watch keeps the view of q current with long polls until ctx ends, calling onChange (from
// its own goroutine, one call at a time) with every new view. It asks for the changes since
// the view it holds (a delta watch) unless Config.FullAnswers. Failures are retried with
// jittered backoff; readers meanwhile get the cache rules (stale, then expired).
func (c *Client) Watch(ctx context.Context, q Query, onChange func(*Result)) error {
	vals := q.values()
	v := c.capsView(vals.Encode())
	fetch := func(ctx context.Context, at position) (answer[[]apiv1.CapabilityEntry], error) {
		return c.fetchCapabilities(ctx, vals, at)
	}
	if !c.cfg.FullAnswers {
		fetch = newCapabilitiesWatch(c, vals).fetch
	}
	v.watchers.Add(1) // a watched view is never evicted
	defer v.watchers.Add(-1)
	return watch(ctx, c, v, fetch, func(a *answer[[]apiv1.CapabilityEntry], m Meta) {
		if onChange != nil {
			onChange(&Result{Meta: m, Entries: a.body})
		}
	})
}

// WatchRoutes is Watch for the routes view: a delta watch too, unless Config.FullAnswers.
func (c *Client) WatchRoutes(ctx context.Context, onChange func(*RoutesResult)) error {
	fetch := c.fetchRoutes
	if !c.cfg.FullAnswers {
		fetch = newRoutesWatch(c).fetch
	}
	return watch(ctx, c, c.routes, fetch, func(a *answer[Routes], m Meta) {
		if onChange != nil {
			onChange(&RoutesResult{Meta: m, Routes: a.body})
		}
	})
}

func watch[T any](ctx context.Context, c *Client, v *view[T], fetch func(context.Context, position) (answer[T], error), notify func(*answer[T], Meta)) error {
	failures := 0
	for ctx.Err() == nil {
		v.mu.Lock()
		at := position{index: -1}
		if v.lkg != nil && !v.invalid {
			at = position{epoch: v.lkg.epoch, index: v.lkg.revision}
		}
		v.mu.Unlock()
		get := func(ctx context.Context) (answer[T], error) { return fetch(ctx, at) }
		var changed bool
		var err error
		if at.index < 0 {
			changed, err = v.refresh(ctx, c.cfg.Now, get) // a plain fetch: readers may share it
		} else {
			// A long poll may be held for the whole wait: never shared, so that a reader that
			// needs the view now (after Invalidate, past the TTL) gets its own request.
			changed, err = v.fetchAndApply(ctx, c.cfg.Now, get)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			c.backOff(ctx, "discovery watch failed", err, failures)
			continue
		}
		failures = 0
		if changed {
			v.mu.Lock()
			a := v.lkg
			st, age := v.snapshotLocked(c.cfg.Now(), c.cfg.StaleAllowance)
			v.mu.Unlock()
			notify(a, Meta{Source: SourceFresh, State: st, Age: age, RegistryEpoch: a.epoch, Revision: a.revision, Complete: a.complete})
		}
	}
	return nil
}

// backOff logs a watch's failure and waits before its next try: 100 ms doubling to 5 s with
// the failures in a row, with full jitter, so that a fleet of consumers reconnecting after a
// registry restart does not arrive at once. A registry that shed the watch (429, over its
// reconnection cap) said when to come back: then the wait is its Retry-After and up to as
// much again at random, so that watchers shed together come back spread over that time.
func (c *Client) backOff(ctx context.Context, msg string, err error, failures int) {
	d := time.Duration(c.cfg.Rand() * float64(min(100*time.Millisecond<<min(failures-1, 6), 5*time.Second)))
	if ra, ok := client.JitteredRetryAfter(err, c.cfg.Rand); ok {
		d = ra
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, msg, slog.Any("error", err), slog.String("retry_in", d.String()))
	c.cfg.Sleep(ctx, d)
}

// Ack tells the registry that this consumer's view (a gateway's table) reflects revision of
// epoch: the gateway's half of the drain handshake. The answer says how often to acknowledge
// to stay counted as live.
func (c *Client) Ack(ctx context.Context, consumerID, epoch string, revision int64) (*apiv1.AckResponse, error) {
	out, err := c.client.Ack(ctx, &apiv1.AckRequest{GatewayID: consumerID, RegistryEpoch: epoch, Revision: revision})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReportOutcomes sends a gateway's per-instance outcomes of one window to the registry
// (POST /v1/outcomes): the passive evidence of eligibility. The caller must hold a gateway
// role.
func (c *Client) ReportOutcomes(ctx context.Context, req *apiv1.OutcomesRequest) error {
	return c.client.Outcomes(ctx, req)
}

// Report sends a gateway's or an orchestrator's events and conditions to the registry (POST
// /v1/reports; the caller needs the permission outcomes need).
func (c *Client) Report(ctx context.Context, req *apiv1.ReportRequest) error {
	_, err := c.client.Report(ctx, req)
	return err
}

// ErrRestored is the cause a view restored from a saved copy reports until the registry
// answers.
var ErrRestored = errors.New("view restored from a saved copy; the registry has not answered since")

// RestoreRoutes seeds the routes view with a copy saved earlier (a gateway's state dir) when
// it holds nothing yet, and reports whether it did. The copy serves as the last-known-good
// view — stale, its age counted from at, expired past the stale allowance — and incomplete
// answers merge into it, until the registry answers.
func (c *Client) RestoreRoutes(r *RoutesResult, at time.Time) bool {
	v := c.routes
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lkg != nil {
		return false
	}
	v.lkg = &answer[Routes]{epoch: r.RegistryEpoch, revision: r.Revision, complete: r.Complete, body: r.Routes}
	v.lkgAt, v.checkedAt, v.lastErr = at, at, ErrRestored
	return true
}

// RoutesState returns the state and age of the routes view now, without asking the
// registry: what a gateway reports with every response.
func (c *Client) RoutesState() (State, time.Duration) {
	v := c.routes
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.snapshotLocked(c.cfg.Now(), c.cfg.StaleAllowance)
}

// Cached returns the view of q as the client holds it, without asking the registry: for a
// reader that must not wait on the network (a DNS server answering from the view Watch keeps
// current). The cache rules of Capabilities apply: a stale view is served as a snapshot, an
// expired or never fetched one is an *UnavailableError.
func (c *Client) Cached(q Query) (*Result, error) {
	v := c.capsView(q.values().Encode())
	v.mu.Lock()
	st, age := v.snapshotLocked(c.cfg.Now(), c.cfg.StaleAllowance)
	source := SourceCache
	switch st {
	case StateUninitialized, StateExpired:
		v.mu.Unlock()
		return nil, &UnavailableError{State: st, Age: age, Cause: v.lastErr}
	case StateStale:
		source = SourceSnapshot
	}
	a := v.lkg
	v.mu.Unlock()
	meta := Meta{Source: source, State: st, Age: age, RegistryEpoch: a.epoch, Revision: a.revision, Complete: a.complete}
	if err := c.tooStale(meta, q.MaxStale, v); err != nil {
		return nil, err
	}
	return &Result{Meta: meta, Entries: a.body}, nil
}

// State returns the state of the view of q now.
func (c *Client) State(q Query) State {
	v := c.capsView(q.values().Encode())
	v.mu.Lock()
	defer v.mu.Unlock()
	st, _ := v.snapshotLocked(c.cfg.Now(), c.cfg.StaleAllowance)
	return st
}

func (c *Client) fetchCapabilities(ctx context.Context, vals url.Values, at position) (answer[[]apiv1.CapabilityEntry], error) {
	resp, err := c.client.Capabilities(ctx, vals, c.poll(at))
	if err != nil {
		return answer[[]apiv1.CapabilityEntry]{}, err
	}
	if resp.RegistryEpoch == "" || resp.Capabilities == nil {
		return answer[[]apiv1.CapabilityEntry]{}, errors.New("discovery answer without registry_epoch or capabilities")
	}
	return answer[[]apiv1.CapabilityEntry]{epoch: resp.RegistryEpoch, revision: resp.Revision, complete: resp.Complete, body: resp.Capabilities,
		removed: removedSet(resp.Removed)}, nil
}

func (c *Client) fetchRoutes(ctx context.Context, at position) (answer[Routes], error) {
	resp, err := c.client.Routes(ctx, c.poll(at))
	if err != nil {
		return answer[Routes]{}, err
	}
	if resp.RegistryEpoch == "" || resp.Manifests == nil || resp.PublicPaths == nil {
		return answer[Routes]{}, errors.New("routes answer without registry_epoch, manifests or public_paths")
	}
	return answer[Routes]{epoch: resp.RegistryEpoch, revision: resp.Revision, complete: resp.Complete,
		body: Routes{Manifests: resp.Manifests, PublicPaths: resp.PublicPaths}, removed: removedSet(resp.Removed)}, nil
}

// deltaWatch is the state of one delta watch of a view of T: the registry's answer as the
// deltas rebuilt it (held, at epoch and revision), which the view then applies as it would
// a whole answer (merged while the registry warms up). The watch loop owns it: one fetch at a
// time.
type deltaWatch[T any] struct {
	c *Client
	// full fetches a whole answer (a long poll when at is one); delta asks for a delta
	full  func(ctx context.Context, at position) (answer[T], error)
	delta func(ctx context.Context, p client.Poll) (change[T], error)
	// off: the registry refused delta=true (one that predates delta watches): whole answers
	off      bool
	holds    bool
	epoch    string
	revision int64
	held     T
}

// change is one delta answer: apply gives the answer it makes of the one held at its base.
type change[T any] struct {
	epoch    string
	revision int64
	complete bool
	reset    bool
	removed  []apiv1.Removal
	apply    func(held T) T
}

// newCapabilitiesWatch is the delta watch of the capabilities query vals.
func newCapabilitiesWatch(c *Client, vals url.Values) *deltaWatch[[]apiv1.CapabilityEntry] {
	return &deltaWatch[[]apiv1.CapabilityEntry]{c: c,
		full: func(ctx context.Context, at position) (answer[[]apiv1.CapabilityEntry], error) {
			return c.fetchCapabilities(ctx, vals, at)
		},
		delta: func(ctx context.Context, p client.Poll) (change[[]apiv1.CapabilityEntry], error) {
			resp, err := c.client.CapabilitiesDelta(ctx, vals, p)
			if err != nil {
				return change[[]apiv1.CapabilityEntry]{}, err
			}
			if resp.Reset && resp.Capabilities == nil {
				return change[[]apiv1.CapabilityEntry]{}, errors.New("delta answer with reset but without capabilities")
			}
			return change[[]apiv1.CapabilityEntry]{epoch: resp.RegistryEpoch, revision: resp.Revision, complete: resp.Complete,
				reset: resp.Reset, removed: resp.Removed, apply: resp.Apply}, nil
		}}
}

// newRoutesWatch is the delta watch of the routes view.
func newRoutesWatch(c *Client) *deltaWatch[Routes] {
	return &deltaWatch[Routes]{c: c, full: c.fetchRoutes,
		delta: func(ctx context.Context, p client.Poll) (change[Routes], error) {
			resp, err := c.client.RoutesDelta(ctx, p)
			if err != nil {
				return change[Routes]{}, err
			}
			if resp.Manifests == nil || resp.PublicPaths == nil {
				return change[Routes]{}, errors.New("routes delta answer without manifests or public_paths")
			}
			return change[Routes]{epoch: resp.RegistryEpoch, revision: resp.Revision, complete: resp.Complete, reset: resp.Reset,
				removed: resp.Removed, apply: func(held Routes) Routes {
					ms, ps := resp.Apply(held.Manifests, held.PublicPaths)
					return Routes{Manifests: ms, PublicPaths: ps}
				}}, nil
		}}
}

// fetch asks for the changes since what d holds (the whole answer when it holds nothing)
// and returns the answer they make; a long poll when at is one.
func (d *deltaWatch[T]) fetch(ctx context.Context, at position) (answer[T], error) {
	if d.off || at.index < 0 {
		a, err := d.full(ctx, at)
		if err == nil && !d.off {
			d.epoch, d.revision, d.held, d.holds = a.epoch, a.revision, a.body, true
		}
		return a, err
	}
	p := d.c.poll(position{epoch: d.epoch, index: d.revision})
	if !d.holds {
		p = client.Poll{} // nothing held: the whole answer, at once
	}
	ch, err := d.delta(ctx, p)
	var ae *apiv1.Error
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && ae.Code == apiv1.CodeUnknownParameter {
		d.off = true
		d.c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "the registry has no delta watch: watching whole answers", slog.Any("error", err))
		return d.full(ctx, at)
	}
	if err != nil {
		return answer[T]{}, err
	}
	if ch.epoch == "" {
		return answer[T]{}, errors.New("delta answer without registry_epoch")
	}
	if !ch.reset && ch.epoch != d.epoch {
		return answer[T]{}, fmt.Errorf("delta of epoch %s on an answer of epoch %s", ch.epoch, d.epoch)
	}
	d.held, d.holds = ch.apply(d.held), true
	d.epoch, d.revision = ch.epoch, ch.revision
	kind := "delta"
	if ch.reset {
		kind = "reset"
	}
	d.c.metrics.deltas.WithLabelValues(kind).Inc()
	return answer[T]{epoch: ch.epoch, revision: ch.revision, complete: ch.complete, body: d.held, removed: removedSet(ch.removed)}, nil
}

func deltaKind(d *apiv1.DiscoveryDelta) string {
	if d.Reset {
		return "reset"
	}
	return "delta"
}

// removedSet is the instances an incomplete answer says were removed.
func removedSet(rs []apiv1.Removal) map[string]bool {
	if len(rs) == 0 {
		return nil
	}
	out := make(map[string]bool, len(rs))
	for _, r := range rs {
		out[r.InstanceID] = true
	}
	return out
}

// position is where a view stands: the long poll waits for a revision past index of epoch
// (index < 0: a plain fetch).
type position struct {
	epoch string
	index int64
}

// poll is the long poll of at (at.index >= 0), or none: a plain fetch. Any failure of the
// fetch — transport, status, decoding — is an error, never an empty answer.
func (c *Client) poll(at position) client.Poll {
	if at.index < 0 {
		return client.Poll{}
	}
	// With its epoch the registry knows an index ahead of it is of its own history (a
	// replica further along etcd's): it waits for a change instead of answering at once.
	return client.Poll{Epoch: at.epoch, Index: at.index, Wait: c.cfg.WatchWait}
}

// refusedAnswer counts an answer a view refused as older than what it holds.
func (c *Client) refusedAnswer(reason string) {
	c.metrics.refused.WithLabelValues(reason).Inc()
}
