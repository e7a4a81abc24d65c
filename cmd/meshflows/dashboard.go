package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/dashboard"
	"github.com/meshflows/meshflows/internal/telemetry"
)

type dashboardFlags struct {
	listen, orchestrator, gateway string
	registry                      []string
	tokenFile                     string
	insecure                      bool
	grafanaURL                    string
	creds                         clientCreds
	log                           telemetry.LogConfig
}

func newDashboardCmd() *cobra.Command {
	var f dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Run the web console over the registry, gateway and orchestrator",
		Long: `Run the web console: the capabilities catalog, the validation console, the gateway's routes
and route map, and the workflows' runs. Pages are rendered on the server and work without
JavaScript; with it the catalog updates live.

Write actions (invalidate, re-validate, upload, run) need the admin token from
--admin-token-file, unless --insecure opens them (development only).`,
		Example: "  meshflows dashboard --registry http://127.0.0.1:7400 --orchestrator http://127.0.0.1:7401 --gateway http://127.0.0.1:7402 --admin-token-file token",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				return startDashboard(ctx, g, &f, ln, logger)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7403", "address to serve on")
	fl.StringSliceVar(&f.registry, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fl, "registry", "MESHFLOWS_REGISTRY")
	fl.StringVar(&f.orchestrator, "orchestrator", "http://127.0.0.1:7401", "orchestrator base URL")
	fl.StringVar(&f.gateway, "gateway", "http://127.0.0.1:7402", "gateway base URL")
	fl.StringVar(&f.tokenFile, "admin-token-file", "", "file holding the bearer token that write actions need")
	fl.BoolVar(&f.insecure, "insecure", false, "let anyone who reaches the console use the write actions (development only)")
	fl.StringVar(&f.grafanaURL, "grafana-url", "", "base URL of a Grafana with deploy/grafana's dashboards imported: each page then links its metrics (e.g. https://grafana.example.com)")
	bindLogFlags(fl, &f.log, "json")
	f.creds.bind(fl)
	return cmd
}

func startDashboard(ctx context.Context, g *errgroup.Group, f *dashboardFlags, ln net.Listener, logger *slog.Logger) error {
	var token string
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--admin-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return fmt.Errorf("--admin-token-file %s is empty", f.tokenFile)
		}
	}
	httpClient, err := f.creds.httpClient()
	if err != nil {
		return err
	}
	d, err := dashboard.New(dashboard.Config{RegistryURLs: f.registry, GatewayURL: f.gateway, OrchestratorURL: f.orchestrator,
		Client: httpClient, AdminToken: token, Insecure: f.insecure, GrafanaURL: f.grafanaURL})
	if err != nil {
		return err
	}
	if f.insecure {
		logger.Warn("INSECURE: the dashboard's write actions are open to anyone who reaches " + ln.Addr().String())
	}
	srv := &http.Server{Handler: httpapi.BodyTimeout(d.Handler(), httpapi.DefaultBodyTimeout), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("dashboard listening", slog.String("addr", ln.Addr().String()))
	g.Go(func() error { return serveUntil(ctx, srv, ln) })
	return nil
}
