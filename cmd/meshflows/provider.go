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
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/examples/providers/jms"
	"github.com/meshflows/meshflows/examples/providers/messaging"
	"github.com/meshflows/meshflows/examples/providers/rabbitmq"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/provider"
)

func newExampleProviderCmd() *cobra.Command {
	var (
		kind, listen, advertise, zone, otlp string
		registries                          []string
		heartbeat, tlsReload                time.Duration
		logCfg                              telemetry.LogConfig
		creds                               clientCreds
		faults                              messaging.Faults
		warmup, healthInterval              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "example-provider",
		Short: "Run an example messaging provider (jms or rabbitmq) that registers itself",
		Long: `Run one of the example providers: an in-memory messaging publisher that registers
messaging.publish@1.0.0 with the registry, heartbeats, re-registers after a registry restart
and deregisters on Ctrl-C. It publishes itself when ready: registered not ready, it says
it is ready after --warmup (default at once), and gets no request before. It serves POST /api/messaging/KIND/publish,
GET /api/messaging/KIND/messages, the capability's validate and invoke endpoints, /healthz
and /metrics.

For drills, it can misbehave on purpose: --latency adds a delay to every publish (over HTTP
or invoked by a workflow) and --error-rate answers that share of them 500 — a grey failure
its probes never see (/healthz stays ok), which only the outcomes consumers report reveal.
meshflows_example_provider_injected_faults_total counts the injected errors.`,
		Example: `  meshflows example-provider --kind jms --registry http://127.0.0.1:7400 --listen 127.0.0.1:7410
  meshflows example-provider --kind jms --zone b --listen 127.0.0.1:7412 --error-rate 0.04 --latency 20ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runComponent(cmd, logCfg, listen, func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error {
				certs := auth.NewCertMetrics("provider")
				httpClient, err := creds.watchedClient(ctx, g, tlsReload, certs, logger)
				if err != nil {
					return err
				}
				return startExampleProvider(ctx, g, exampleProviderOptions{kind: kind, advertise: advertise, zone: zone,
					registries: registries, heartbeat: heartbeat, client: httpClient, token: creds.token, faults: faults, certs: certs, otlp: otlp, warmup: warmup, healthInterval: healthInterval}, ln, logger)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "jms", "which example: jms or rabbitmq")
	f.StringSliceVar(&registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(f, "registry", "MESHFLOWS_REGISTRY")
	f.StringVar(&listen, "listen", "127.0.0.1:7410", "address to serve on")
	f.StringVar(&advertise, "advertise", "", "endpoint URL to register (default http://<listen address>)")
	f.StringVar(&zone, "zone", "", "zone to register in")
	f.DurationVar(&heartbeat, "heartbeat-interval", 0, "heartbeat interval (0: the one the registry returns)")
	f.Float64Var(&faults.ErrorRate, "error-rate", 0, "share of publishes answered 500 on purpose, 0..1 (a drill's grey failure)")
	f.DurationVar(&faults.Latency, "latency", 0, "delay added to every publish (a drill's slow instance)")
	f.DurationVar(&healthInterval, "health-interval", time.Second, "the health.interval its manifest declares: the registry probes /healthz this often (and re-probes early only when it suspects a failure)")
	f.DurationVar(&warmup, "warmup", 0, "warm up this long before saying ready: registered not ready (publish when ready), it gets no request until then, even as the first member of a new service")
	bindLogFlags(f, &logCfg, "json")
	bindOTLP(f, &otlp)
	creds.bind(f)
	f.DurationVar(&tlsReload, "tls-reload-interval", client.DefaultTLSReloadInterval, "how often --ca, --tls-cert and --tls-key are read again: a rotated set is used by new connections, an invalid one is refused and logged")
	return cmd
}

// clientCreds are the flags with which a client of the registry authenticates.
type clientCreds struct {
	ca, cert, key, token, tokenFile string
}

// bind adds the client credential flags (a provider's, the dashboard's, a CLI's).
func (c *clientCreds) bind(f *pflag.FlagSet) {
	f.StringVar(&c.ca, "ca", "", "CA bundle the server's certificate must chain to (https servers)")
	f.StringVar(&c.cert, "tls-cert", "", "client certificate carrying this program's identity (mTLS)")
	f.StringVar(&c.key, "tls-key", "", "key of --tls-cert")
	f.StringVar(&c.token, "token", "", "bearer token to send instead of a client certificate")
	f.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token (instead of --token, which shows in the process list)")
	c.bindEnv(f, "ca", "tls-cert", "tls-key", "token", "token-file")
}

// bindEnv ties the credential flags, by their names in this command, to the variables.
func (c *clientCreds) bindEnv(f *pflag.FlagSet, ca, cert, key, token, tokenFile string) {
	bindEnv(f, ca, "MESHFLOWS_CA")
	bindEnv(f, cert, "MESHFLOWS_CLIENT_CERT")
	bindEnv(f, key, "MESHFLOWS_CLIENT_KEY")
	bindEnv(f, token, "MESHFLOWS_TOKEN")
	bindEnv(f, tokenFile, "MESHFLOWS_TOKEN_FILE")
}

// bearer returns the token: --token, else the content of --token-file.
func (c *clientCreds) bearer() (string, error) {
	if c.token != "" || c.tokenFile == "" {
		return c.token, nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token file %s is empty", c.tokenFile)
	}
	return t, nil
}

// bindRegistry adds the flags under names that leave --tls-cert and --tls-key to a server's
// own certificate (the gateway and the orchestrator serve with one and call the registry
// with these).
func (c *clientCreds) bindRegistry(f *pflag.FlagSet) { c.bindPrefixed(f, "registry", "the registry") }

// bindPrefixed adds the flags as --PREFIX-ca, --PREFIX-cert, --PREFIX-key, --PREFIX-token and
// --PREFIX-token-file, for a server that calls whom with them.
func (c *clientCreds) bindPrefixed(f *pflag.FlagSet, prefix, whom string) {
	f.StringVar(&c.ca, prefix+"-ca", "", "CA bundle the certificates of "+whom+" must chain to (https URLs)")
	f.StringVar(&c.cert, prefix+"-cert", "", "client certificate with which this server authenticates to "+whom+" (mTLS)")
	f.StringVar(&c.key, prefix+"-key", "", "key of --"+prefix+"-cert")
	f.StringVar(&c.token, prefix+"-token", "", "bearer token to send to "+whom+" instead of a client certificate")
	f.StringVar(&c.tokenFile, prefix+"-token-file", "", "file holding the bearer token for "+whom)
	c.bindEnv(f, prefix+"-ca", prefix+"-cert", prefix+"-key", prefix+"-token", prefix+"-token-file")
}

// prepare reads --token-file into the token and reports whether TLS files are given.
func (c *clientCreds) prepare() (bool, error) {
	tok, err := c.bearer()
	if err != nil {
		return false, err
	}
	c.token = tok
	return c.ca != "" || c.cert != "" || c.key != "", nil
}

// httpClient returns a client for the credentials (a plain one when none are given); it
// also reads --token-file into the token.
func (c *clientCreds) httpClient() (*http.Client, error) {
	if tlsOn, err := c.prepare(); err != nil || !tlsOn {
		return client.HTTPClient(nil), err
	}
	tlsCfg, err := client.TLSConfig(c.ca, c.cert, c.key)
	if err != nil {
		return nil, err
	}
	return client.HTTPClient(tlsCfg), nil
}

// watchedClient is httpClient for a long-running program: the CA bundle and the client
// certificate are read again every interval in g (a rotated set is used by new connections,
// idle ones are closed; a bad one is refused and logged), and certs, when not nil, exports
// their expiry.
func (c *clientCreds) watchedClient(ctx context.Context, g *errgroup.Group, interval time.Duration, certs *auth.CertMetrics, logger *slog.Logger) (*http.Client, error) {
	if tlsOn, err := c.prepare(); err != nil || !tlsOn {
		return client.HTTPClient(nil), err
	}
	files, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: c.ca, CertFile: c.cert, KeyFile: c.key, Logger: logger})
	if err != nil {
		return nil, err
	}
	if certs != nil {
		certs.Add(files)
	}
	g.Go(func() error { return files.Run(ctx, interval) })
	return files.HTTPClient(), nil
}

type exampleProviderOptions struct {
	kind, advertise, zone string
	registries            []string
	heartbeat             time.Duration
	client                *http.Client // nil: a plain client
	token                 string
	faults                messaging.Faults
	certs                 *auth.CertMetrics // the certificates' expiry on the provider's /metrics; nil: none
	otlp                  string            // --otlp-endpoint
	warmup                time.Duration     // --warmup
	healthInterval        time.Duration     // --health-interval
}

// startExampleProvider builds an example provider on ln and runs it in g until ctx ends.
func startExampleProvider(ctx context.Context, g *errgroup.Group, o exampleProviderOptions, ln net.Listener, logger *slog.Logger) error {
	endpoint := o.advertise
	if endpoint == "" {
		endpoint = "http://" + ln.Addr().String()
	}
	var p *messaging.Provider
	var err error
	switch o.kind {
	case "jms":
		p, err = jms.New(endpoint, o.zone)
	case "rabbitmq":
		p, err = rabbitmq.New(endpoint, o.zone)
	default:
		return fmt.Errorf("--kind %q: want jms or rabbitmq", o.kind)
	}
	if err != nil {
		return err
	}
	if o.faults.ErrorRate != 0 || o.faults.Latency != 0 {
		if err := p.SetFaults(o.faults); err != nil {
			return fmt.Errorf("--error-rate, --latency: %w", err)
		}
		logger.Warn("example provider injects faults", slog.Float64("error_rate", o.faults.ErrorRate), slog.Duration("latency", o.faults.Latency))
	}
	if o.certs != nil {
		if err := p.Metrics().Register(o.certs); err != nil {
			return err
		}
	}
	tr, err := startTracing(ctx, g, o.otlp, "provider-"+o.kind, logger)
	if err != nil {
		return err
	}
	p.SetTracer(tr.Tracer)
	p.SetWarmup(o.warmup)
	p.SetHealthInterval(o.healthInterval)
	agentCfg := provider.Config{Registries: o.registries, HeartbeatInterval: o.heartbeat, Client: o.client, BearerToken: o.token,
		Logger: logger.With(slog.String("provider", o.kind))}
	logger.Info("example provider listening", slog.String("kind", o.kind), slog.String("addr", ln.Addr().String()),
		slog.String("endpoint", endpoint))
	g.Go(func() error { return p.Run(ctx, ln, agentCfg, logger) })
	return nil
}
