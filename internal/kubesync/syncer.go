package kubesync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// Registry is what the syncer asks of the registry (*client.Client does it).
type Registry interface {
	Register(ctx context.Context, req *apiv1.RegisterRequest) (*apiv1.RegisterResponse, error)
	Heartbeat(ctx context.Context, id string, req *apiv1.HeartbeatRequest) (*apiv1.HeartbeatResponse, error)
	Deregister(ctx context.Context, id string, generation int64) error
	Services(ctx context.Context, p client.Page) (*apiv1.CatalogResponse, error)
	Report(ctx context.Context, req *apiv1.ReportRequest) (*apiv1.ReportResponse, error)
}

// Config configures a Syncer.
type Config struct {
	// Kube reads Services and EndpointSlices and records Events.
	Kube API
	// Namespaces are watched (empty: all).
	Namespaces []string
	Registry   Registry
	// Identity is the syncer's identity at the registry, which the registry records as the
	// owner of what it registers: on start the syncer adopts the instances of that owner and
	// never touches another's. Empty (a registry run open) adopts nothing.
	Identity string
	// HeartbeatInterval is how often every instance is renewed (default: the registry's
	// answer to the first registration, else 30 s).
	HeartbeatInterval time.Duration
	// Coalesce is the window changes gather in under a burst: a change after a quiet spell is
	// written at once, and at most one batch goes out per window (default 50 ms).
	Coalesce time.Duration
	// Workers bounds the registry requests in flight (default 16).
	Workers int
	Logger  *slog.Logger
	// Metrics receives the syncer's series (nil: kept nowhere).
	Metrics *Metrics
	// Clock is what the syncer waits on (default: the real clock).
	Clock Clock
}

// Validate reports a configuration that cannot run.
func (c *Config) Validate() error {
	switch {
	case c.Kube == nil:
		return errors.New("kubesync: a Kubernetes API client is required")
	case c.Registry == nil:
		return errors.New("kubesync: a registry client is required")
	case c.HeartbeatInterval < 0 || c.Coalesce < 0 || c.Workers < 0:
		return errors.New("kubesync: heartbeat interval, coalescing window and workers must not be negative")
	}
	return nil
}

// owned is an instance the syncer registered (or adopted).
type owned struct {
	service  string // the Service's namespace/name
	req      apiv1.RegisterRequest
	gen      int64
	health   string
	draining bool // deregistered (terminating); kept until the endpoint leaves
}

// Syncer registers the endpoints of annotated Services and keeps them renewed.
type Syncer struct {
	cfg     Config
	metrics *metrics

	services, slices stores // the informers' (or a test's)

	mu       sync.Mutex
	owned    map[string]*owned         // by instance id
	adopt    map[string]apiv1.Instance // the registry's instances of this owner at start, by id
	dirty    map[string]bool           // Service keys to reconcile
	reported map[string]string         // the last problem told per Service key, told once
	wake     chan struct{}             // a Service key became dirty
	interval time.Duration             // the heartbeat interval in force
}

// New returns a Syncer for cfg.
func New(cfg Config) (*Syncer, error) {
	if cfg.Coalesce == 0 {
		cfg.Coalesce = 50 * time.Millisecond
	}
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := cfg.Metrics
	if m == nil {
		var err error
		if m, err = newMetrics(nil); err != nil {
			return nil, err
		}
	}
	return &Syncer{cfg: cfg, metrics: m, owned: map[string]*owned{}, dirty: map[string]bool{}, reported: map[string]string{},
		wake: make(chan struct{}, 1), interval: cfg.HeartbeatInterval}, nil
}

// sliceService indexes EndpointSlices by their Service's key.
const sliceService = "service"

func sliceServiceKey(obj any) ([]string, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || sl.Labels[LabelServiceName] == "" {
		return nil, nil
	}
	return []string{sl.Namespace + "/" + sl.Labels[LabelServiceName]}, nil
}

// Clock is the time the syncer waits on; tests inject one.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Run watches the Services and EndpointSlices, reconciles every change into the registry
// and renews what it registered, until ctx ends. It never deregisters at its end: a
// successor (another replica elected, or this one restarted) adopts the instances.
func (s *Syncer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	informers := s.informers()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, inf := range informers {
		wg.Go(func() { inf.Run(ctx.Done()) })
	}
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, inf := range informers {
		synced = append(synced, inf.HasSynced)
	}
	start := s.cfg.Clock.Now()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended first
	}
	if err := s.start(ctx, start); err != nil {
		return err
	}
	wg.Go(func() { s.heartbeatLoop(ctx) })
	// A change after a quiet spell is written at once; under a burst (a rollout) the changes
	// gather so that at most one batch goes out per Coalesce window.
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
		first := s.cfg.Clock.Now()
		if wait := s.cfg.Coalesce - first.Sub(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-s.cfg.Clock.After(wait):
			}
		}
		last = s.cfg.Clock.Now()
		s.reconcileDirty(ctx, first)
	}
}

// start applies the first full list: it lists what the registry holds of this owner, adopts
// the instances the Services still claim, and only then removes what none claims.
func (s *Syncer) start(ctx context.Context, since time.Time) error {
	// the registry away: nothing can be adopted, and registering before knowing what it
	// holds would make new generations of what a restart should only renew; so wait for it
	for told := false; ; {
		err := s.loadAdoptable(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.metrics.errors.WithLabelValues("list").Inc()
		if !told {
			s.cfg.Logger.Warn("kube-sync: the registry does not answer: waiting for it before the first reconcile", slog.Any("error", err))
			told = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.cfg.Clock.After(2 * time.Second):
		}
	}
	s.markAll()
	s.reconcileDirty(ctx, since)
	// every kind listed and applied: the adopted instances no Service claimed may now go
	s.removeUnclaimed(ctx)
	s.cfg.Logger.Info("kube-sync: first full list applied", slog.Int("instances", len(s.snapshot())), slog.Duration("took", s.cfg.Clock.Now().Sub(since)))
	return nil
}

// informers builds a Service and an EndpointSlice informer per watched namespace (one of
// each for all namespaces), their stores the syncer's.
func (s *Syncer) informers() []cache.SharedIndexInformer {
	namespaces := s.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var out []cache.SharedIndexInformer
	s.services, s.slices = nil, nil
	for _, ns := range namespaces {
		k := s.cfg.Kube
		svc := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return k.ListServices(ctx, ns, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return k.WatchServices(ctx, ns, o)
			},
		}, &corev1.Service{}, 0, cache.Indexers{})
		sl := cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return k.ListEndpointSlices(ctx, ns, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return k.WatchEndpointSlices(ctx, ns, o)
			},
		}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{sliceService: sliceServiceKey})
		_, _ = svc.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    s.markObj,
			UpdateFunc: func(_, o any) { s.markObj(o) },
			DeleteFunc: s.markObj,
		})
		_, _ = sl.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    s.markObj,
			UpdateFunc: func(old, o any) { s.markObj(old); s.markObj(o) },
			DeleteFunc: s.markObj,
		})
		s.services = append(s.services, svc.GetIndexer())
		s.slices = append(s.slices, sl.GetIndexer())
		out = append(out, svc, sl)
	}
	return out
}

// stores reads several informers' stores (one per namespace watched) as one.
type stores []cache.Indexer

func (st stores) get(key string) (any, bool) {
	for _, i := range st {
		if o, ok, _ := i.GetByKey(key); ok {
			return o, true
		}
	}
	return nil, false
}

func (st stores) byIndex(index, value string) []any {
	var out []any
	for _, i := range st {
		objs, _ := i.ByIndex(index, value)
		out = append(out, objs...)
	}
	return out
}

func (st stores) keys() []string {
	var out []string
	for _, i := range st {
		out = append(out, i.ListKeys()...)
	}
	return out
}

func (st stores) indexValues(index string) []string {
	var out []string
	for _, i := range st {
		out = append(out, i.ListIndexFuncValues(index)...)
	}
	return out
}

// markObj marks the Service of a Service or an EndpointSlice (or of a deleted one's last
// state) dirty.
func (s *Syncer) markObj(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	var key string
	switch v := o.(type) {
	case *corev1.Service:
		key = v.Namespace + "/" + v.Name
	case *discoveryv1.EndpointSlice:
		if v.Labels[LabelServiceName] == "" {
			return
		}
		key = v.Namespace + "/" + v.Labels[LabelServiceName]
	default:
		return
	}
	s.mark(key)
}

func (s *Syncer) mark(key string) {
	s.mu.Lock()
	s.dirty[key] = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// markAll marks every Service with annotations or slices dirty, and every Service of an
// instance owned.
func (s *Syncer) markAll() {
	for _, key := range s.services.keys() {
		s.mark(key)
	}
	for _, key := range s.slices.indexValues(sliceService) {
		s.mark(key)
	}
}

// loadAdoptable lists the registry's instances of this owner: a restarted syncer heartbeats
// them with their generations instead of registering them again.
func (s *Syncer) loadAdoptable(ctx context.Context) error {
	adopt := map[string]apiv1.Instance{}
	if s.cfg.Identity != "" {
		page := client.Page{Limit: apiv1.MaxLimit}
		for {
			list, err := s.cfg.Registry.Services(ctx, page)
			if err != nil {
				return fmt.Errorf("kubesync: list the registry's instances to adopt: %w", err)
			}
			for _, in := range list.Instances {
				if in.Owner == s.cfg.Identity {
					adopt[in.InstanceID] = in
				}
			}
			if list.NextPageToken == "" {
				break
			}
			page.Token = list.NextPageToken
		}
	}
	s.mu.Lock()
	s.adopt = adopt
	s.mu.Unlock()
	if len(adopt) > 0 {
		s.cfg.Logger.Info("kube-sync: adopting the instances it registered before", slog.Int("instances", len(adopt)))
	}
	return nil
}

// op is one registry write.
type op struct {
	kind string // register, heartbeat, deregister
	id   string
	o    *owned
	// forget: deregistered, o leaves the owned set (its endpoint is gone; a terminating
	// one's stays, draining, until its endpoint goes)
	forget bool
}

// reconcileDirty reconciles every dirty Service, its writes in parallel; since is when the
// first change of the batch came (the reconcile latency's start).
func (s *Syncer) reconcileDirty(ctx context.Context, since time.Time) {
	s.mu.Lock()
	keys := make([]string, 0, len(s.dirty))
	for k := range s.dirty {
		keys = append(keys, k)
	}
	clear(s.dirty)
	s.mu.Unlock()
	sort.Strings(keys)
	var ops []op
	for _, key := range keys {
		ops = append(ops, s.plan(ctx, key)...)
	}
	s.apply(ctx, ops)
	s.metrics.reconcile.Observe(time.Since(since).Seconds())
	s.metrics.lastReconcile.SetToCurrentTime()
	s.countStates()
}

// plan decides the writes that bring the registry to what Service key and its slices say.
func (s *Syncer) plan(ctx context.Context, key string) []op {
	desired, state := s.desired(ctx, key)
	if state == invalid {
		return nil // an annotation made invalid keeps what was registered: nothing is lost on bad input
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ops []op
	want := map[string]bool{}
	if state == synced {
		for _, e := range desired {
			id := e.Request.InstanceID
			want[id] = true
			cur := s.owned[id]
			if cur != nil && cur.service != key {
				continue // another Service's: the first to claim a pod keeps it
			}
			switch {
			case e.Terminating:
				if cur != nil && !cur.draining {
					ops = append(ops, op{kind: "deregister", id: id, o: cur})
				}
			case cur == nil || cur.draining || !sameRegistration(&cur.req, &e.Request):
				health := e.health()
				req := e.Request
				req.Health = health
				n := &owned{service: key, req: req, health: health}
				if in, adopted := s.adopt[id]; adopted && cur == nil {
					delete(s.adopt, id)
					if sameInstance(&in, &req) {
						// a restarted syncer's own instance, as it left it: renewed with its
						// generation, not registered again (a heartbeat that finds it gone
						// registers it)
						n.gen = in.Generation
						s.owned[id] = n
						ops = append(ops, op{kind: "heartbeat", id: id, o: n})
						continue
					}
				}
				s.owned[id] = n
				ops = append(ops, op{kind: "register", id: id, o: n})
			default:
				if health := e.health(); health != cur.health {
					cur.health = health
					ops = append(ops, op{kind: "heartbeat", id: id, o: cur})
				}
			}
		}
	}
	for id, o := range s.owned {
		if o.service != key || want[id] {
			continue
		}
		if o.draining {
			delete(s.owned, id) // deregistered already; its endpoint has now gone
			continue
		}
		ops = append(ops, op{kind: "deregister", id: id, o: o, forget: true})
	}
	return ops
}

// serviceState is what a Service key is to the syncer.
type serviceState int

const (
	unsynced serviceState = iota // gone, or not annotated: its instances go
	synced                       // annotated, valid: its endpoints are the instances
	invalid                      // annotated, invalid: nothing registered, what was stays
)

// desired returns the endpoints Service key wants registered, and its state. A problem is
// told once as an Event on the Service, in the registry's journal and in the log.
func (s *Syncer) desired(ctx context.Context, key string) ([]Endpoint, serviceState) {
	obj, exists := s.services.get(key)
	if !exists || !Annotated(obj.(*corev1.Service)) {
		s.setProblem(key, "")
		return nil, unsynced
	}
	svc := obj.(*corev1.Service)
	spec, err := ParseSpec(svc)
	if err != nil {
		if s.setProblem(key, err.Error()) {
			s.metrics.errors.WithLabelValues("annotation").Inc()
			s.cfg.Logger.Warn("kube-sync: a Service's annotations are invalid: nothing is registered for it, what was stays", slog.String("service", key), slog.Any("error", err))
			s.event(ctx, svc, "InvalidMeshflowsAnnotations", "meshflows kube-sync registers nothing for this Service: "+err.Error())
			s.journal(ctx, svc, "registers nothing for this Service: its annotations are invalid: "+err.Error())
		}
		return nil, invalid
	}
	s.setProblem(key, "")
	var slices []*discoveryv1.EndpointSlice
	for _, o := range s.slices.byIndex(sliceService, key) {
		slices = append(slices, o.(*discoveryv1.EndpointSlice))
	}
	return Endpoints(svc, spec, slices), synced
}

// setProblem records the problem of key ("" none) and reports whether it is new.
func (s *Syncer) setProblem(key, problem string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported[key] == problem {
		return false
	}
	if problem == "" {
		delete(s.reported, key)
	} else {
		s.reported[key] = problem
	}
	return problem != ""
}

// sameInstance reports whether the registry's in is what req registers (a restarted
// syncer's instance that changed while it was away is registered again).
func sameInstance(in *apiv1.Instance, req *apiv1.RegisterRequest) bool {
	return in.ServiceName == req.ServiceName && in.ServiceVersion == req.ServiceVersion && in.Endpoint == req.Endpoint &&
		in.Zone == req.Zone && sameJSON(withMetadata(in.Capabilities), withMetadata(req.Capabilities)) && sameJSON(in.Manifest, req.Manifest) &&
		// registered by a syncer that did not say the runtime tells readiness: again, so that
		// it does (a registry that does not answer readiness, or one that probes, is alike)
		(in.Readiness == "" || in.Readiness == apiv1.ReadinessProbe || in.Readiness == req.Readiness)
}

// withMetadata returns caps with an absent metadata as the empty object the registry
// answers for it.
func withMetadata(caps []apiv1.Capability) []apiv1.Capability {
	out := slices.Clone(caps)
	for i := range out {
		if len(out[i].Metadata) == 0 {
			out[i].Metadata = json.RawMessage("{}")
		}
	}
	return out
}

// sameJSON reports whether a and b encode alike (metadata compared as JSON, not as the bytes
// it was sent in).
func sameJSON(a, b any) bool {
	x, errX := json.Marshal(a)
	y, errY := json.Marshal(b)
	return errX == nil && errY == nil && bytes.Equal(x, y)
}

// heartbeatEvery is the renewal interval in force: configured, else the registry's (from
// its answer to a registration, or a third of a lease it granted), else 10 s.
func (s *Syncer) heartbeatEvery() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.interval > 0 {
		return s.interval
	}
	return 10 * time.Second
}

// learnLease shortens an interval the registry has not told to a third of a lease it
// granted, so that an adopting syncer (which registers nothing) renews in time.
func (s *Syncer) learnLease(expires time.Time) {
	if s.cfg.HeartbeatInterval > 0 || expires.IsZero() {
		return
	}
	third := expires.Sub(s.cfg.Clock.Now()) / 3
	s.mu.Lock()
	if third > 0 && (s.interval == 0 || third < s.interval) {
		s.interval = third.Round(time.Millisecond)
	}
	s.mu.Unlock()
}

// sameRegistration reports whether a and b register the same thing (health aside).
func sameRegistration(a, b *apiv1.RegisterRequest) bool {
	x, y := *a, *b
	x.Health, y.Health = "", ""
	return reflect.DeepEqual(x, y)
}

// apply runs ops on Workers goroutines and waits for them.
func (s *Syncer) apply(ctx context.Context, ops []op) {
	if len(ops) == 0 {
		return
	}
	work := make(chan op)
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(ops)) {
		wg.Go(func() {
			for o := range work {
				s.do(ctx, o)
			}
		})
	}
	for _, o := range ops {
		work <- o
	}
	close(work)
	wg.Wait()
}

// do runs one write and records its result. A write cut short by the syncer's end is
// nobody's error: the successor adopts what stands.
func (s *Syncer) do(ctx context.Context, o op) {
	if ctx.Err() != nil {
		return
	}
	switch o.kind {
	case "register":
		s.register(ctx, o.o)
	case "heartbeat":
		s.mu.Lock()
		gen, health := o.o.gen, o.o.health
		s.mu.Unlock()
		s.metrics.writes.WithLabelValues("heartbeat").Inc()
		resp, err := s.cfg.Registry.Heartbeat(ctx, o.id, &apiv1.HeartbeatRequest{Generation: gen, Health: health})
		if err == nil {
			s.learnLease(resp.LeaseExpiresAt)
		}
		if status(err) == http.StatusNotFound || status(err) == http.StatusGone {
			s.register(ctx, o.o) // gone (a registry restarted empty, an eviction) or another incarnation: registered again
			return
		}
		if err != nil && ctx.Err() == nil {
			s.metrics.errors.WithLabelValues("heartbeat").Inc()
			s.cfg.Logger.Warn("kube-sync: heartbeat failed", slog.String("instance_id", o.id), slog.Any("error", err))
		}
	case "deregister":
		s.mu.Lock()
		gen := o.o.gen
		o.o.draining = true
		s.mu.Unlock()
		s.metrics.writes.WithLabelValues("deregister").Inc()
		err := s.cfg.Registry.Deregister(ctx, o.id, gen)
		if err != nil && status(err) != http.StatusNotFound && status(err) != http.StatusGone && ctx.Err() == nil {
			s.metrics.errors.WithLabelValues("deregister").Inc()
			s.cfg.Logger.Warn("kube-sync: deregistration failed", slog.String("instance_id", o.id), slog.Any("error", err))
			s.mu.Lock()
			o.o.draining = false // tried again at the next reconcile of its Service
			s.mu.Unlock()
			s.mark(o.o.service)
			return
		}
		if o.forget {
			s.mu.Lock()
			if s.owned[o.id] == o.o {
				delete(s.owned, o.id)
			}
			s.mu.Unlock()
		}
	}
}

// register registers o's request and records its generation.
func (s *Syncer) register(ctx context.Context, o *owned) {
	s.mu.Lock()
	req := o.req
	req.Health = o.health
	s.mu.Unlock()
	s.metrics.writes.WithLabelValues("register").Inc()
	resp, err := s.cfg.Registry.Register(ctx, &req)
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil {
		s.metrics.errors.WithLabelValues("register").Inc()
		s.cfg.Logger.Warn("kube-sync: registration failed", slog.String("instance_id", req.InstanceID), slog.String("service", o.service), slog.Any("error", err))
		s.mu.Lock()
		if s.owned[req.InstanceID] == o {
			delete(s.owned, req.InstanceID) // tried again at the next reconcile of its Service
		}
		s.mu.Unlock()
		if status(err) >= 400 && status(err) < 500 {
			if obj, ok := s.services.get(o.service); ok {
				s.event(ctx, obj.(*corev1.Service), "RegistrationRefused", fmt.Sprintf("the registry refused %s: %v", req.InstanceID, err))
			}
		}
		return
	}
	s.mu.Lock()
	o.gen = resp.Generation
	if s.interval == 0 && resp.HeartbeatIntervalSeconds > 0 {
		s.interval = time.Duration(resp.HeartbeatIntervalSeconds) * time.Second
	}
	s.mu.Unlock()
}

// removeUnclaimed deregisters the adopted instances no Service claimed in the first full
// list: endpoints that went while no syncer ran.
func (s *Syncer) removeUnclaimed(ctx context.Context) {
	s.mu.Lock()
	var ops []op
	for id, in := range s.adopt {
		ops = append(ops, op{kind: "deregister", id: id, o: &owned{gen: in.Generation}})
	}
	s.adopt = nil
	s.mu.Unlock()
	if len(ops) > 0 {
		s.cfg.Logger.Info("kube-sync: deregistering instances it owned whose endpoints went while it was away", slog.Int("instances", len(ops)))
	}
	s.apply(ctx, ops)
}

// heartbeatLoop renews every owned instance each interval until ctx ends.
func (s *Syncer) heartbeatLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.Clock.After(s.heartbeatEvery()):
		}
		var ops []op
		for id, o := range s.snapshot() {
			ops = append(ops, op{kind: "heartbeat", id: id, o: o})
		}
		s.apply(ctx, ops)
		s.metrics.lastReconcile.SetToCurrentTime()
	}
}

// snapshot returns the owned instances that are not draining.
func (s *Syncer) snapshot() map[string]*owned {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*owned, len(s.owned))
	for id, o := range s.owned {
		if !o.draining {
			out[id] = o
		}
	}
	return out
}

// countStates sets the instances gauge.
func (s *Syncer) countStates() {
	s.mu.Lock()
	n := map[string]int{"ready": 0, "not_ready": 0, "terminating": 0}
	for _, o := range s.owned {
		switch {
		case o.draining:
			n["terminating"]++
		case o.health == apiv1.HealthNotReady:
			n["not_ready"]++
		default:
			n["ready"]++
		}
	}
	s.mu.Unlock()
	for state, c := range n {
		s.metrics.instances.WithLabelValues(state).Set(float64(c))
	}
}

// event records a Warning Event on svc (kubectl describe service shows it).
func (s *Syncer) event(ctx context.Context, svc *corev1.Service, reason, message string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: svc.Name + ".", Namespace: svc.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning, Count: 1,
		FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "meshflows-kube-sync"},
		ReportingController: "meshflows.io/kube-sync",
	}
	if err := s.cfg.Kube.CreateEvent(ctx, ev); err != nil {
		s.metrics.errors.WithLabelValues("event").Inc()
		s.cfg.Logger.Warn("kube-sync: could not record an Event on the Service", slog.String("service", svc.Namespace+"/"+svc.Name), slog.Any("error", err))
	}
}

// journal records in the registry's journal that svc is not registered, and why.
func (s *Syncer) journal(ctx context.Context, svc *corev1.Service, message string) {
	if len(message) > 1000 {
		message = message[:1000]
	}
	_, err := s.cfg.Registry.Report(ctx, &apiv1.ReportRequest{Reporter: "kube-sync", Events: []apiv1.ReportedEvent{{
		Type: apiv1.EventRuntimeRejected, Severity: apiv1.SeverityWarning, Subject: "kubernetes/" + svc.Namespace + "/" + svc.Name, Message: message,
		Attrs: map[string]any{"namespace": svc.Namespace, "service": svc.Name}}}})
	if err != nil {
		s.metrics.errors.WithLabelValues("event").Inc()
		s.cfg.Logger.Warn("kube-sync: could not record the problem in the registry's journal", slog.String("service", svc.Namespace+"/"+svc.Name), slog.Any("error", err))
	}
}

// status is the HTTP status of a registry error (0 for none or a transport error).
func status(err error) int {
	var ae *apiv1.Error
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
