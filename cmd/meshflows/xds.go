package main

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/internal/xds"
	"github.com/meshflows/meshflows/routing"
)

// xdsFlags are the flags of 'meshflows xds'.
type xdsFlags struct {
	listen     string
	registries []string
	maxStale   time.Duration
	routesFile string
	policyFile string
	policy     routing.Policy // set directly by meshflows dev
	creds      clientCreds
	log        telemetry.LogConfig
	debug      string
	// maxResponse is --max-response-bytes.
	maxResponse int
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
only the resources that changed. The last view keeps being served while the registry is away.`,
		Example: `  meshflows xds --listen 127.0.0.1:18000 --registry http://127.0.0.1:7400
  GRPC_XDS_BOOTSTRAP=bootstrap.json ./my-grpc-client   # target xds:///messaging.publish`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				return startXDS(ctx, g, &f, ln, logger)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:18000", "address the ADS server listens on (gRPC, plaintext)")
	fl.StringSliceVar(&f.registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fl, "registry", "MESHFLOWS_REGISTRY")
	fl.StringVar(&f.routesFile, "routes", "", "static routes file (YAML): routes: [{path, methods, upstream}] (as the gateway's)")
	fl.StringVar(&f.policyFile, "policy", "", "path policy file (YAML): path_prefixes: {service: [prefix, …]} (as the gateway's; without it no manifest route is served)")
	fl.DurationVar(&f.maxStale, "max-stale", discovery.DefaultStaleAllowance, "how long the last-known-good view is kept while the registry is away")
	fl.IntVar(&f.maxResponse, "max-response-bytes", xds.DefaultMaxResponseBytes, "largest EDS or RDS response: more endpoints go out over several responses, each acknowledged before the next (the default is gRPC's default receive limit; a client that raises its own may take a larger bound)")
	fl.StringVar(&f.debug, "debug-listen", "", "serve Go profiling (/debug/pprof/) on this address, e.g. 127.0.0.1:6062 (off by default)")
	bindEnv(fl, "debug-listen", "MESHFLOWS_XDS_DEBUG_LISTEN")
	f.creds.bindRegistry(fl)
	bindLogFlags(fl, &f.log, "json")
	return cmd
}

// startXDS serves ADS on ln in g.
func startXDS(ctx context.Context, g *errgroup.Group, f *xdsFlags, ln net.Listener, logger *slog.Logger) error {
	httpClient, err := f.creds.httpClient()
	if err != nil {
		return err
	}
	disc, err := discovery.New(discovery.Config{Registries: f.registries, Consumer: "xds", Client: httpClient, BearerToken: f.creds.token,
		StaleAllowance: f.maxStale, Logger: logger})
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
	srv, err := xds.New(xds.Config{Discovery: disc, Logger: logger, Static: static, Policy: policy, MaxResponseBytes: f.maxResponse})
	if err != nil {
		return err
	}
	if err := serveDebug(ctx, g, f.debug); err != nil {
		return err
	}
	logger.Info("xds listening", slog.String("addr", ln.Addr().String()))
	g.Go(func() error { return srv.Run(ctx, ln) })
	return nil
}
