package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/nameserver"
	"github.com/meshflows/meshflows/internal/telemetry"
)

// dnsFlags are the flags of 'meshflows dns'.
type dnsFlags struct {
	regions    regionFlags
	otlp       string
	listen     string
	registries []string
	domain     string
	ttl        time.Duration
	maxStale   time.Duration
	metrics    string
	creds      clientCreds
	tlsReload  time.Duration
	// allowRemote lets --listen be an address other hosts reach (DNS has no identities).
	allowRemote bool
	log         telemetry.LogConfig
}

func newDNSCmd() *cobra.Command {
	var f dnsFlags
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Serve the registry's discovery view over DNS (UDP and TCP), eligibility-aware, from last-known-good",
		Long: `Answer DNS queries from the registry's discovery view, for clients that can only resolve
names. Only instances in rotation answer (all of them when their group is in panic); SRV
carries the eligibility weight and a priority from metadata.priority; answers keep flowing
from the last-known-good view while the registry is away (TXT says source=snapshot).

Names under --domain (docs/reference/dns.md):
  <capability-id>.cap.DOMAIN                 SRV, A/AAAA, TXT
  _<provider>.<capability-id>.cap.DOMAIN     one provider
  v<major>.<capability-id>.cap.DOMAIN        one major version (after the provider label)
  <service-name>.svc.DOMAIN                  <instance-id>.inst.DOMAIN

A name that does not exist is NXDOMAIN; a known one with none in rotation, NODATA. ANY gets
the minimal answer of RFC 8482. Metrics (meshflows_dns_queries_total{qtype,rcode},
meshflows_dns_answer_source{source}) are served on --metrics-listen when given.`,
		Example: `  meshflows dns --listen 127.0.0.1:8600 --registry http://127.0.0.1:7400
  dig @127.0.0.1 -p 8600 SRV messaging.publish.cap.meshflows. +short`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loopbackOnly(f.listen, f.allowRemote); err != nil {
				return err
			}
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				var mln net.Listener
				if f.metrics != "" {
					l, err := net.Listen("tcp", f.metrics)
					if err != nil {
						return fmt.Errorf("--metrics-listen: %w", err)
					}
					mln = l
				}
				return startDNS(ctx, g, &f, ln, mln, logger)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8600", "address to answer on, UDP and TCP")
	fl.StringSliceVar(&f.registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fl, "registry", "MESHFLOWS_REGISTRY")
	fl.StringVar(&f.domain, "domain", nameserver.DefaultDomain, "the zone answered")
	fl.DurationVar(&f.ttl, "ttl", nameserver.DefaultTTL, "TTL of answers (never longer than what is left of --max-stale)")
	fl.StringVar(&f.metrics, "metrics-listen", "", "address to serve /metrics on over HTTP (default: none)")
	fl.DurationVar(&f.maxStale, "max-stale", 0, "how long the last-known-good view is answered while the registry is away; past it names answer SERVFAIL until the registry answers. 0 (the default): for as long as it is away — the view is authoritative")
	fl.BoolVar(&f.allowRemote, "allow-remote", false, "allow a --listen address other hosts reach: DNS has no identities, so anyone who reaches it reads every name; keep it cluster-private (a NetworkPolicy, a firewall)")
	f.creds.bindRegistry(fl)
	f.regions.bind(fl)
	fl.DurationVar(&f.tlsReload, "tls-reload-interval", client.DefaultTLSReloadInterval, "how often --registry-ca, --registry-cert and --registry-key are read again (a rotated set is used by new connections)")
	bindLogFlags(fl, &f.log, "json")
	bindOTLP(fl, &f.otlp)
	return cmd
}

// loopbackOnly refuses a listen address that is not a loopback one unless allowRemote:
// a server without identities answers anyone who reaches it.
func loopbackOnly(listen string, allowRemote bool) error {
	if allowRemote {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("--listen %s is reachable from other hosts and DNS authenticates nobody: pass --allow-remote to serve it there, and keep it cluster-private (a NetworkPolicy or a firewall)", listen)
}

// startDNS serves DNS on ln's address (TCP on ln, UDP on the same port) and, when mln is not
// nil, its metrics on mln, in g.
func startDNS(ctx context.Context, g *errgroup.Group, f *dnsFlags, ln, mln net.Listener, logger *slog.Logger) error {
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		return fmt.Errorf("dns: udp %s: %w", ln.Addr(), err)
	}
	promReg := telemetry.NewRegistry()
	certs := auth.NewCertMetrics("dns")
	promReg.MustRegister(certs)
	httpClient, err := f.creds.watchedClient(ctx, g, f.tlsReload, certs, logger)
	if err != nil {
		pc.Close()
		return err
	}
	if err := f.regions.validate(); err != nil {
		pc.Close()
		return &exitError{code: 2, err: err}
	}
	tr, err := startTracing(ctx, g, f.otlp, "dns", logger)
	if err != nil {
		pc.Close()
		return err
	}
	// one name server per region (only home's without --region), each over its own
	// registry, its series labelled with its region
	build := func(region string, registries []string) (*nameserver.Server, error) {
		reg, rlog := f.regions.scoped(region, promReg, logger)
		disc, err := discovery.New(discovery.Config{Registries: registries, Consumer: "dns", Client: httpClient, BearerToken: f.creds.token,
			StaleAllowance: f.maxStale, Logger: rlog, Registerer: reg})
		if err != nil {
			return nil, err
		}
		return nameserver.New(nameserver.Config{Tracer: tr.Tracer, Discovery: disc, Domain: f.domain, TTL: f.ttl, StaleAllowance: f.maxStale, Logger: rlog, Registerer: reg})
	}
	srv, err := build(f.regions.home, f.registries)
	if err != nil {
		pc.Close()
		return err
	}
	if f.regions.home != "" {
		if err := f.regions.nameservers(ctx, g, srv, build, promReg, logger); err != nil {
			pc.Close()
			return err
		}
	}
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promHandler(promReg))
		g.Go(func() error {
			return serveUntil(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, mln)
		})
	}
	logger.Info("dns listening", slog.String("addr", ln.Addr().String()), slog.String("domain", f.domain))
	g.Go(func() error { return srv.Run(ctx, pc, ln) })
	return nil
}
