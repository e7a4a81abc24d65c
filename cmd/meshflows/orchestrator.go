package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/orchestrator"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/internal/workflow"
)

type orchestratorFlags struct {
	regions                  regionFlags
	otlp                     string
	listen, dir, staticFile  string
	registries               []string
	timeout                  time.Duration
	scopeMode                string
	scopeModeSet             bool // --scope-mode given (it wins over $WORKFLOW_SCOPE_MODE)
	maxParallel              int
	triggerWarn, triggerCrit float64
	creds                    clientCreds
	security                 serverAuthFlags
	insecure                 bool
	log                      telemetry.LogConfig
	// preload are workflows to upload and publish at start (meshflows dev's example).
	preload [][]byte
	// allowEndpointCIDR is --allow-endpoint-cidr.
	allowEndpointCIDR []string
	maxStale          time.Duration
	revalidateEvery   time.Duration
	maxRuns           int
	maxRunsTotal      int
	maxStepTimeout    time.Duration
	maxRunDuration    time.Duration
	maxRecordBytes    int
	maxHistoryBytes   int
}

func newOrchestratorCmd() *cobra.Command {
	var f orchestratorFlags
	cmd := &cobra.Command{
		Use:   "orchestrator",
		Short: "Run the workflow orchestrator: store, validate, publish and run workflows",
		Long: `Run the orchestrator. Workflows are uploaded as YAML (POST /v1/workflows), validated in three
layers (contract, resolution, providers), published, and run over HTTP or on their schedule;
each service_call step goes to an instance that qualifies, resolved through the registry —
or through --static-capabilities when the registry has never answered.

Provider strictness for workflows that do not set validation.provider_strict comes from
$` + strictEnv + ` (default strict).

The API is guarded like the registry's: serve with --tls-cert/--tls-key, identify callers by
client certificate (--client-ca) and/or bearer token (--jwt-keys), and give the registry's
--rbac file, whose roles grant "workflows: [read, write, run]": read lists and shows
workflows and runs, write uploads, re-validates, publishes and invalidates, run starts runs
(admin grants all). Without TLS the orchestrator refuses to start unless --insecure says
that an open API is intended. It calls the registry with --registry-ca, --registry-cert,
--registry-key or --registry-token.`,
		Example: `  meshflows orchestrator --insecure --registry http://127.0.0.1:7400 --workflows-dir /var/lib/meshflows/workflows
  meshflows orchestrator --registry https://127.0.0.1:7400 --registry-ca certs/ca.pem --registry-cert certs/orchestrator.pem \
    --registry-key certs/orchestrator-key.pem --tls-cert certs/server.pem --tls-key certs/server-key.pem --client-ca certs/ca.pem --rbac rbac.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.scopeModeSet = cmd.Flags().Changed("scope-mode")
			return runComponent(cmd, f.log, f.listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				return startOrchestrator(ctx, g, &f, ln, logger)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7401", "address to serve on")
	fl.StringSliceVar(&f.registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fl, "registry", "MESHFLOWS_REGISTRY")
	fl.StringVar(&f.dir, "workflows-dir", "", "directory where workflows, their results, run history and trigger health, and the last discovery view persist (loaded at start: runs resolve from the saved view while the registry is away)")
	fl.StringSliceVar(&f.allowEndpointCIDR, "allow-endpoint-cidr", nil, allowEndpointCIDRUsage)
	fl.DurationVar(&f.revalidateEvery, "revalidate-every", time.Hour, "validate every published workflow again against its providers this often (0: never): the results show in the validation console and the journal, and a workflow that stopped validating raises its validation incident")
	fl.DurationVar(&f.maxStale, "max-stale", 0, "how long the last valid discovery view (saved in --workflows-dir, or held since the registry went away) resolves the steps that declare no max_stale of their own; past it such a step uses --static-capabilities, or fails with 503 STALE_VIEW_EXPIRED, until the registry answers. 0 (the default): for as long as the registry is away")
	fl.StringVar(&f.staticFile, "static-capabilities", "", "YAML list of {capability_id, provider, version, endpoint}: used when the registry has never answered")
	fl.DurationVar(&f.timeout, "provider-timeout", workflow.DefaultProviderTimeout, "timeout of each provider validation")
	fl.StringVar(&f.scopeMode, "scope-mode", "legacy", "scope mode of workflows that name none: legacy (loops and branches share the context) or strict (default: $"+scopeEnv+", else legacy)")
	fl.IntVar(&f.maxParallel, "max-parallel", orchestrator.DefaultMaxParallel, "branches of one parallel step that run at once")
	fl.IntVar(&f.maxRuns, "max-concurrent-runs", orchestrator.DefaultMaxConcurrentRuns, "runs of one workflow in progress at once; past it POST .../run is 429 with Retry-After (a schedule skips a fire while its own run is in progress)")
	fl.IntVar(&f.maxRunsTotal, "max-concurrent-runs-total", orchestrator.DefaultMaxConcurrentRunsTotal, "runs of all workflows in progress at once")
	fl.DurationVar(&f.maxStepTimeout, "max-step-timeout", workflow.DefaultMaxStepTimeout, "the longest step timeout a workflow may ask for; above it the upload is refused (INVALID_VALUE)")
	fl.DurationVar(&f.maxRunDuration, "max-run-duration", orchestrator.DefaultMaxRunDuration, "a run still going after this long is stopped (its step fails with DEADLINE_EXCEEDED)")
	fl.IntVar(&f.maxRecordBytes, "max-run-record-bytes", orchestrator.DefaultMaxRunRecordBytes, "bound of one run's record: past it a loop keeps its first iterations as far as the bound allows and its last 10, says how many it left out, and the run says truncated")
	fl.IntVar(&f.maxHistoryBytes, "max-run-history-bytes", orchestrator.DefaultMaxRunHistoryBytes, "bound of a workflow's run history (beside its 100 runs): the oldest runs leave first")
	fl.Float64Var(&f.triggerWarn, "trigger-warning", orchestrator.DefaultTriggerWarning, "success rate under which a workflow's trigger health is a warning (GET /v1/triggers/health, the console's strips)")
	fl.Float64Var(&f.triggerCrit, "trigger-critical", orchestrator.DefaultTriggerCritical, "success rate under which a workflow's trigger health is critical")
	bindLogFlags(fl, &f.log, "json")
	bindOTLP(fl, &f.otlp)
	fl.BoolVar(&f.insecure, "insecure", false, "serve the API without authentication (development only: anyone who reaches the port can upload and run workflows, which call the providers)")
	f.creds.bindRegistry(fl)
	f.regions.bind(fl)
	f.security.bind(fl, "the registry's RBAC file (YAML): roles' workflows verbs say who may read, write and run workflows; reloaded when it changes")
	return cmd
}

func startOrchestrator(ctx context.Context, g *errgroup.Group, f *orchestratorFlags, ln net.Listener, logger *slog.Logger) error {
	var static []orchestrator.StaticCapability
	if f.staticFile != "" {
		if err := readYAML(f.staticFile, &static); err != nil {
			return err
		}
	}
	strict := true
	if v, ok := os.LookupEnv(strictEnv); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("$%s=%q: want true or false", strictEnv, v)
		}
		strict = b
	}
	mode, err := scopeMode(f.scopeMode, f.scopeModeSet)
	if err != nil {
		return err
	}
	if f.maxParallel < 0 {
		return fmt.Errorf("--max-parallel %d: want at least 1", f.maxParallel)
	}
	switch { // zero is the default (meshflows dev sets none of them)
	case f.maxRuns < 0 || f.maxRunsTotal < 0:
		return fmt.Errorf("--max-concurrent-runs %d, --max-concurrent-runs-total %d: want at least 1", f.maxRuns, f.maxRunsTotal)
	case f.maxRunsTotal > 0 && f.maxRunsTotal < f.maxRuns:
		return fmt.Errorf("--max-concurrent-runs-total %d: want at least --max-concurrent-runs (%d)", f.maxRunsTotal, f.maxRuns)
	case f.maxStepTimeout < 0 || f.maxRunDuration < 0:
		return fmt.Errorf("--max-step-timeout and --max-run-duration must be positive")
	case f.maxRecordBytes < 0 || f.maxHistoryBytes < 0:
		return fmt.Errorf("--max-run-record-bytes and --max-run-history-bytes must be positive")
	}
	sa, err := buildServerAuth(ctx, g, "orchestrator", f.security, f.insecure, logger)
	if err != nil {
		return err
	}
	ln, guard := sa.serve(ln, "orchestrator", "upload, publish and run workflows, which call the providers", logger)
	var authz orchestrator.Authorizer // nil, not a nil *auth.Guard, when open
	if guard != nil {
		authz = guard
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
	// one discovery client per region (only home's without --region), each on its own
	// registry, its series labelled with its region
	newClient := func(region string, registries []string) (*discovery.Client, error) {
		reg, rlog := f.regions.scoped(region, promReg, logger)
		return discovery.New(discovery.Config{Registries: registries, Consumer: "orchestrator", Client: httpClient, BearerToken: f.creds.token, StaleAllowance: f.maxStale,
			Logger: rlog, Registerer: reg})
	}
	disc, err := newClient(f.regions.home, f.registries)
	if err != nil {
		return err
	}
	var regions *discovery.Regions
	if f.regions.home != "" {
		if regions, err = f.regions.discovery(ctx, g, disc, newClient, orchestrator.ReadyPool(0.5), promReg, logger); err != nil {
			return err
		}
	}
	reporter, err := report.New(report.Config{Reporter: "orchestrator@" + ln.Addr().String(), Send: disc.Report, Logger: logger})
	if err != nil {
		return err
	}
	endpoints, err := endpointPolicy(f.allowEndpointCIDR)
	if err != nil {
		return err
	}
	tr, err := startTracing(ctx, g, f.otlp, "orchestrator", logger)
	if err != nil {
		return err
	}
	revalidate := f.revalidateEvery
	if revalidate == 0 {
		revalidate = -1 // the flag's 0 is never; the Config's default is an hour
	}
	o, err := orchestrator.New(orchestrator.Config{RevalidateEvery: revalidate, Endpoints: endpoints, Reporter: reporter, ReporterID: "orchestrator@" + ln.Addr().String(), Discovery: disc, Regions: regions, Static: static, Dir: f.dir, ProviderTimeout: f.timeout, Strict: strict, ScopeMode: mode, MaxParallel: f.maxParallel,
		MaxConcurrentRuns: f.maxRuns, MaxConcurrentRunsTotal: f.maxRunsTotal, MaxStepTimeout: f.maxStepTimeout, MaxRunDuration: f.maxRunDuration,
		MaxRunRecordBytes: f.maxRecordBytes, MaxRunHistoryBytes: f.maxHistoryBytes, TriggerWarning: f.triggerWarn, TriggerCritical: f.triggerCrit, Authorizer: authz, Registerer: promReg, Logger: logger, Tracing: tr})
	if err != nil {
		return err
	}
	if err := o.Load(ctx); err != nil {
		logger.Warn("some stored workflows were not loaded", slog.Any("error", err))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promHandler(promReg))
	mux.Handle("/", o.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	logger.Info("orchestrator listening", slog.String("addr", ln.Addr().String()))
	g.Go(func() error { return o.Run(ctx) })
	g.Go(func() error { return reporter.Run(ctx) })
	g.Go(func() error { return serveUntil(ctx, srv, ln) })
	if len(f.preload) > 0 {
		g.Go(func() error { preload(ctx, o, f.preload, logger); return nil })
	}
	return nil
}

// preload uploads and publishes workflows once their providers can be resolved (meshflows
// dev starts them together), retrying for a while.
func preload(ctx context.Context, o *orchestrator.Orchestrator, srcs [][]byte, logger *slog.Logger) {
	for _, src := range srcs {
		var err error
		for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
			o.Invalidate() // the providers start with us: ask the registry afresh each time
			r, uerr := o.Upload(ctx, src)
			if err = uerr; err == nil && !hasWarning(r, "CAPABILITY_UNAVAILABLE") {
				_, err = o.Publish(r.Workflow)
			} else if err == nil {
				err = fmt.Errorf("providers not registered yet")
			}
			if err == nil {
				logger.Info("example workflow loaded and published", slog.String("workflow", r.Workflow))
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err != nil {
			logger.Warn("example workflow not loaded", slog.Any("error", err))
		}
	}
}

func hasWarning(r *apiv1.ValidationResult, code string) bool {
	for _, d := range workflow.Diagnostics(r) {
		if d.Code == code {
			return true
		}
	}
	return false
}
