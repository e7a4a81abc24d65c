package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/internal/xds"
	"github.com/meshflows/meshflows/routing"
)

// xdsFlags are the flags of 'meshflows xds'.
type xdsFlags struct {
	regions    regionFlags
	listen     string
	registries []string
	maxStale   time.Duration
	routesFile string
	policyFile string
	policy     routing.Policy // set directly by meshflows dev
	creds      clientCreds
	security   serverAuthFlags
	insecure   bool
	log        telemetry.LogConfig
	debug      string
	metrics    string
	// maxResponse is --max-response-bytes.
	maxResponse int
	// weightDelay is --weight-delay.
	weightDelay time.Duration
	// reconnectRate and reconnectBurst are --reconnect-rate and --reconnect-burst: the new-stream cap.
	reconnectRate  float64
	reconnectBurst int
}

func newXDSCmd() *cobra.Command {
	var f xdsFlags
	cmd := &cobra.Command{
		Use:   "xds",
		Short: "Serve the registry's discovery view over xDS (ADS) to Envoy and proxyless gRPC clients",
		Long: `Serve the registry's discovery view over gRPC ADS (xDS v3), for Envoy and for gRPC clients
with xds:/// targets. Resources (docs/reference/xds.md):

  cluster + endpoints   one per capability ("messaging.publish") and one per capability and
                        provider ("messaging.publish/jms"), EDS over ADS
  endpoint weight       the eligibility weight; health HEALTHY (DEGRADED when degraded),
                        DRAINING, or UNHEALTHY for the other verdicts; all HEALTHY in panic
  locality              zone (sub_zone: the instance), priority from metadata.priority
  listener              an API listener of the same name with an inline route to its cluster,
                        which is what a gRPC client asks for xds:///messaging.publish
  route configuration   "meshflows-gateway": the routing table the gateway derives from the
                        manifests with --routes and --policy, most specific route first, each
                        route sending to a cluster of its instances ("route:POST:/path"), for an
                        Envoy that replaces the gateway

Every client gets the same resources, whatever its node id; a change of the view re-sends
only the resources that changed. The last view keeps being served while the registry is away.

The resources are the whole fleet's, so the server refuses to run open: give it its server
certificate (--tls-cert, --tls-key), how clients authenticate (--client-ca for client
certificates, --jwt-keys for bearer tokens in the authorization metadata) and --rbac, whose
roles with "xds: true" (or admin) may subscribe; or --insecure (development only).`,
		Example: `  meshflows xds --listen 127.0.0.1:18000 --registry https://127.0.0.1:7400 --registry-ca certs/ca.pem \
    --registry-cert certs/xds.pem --registry-key certs/xds-key.pem \
    --tls-cert certs/server.pem --tls-key certs/server-key.pem --client-ca certs/ca.pem --rbac rbac.yaml
  meshflows xds --listen 127.0.0.1:18000 --registry http://127.0.0.1:7400 --insecure
  GRPC_XDS_BOOTSTRAP=bootstrap.json ./my-grpc-client   # target xds:///messaging.publish`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				return startXDS(ctx, g, &f, ln, logger)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:18000", "address the ADS server listens on (gRPC; TLS with --tls-cert)")
	fl.StringSliceVar(&f.registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fl, "registry", "MESHFLOWS_REGISTRY")
	fl.StringVar(&f.routesFile, "routes", "", "static routes file (YAML): routes: [{path, methods, upstream}] (as the gateway's)")
	fl.StringVar(&f.policyFile, "policy", "", "path policy file (YAML): path_prefixes: {service: [prefix, …]} (as the gateway's; without it no manifest route is served)")
	fl.DurationVar(&f.maxStale, "max-stale", 0, "how long the last-known-good view is kept while the registry is away. 0 (the default): for as long as it is away")
	fl.IntVar(&f.maxResponse, "max-response-bytes", xds.DefaultMaxResponseBytes, "largest EDS or RDS response: more endpoints go out over several responses, each acknowledged before the next (the default is gRPC's default receive limit; a client that raises its own may take a larger bound)")
	fl.DurationVar(&f.weightDelay, "weight-delay", xds.DefaultWeightDelay, "how long a change of a cluster's endpoint weights alone (a slow start's ramp) may wait to go out with the cluster's next change; any other change sends it at once (0: send every weight at once; at most 1m)")
	fl.Float64Var(&f.reconnectRate, "reconnect-rate", xds.DefaultStreamRate, "new ADS streams accepted a second (a token bucket): after a restart every Envoy reconnects at once and each new stream costs a whole state; the excess is refused RESOURCE_EXHAUSTED with the wait in grpc-retry-pushback-ms, spread over the backlog; open streams are never cut; 0 or less: no bound")
	fl.IntVar(&f.reconnectBurst, "reconnect-burst", xds.DefaultStreamBurst, "new streams accepted at once above --reconnect-rate")
	fl.StringVar(&f.debug, "debug-listen", "", "serve Go profiling (/debug/pprof/) on this address, e.g. 127.0.0.1:6062 (off by default)")
	bindEnv(fl, "debug-listen", "MESHFLOWS_XDS_DEBUG_LISTEN")
	fl.StringVar(&f.metrics, "metrics-listen", "", "address to serve /metrics on over HTTP (the discovery client's and the certificates' series; default: none)")
	f.creds.bindRegistry(fl)
	f.regions.bind(fl)
	f.security.bind(fl, "RBAC policy file: identities with a role granting xds: true (or admin) may subscribe")
	fl.BoolVar(&f.insecure, "insecure", false, "serve plaintext gRPC to anyone who reaches --listen (development only)")
	bindLogFlags(fl, &f.log, "json")
	return cmd
}

// startXDS serves ADS on ln in g.
func startXDS(ctx context.Context, g *errgroup.Group, f *xdsFlags, ln net.Listener, logger *slog.Logger) error {
	sa, err := buildServerAuth(ctx, g, "xds", f.security, f.insecure, logger)
	if err != nil {
		return err
	}
	promReg := telemetry.NewRegistry()
	if err := sa.register(promReg); err != nil {
		return err
	}
	httpClient, err := f.creds.watchedClient(ctx, g, f.security.tlsReload, sa.certMetrics, logger)
	if err != nil {
		return err
	}
	if err := f.regions.validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	// one discovery client per region (only home's without --region), each on its own
	// registry, its series labelled with its region
	newClient := func(region string, registries []string) (*discovery.Client, error) {
		reg, rlog := f.regions.scoped(region, promReg, logger)
		return discovery.New(discovery.Config{Registries: registries, Consumer: "xds", Client: httpClient, BearerToken: f.creds.token,
			StaleAllowance: f.maxStale, Logger: rlog, Registerer: reg})
	}
	disc, err := newClient(f.regions.home, f.registries)
	if err != nil {
		return err
	}
	static, err := readStatic(f.routesFile)
	if err != nil {
		return err
	}
	policy := f.policy
	if policy == nil {
		if policy, err = readPolicy(f.policyFile); err != nil {
			return err
		}
	}
	cfg := xds.Config{Discovery: disc, Logger: logger, Static: static, Policy: policy, MaxResponseBytes: f.maxResponse, WeightDelay: f.weightDelay,
		StreamRate: f.reconnectRate, StreamBurst: f.reconnectBurst, Registerer: promReg}
	if f.weightDelay == 0 {
		cfg.WeightDelay = -1 // the flag's 0 is "at once", the Config's "the default"
	}
	if f.regions.home != "" {
		if err := f.regions.xds(ctx, g, &cfg, newClient, promReg, logger); err != nil {
			return err
		}
	}
	if sa.authenticator == nil {
		logger.Warn("INSECURE: the xDS server runs without authentication over plaintext gRPC; anyone who reaches " + ln.Addr().String() +
			" reads every cluster, listener, route and endpoint. Never use --insecure outside development.")
	} else {
		guard := auth.NewGuard(sa.authenticator, sa.policy)
		cfg.TLS, cfg.Authorize = sa.tls, func(ctx context.Context) error { return authorizeStream(ctx, guard, logger) }
	}
	srv, err := xds.New(cfg)
	if err != nil {
		return err
	}
	if err := serveDebug(ctx, g, f.debug); err != nil {
		return err
	}
	if f.metrics != "" {
		mln, err := net.Listen("tcp", f.metrics)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promHandler(promReg))
		g.Go(func() error {
			return serveUntil(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, mln)
		})
	}
	logger.Info("xds listening", slog.String("addr", ln.Addr().String()), slog.Bool("tls", cfg.TLS != nil))
	g.Go(func() error { return srv.Run(ctx, ln) })
	return nil
}

// authorizeStream lets a stream through when its caller — the verified client certificate of
// its connection, else the bearer token of its authorization metadata — may subscribe (xds).
func authorizeStream(ctx context.Context, guard *auth.Guard, logger *slog.Logger) error {
	var state *tls.ConnectionState
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			state = &ti.State
		}
	}
	var authz string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	identity, err := guard.AuthorizeConn(state, authz, auth.XDS)
	if err != nil {
		code := codes.PermissionDenied
		if identity == "" {
			code = codes.Unauthenticated
		}
		logger.Warn("xds stream refused", slog.String("peer", addr), slog.String("identity", identity), slog.Any("error", err))
		return status.Error(code, err.Error())
	}
	logger.Info("xds stream admitted", slog.String("peer", addr), slog.String("identity", identity))
	return nil
}
