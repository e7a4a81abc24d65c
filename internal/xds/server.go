package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/reconnect"
	"github.com/meshflows/meshflows/routing"
)

// Config configures a Server.
type Config struct {
	// Discovery is the registry view the server serves.
	Discovery *discovery.Client
	// Home, when set, makes the server regional: Discovery is the home region's registry,
	// Peers the other regions' in their priority order. Every cluster's assignment holds
	// home's endpoints at the first xDS priorities and each peer's after those of the regions
	// before it (Envoy fails over by priority), each region's view kept apart (instances
	// are named REGION/ID, the locality's region is the region). A region RegionOn says is
	// off has no endpoint in any assignment.
	Home     string
	Peers    []Peer
	RegionOn func(region string) bool
	// Logger receives NACKs and stream events (default: discarded).
	Logger *slog.Logger
	// ShutdownGrace bounds how long Run lets streams end after its context ends (default 5 s).
	ShutdownGrace time.Duration
	// Static and Policy are the gateway's static routes and path policy: the routing table
	// served over RDS (RouteConfigName) is derived with them from the registry's manifests,
	// as the gateway derives its own.
	Static []routing.StaticRoute
	Policy routing.Policy
	// MaxResponseBytes bounds each EDS and RDS response (default DefaultMaxResponseBytes,
	// gRPC's default receive limit): more endpoints than fit go out over several responses,
	// each acknowledged before the next. CDS and LDS responses carry their whole state, as
	// the protocol wants, and are small (a cluster or a listener per capability and provider).
	MaxResponseBytes int
	// TLS, when set, serves gRPC over it (mTLS when it asks for client certificates);
	// otherwise plaintext.
	TLS *tls.Config
	// Authorize, when set, is asked at the start of every stream: an error refuses it, with
	// its gRPC status when it carries one (else PermissionDenied).
	Authorize func(ctx context.Context) error
	// WeightDelay is how long a change of a cluster's endpoint weights alone (a slow start's
	// ramp, the most common change under churn) may wait before it is sent (default
	// DefaultWeightDelay; negative: sent at once). Any other change of the cluster sends it
	// at once, with the weights as they are then: a ramp's weight reaches Envoy at most this
	// much later, and a cluster is sent about once per change instead of once more per ramp
	// step.
	WeightDelay time.Duration
	// StreamRate and StreamBurst bound the new streams accepted a second (a token bucket):
	// after this server or the registry restarts, every Envoy reconnects at once, and each
	// new stream costs a whole state. The excess is refused RESOURCE_EXHAUSTED with the wait
	// in the trailers (grpc-retry-pushback-ms, retry-after), spread over the backlog. Open
	// streams are never cut. Zero or negative: no bound (meshflows xds sets
	// DefaultStreamRate).
	StreamRate  float64
	StreamBurst int
	// Registerer receives meshflows_xds_streams_shed_total (nil: none).
	Registerer prometheus.Registerer
	// Now is the clock of WeightDelay and the stream cap (default time.Now).
	Now func() time.Time
}

// DefaultStreamRate and DefaultStreamBurst are meshflows xds's --reconnect-rate and
// --reconnect-burst.
const (
	DefaultStreamRate  = 1000
	DefaultStreamBurst = 1000
)

// DefaultWeightDelay is Config.WeightDelay's default: the registry moves a service's ramps
// once per sweep interval (1 s) already.
const DefaultWeightDelay = time.Second

// Validate reports a configuration that cannot run.
func (c *Config) Validate() error {
	if c.Discovery == nil {
		return errors.New("xds: a discovery client is required")
	}
	if c.ShutdownGrace < 0 {
		return fmt.Errorf("xds: shutdown grace %s is negative", c.ShutdownGrace)
	}
	if c.MaxResponseBytes < 0 {
		return fmt.Errorf("xds: max response bytes %d is negative", c.MaxResponseBytes)
	}
	if c.WeightDelay > time.Minute {
		return fmt.Errorf("xds: weight delay %s is over a minute", c.WeightDelay)
	}
	return nil
}

// Server serves the discovery view over ADS.
type Server struct {
	cfg    Config
	caches map[resourcev3.Type]*cachev3.LinearCache
	mux    *cachev3.MuxCache

	mu     sync.Mutex
	index  *capsIndex                                    // the capabilities view, to update by change
	caps   map[resourcev3.Type]map[string]types.Resource // from the capabilities view
	routes map[resourcev3.Type]map[string]types.Resource // from the routes view (the table)
	// follow derives the table of each routes view incrementally (under followMu, which
	// keeps one routes update at a time; mu is taken inside it).
	followMu sync.Mutex
	follow   routing.Follower
	last     map[resourcev3.Type]map[string]types.Resource // the resources served, to find what changed
	// pending holds the clusters whose assignment changed while no stream subscribed to it
	// (interest.go): built when one does.
	pending  map[string]struct{}
	interest interest
	// held holds the clusters whose endpoint weights alone changed since their assignment
	// was last built, with when the first such change came (Config.WeightDelay).
	held map[string]time.Time
	// streams caps new streams (Config.StreamRate); nil: no bound.
	streams *reconnect.Cap
	shed    prometheus.Counter
}

// servedTypes are the resource types served; a stream asking for another type gets an error.
var servedTypes = []resourcev3.Type{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 5 * time.Second
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.WeightDelay == 0 {
		cfg.WeightDelay = DefaultWeightDelay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// One linear cache per type: every client gets the same resources whatever its node id,
	// a resource is marshalled once however many streams hold it, and a change of the view
	// re-sends only the resources that changed.
	s := &Server{cfg: cfg, caches: map[resourcev3.Type]*cachev3.LinearCache{}, index: newCapsIndex(), caps: emptyResources(), pending: map[string]struct{}{},
		held: map[string]time.Time{}, streams: reconnect.New(cfg.StreamRate, cfg.StreamBurst),
		shed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "meshflows", Subsystem: "xds", Name: "streams_shed_total",
			Help: "New ADS streams refused RESOURCE_EXHAUSTED over --reconnect-rate."})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.shed); err != nil {
			return nil, fmt.Errorf("xds: metrics: %w", err)
		}
	}
	mux := &cachev3.MuxCache{Classify: func(r *cachev3.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() }, Caches: map[string]cachev3.Cache{}}
	for _, typ := range servedTypes {
		c := cachev3.NewLinearCache(typ, cachev3.WithLogger(cacheLogger{cfg.Logger}))
		s.caches[typ] = c
		mux.Caches[typ] = c
		if typ == resourcev3.EndpointType || typ == resourcev3.RouteType {
			mux.Caches[typ] = splitCache{Cache: c, max: cfg.MaxResponseBytes}
		}
	}
	s.mux = mux
	if cfg.Home != "" {
		s.index.rank, s.index.off = map[string]int{cfg.Home: 0}, map[string]bool{}
		for i, p := range cfg.Peers {
			s.index.rank[p.Region] = i + 1
		}
	}
	return s, nil
}

// updateIn is update for the deltas of region's registry in a regional server (home's
// included); in a server that is not, update itself.
func (s *Server) updateIn(region string) func(*discovery.Delta) {
	if s.cfg.Home == "" {
		return s.update
	}
	return func(d *discovery.Delta) {
		s.updateWith(d, func() (map[string]struct{}, map[string]struct{}) { return s.index.applyIn(region, d) })
	}
}

// setOff makes the regions of off absent from every assignment, and rebuilds them all.
func (s *Server) setOff(off map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index.off = off
	built := map[string]struct{}{}
	for n := range s.index.clusters {
		delete(s.pending, n)
		delete(s.held, n)
		if s.buildLocked(n, "regions") {
			built[n] = struct{}{}
		}
	}
	changed := s.installNamesLocked(built)
	s.cfg.Logger.Info("regions switched: assignments rebuilt", slog.Any("off", off), slog.Int("resources_changed", changed))
}

// followRegions applies RegionOn to the assignments whenever its answer changes, checked
// every 100 ms, until ctx ends.
func (s *Server) followRegions(ctx context.Context) {
	regions := []string{s.cfg.Home}
	for _, p := range s.cfg.Peers {
		regions = append(regions, p.Region)
	}
	last := map[string]bool{}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		off := map[string]bool{}
		for _, r := range regions {
			if !s.cfg.RegionOn(r) {
				off[r] = true
			}
		}
		if !maps.Equal(off, last) {
			s.setOff(off)
			last = off
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Peer is a peer region of a regional server and its registry's view.
type Peer struct {
	Region    string
	Discovery *discovery.Client
}

// query is the view served: every instance with its verdict, so that out-of-rotation ones
// are told as such (UNHEALTHY, DRAINING) rather than disappearing.
var query = discovery.Query{IncludeAll: true}

// emptyResources is a resource set with a map for every type.
func emptyResources() map[resourcev3.Type]map[string]types.Resource {
	return map[resourcev3.Type]map[string]types.Resource{resourcev3.ClusterType: {}, resourcev3.EndpointType: {},
		resourcev3.ListenerType: {}, resourcev3.RouteType: {}}
}

// update folds a change of the view in (discovery.WatchDeltas): the resources of the clusters
// it touched (every cluster at a reset) are built again, and those that differ replaced (and
// sent again to the streams holding them). The resources are those Resources builds from the
// whole view (TestUpdatesByChangeAreTheWholeView): a change costs the clusters it touched,
// not the fleet. The assignment of a cluster that stays, which no stream subscribes to, is
// only marked pending (interest.go); that of a cluster whose endpoints' weights alone
// changed waits up to Config.WeightDelay for another change (flushWeights).
func (s *Server) update(d *discovery.Delta) {
	s.updateWith(d, func() (map[string]struct{}, map[string]struct{}) { return s.index.apply(d) })
}

// updateWith is update with the delta folded in by apply.
func (s *Server) updateWith(d *discovery.Delta, apply func() (dirty, moved map[string]struct{})) {
	version := d.Epoch + "/" + strconv.FormatInt(d.Revision, 10)
	s.mu.Lock()
	defer s.mu.Unlock()
	dirty, moved := apply()
	deferred, weighed := 0, 0
	now := s.cfg.Now()
	for _, n := range sortedNames(dirty) {
		keeps := s.index.keeps(s.caps, n)
		if !s.interest.wants(n) && keeps {
			s.pending[n] = struct{}{}
			delete(s.held, n) // built as it is when a stream subscribes
			delete(dirty, n)
			deferred++
			continue
		}
		if _, m := moved[n]; !m && s.cfg.WeightDelay > 0 && keeps {
			if _, ok := s.held[n]; !ok {
				s.held[n] = now
			}
			delete(dirty, n)
			weighed++
			continue
		}
		delete(s.pending, n)
		delete(s.held, n)
		if !s.buildLocked(n, version) {
			delete(dirty, n)
		}
	}
	changed := s.installNamesLocked(dirty)
	s.cfg.Logger.Debug("xds view", slog.String("version", version), slog.Int("entries", len(s.index.entries)), slog.Int("clusters_touched", len(dirty)),
		slog.Int("assignments_deferred", deferred), slog.Int("weights_held", weighed), slog.Int("resources_changed", changed))
}

// flushWeights builds and sends the assignments whose weights have waited WeightDelay by
// now (all of them when all), and returns how many it sent.
func (s *Server) flushWeights(now time.Time, all bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	built := map[string]struct{}{}
	for n, since := range s.held {
		if !all && now.Sub(since) < s.cfg.WeightDelay {
			continue
		}
		delete(s.held, n)
		if s.buildLocked(n, "") {
			built[n] = struct{}{}
		}
	}
	return s.installNamesLocked(built)
}

// buildLocked builds the resources of cluster n from the index, and reports whether they
// changed (an error leaves them as they were, and is logged).
func (s *Server) buildLocked(n, version string) bool {
	built, err := s.index.build(s.caps, n)
	if err != nil {
		// the index holds the view; the cluster's resources stay as they were
		s.cfg.Logger.Error("xds resources not built; the previous ones stay", slog.String("version", version), slog.String("cluster", n), slog.Any("error", err))
		return false
	}
	return built
}

// updateRoutes installs the routing table derived from a routes view: only its resources are
// compared with those served (a routes answer moves at every removal while the registry warms
// up, and comparing the fleet's clusters then was most of the server's CPU during a churn).
//
// The table is derived incrementally (routing.Follower): a view that continues the last one
// applies only what changed, and then only the clusters and endpoints of the rows that
// changed are built again, beside the RouteConfiguration (one virtual host: Envoy gets it
// whole when a row changed, and nothing when none did).
func (s *Server) updateRoutes(res *discovery.RoutesResult) {
	s.followMu.Lock()
	defer s.followMu.Unlock()
	t, whole, rows := s.follow.Next(routing.InputFromView(s.cfg.Static, s.cfg.Policy, res.Manifests, res.PublicPaths), res.RegistryEpoch)
	if !whole {
		if len(rows) > 0 {
			s.updateRows(res.Revision, t, rows)
		}
		return
	}
	routes := RouteResources(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[resourcev3.Type]map[string]struct{}{}
	for _, set := range []map[resourcev3.Type]map[string]types.Resource{s.routes, routes} {
		for typ, rs := range set {
			if names[typ] == nil {
				names[typ] = map[string]struct{}{}
			}
			for n := range rs {
				names[typ][n] = struct{}{}
			}
		}
	}
	s.routes = routes
	changed := 0
	for _, typ := range servedTypes {
		changed += s.installTypeLocked(typ, names[typ], false)
	}
	s.cfg.Logger.Debug("xds routes", slog.Int64("revision", res.Revision), slog.Int("routes", len(t.Entries())), slog.Int("resources_changed", changed))
}

// updateRows installs what the rows changed: the clusters and endpoints of each changed
// row (under its old pattern and its new one), and the route configuration.
func (s *Server) updateRows(revision int64, t *routing.Table, rows []routing.RowChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[resourcev3.Type]map[string]struct{}{resourcev3.RouteType: {RouteConfigName: {}}, resourcev3.ClusterType: {}, resourcev3.EndpointType: {}}
	touch := func(name string) {
		names[resourcev3.ClusterType][name] = struct{}{}
		names[resourcev3.EndpointType][name] = struct{}{}
	}
	for _, r := range rows {
		if r.Old != nil {
			name := RouteClusterName(r.Old.Method, r.Old.Pattern)
			delete(s.routes[resourcev3.ClusterType], name)
			delete(s.routes[resourcev3.EndpointType], name)
			touch(name)
		}
	}
	for _, r := range rows {
		if r.New != nil {
			if name, c, a, ok := routeCluster(r.New); ok {
				s.routes[resourcev3.ClusterType][name] = c
				s.routes[resourcev3.EndpointType][name] = a
				touch(name)
			}
		}
	}
	s.routes[resourcev3.RouteType][RouteConfigName] = routeConfig(t)
	changed := 0
	for _, typ := range servedTypes {
		changed += s.installTypeLocked(typ, names[typ], false)
	}
	s.cfg.Logger.Debug("xds routes", slog.Int64("revision", revision), slog.Int("rows_changed", len(rows)), slog.Int("resources_changed", changed))
}

// installNamesLocked installs the capabilities' resources of the names given (their
// clusters, endpoints and listeners), and returns how many changed.
func (s *Server) installNamesLocked(names map[string]struct{}) int {
	changed := 0
	for _, typ := range []resourcev3.Type{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType} {
		changed += s.installTypeLocked(typ, names, true)
	}
	return changed
}

// installTypeLocked replaces, in the cache of typ, the resources of the names given that
// differ from those served (a name of the capabilities' resources and the routes' alike is
// the capabilities'), removes those neither has any more, and returns how many changed.
// built says that every resource of names that is not the one served was built anew from
// other endpoints (capsIndex.build): it differs, without comparing.
func (s *Server) installTypeLocked(typ resourcev3.Type, names map[string]struct{}, built bool) int {
	if s.last == nil {
		s.last = map[resourcev3.Type]map[string]types.Resource{}
	}
	last := s.last[typ]
	if last == nil {
		last = map[string]types.Resource{}
		s.last[typ] = last
	}
	update := map[string]types.Resource{}
	var remove []string
	for n := range names {
		cur, ok := s.caps[typ][n]
		if !ok {
			cur, ok = s.routes[typ][n]
		}
		old, had := last[n]
		switch {
		case ok && had && old == cur: // the same resource: unchanged
		case ok && (!had || built || !proto.Equal(old, cur)):
			update[n] = cur
			last[n] = cur
		case !ok && had:
			remove = append(remove, n)
			delete(last, n)
		}
	}
	if len(update)+len(remove) == 0 {
		return 0
	}
	if err := s.caches[typ].UpdateResources(update, remove); err != nil {
		s.cfg.Logger.Error("xds resources not installed", slog.String("type", typ), slog.Any("error", err))
	}
	return len(update) + len(remove)
}

// Run keeps the resources current from the discovery view and serves ADS on ln until ctx
// ends; the last resources keep being served while the registry is away.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var opts []grpc.ServerOption
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	authz := s.cfg.Authorize
	opts = append(opts, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if authz != nil {
			if err := authz(ss.Context()); err != nil {
				if _, ok := status.FromError(err); !ok {
					err = status.Error(codes.PermissionDenied, err.Error())
				}
				return err
			}
		}
		if err := s.admitStream(ss); err != nil {
			return err
		}
		return handler(srv, ss)
	}))
	gs := grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, s.mux, s.callbacks()))
	var wg sync.WaitGroup
	errs := make(chan error, 3+len(s.cfg.Peers))
	wg.Go(func() {
		err := s.cfg.Discovery.WatchDeltas(ctx, query, s.updateIn(s.cfg.Home))
		if ctx.Err() == nil {
			errs <- fmt.Errorf("xds: discovery watch: %w", err)
			cancel()
		}
	})
	for _, p := range s.cfg.Peers {
		wg.Go(func() {
			err := p.Discovery.WatchDeltas(ctx, query, s.updateIn(p.Region))
			if ctx.Err() == nil {
				errs <- fmt.Errorf("xds: discovery watch of region %s: %w", p.Region, err)
				cancel()
			}
		})
	}
	if s.cfg.Home != "" && s.cfg.RegionOn != nil {
		wg.Go(func() { s.followRegions(ctx) })
	}
	if s.cfg.WeightDelay > 0 {
		wg.Go(func() {
			t := time.NewTicker(max(s.cfg.WeightDelay/4, time.Millisecond))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.flushWeights(s.cfg.Now(), false)
				}
			}
		})
	}
	wg.Go(func() {
		err := s.cfg.Discovery.WatchRoutes(ctx, s.updateRoutes)
		if ctx.Err() == nil {
			errs <- fmt.Errorf("xds: routes watch: %w", err)
			cancel()
		}
	})
	wg.Go(func() {
		if err := gs.Serve(ln); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("xds: serve: %w", err)
			cancel()
		}
	})
	<-ctx.Done()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.cfg.ShutdownGrace):
		gs.Stop() // streams are long-lived: past the grace they are cut
		<-stopped
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// admitStream takes a token of the stream cap for a new stream, or refuses it with
// RESOURCE_EXHAUSTED and the wait in its trailers: grpc-retry-pushback-ms (gRPC's own hint)
// and retry-after (seconds). Envoy's backoff adds its own jitter.
func (s *Server) admitStream(ss grpc.ServerStream) error {
	ok, wait := s.streams.Admit(s.cfg.Now())
	if ok {
		return nil
	}
	s.shed.Inc()
	ss.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", strconv.FormatInt(wait.Milliseconds(), 10),
		"retry-after", strconv.Itoa(int(wait/time.Second))))
	return status.Errorf(codes.ResourceExhausted, "the xDS server accepts %g new streams a second (--reconnect-rate) and more are coming in: retry in %s, with jitter",
		s.cfg.StreamRate, wait)
}
