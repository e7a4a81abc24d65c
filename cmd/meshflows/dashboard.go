package main

import (
	"context"
	"crypto/tls"
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
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/dashboard"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/internal/tracing"
)

type dashboardFlags struct {
	otlp                          string
	listen, orchestrator, gateway string
	registry                      []string
	tokenFile                     string
	insecure                      bool
	sessionTTL                    time.Duration
	grafanaURL, traceURL          string
	scaleCommand, scaleWebhook    string
	creds                         clientCreds
	security                      serverAuthFlags
	log                           telemetry.LogConfig
}

func newDashboardCmd() *cobra.Command {
	var f dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Run the web console over the registry, gateway and orchestrator",
		Long: `Run the web console: the capabilities catalog, the validation console, the gateway's routes
and route map, the workflows' runs, the incidents with their evidence, the registry's key
series of the last hour (Metrics) and the event journal (Logs). Pages are rendered on the
server and work without JavaScript; with it the catalog and the logs update live.

An incident's Scale provider button calls --scale-command (run without a shell, "{service}"
and "{zone}" replaced in its arguments and MESHFLOWS_SCALE_SERVICE, _ZONE, _INCIDENT and _BY
in its environment) or POSTs to --scale-webhook (a URL template with {service} and {zone});
it must answer within 5 s. Without either the button is disabled and says why.

The console shows what the registry, the gateway and the orchestrator protect, so every page
needs a signed-in viewer, and shows only what the viewer's roles allow (the same RBAC file as
the registry's: discover for the catalog, events and incidents; workflows: read for the
workflows; gateway_admin for the routes). A viewer signs in with the admin token of
--admin-token-file (every permission) or a bearer token of --jwt-keys on the sign-in page,
or is identified by a client certificate (--client-ca) or a bearer token on each request;
a sign-in is a session cookie (HttpOnly, SameSite=Strict) for --session-ttl. Write actions
need the permission of what they change (or the admin token). --tls-cert and --tls-key serve
HTTPS, reloaded as the files change. --insecure opens everything (development only).

The console reads the components with its own credentials (--upstream-ca, --upstream-cert,
--upstream-key or --upstream-token), which need every permission the pages show.`,
		Example: `  meshflows dashboard --registry http://127.0.0.1:7400 --orchestrator http://127.0.0.1:7401 --gateway http://127.0.0.1:7402 --admin-token-file token
  meshflows dashboard --registry https://127.0.0.1:7400 --orchestrator https://127.0.0.1:7401 --gateway https://127.0.0.1:7402 \
    --upstream-ca certs/ca.pem --upstream-cert certs/dashboard.pem --upstream-key certs/dashboard-key.pem \
    --tls-cert certs/server.pem --tls-key certs/server-key.pem --client-ca certs/ca.pem --rbac rbac.yaml --admin-token-file token`,
		Args: cobra.NoArgs,
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
	fl.StringVar(&f.tokenFile, "admin-token-file", "", "file holding the admin token: signs in with every permission; read again every --tls-reload-interval, and a new token ends the sessions the old one signed")
	fl.BoolVar(&f.insecure, "insecure", false, "let anyone who reaches the console see everything and use every action (development only)")
	fl.DurationVar(&f.sessionTTL, "session-ttl", dashboard.DefaultSessionTTL, "how long a sign-in lasts")
	fl.StringVar(&f.traceURL, "trace-url-template", "", "link every run, and every event naming a trace, to it: {trace_id} is replaced, e.g. 'https://tempo.example/trace/{trace_id}' or 'http://jaeger:16686/trace/{trace_id}'")
	fl.StringVar(&f.scaleCommand, "scale-command", "", "command an incident's Scale provider button runs (admin), arguments separated by spaces, no shell: e.g. '"+dashboard.ScaleCommandExample+"' (adds one replica to a Deployment; kubectl scale --replicas alone is absolute)")
	fl.StringVar(&f.scaleWebhook, "scale-webhook", "", "URL an incident's Scale provider button POSTs {service, zone, incident, by} to (admin): e.g. 'https://autoscaler.example/scale/{service}?zone={zone}'")
	fl.StringVar(&f.grafanaURL, "grafana-url", "", "base URL of a Grafana with deploy/grafana's dashboards imported: each page then links its metrics (e.g. https://grafana.example.com)")
	bindLogFlags(fl, &f.log, "json")
	bindOTLP(fl, &f.otlp)
	f.creds.bindPrefixed(fl, "upstream", "the registry, the gateway and the orchestrator")
	// Before the console served TLS itself, its upstream credentials were --ca, --token and
	// --token-file: they still work, and say so. (--tls-cert and --tls-key now name the
	// console's own server certificate: docs/upgrading.md.)
	for old, now := range map[string]*string{"ca": &f.creds.ca, "token": &f.creds.token, "token-file": &f.creds.tokenFile} {
		fl.StringVar(now, old, "", "deprecated: use --upstream-"+old)
		fl.MarkDeprecated(old, "use --upstream-"+old)
	}
	f.security.bind(fl, "RBAC policy file (the registry's): what each identity of a client certificate or bearer token may see and do")
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
	sec := f.security
	tlsOn, identities := sec.tlsCert != "" || sec.tlsKey != "", sec.clientCA != "" || sec.jwtKeys != ""
	switch {
	case f.insecure && (tlsOn || identities || token != ""):
		return fmt.Errorf("--insecure opens the console to anyone: it contradicts --tls-cert, --client-ca, --jwt-keys and --admin-token-file")
	case identities && sec.rbac == "":
		return fmt.Errorf("--client-ca and --jwt-keys need --rbac: it says what each identity may see")
	case sec.clientCA != "" && !tlsOn:
		return fmt.Errorf("--client-ca needs --tls-cert and --tls-key: client certificates come with TLS")
	}
	certs := auth.NewCertMetrics("dashboard")
	var viewers dashboard.Viewers
	var serverTLS *tls.Config
	if tlsOn {
		sc, err := startServerCerts(ctx, g, "dashboard", sec, logger)
		if err != nil {
			return err
		}
		certs.Add(sc)
		serverTLS = sc.TLSConfig()
	}
	if identities {
		authn, policy, err := buildIdentities(ctx, g, sec, logger)
		if err != nil {
			return err
		}
		viewers = policyViewers{authn: authn, policy: policy}
	}
	httpClient, err := f.creds.watchedClient(ctx, g, sec.tlsReload, certs, logger)
	if err != nil {
		return err
	}
	tr, err := startTracing(ctx, g, f.otlp, "dashboard", logger)
	if err != nil {
		return err
	}
	if tr.On() { // a page's calls to the registry, orchestrator and gateway carry its trace
		c := *httpClient
		c.Transport = tracing.Transport(c.Transport)
		httpClient = &c
	}
	d, err := dashboard.New(dashboard.Config{RegistryURLs: f.registry, GatewayURL: f.gateway, OrchestratorURL: f.orchestrator,
		Client: httpClient, AdminToken: token, Viewers: viewers, Insecure: f.insecure, SessionTTL: f.sessionTTL, GrafanaURL: f.grafanaURL, TraceURLTemplate: f.traceURL, Logger: logger,
		Scale: dashboard.ScaleHook{Command: strings.Fields(f.scaleCommand), Webhook: f.scaleWebhook}})
	if err != nil {
		return err
	}
	if f.tokenFile != "" && sec.tlsReload > 0 {
		g.Go(func() error { return watchTokenFile(ctx, f.tokenFile, token, sec.tlsReload, d.SetAdminToken, logger) })
	}
	switch {
	case f.insecure:
		logger.Warn("INSECURE: the console is open: anyone who reaches " + ln.Addr().String() + " sees the catalog, the routes and the workflows and can use every action. Never use --insecure outside development.")
	case serverTLS == nil && !isLoopback(ln.Addr()):
		logger.Warn("the console serves plain HTTP on " + ln.Addr().String() + ": tokens and session cookies travel in clear; give --tls-cert and --tls-key, or put it behind a TLS ingress")
	}
	promReg := telemetry.NewRegistry()
	if err := promReg.Register(certs); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promHandler(promReg))
	mux.Handle("/", httpapi.Traced(tr.Tracer, "", d.Handler()))
	srv := &http.Server{Handler: httpapi.BodyTimeout(mux, httpapi.DefaultBodyTimeout), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
	}
	logger.Info("dashboard listening", slog.String("addr", ln.Addr().String()), slog.Bool("tls", serverTLS != nil))
	g.Go(func() error { return serveUntil(ctx, srv, ln) })
	return nil
}

// policyViewers are the console's viewers as the RBAC file sees them.
type policyViewers struct {
	authn  *auth.Authenticator
	policy *auth.PolicyFile
}

func (p policyViewers) Identify(r *http.Request) (string, error) { return p.authn.Identify(r) }

func (p policyViewers) Allows(identity, perm string) bool {
	switch perm {
	case dashboard.PermDiscover:
		return p.policy.CanDiscover(identity)
	case dashboard.PermAdmin:
		return p.policy.IsAdmin(identity)
	}
	return p.policy.Allows(identity, perm)
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// watchTokenFile reads the admin token file again every interval, as the certificates are:
// a new token is handed to set (which ends the sessions the old one signed); an empty or
// unreadable file is refused and logged, and the token in force stays.
func watchTokenFile(ctx context.Context, path, current string, every time.Duration, set func(string), logger *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		tok := strings.TrimSpace(string(b))
		switch {
		case err != nil || tok == "":
			logger.Warn("the admin token file could not be read again, or is empty: the token in force stays", slog.String("file", path), slog.Any("error", err))
		case tok != current:
			current = tok
			set(tok)
			logger.Warn("the admin token changed: the sessions signed in with the old one are ended", slog.String("file", path))
		}
	}
}
