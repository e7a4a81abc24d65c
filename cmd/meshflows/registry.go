package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/history"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/notify"
	"github.com/meshflows/meshflows/internal/prober"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/telemetry"
)

// logFlushInterval is how long a log line may wait in the buffer before it is written.
const logFlushInterval = 100 * time.Millisecond

// registryFlags are the flags of 'meshflows registry'.
type registryFlags struct {
	// consoleIdentities are the console's identities (--console-identity): they may act on
	// incidents on behalf of the viewer they name
	consoleIdentities []string
	otlp              string
	listen            string
	allowEndpointCIDR []string
	debug             string
	memoryLimit       memoryLimit
	region            string
	leaseTTL          time.Duration
	heartbeatInterval time.Duration
	sweepInterval     time.Duration
	gatewayTTL        time.Duration
	storeTimeout      time.Duration
	maxBodyBytes      int64
	gzipMinBytes      int64
	maxAnswer         int
	maxDeltaBytes     int64
	pollSpacing       float64
	snapshotDir       string
	snapshotInterval  time.Duration
	snapshotKeep      int
	eventsMax         int
	owners            string
	reconnectRate     float64
	reconnectBurst    int
	notifyEvery       time.Duration
	restoreSnapshot   string
	insecure          bool
	log               telemetry.LogConfig
	security          securityFlags
	etcd              etcdFlags
	eligibility       eligibilityFlags
}

// eligibilityFlags configure the eligibility engine and the prober.
type eligibilityFlags struct {
	off              bool
	slowStart        time.Duration
	panicThreshold   float64
	probeConcurrency int
	probeTimeout     time.Duration
	confirmLost      int
	probeCA          string
	probeCert        string
	probeKey         string
	outlier          health.Config // the passive and relative outlier settings
	outcomeRate      float64
	outcomeBurst     int
}

// etcdFlags select and configure the etcd store.
type etcdFlags struct {
	store             string
	endpoints         []string
	prefix            string
	cacert, cert, key string
	dialTimeout       time.Duration
}

// securityFlags configure authentication, authorisation, audit and rate limits.
type securityFlags struct {
	serverAuthFlags
	auditLog      string
	registerRate  float64
	registerBurst int
}

func (f *registryFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7400", "address the registry API listens on")
	fs.StringVar(&f.debug, "debug-listen", "", "serve Go profiling (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (off by default)")
	f.memoryLimit = memoryLimit{auto: true}
	fs.Var(&f.memoryLimit, "memory-limit", "soft limit of the Go heap, e.g. 2800MiB: the collector works harder as the heap nears it, so a large fleet stays under the limit at some CPU; auto: 90% of the container's memory limit when there is one (GOMEMLIMIT, when set, wins); none: none set here (GOMEMLIMIT still applies)")
	fs.StringVar(&f.region, "region", "", "the region this registry serves (a DNS label): every instance registered here belongs to it, and every answer names it; consumers of other regions reach it as a --peer-registry")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", registry.DefaultLeaseTTL, "lease TTL: an instance without a heartbeat for this long is evicted; also the warm-up window after an empty start")
	fs.DurationVar(&f.heartbeatInterval, "heartbeat-interval", registry.DefaultHeartbeatInterval, "heartbeat interval told to providers (must be shorter than --lease-ttl)")
	fs.DurationVar(&f.sweepInterval, "sweep-interval", registry.DefaultSweepInterval, "how often expired leases are evicted; weights in slow start move once per interval, each service's at its own fiftieth of it (the same on every replica over etcd)")
	fs.DurationVar(&f.storeTimeout, "store-timeout", registry.DefaultStoreTimeout, "bound of every write to the store: past it the write fails with 503 STORE_UNAVAILABLE and Retry-After (the SDKs retry)")
	fs.DurationVar(&f.gatewayTTL, "gateway-ttl", registry.DefaultGatewayTTL, "a gateway counts as live this long after its last drain acknowledgement (gateways acknowledge every 10 s); withdrawals are acknowledged only once the registry has run this long")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted; larger ones get 413 PAYLOAD_TOO_LARGE")
	fs.Int64Var(&f.gzipMinBytes, "gzip-min-bytes", server.DefaultGzipMinBytes, "discovery and routes answers of at least this many bytes go gzip-compressed to clients that accept it (compressed once per revision); lower it when consumers poll across slow links; 0: never compress")
	fs.IntVar(&f.maxAnswer, "max-answer-instances", server.DefaultMaxAnswerInstances, "largest discovery answer without capability_id or service_name sent whole; a larger one must be paged (limit, page_token) and is refused with 400 saying so (delta watches, as the DNS and xDS servers keep, are not bound: --max-delta-cache-bytes bounds what their answers keep); 0: no bound")
	fs.Int64Var(&f.maxDeltaBytes, "max-delta-cache-bytes", server.DefaultMaxDeltaBytes, "most bytes of delta-watch answers kept for the watchers of the same query and revision (a reset is the whole answer); past it the least recently asked queries are dropped and built again when asked")
	fs.Float64Var(&f.pollSpacing, "poll-spacing", server.DefaultPollSpacing, "hold a long poll whose answer is costly to build (a millisecond or more: a whole fleet's, as DNS and xDS servers watch) until this many times its last build time has passed since that build, at most 5 s, so that a fast-changing fleet's answer is built at most once per such span; 0: never hold")
	fs.StringVar(&f.snapshotDir, "snapshot-dir", "", "directory for snapshot files (POST /v1/admin/snapshot and --snapshot-interval)")
	fs.DurationVar(&f.snapshotInterval, "snapshot-interval", 0, "write a snapshot to --snapshot-dir this often (0: only on demand)")
	fs.IntVar(&f.snapshotKeep, "snapshot-keep", registry.DefaultSnapshotKeep, "how many snapshot files to keep in --snapshot-dir (the newest)")
	fs.Float64Var(&f.reconnectRate, "reconnect-rate", registry.DefaultReconnectRate, "registrations accepted a second, and as many new watches (a long poll that needs a whole answer: index 0, or an epoch of before a restart or a failover), each a token bucket: after a restart or a failover the whole fleet comes back at once, and the excess is answered 429 with a Retry-After spread over the backlog (the SDKs add jitter); heartbeats and re-armed watches are never shed; 0 or less: no bound")
	fs.IntVar(&f.reconnectBurst, "reconnect-burst", registry.DefaultReconnectBurst, "registrations (and new watches) accepted at once above --reconnect-rate")
	fs.StringVar(&f.owners, "owners", "", "a YAML file mapping owners (the team a registration names, or the identity that registers) to webhooks, with optional HMAC secrets: each is told of its instances' quarantines, outlier ejections and failing self-reports (docs/reference/owner-notifications.md); without it, the journal's owner.notified events are the notifications")
	fs.DurationVar(&f.notifyEvery, "notify-every", notify.DefaultEvery, "an owner is told of one (instance, cause) at most this often")
	fs.IntVar(&f.eventsMax, "events-max", journal.DefaultMax, "how many events the journal (GET /v1/events, the console's Events page) keeps; the oldest go first, and a reader they overtook is told how many it missed")
	fs.StringVar(&f.restoreSnapshot, "restore-snapshot", "", "load a snapshot at start: a file, or 'auto' for the newest valid one in --snapshot-dir (none: start empty and say so)")
	fs.StringSliceVar(&f.allowEndpointCIDR, "allow-endpoint-cidr", nil, allowEndpointCIDRUsage)
	fs.BoolVar(&f.insecure, "insecure", false, "serve without authentication (development only: anyone who reaches the port can register and deregister)")
	f.security.bind(fs, "RBAC policy file (YAML); reloaded when it changes, an invalid new version is refused")
	fs.StringVar(&f.security.auditLog, "audit-log", "", "audit log: a file to append JSON lines to, or - for stdout (default: none)")
	fs.StringSliceVar(&f.consoleIdentities, "console-identity", nil, "the console's identity (repeatable): it may act on incidents on behalf of its viewer, whom the registry then judges (an admin, or the incident's owner) and records")
	fs.Float64Var(&f.security.registerRate, "register-rate", 10, "registrations per second allowed per identity")
	fs.IntVar(&f.security.registerBurst, "register-burst", 20, "registration burst allowed per identity")
	fs.StringVar(&f.etcd.store, "store", "memory", "where the state lives: memory (this process) or etcd (replicas over an etcd cluster)")
	fs.StringSliceVar(&f.etcd.endpoints, "etcd-endpoints", []string{"http://127.0.0.1:2379"}, "etcd client URLs (with --store etcd)")
	fs.StringVar(&f.etcd.prefix, "etcd-prefix", "/meshflows/", "key prefix of the registry in etcd")
	fs.StringVar(&f.etcd.cacert, "etcd-cacert", "", "CA bundle of the etcd servers")
	fs.StringVar(&f.etcd.cert, "etcd-cert", "", "client certificate for etcd")
	fs.StringVar(&f.etcd.key, "etcd-key", "", "key of --etcd-cert")
	fs.DurationVar(&f.etcd.dialTimeout, "etcd-dial-timeout", 5*time.Second, "timeout of connecting to etcd")
	fs.BoolVar(&f.eligibility.off, "no-eligibility", false, "run without the eligibility engine: no probes, every instance with a live lease is serving at weight 100")
	fs.DurationVar(&f.eligibility.slowStart, "slow-start", 30*time.Second, "how long an instance entering rotation ramps its weight from 10 to 100 (0 means the default)")
	fs.Float64Var(&f.eligibility.panicThreshold, "panic-threshold", 0.5, "a (capability, zone) with fewer than this share of its instances in rotation is answered in panic: all of them")
	fs.IntVar(&f.eligibility.probeConcurrency, "probe-concurrency", prober.DefaultConcurrency, "active health probes in flight at most")
	fs.StringVar(&f.eligibility.probeCA, "probe-ca", "", "CA bundle that https health endpoints' certificates must chain to (default: the system's roots)")
	fs.StringVar(&f.eligibility.probeCert, "probe-cert", "", "client certificate the prober presents to https health endpoints that ask for one")
	fs.StringVar(&f.eligibility.probeKey, "probe-key", "", "key of --probe-cert")
	fs.DurationVar(&f.eligibility.probeTimeout, "probe-timeout", prober.DefaultTimeout, "timeout of one active health probe (never more than the instance's declared interval)")
	fs.IntVar(&f.eligibility.confirmLost, "probe-confirm-lost", prober.DefaultConfirmLost, "unanswered probes in a row (the first and its re-probes, 100 ms apart) that confirm an instance no longer answers; fewer, then an ok, were lost and count for nothing (1: report every unanswered probe)")
	bindOutlierFlags(fs, &f.eligibility)
	bindLogFlags(fs, &f.log, "json")
	bindOTLP(fs, &f.otlp)
}

// bindOutlierFlags binds the settings of passive ejection and of relative and zone outliers,
// with the defaults of docs/reference/eligibility.md.
func bindOutlierFlags(fs *pflag.FlagSet, f *eligibilityFlags) {
	d, o := health.Config{}.WithDefaults(), &f.outlier
	fs.IntVar(&o.OutlierMinRequests, "outlier-min-requests", d.OutlierMinRequests, "passive ejection: an outcome needs this many requests for its error share to count")
	fs.Float64Var(&o.OutlierErrorRate, "outlier-error-rate", d.OutlierErrorRate, "passive ejection: an outcome's error share at or above this ejects (unless other reporters dispute it)")
	fs.IntVar(&o.OutlierConnectFailures, "outlier-connect-failures", d.OutlierConnectFailures, "passive ejection: this many connect failures in one outcome eject")
	fs.DurationVar(&o.EjectionBase, "ejection-base", d.EjectionBase, "the k-th ejection of an instance lasts k times this")
	fs.IntVar(&o.MaxEjectionPercent, "max-ejection-percent", d.MaxEjectionPercent, "at most this share (percent) of a (capability, zone) group is ejected at once")
	fs.DurationVar(&o.OutlierWindow, "outlier-window", d.OutlierWindow, "relative outliers: the sliding window outcomes are pooled over, every reporter together")
	fs.IntVar(&o.OutlierMinVolume, "outlier-min-volume", d.OutlierMinVolume, "relative outliers: requests in the window an instance needs to be compared with its peers")
	fs.Float64Var(&o.OutlierZ, "outlier-z", d.OutlierZ, "relative outliers: z of the Wilson lower bound of an instance's error share (higher: surer, slower)")
	fs.Float64Var(&o.OutlierRelativeFloor, "outlier-relative-floor", d.OutlierRelativeFloor, "relative outliers: the lower bound must exceed the peers' median share by this much")
	fs.Float64Var(&o.OutlierRelativeFactor, "outlier-relative-factor", d.OutlierRelativeFactor, "relative outliers: and be this many times the peers' median share")
	fs.Float64Var(&o.LatencyOutlierFactor, "latency-outlier-factor", d.LatencyOutlierFactor, "latency outliers: an instance whose p99 over the latency window is this many times its peers' median p99 (and over the floor) is degraded")
	fs.DurationVar(&o.LatencyOutlierFloor, "latency-outlier-floor", d.LatencyOutlierFloor, "latency outliers: and at least this much over its peers' median p99")
	fs.DurationVar(&o.LatencyWindow, "latency-window", 0, "latency outliers: the window of reported p99s an instance is judged on, entering and leaving (default 20s, or --outlier-window when shorter); who is comparable is still judged over --outlier-window")
	fs.DurationVar(&o.ReturnDwell, "return-dwell", d.ReturnDwell, "the way back from an evacuation: how long the zone's instances stay at each weight step (10, 25, 50) before the next")
	fs.DurationVar(&o.FlapWindow, "flap-window", d.FlapWindow, "an instance withdrawn 3 times within this window is quarantined (flapping)")
	fs.Float64Var(&o.AdmitRate, "admit-rate", d.AdmitRate, "admission budget: at most this many instances a second leave unknown for rotation per (capability, zone), with a burst of as many; the rest wait, oldest first, marked ADMISSION_QUEUED (withdrawals never wait)")
	fs.Float64Var(&o.FlapCohortShare, "flap-cohort-share", d.FlapCohortShare, "when more than this share of a (capability, zone) cohort (and two instances at least) leaves rotation twice or more within one flap window, that is one cohort event (incident cohort_flapping): none of them is quarantined")
	fs.DurationVar(&o.ProbeScoreHalfLife, "probe-score-half-life", d.ProbeScoreHalfLife, "the failure score (1 a failed probe or a consumer's window with connect failures) halves every this long")
	fs.Float64Var(&o.ProbeScoreOut, "probe-score-out", d.ProbeScoreOut, "a failed probe that brings the failure score to this withdraws the instance (PROBE_SCORE: it fails intermittently)")
	fs.Float64Var(&o.ProbeScoreIn, "probe-score-in", d.ProbeScoreIn, "an instance withdrawn by PROBE_SCORE comes back once its probes pass and its score is under this (under --probe-score-out: re-entry is slower than removal)")
	fs.Float64Var(&f.outcomeRate, "outcome-rate", registry.DefaultOutcomeRate, "outcome batches (POST /v1/outcomes, up to 1,000 instances each) per second allowed per reporting identity; more get 429 with Retry-After; 0 or less: no bound")
	fs.IntVar(&f.outcomeBurst, "outcome-burst", registry.DefaultOutcomeBurst, "outcome batch burst allowed per reporting identity")
}

func newRegistryCmd() *cobra.Command {
	var f registryFlags
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Run the registry server on the embedded store",
		Long: `Run the registry server: providers register capabilities and heartbeat their leases,
consumers discover them. State lives in memory (or in etcd with --store etcd); use
--snapshot-dir with --snapshot-interval and --restore-snapshot auto to carry it over a
restart: the same command line works for the first start (no snapshot yet: it starts empty)
and for every restart after (it restores the newest valid snapshot). A restored registry
begins a new epoch and warms up for one --lease-ttl, and writes no snapshot until then, so
the newest snapshot is never one taken before every live provider was back.

Outside development the registry runs with TLS: --tls-cert/--tls-key, client certificates
verified against --client-ca (the identity is the SPIFFE URI SAN's name, else the CN) and/or
bearer tokens checked with --jwt-keys, and an --rbac policy. Without TLS it refuses to start
unless --insecure says that running open is intended.`,
		Example: `  meshflows certs init --dir certs
  meshflows registry --tls-cert certs/server.pem --tls-key certs/server-key.pem --client-ca certs/ca.pem --rbac rbac.yaml --audit-log audit.jsonl
  meshflows registry --insecure --listen 127.0.0.1:7400 --snapshot-dir /var/lib/meshflows --snapshot-interval 1m --restore-snapshot auto`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				if err := startRegistry(ctx, g, &f, ln, logger); err != nil {
					return err
				}
				g.Go(func() error { <-ctx.Done(); logger.Info("registry stopping"); return nil })
				return nil
			})
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

// startRegistry builds the registry on a memory store and starts its loops and its HTTP
// server on ln in g; they stop when ctx ends.
func startRegistry(ctx context.Context, g *errgroup.Group, f *registryFlags, ln net.Listener, logger *slog.Logger) error {
	applyMemoryLimit(f.memoryLimit, rootFS, os.Getenv, logger)
	sec, err := buildSecurity(ctx, g, f, logger)
	if err != nil {
		return err
	}
	if sec.tls != nil {
		ln = tls.NewListener(ln, sec.tls)
	} else {
		logger.Warn("INSECURE: the registry runs without authentication; anyone who reaches " + ln.Addr().String() +
			" can register, heartbeat and deregister any instance. Never use --insecure outside development.")
	}
	promReg := telemetry.NewRegistry()
	if sec.certMetrics != nil {
		if err := promReg.Register(sec.certMetrics); err != nil {
			return err
		}
	}
	store, closeStore, err := openStore(ctx, f, logger)
	if err != nil {
		return err
	}
	started := false
	defer func() {
		if !started {
			closeStore()
		}
	}()
	if f.eventsMax < 1 {
		return fmt.Errorf("--events-max %d: the journal keeps at least one event", f.eventsMax)
	}
	var (
		monitor   *health.Monitor
		notifier  *notify.Notifier
		incidents *incident.Log
		reg       *registry.Registry
		events    = journal.New(f.eventsMax, nil)
	)
	// Over etcd, the journal is shared: events are keys of the store, numbered by etcd, and
	// every replica answers the same sequence.
	if es, ok := store.(sharedEvents); ok {
		events.Share(es, logger)
		if err := es.OnEvent(ctx, events.Insert); err != nil {
			return err
		}
	}
	if !f.eligibility.off {
		if incidents, err = incident.New(incident.Config{Logger: logger, Registerer: promReg, Journal: events}); err != nil {
			return err
		}
		owner := func(id string) string { return reg.Owner(id) } // called only once reg serves
		raise, record := incident.FromTransitions(incidents, owner), journal.FromTransitions(events)
		if notifier, err = newNotifier(f.owners, f.notifyEvery, events, incidents, logger, promReg); err != nil {
			return err
		}
		tell := notify.FromTransitions(notifier, func(id string) notify.Instance {
			o, s, z := reg.Team(id)
			return notify.Instance{Owner: o, Service: s, Zone: z}
		}, func(kind, subject string) (string, bool) {
			in, ok := incidents.Find(kind, subject)
			return in.ID, ok
		})
		o := f.eligibility.outlier
		monitor, err = health.NewMonitor(health.MonitorConfig{Logger: logger, Registerer: promReg, RampStep: f.sweepInterval,
			OnTransition: func(t health.Transition) {
				record(t)
				raise(t)
				if reg.Leader() { // over etcd, the elected replica tells owners; the others would repeat it
					tell(t)
				}
			}, Engine: health.Config{
				ExternalLeases: registry.ExpiresLeases(store),
				LeaseTTL:       f.leaseTTL, HeartbeatInterval: f.heartbeatInterval, SlowStart: f.eligibility.slowStart, PanicThreshold: f.eligibility.panicThreshold,
				OutlierMinRequests: o.OutlierMinRequests, OutlierErrorRate: o.OutlierErrorRate, OutlierConnectFailures: o.OutlierConnectFailures,
				EjectionBase: o.EjectionBase, MaxEjectionPercent: o.MaxEjectionPercent, OutlierWindow: o.OutlierWindow, OutlierMinVolume: o.OutlierMinVolume,
				OutlierZ: o.OutlierZ, OutlierRelativeFloor: o.OutlierRelativeFloor, OutlierRelativeFactor: o.OutlierRelativeFactor,
				LatencyOutlierFactor: o.LatencyOutlierFactor, LatencyOutlierFloor: o.LatencyOutlierFloor, LatencyWindow: o.LatencyWindow, ReturnDwell: o.ReturnDwell, FlapWindow: o.FlapWindow,
				FlapCohortShare: o.FlapCohortShare, AdmitRate: o.AdmitRate, ProbeScoreHalfLife: o.ProbeScoreHalfLife, ProbeScoreOut: o.ProbeScoreOut, ProbeScoreIn: o.ProbeScoreIn}})
		if err != nil {
			return err
		}
	}
	var eligibility registry.Eligibility // nil, not a nil *health.Monitor, when the engine is off
	if monitor != nil {
		eligibility = monitor
	}
	endpoints, err := endpointPolicy(f.allowEndpointCIDR)
	if err != nil {
		return err
	}
	var probes *prober.Prober // set before the registry serves; re-probes what consumers report
	reg, err = registry.New(store, registry.Config{
		Suspect: func(id string) {
			if probes != nil {
				probes.Suspect(id)
			}
		},
		Endpoints:         endpoints,
		OutcomeRate:       never(f.eligibility.outcomeRate),
		OutcomeBurst:      max(f.eligibility.outcomeBurst, 1),
		ReconnectRate:     f.reconnectRate,
		ReconnectBurst:    f.reconnectBurst,
		Eligibility:       eligibility,
		Region:            f.region,
		LeaseTTL:          f.leaseTTL,
		HeartbeatInterval: f.heartbeatInterval,
		SweepInterval:     f.sweepInterval,
		GatewayTTL:        f.gatewayTTL,
		StoreTimeout:      f.storeTimeout,
		SnapshotDir:       f.snapshotDir,
		SnapshotInterval:  f.snapshotInterval,
		SnapshotKeep:      f.snapshotKeep,
		Journal:           events,
		Logger:            logger,
		Registerer:        promReg,
	})
	if err != nil {
		return err
	}
	if err := restoreAtStart(ctx, reg, f, logger); err != nil {
		return err
	}
	tr, err := startTracing(ctx, g, f.otlp, "registry", logger)
	if err != nil {
		return err
	}
	hist, err := history.New(history.Config{Gatherer: promReg})
	if err != nil {
		return err
	}
	srv, err := server.New(reg, sec.apply(server.Config{MaxBodyBytes: f.maxBodyBytes, GzipMinBytes: never(f.gzipMinBytes), PollSpacing: never(f.pollSpacing), MaxAnswerInstances: never(f.maxAnswer), MaxDeltaBytes: f.maxDeltaBytes, Logger: logger, Registerer: promReg, Gatherer: promReg, Incidents: incidents, Journal: events, History: hist, Tracing: tr, Delegators: f.consoleIdentities}))
	if err != nil {
		return err
	}
	logger.Info("registry listening", slog.String("addr", ln.Addr().String()), slog.Bool("tls", sec.tls != nil), slog.String("store", store.Name()),
		slog.String("registry_epoch", store.Epoch().ID), slog.String("lease_ttl", reg.Config().LeaseTTL.String()),
		slog.Int("pid", os.Getpid()))
	if monitor != nil {
		probeTLS, err := client.TLSConfig(f.eligibility.probeCA, f.eligibility.probeCert, f.eligibility.probeKey)
		if err != nil {
			return fmt.Errorf("--probe-ca/--probe-cert/--probe-key: %w", err)
		}
		probeClient := client.HTTPClient(probeTLS)
		probeClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse } // a redirect is an answer
		probes, err = prober.New(prober.Config{Targets: reg.ProbeTargets, Report: reg.ReportProbe, Leader: reg.Leader, Client: probeClient,
			Concurrency: f.eligibility.probeConcurrency, Timeout: f.eligibility.probeTimeout, ConfirmLost: f.eligibility.confirmLost,
			Logger: logger, Registerer: promReg})
		if err != nil {
			return err
		}
		g.Go(func() error { return probes.Run(ctx) })
		g.Go(func() error { return notifier.Run(ctx) })
	}
	if err := serveDebug(ctx, g, f.debug); err != nil {
		return err
	}
	started = true
	g.Go(func() error { return events.Run(ctx) }) // publishes a shared journal's events (returns at once otherwise)
	g.Go(func() error { return reg.Run(ctx) })
	g.Go(func() error { return hist.Run(ctx) }) // the last hour of the key series, for the console's Metrics view
	g.Go(func() error { return errors.Join(srv.Serve(ctx, ln), sec.close(), closeStore()) })
	return nil
}

// sharedEvents is a store that keeps the event journal for every replica (the etcd store).
type sharedEvents interface {
	journal.Store
	OnEvent(ctx context.Context, fn func(journal.Stored)) error
}

// restoreAtStart restores the snapshot --restore-snapshot names: a file (which must restore),
// or "auto", the newest valid one in --snapshot-dir (none: the registry starts empty).
func restoreAtStart(ctx context.Context, reg *registry.Registry, f *registryFlags, logger *slog.Logger) error {
	start := time.Now()
	var (
		snap *registry.Snapshot
		path = f.restoreSnapshot
		err  error
	)
	switch f.restoreSnapshot {
	case "":
		return nil
	case "auto":
		if f.snapshotDir == "" {
			return errors.New("--restore-snapshot auto needs --snapshot-dir")
		}
		snap, path, err = reg.RestoreLatest(ctx)
		if errors.Is(err, registry.ErrNoSnapshot) {
			logger.Warn("no valid snapshot to restore: starting empty (warming up for one lease ttl)",
				slog.String("snapshot_dir", f.snapshotDir), slog.Any("reason", err))
			return nil
		}
	default:
		snap, err = reg.RestoreSnapshot(ctx, f.restoreSnapshot)
	}
	if err != nil {
		return err
	}
	logger.Info("snapshot restored: a new epoch, warming up for one lease ttl", slog.String("path", path), slog.Int("instances", snap.InstanceCount),
		slog.String("snapshot_epoch", snap.RegistryEpoch), slog.String("registry_epoch", reg.State().Epoch), slog.Int64("revision", snap.Revision),
		slog.Time("snapshot_taken", snap.Timestamp), slog.String("took", time.Since(start).String()))
	return nil
}

// never maps a flag's 0 or less, which turns a feature off, to the -1 that server.Config
// takes for off (its 0 is the default).
func never[T int | int64 | float64](v T) T {
	if v <= 0 {
		return -1
	}
	return v
}

// newNotifier returns the owner notifier of --owners (none: journal events only).
func newNotifier(path string, every time.Duration, events *journal.Journal, incidents *incident.Log, logger *slog.Logger, reg prometheus.Registerer) (*notify.Notifier, error) {
	var owners *notify.Owners
	if path != "" {
		var err error
		if owners, err = notify.LoadOwners(path); err != nil {
			return nil, fmt.Errorf("--owners: %w", err)
		}
		logger.Info("owner notifications by webhook", slog.String("owners_file", path), slog.Int("owners", owners.Len()))
	}
	return notify.New(notify.Config{Owners: owners, Every: every, Journal: events, Incidents: incidents, Logger: logger, Registerer: reg})
}
