package routingcontrol

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Client is connected to the routing-control cluster with the consumer's own
	// credentials.
	Client *clientv3.Client
	// Prefix of the keys (default DefaultPrefix).
	Prefix string
	// Check is how often the watcher reads the signal (a linearizable read, which fails
	// without quorum) besides watching it (default 1 s).
	Check time.Duration
	// Timeout bounds each read (default 2 s).
	Timeout time.Duration
	// StaleAfter: the signal is stale when no read succeeded for this long (default 3 s).
	StaleAfter time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// View is a consumer's copy of the signal.
type View struct {
	Signal   apiv1.RoutingSignal
	Revision int64
	// Read: a value was read at least once. Before, every region counts as on.
	Read bool
	// ReadAt is when the cluster last answered.
	ReadAt time.Time
	// Stale: the cluster has not answered for StaleAfter (unreachable, or no quorum); the
	// signal is the last one read, kept as it was (fail-static).
	Stale bool
	// Error is the last read's error while stale.
	Error string
}

// On says whether region takes traffic: a region the signal does not hold is on.
func (v *View) On(region string) bool {
	r, ok := v.Signal.Regions[region]
	return !ok || r.State != apiv1.RegionOff
}

// Watcher keeps a consumer's view of the routing control.
type Watcher struct {
	cfg     WatcherConfig
	control *Control
	view    atomic.Pointer[View]
	mu      sync.Mutex // orders updates of view
	metrics *watcherMetrics
}

type watcherMetrics struct {
	stale    prometheus.Gauge
	lastRead prometheus.Gauge
	on       *prometheus.GaugeVec
}

// NewWatcher returns a Watcher; Run keeps it current.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	c, err := New(Config{Client: cfg.Client, Prefix: cfg.Prefix, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	if cfg.Check <= 0 {
		cfg.Check = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Watcher{cfg: cfg, control: c}
	w.view.Store(&View{Signal: apiv1.RoutingSignal{Regions: map[string]apiv1.RegionSwitch{}}})
	if cfg.Registerer != nil {
		m := &watcherMetrics{
			stale: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshflows_routing_control_stale",
				Help: "1 while the routing-control cluster has not answered for the stale bound (unreachable or without quorum): the last signal read is kept, never taken as off."}),
			lastRead: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshflows_routing_control_last_read_timestamp_seconds",
				Help: "When the routing-control cluster last answered a read (Unix seconds)."}),
			on: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshflows_region_on",
				Help: "1 when the region is on in the last signal read, 0 when off."}, []string{"region"}),
		}
		for _, c := range []prometheus.Collector{m.stale, m.lastRead, m.on} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register routing-control metrics: %w", err)
			}
		}
		w.metrics = m
	}
	return w, nil
}

// View returns the current view (never nil; do not change it).
func (w *Watcher) View() *View { return w.view.Load() }

// Run watches the signal and reads it every Check until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { w.watch(ctx) })
	t := time.NewTicker(w.cfg.Check)
	defer t.Stop()
	for {
		w.read(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// read reads the signal once, linearizably, and updates the view; a failure keeps the
// signal and marks it stale once StaleAfter passed since the last answer.
func (w *Watcher) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	sig, rev, err := w.control.Read(rctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		w.failed(err)
		return
	}
	w.update(sig, rev)
}

// watch applies every change of the signal as it happens (the reads catch what it misses).
func (w *Watcher) watch(ctx context.Context) {
	for ctx.Err() == nil {
		rev := w.View().Revision
		opts := []clientv3.OpOption{}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range w.cfg.Client.Watch(wctx, w.control.signalKey(), opts...) {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if sig, err := decode(ev.Kv.Value); err == nil {
					w.update(sig, ev.Kv.ModRevision)
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (w *Watcher) update(sig apiv1.RoutingSignal, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.View()
	now := w.cfg.Now()
	v := &View{Signal: sig, Revision: rev, Read: true, ReadAt: now}
	if rev < old.Revision { // an older answer than one already applied: only its freshness counts
		v.Signal, v.Revision = old.Signal, old.Revision
	}
	if old.Stale {
		w.cfg.Logger.Info("the routing control answers again", slog.Duration("unanswered_for", now.Sub(old.ReadAt)))
	}
	if changed := describeChange(old, v); changed != "" {
		w.cfg.Logger.Info("routing control changed", slog.String("change", changed), slog.Int64("revision", v.Revision))
	}
	w.view.Store(v)
	if m := w.metrics; m != nil {
		m.stale.Set(0)
		m.lastRead.Set(float64(now.UnixNano()) / 1e9)
		for name := range v.Signal.Regions {
			on := 0.0
			if v.On(name) {
				on = 1
			}
			m.on.WithLabelValues(name).Set(on)
		}
	}
}

func (w *Watcher) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.View()
	now := w.cfg.Now()
	since := old.ReadAt
	if !old.Read {
		since = time.Time{}
	}
	if old.Read && now.Sub(since) < w.cfg.StaleAfter {
		return
	}
	v := *old
	v.Stale, v.Error = true, err.Error()
	if !old.Stale {
		w.cfg.Logger.Warn("the routing control does not answer: keeping the last signal read (fail-static), never taking unreachable as off",
			slog.Bool("ever_read", old.Read), slog.Time("last_read", old.ReadAt), slog.Any("error", err))
	}
	w.view.Store(&v)
	if w.metrics != nil {
		w.metrics.stale.Set(1)
	}
}

// describeChange names the regions whose state differs between a and b.
func describeChange(a, b *View) string {
	var out []string
	for name := range b.Signal.Regions {
		if a.On(name) != b.On(name) || !a.Read {
			st := apiv1.RegionOn
			if !b.On(name) {
				st = apiv1.RegionOff
			}
			out = append(out, name+" "+st)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
