package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/routing"
)

type gatewayFlags struct {
	otlp                           string
	listen, routesFile, policyFile string
	registries                     []string
	cacheTTL, maxStale             time.Duration
	creds                          clientCreds
	security                       serverAuthFlags
	insecure                       bool
	log                            telemetry.LogConfig
	// policy, when set, is used as is (meshflows dev grants the example providers theirs).
	policy        routing.Policy
	debug         string
	outcomeWindow time.Duration
	verifyEvery   int
	stateDir      string
	bodyTimeout   time.Duration
	maxBuffered   int64
	maxBody       int64
	upstreamTO    time.Duration
	// allowEndpointCIDR is --allow-endpoint-cidr.
	allowEndpointCIDR []string
	regions           regionFlags
	// wrapTransport, when set, wraps the upstream transport (tests break one gateway's path
	// to an instance with it); no flag sets it.
	wrapTransport func(http.RoundTripper) http.RoundTripper
}

func newGatewayCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the API gateway: routes derived from the manifests services publish",
		Long: `Run the API gateway. It watches the registry's routes view, derives its routing table as
ρ(static routes, manifests, policy) on every change and proxies requests by it, to the
instances in rotation by smooth weighted round robin (slow start and degraded weights shape
traffic; a panic answer means all of them), and reports its per-instance outcomes back. When the
registry cannot be reached it keeps serving the last valid table and says so on every response
(X-Cache-Source: snapshot, X-Route-Table-Age). GET /v1/gateway/routes shows the table with
rejected manifests and conflicts; DELETE /v1/discovery/invalidate refetches now.

The path policy (which prefixes each service may claim) comes from --policy
(path_prefixes: {service: [prefix…]}) or from the registry's --rbac file (roles' path_prefixes;
the identity is the service name). Without either, services may claim nothing.

The admin endpoints are guarded like the registry: serve with --tls-cert/--tls-key, identify
callers by client certificate (--client-ca) and/or bearer token (--jwt-keys), and give the
registry's --rbac file: DELETE /v1/discovery/invalidate needs a role with gateway_admin (or
admin), and GET /v1/gateway/routes shows anyone else a summary only. Proxied traffic needs no
credential. Without TLS the gateway refuses to start unless --insecure says that open admin
endpoints are intended. The gateway calls the registry with --registry-ca, --registry-cert,
--registry-key or --registry-token.`,
		Example: `  meshflows gateway --insecure --registry http://127.0.0.1:7400 --policy policy.yaml --routes static.yaml
  meshflows gateway --registry https://127.0.0.1:7400 --registry-ca certs/ca.pem --registry-cert certs/gateway.pem --registry-key certs/gateway-key.pem \
    --tls-cert certs/server.pem --tls-key certs/server-key.pem --client-ca certs/ca.pem --rbac rbac.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				return startGateway(ctx, g, &f, ln, logger)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7402", "address to serve on")
	fl.StringSliceVar(&f.registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fl, "registry", "MESHFLOWS_REGISTRY")
	fl.StringVar(&f.routesFile, "routes", "", "static routes file (YAML): routes: [{path, methods, upstream}]")
	fl.StringVar(&f.policyFile, "policy", "", "path policy file (YAML): path_prefixes: {service: [prefix, …]}, and max_stale: {prefix: 30s, …} for the routes under a prefix that must not be served from a view older than that while the registry is away")
	fl.BoolVar(&f.insecure, "insecure", false, "serve the admin endpoints without authentication (development only: anyone who reaches the port can read the table and make the gateway refetch)")
	fl.DurationVar(&f.cacheTTL, "cache-ttl", discovery.DefaultTTL, "how long a routes view is used without asking the registry")
	fl.DurationVar(&f.maxStale, "max-stale", 0, "how long the last valid view (held since the registry went away, or saved in --state-dir) is served to the routes that declare no max_stale of their own; past it they answer 503 STALE_VIEW_EXPIRED with Retry-After until the registry answers (static routes are always served). 0 (the default): for as long as the registry is away — the view is authoritative; a route that needs prompt revocation declares max_stale")
	fl.StringVar(&f.stateDir, "state-dir", "", "keep the last routes view in this directory: a gateway restarted while the registry is away serves what it served before (X-Cache-Source: snapshot)")
	fl.DurationVar(&f.bodyTimeout, "body-timeout", 10*time.Second, "a request body of up to --max-buffered-body must arrive within this before anything goes upstream (else 408); a larger one may pause this long between reads")
	fl.Int64Var(&f.maxBuffered, "max-buffered-body", 1<<20, "request bodies up to this many bytes are read whole before going upstream (a slow client holds no upstream connection; a request refused by its upstream's port can be retried on another); larger ones are streamed")
	fl.DurationVar(&f.upstreamTO, "upstream-timeout", 30*time.Second, "how long an upstream may take to answer (its headers) once the request is sent; past it the client gets 504 GATEWAY_TIMEOUT")
	fl.Int64Var(&f.maxBody, "max-body-bytes", gateway.DefaultMaxBodyBytes, "largest request body of a route whose manifest declares no capabilities.max_body_bytes; a larger one is 413 PAYLOAD_TOO_LARGE, by its Content-Length or as soon as that much of a chunked body arrived, and never forwarded")
	fl.IntVar(&f.verifyEvery, "routes-verify-every", gateway.DefaultRoutesVerifyEvery, "check the incremental routing table against a full derivation every this many changed rows (a difference is logged at ERROR, counted in meshflows_gateway_routes_divergence_total, and the full table serves); 0: never")
	fl.DurationVar(&f.outcomeWindow, "outcome-window", 10*time.Second, "report per-instance outcomes (ok, errors, connect failures) to the registry this often, as passive health evidence (needs a gateway role; 0: never)")
	fl.StringSliceVar(&f.allowEndpointCIDR, "allow-endpoint-cidr", nil, allowEndpointCIDRUsage)
	fl.StringVar(&f.debug, "debug-listen", "", "serve Go profiling (/debug/pprof/) on this address, e.g. 127.0.0.1:6060 (off by default)")
	bindLogFlags(fl, &f.log, "json")
	bindOTLP(fl, &f.otlp)
	f.creds.bindRegistry(fl)
	f.regions.bind(fl)
	f.security.bind(fl, "the registry's RBAC file (YAML): who may use the admin endpoints, and the path policy when --policy is not given (roles' path_prefixes); reloaded when it changes")
	return cmd
}

// outcomeWindow maps the flag to the gateway's setting: 0 means never.
func outcomeWindow(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// startGateway builds the gateway and runs it and its HTTP server in g until ctx ends.
func startGateway(ctx context.Context, g *errgroup.Group, f *gatewayFlags, ln net.Listener, logger *slog.Logger) error {
	static, err := readStatic(f.routesFile)
	if err != nil {
		return err
	}
	sa, err := buildServerAuth(ctx, g, "gateway", f.security, f.insecure, logger)
	if err != nil {
		return err
	}
	ln, guard := sa.serve(ln, "gateway's admin API", "read the whole routing table and make the gateway refetch it", logger)
	var admin gateway.Authorizer // nil, not a nil *auth.Guard, when open
	if guard != nil {
		admin = guard
	}
	rbac := sa.policy
	if rbac == nil && f.policyFile != "" && f.security.rbac != "" {
		return errors.New("--policy and --rbac are alternatives for the path policy; give one (with TLS, --rbac also authorises the admin endpoints and may go with --policy)")
	}
	if rbac == nil && f.security.rbac != "" { // open, with the path policy from the RBAC file
		if rbac, err = auth.LoadPolicyFile(f.security.rbac, logger); err != nil {
			return err
		}
		g.Go(func() error { return rbac.Run(ctx, f.security.rbacReload) })
	}
	policy := func() routing.Policy { return routing.Policy{} }
	var maxStale map[string]time.Duration // the policy file's max_stale, by path prefix
	switch {
	case f.policy != nil:
		policy = func() routing.Policy { return f.policy }
	case f.policyFile != "":
		if maxStale, err = readPolicyMaxStale(f.policyFile); err != nil {
			return err
		}
		p, err := readPolicy(f.policyFile)
		if err != nil {
			return err
		}
		policy = func() routing.Policy { return p }
	case rbac != nil:
		policy = func() routing.Policy {
			p := rbac.Policy()
			out := routing.Policy{}
			for id := range p.Identities {
				out[id] = p.PathPrefixes(id)
			}
			return out
		}
	default:
		logger.Warn("no --policy or --rbac: services may claim no path; only static routes are served")
	}
	httpClient, err := f.creds.watchedClient(ctx, g, f.security.tlsReload, sa.certMetrics, logger)
	if err != nil {
		return err
	}
	promReg := telemetry.NewRegistry()
	if err := sa.register(promReg); err != nil {
		return err
	}
	if err := f.regions.validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	id := "gateway@" + ln.Addr().String()
	endpoints, err := endpointPolicy(f.allowEndpointCIDR)
	if err != nil {
		return err
	}
	tr, err := startTracing(ctx, g, f.otlp, "gateway", logger)
	if err != nil {
		return err
	}
	var transport http.RoundTripper // nil: the gateway's own
	if f.wrapTransport != nil {
		transport = f.wrapTransport(gateway.NewTransportFor(endpoints, f.upstreamTO))
	}
	// one gateway per region (only home's without --region), each on its own registry's view
	build := func(region string, registries []string) (*gateway.Gateway, error) {
		reg, rlog := f.regions.scoped(region, promReg, logger)
		stateDir := f.stateDir
		if f.regions.home != "" && stateDir != "" {
			stateDir = filepath.Join(stateDir, region)
		}
		disc, err := discovery.New(discovery.Config{Registries: registries, Consumer: "gateway", Client: httpClient, BearerToken: f.creds.token,
			TTL: f.cacheTTL, StaleAllowance: f.maxStale, Logger: rlog, Registerer: reg})
		if err != nil {
			return nil, err
		}
		reporter, err := report.New(report.Config{Reporter: id, Send: disc.Report, Logger: rlog})
		if err != nil {
			return nil, err
		}
		gw, err := gateway.New(gateway.Config{MaxStale: maxStale, Transport: transport, Endpoints: endpoints, ID: id, Reporter: reporter, Discovery: disc, Static: static, Policy: policy,
			OutcomeWindow: outcomeWindow(f.outcomeWindow), StateDir: stateDir, Admin: admin, BodyTimeout: f.bodyTimeout, MaxBufferedBody: f.maxBuffered, MaxBodyBytes: f.maxBody, UpstreamTimeout: f.upstreamTO, Logger: rlog, Registerer: reg, Tracing: tr,
			RoutesVerifyEvery: never(f.verifyEvery)})
		if err != nil {
			return nil, err
		}
		g.Go(func() error { return reporter.Run(ctx) })
		g.Go(func() error { return gw.Run(ctx) })
		return gw, nil
	}
	gw, err := build(f.regions.home, f.registries)
	if err != nil {
		return err
	}
	var handler http.Handler = gw
	if f.regions.home != "" {
		if handler, err = f.regions.router(ctx, g, gw, build, promReg, logger); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promHandler(promReg))
	mux.Handle("/", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("gateway listening", slog.String("addr", ln.Addr().String()), slog.Any("registries", f.registries), slog.String("region", f.regions.home))
	if err := serveDebug(ctx, g, f.debug); err != nil {
		return err
	}
	g.Go(func() error { return serveUntil(ctx, srv, ln) })
	return nil
}

// serveUntil serves srv on ln until ctx ends, then lets the requests in flight finish.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	return httpapi.Serve(ctx, srv, ln, httpapi.Shutdown{})
}

func promHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
