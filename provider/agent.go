package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// Defaults of Config.
const (
	DefaultFailureThreshold = 3
	DefaultStopTimeout      = 5 * time.Second
	DefaultRequestTimeout   = 5 * time.Second
)

// ErrInvalidRegistration is returned by Run when the registry refuses the registration as
// malformed (400): retrying the same document cannot succeed.
var ErrInvalidRegistration = errors.New("registration refused as invalid")

// Config configures an Agent.
type Config struct {
	// Registries are registry base URLs; the agent uses the first and fails over to the
	// next on transport errors, 5xx and 429.
	Registries []string
	// Registration is the instance to keep registered. UpdateCapabilities changes its
	// capabilities later.
	Registration apiv1.RegisterRequest
	// Client sends the requests (default: a plain client; every request is bounded by
	// RequestTimeout). The security issue sets TLS on it.
	Client *http.Client
	// BearerToken, when set, is sent as "Authorization: Bearer …".
	BearerToken string
	// HeartbeatInterval overrides the interval the registry returns (0: use the registry's).
	HeartbeatInterval time.Duration
	// Backoff is the registration retry schedule (default DefaultBackoff()).
	Backoff Backoff
	// FailureThreshold is how many heartbeat failures in a row make the agent register
	// again (default 3).
	FailureThreshold int
	// RequestTimeout bounds each request (default 5 s).
	RequestTimeout time.Duration
	// StopTimeout bounds the deregistration when Run's context ends (default 5 s).
	StopTimeout time.Duration
	// DrainTimeout bounds how long Run, after deregistering, waits for every live gateway
	// to acknowledge the withdrawal before it returns and the provider stops serving
	// (default 10 s; negative: do not wait).
	DrainTimeout time.Duration
	// Logger receives lifecycle events; nil is silent.
	Logger *slog.Logger
	// Registerer receives the agent's metrics; nil registers none. Several agents in one
	// process need distinct registerers (or nil).
	Registerer prometheus.Registerer
	// Clock is what the agent waits on (default: the real clock).
	Clock Clock
	// Rand returns uniform values in [0, 1) for jitter (default math/rand/v2).
	Rand func() float64
	// PublishWhenReady registers the instance not ready (health not_ready): the registry
	// answers it nowhere — not even as the first member of a brand-new service — until the
	// application calls Agent.Ready, which heartbeats ok at once. False (the default, kept
	// for compatibility) publishes it ready from the start: a service still warming up then
	// takes traffic as soon as its group has no admitted member.
	PublishWhenReady bool
}

func (c *Config) setDefaults() {
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Backoff == (Backoff{}) {
		c.Backoff = DefaultBackoff()
	}
	if c.FailureThreshold == 0 {
		c.FailureThreshold = DefaultFailureThreshold
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Validate reports a configuration that cannot work, the registration included.
func (c *Config) Validate() error {
	var errs []error
	if _, err := client.New(client.Config{Registries: c.Registries}); err != nil {
		errs = append(errs, err)
	}
	if err := c.Registration.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("registration: %w", err))
	}
	if c.Backoff.Initial <= 0 || c.Backoff.Multiplier < 1 || c.Backoff.Max < c.Backoff.Initial || c.Backoff.Jitter < 0 {
		errs = append(errs, fmt.Errorf("backoff %+v: want Initial > 0, Multiplier >= 1, Max >= Initial, Jitter >= 0", c.Backoff))
	}
	if c.FailureThreshold < 1 || c.HeartbeatInterval < 0 || c.RequestTimeout <= 0 || c.StopTimeout <= 0 {
		errs = append(errs, errors.New("failure threshold, request timeout and stop timeout must be positive; heartbeat interval not negative"))
	}
	return errors.Join(errs...)
}

// Status is what an Agent knows of its registration.
type Status struct {
	Registered    bool
	Generation    int64
	RegistryEpoch string
	// Registry is the base URL the agent talks to now.
	Registry string
	// LeaseExpiresAt is the end of the lease as of the last heartbeat or registration.
	LeaseExpiresAt time.Time
	// Registrations counts successful registrations, the first included.
	Registrations int
	// Health is what the heartbeats report (see SetHealth); not_ready until Ready when
	// Config.PublishWhenReady.
	Health string
	// Ready says the application said it is ready (always, without PublishWhenReady).
	Ready bool
}

// Agent keeps one instance registered. Run drives it; the other methods are safe to call
// from any goroutine.
type Agent struct {
	cfg     Config
	client  *client.Client
	metrics *metrics
	updated chan struct{} // capacity 1: a burst of updates is one re-registration
	readied chan struct{} // capacity 1: Ready heartbeats at once

	mu               sync.Mutex
	reg              apiv1.RegisterRequest
	status           Status
	health           string        // reported with every heartbeat (SetHealth)
	ready            bool          // the application is ready (Ready), or PublishWhenReady is off
	registryInterval time.Duration // what the last registration answer said
}

// New returns an Agent for cfg.
func New(cfg Config) (*Agent, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("provider config: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	c, err := client.New(client.Config{Registries: cfg.Registries, HTTPClient: cfg.Client, BearerToken: cfg.BearerToken, Timeout: cfg.RequestTimeout, Now: cfg.Clock.Now})
	if err != nil {
		return nil, fmt.Errorf("provider config: %w", err)
	}
	return &Agent{cfg: cfg, client: c, metrics: m, updated: make(chan struct{}, 1), readied: make(chan struct{}, 1), reg: cfg.Registration,
		health: apiv1.HealthOK, ready: !cfg.PublishWhenReady}, nil
}

// Ready says the application is ready to serve: with Config.PublishWhenReady the agent has
// registered the instance not ready, and now heartbeats ok at once (the registry admits it:
// at once without a health endpoint, else as soon as its probes pass). Without it, or
// called again, it does nothing.
func (a *Agent) Ready() {
	a.mu.Lock()
	was := a.ready
	a.ready = true
	a.mu.Unlock()
	if was {
		return
	}
	select {
	case a.readied <- struct{}{}:
	default:
	}
}

// reported is the health the agent reports now: not_ready until Ready, then SetHealth's.
// Called with a.mu held.
func (a *Agent) reported() string {
	if !a.ready {
		return apiv1.HealthNotReady
	}
	return a.health
}

// SetHealth sets what the heartbeats report from the next one on: apiv1.HealthOK,
// apiv1.HealthDegraded (the registry lowers the instance's weight) or apiv1.HealthFailing
// (it withdraws the instance from rotation). Anything else is an error.
func (a *Agent) SetHealth(health string) error {
	switch health {
	case apiv1.HealthOK, apiv1.HealthDegraded, apiv1.HealthFailing:
	default:
		return fmt.Errorf("health %q: want %s, %s or %s", health, apiv1.HealthOK, apiv1.HealthDegraded, apiv1.HealthFailing)
	}
	a.mu.Lock()
	a.health = health
	a.mu.Unlock()
	return nil
}

// Status returns a copy of the agent's registration status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	st := a.status
	st.Health, st.Ready = a.reported(), a.ready
	a.mu.Unlock()
	st.Registry = a.client.Registry()
	return st
}

// UpdateCapabilities replaces the instance's capabilities; the agent registers again with
// them at once. The new set is validated first and refused whole when invalid.
func (a *Agent) UpdateCapabilities(caps []apiv1.Capability) error {
	a.mu.Lock()
	next := a.reg
	next.Capabilities = slices.Clone(caps)
	if err := next.Validate(); err != nil {
		a.mu.Unlock()
		return err
	}
	a.reg = next
	a.mu.Unlock()
	select {
	case a.updated <- struct{}{}:
	default: // a re-registration is already pending; it will carry this set
	}
	return nil
}

// Run keeps the instance registered until ctx ends, then deregisters it (bounded by
// StopTimeout) and returns nil. It returns early only with ErrInvalidRegistration.
func (a *Agent) Run(ctx context.Context) error {
	defer a.deregister(ctx)
	for rejoin := false; ctx.Err() == nil; rejoin = true {
		if err := a.registerWithBackoff(ctx, rejoin); err != nil {
			if errors.Is(err, ErrInvalidRegistration) {
				return err
			}
			return nil // ctx ended
		}
		reason := a.heartbeatLoop(ctx)
		if reason == "" {
			return nil
		}
		a.metrics.reregister.WithLabelValues(reason).Inc()
		a.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "registering again", slog.String("reason", reason),
			slog.String("instance_id", a.cfg.Registration.InstanceID))
		if reason == ReasonNotFound || reason == ReasonEpochChanged {
			// The registry lost its state (a restart or an eviction): the whole fleet notices
			// within one interval. A uniform delay over one more interval spreads the herd.
			select {
			case <-ctx.Done():
				return nil
			case <-a.cfg.Clock.After(time.Duration(a.cfg.Rand() * float64(a.interval()))):
			}
		}
	}
	return nil
}

// interval is the heartbeat interval in force.
func (a *Agent) interval() time.Duration {
	if a.cfg.HeartbeatInterval > 0 {
		return a.cfg.HeartbeatInterval
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.registryInterval <= 0 {
		return 30 * time.Second // docs/architecture.md's default, until a registry has answered
	}
	return a.registryInterval
}

// registerWithBackoff registers, retrying until it succeeds or ctx ends. Rejoining (it was
// registered before: the registry restarted or was away), it retries at least once a
// heartbeat interval, at a random point of the second half of it: a restarted registry waits
// one lease TTL (three intervals) for its fleet before it answers without the instances that
// did not come back, so a retry five minutes away (the backoff's cap) would drop the instance
// from every consumer's view. Retry-After still wins, with as much again of jitter.
func (a *Agent) registerWithBackoff(ctx context.Context, rejoin bool) error {
	for attempt := 0; ; attempt++ {
		err := a.register(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrInvalidRegistration) {
			return err
		}
		wait := a.cfg.Backoff.Delay(attempt, a.cfg.Rand)
		if iv := a.interval(); rejoin && wait > iv {
			wait = iv/2 + time.Duration(a.cfg.Rand()*float64(iv/2))
		}
		if ra, ok := client.JitteredRetryAfter(err, a.cfg.Rand); ok {
			wait = max(wait, ra) // the registry's Retry-After, with as much again of jitter
		}
		a.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "registration failed", slog.Any("error", err),
			slog.Int("attempt", attempt+1), slog.String("retry_in", wait.String()))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.cfg.Clock.After(wait):
		}
	}
}

func (a *Agent) register(ctx context.Context) error {
	a.mu.Lock()
	req := a.reg
	if h := a.reported(); req.Health == "" || h != apiv1.HealthOK {
		req.Health = h // registered as a heartbeat would report it: not ready until Ready
	}
	a.mu.Unlock()
	a.metrics.registerAttempts.Inc()
	// Not cancelled with ctx (bounded by RequestTimeout): a registration the registry may
	// already have accepted is seen through, so that the stop that follows deregisters it
	// with its generation instead of leaving it registered until its lease ends.
	resp, err := a.client.Register(context.WithoutCancel(ctx), &req)
	if err != nil {
		var ae *apiv1.Error
		if errors.Is(err, client.ErrEncode) || errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
			return fmt.Errorf("%w: %v", ErrInvalidRegistration, err)
		}
		return err
	}
	a.metrics.registerSuccess.Inc()
	a.mu.Lock()
	a.status.Registered = true
	a.status.Generation = resp.Generation
	a.status.RegistryEpoch = resp.RegistryEpoch
	a.status.Registrations++
	a.status.LeaseExpiresAt = a.cfg.Clock.Now().Add(time.Duration(resp.LeaseTTLSeconds) * time.Second)
	a.registryInterval = time.Duration(resp.HeartbeatIntervalSeconds) * time.Second
	a.mu.Unlock()
	a.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "registered", slog.String("instance_id", req.InstanceID),
		slog.Int64("generation", resp.Generation), slog.String("registry_epoch", resp.RegistryEpoch))
	return nil
}

// heartbeatLoop heartbeats until the agent must register again (the reason) or ctx ends ("").
func (a *Agent) heartbeatLoop(ctx context.Context) string {
	failures := 0
	for {
		// 80–100 % of the interval: agents started together drift apart instead of
		// heartbeating (and, after a registry restart, re-registering) in lockstep.
		wait := time.Duration((0.8 + 0.2*a.cfg.Rand()) * float64(a.interval()))
		select {
		case <-ctx.Done():
			return ""
		case <-a.updated:
			return ReasonUpdated
		case <-a.readied: // ready: say so now, not an interval later
		case <-a.cfg.Clock.After(wait):
		}
		reason, err := a.heartbeat(ctx)
		if reason != "" {
			return reason
		}
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return ""
		}
		failures++
		a.metrics.heartbeatFailures.Inc()
		a.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "heartbeat failed", slog.Any("error", err), slog.Int("failures_in_a_row", failures))
		if failures >= a.cfg.FailureThreshold {
			return ReasonHeartbeatFailures
		}
	}
}

// heartbeat sends one heartbeat; a non-empty reason means: register again.
func (a *Agent) heartbeat(ctx context.Context) (string, error) {
	a.mu.Lock()
	id, gen, epoch, health := a.reg.InstanceID, a.status.Generation, a.status.RegistryEpoch, a.reported()
	a.mu.Unlock()
	start := a.cfg.Clock.Now()
	resp, err := a.client.Heartbeat(ctx, id, &apiv1.HeartbeatRequest{Generation: gen, Health: health})
	a.metrics.heartbeatDuration.Observe(a.cfg.Clock.Now().Sub(start).Seconds())
	var ae *apiv1.Error
	switch {
	case err == nil && resp.RegistryEpoch != epoch:
		return ReasonEpochChanged, nil
	case err == nil:
		a.mu.Lock()
		a.status.LeaseExpiresAt = resp.LeaseExpiresAt
		a.mu.Unlock()
		return "", nil
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return ReasonNotFound, nil
	case errors.As(err, &ae) && ae.Status == http.StatusGone:
		return ReasonGenerationMismatch, nil
	default:
		return "", err
	}
}

// deregister removes the registration when Run ends, bounded by StopTimeout.
func (a *Agent) deregister(ctx context.Context) {
	a.mu.Lock()
	st := a.status
	a.status.Registered = false
	a.mu.Unlock()
	if !st.Registered {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.StopTimeout)
	defer cancel()
	// A registry that is away (a transport error, 5xx, 429) is tried again — the client has
	// moved to the next registry — until StopTimeout: a deregistration lost in a failover
	// would leave gateways routing to a stopped provider until its lease ends.
	for attempt := 0; ; attempt++ {
		err := a.client.Deregister(dctx, a.cfg.Registration.InstanceID, st.Generation)
		var ae *apiv1.Error
		switch {
		case err == nil:
		case errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusGone):
			// no longer this incarnation (evicted, or replaced): nothing to withdraw
			a.cfg.Logger.LogAttrs(dctx, slog.LevelInfo, "deregistration: the registry no longer holds this incarnation", slog.Any("error", err))
			return
		case errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests:
			a.cfg.Logger.LogAttrs(dctx, slog.LevelWarn, "deregistration refused; the lease will expire", slog.Any("error", err))
			return
		default:
			wait := min(a.cfg.Backoff.Delay(attempt, a.cfg.Rand), time.Second)
			var ra *client.RetryAfterError
			if errors.As(err, &ra) {
				wait = max(wait, ra.After)
			}
			select {
			case <-dctx.Done():
				a.cfg.Logger.LogAttrs(dctx, slog.LevelWarn, "deregistration failed; the lease will expire", slog.Any("error", err),
					slog.Int("attempts", attempt+1))
				return
			case <-a.cfg.Clock.After(wait):
			}
			continue
		}
		break
	}
	a.cfg.Logger.LogAttrs(dctx, slog.LevelInfo, "deregistered", slog.String("instance_id", a.cfg.Registration.InstanceID),
		slog.Int64("generation", st.Generation))
	if a.cfg.DrainTimeout > 0 {
		a.awaitDrain(context.WithoutCancel(ctx), st.Generation)
	}
}

// withdrawalPoll spaces the asks of awaitDrain: four a second (at 50 ms, a draining
// provider asked twenty times a second, each ask a line of the registry's audit log).
const withdrawalPoll = 250 * time.Millisecond

// awaitDrain waits until every live gateway has applied the withdrawal of generation, or
// DrainTimeout passes: until then consumers may still send requests, so the provider keeps
// serving (the FARP withdrawal rule).
func (a *Agent) awaitDrain(ctx context.Context, generation int64) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.DrainTimeout)
	defer cancel()
	for {
		w, err := a.client.Withdrawal(ctx, a.cfg.Registration.InstanceID, generation)
		var ae *apiv1.Error
		switch {
		case err == nil && w.Acknowledged:
			a.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "withdrawal acknowledged by every gateway", slog.String("instance_id", w.InstanceID))
			return
		case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
			return // a registry that does not remember it (restarted, or older): nothing to wait for
		}
		select {
		case <-ctx.Done():
			a.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "gave up waiting for gateways to acknowledge the withdrawal",
				slog.Any("pending", w.Pending), slog.String("bound", a.cfg.DrainTimeout.String()))
			return
		case <-a.cfg.Clock.After(withdrawalPoll):
		}
	}
}
