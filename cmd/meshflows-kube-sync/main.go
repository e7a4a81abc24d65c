// Command meshflows-kube-sync registers the endpoints of annotated Kubernetes Services in a
// MeshFlows registry, reconciled event by event (docs/kubernetes.md).
//
// It is a binary of its own, not a meshflows command: linking the Kubernetes API types and
// client into meshflows would grow every meshflows process's idle memory by about 7 MB
// (docs/kubernetes.md, "Why a second binary").
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
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/kubesync"
	"github.com/meshflows/meshflows/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newKubeSyncCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshflows-kube-sync:", err)
		os.Exit(1)
	}
}

// kubeSyncFlags are the flags of 'meshflows kube-sync'.
type kubeSyncFlags struct {
	listen, kubeconfig, identity string
	namespaces, registries       []string
	creds                        registryCreds
	tlsReload, heartbeat         time.Duration
	coalesce                     time.Duration
	workers                      int
	leaderElect                  bool
	leaseNamespace, leaseName    string
	replica                      string
	leaseDuration, leaseRetry    time.Duration
	log                          telemetry.LogConfig
}

func newKubeSyncCmd() *cobra.Command {
	var f kubeSyncFlags
	cmd := &cobra.Command{
		Use:   "meshflows-kube-sync",
		Short: "Register the endpoints of annotated Kubernetes Services in the registry, reconciled event by event",
		Long: `Watch the Services that carry the annotation meshflows.io/capabilities, and their
EndpointSlices, and keep one registry instance per endpoint address: registered while the
pod exists, out of rotation (RUNTIME_NOT_READY) while it is not ready, deregistered through
the drain handshake as soon as it is terminating, removed when its endpoint goes. Services
without the annotation, and instances registered by anyone else, are never touched.

A change is written as it comes; under a burst (a rollout) changes gather so that one batch
goes out per --coalesce (50 ms). Every instance is renewed on the registry's heartbeat
interval. Nothing is removed before the first full list of every
Service and EndpointSlice has been applied, and a restarted syncer adopts the instances it
registered before (--identity) instead of registering them again. Several replicas elect
one leader with a coordination.k8s.io Lease; the others stand by.

Annotations (docs/kubernetes.md): meshflows.io/capabilities (required), meshflows.io/port,
meshflows.io/service-name, meshflows.io/version, meshflows.io/manifest, meshflows.io/scheme,
meshflows.io/address-type. Metrics on --listen: /metrics (meshflows_kubesync_*), /healthz.`,
		Example: `  # in a cluster (the ServiceAccount of deploy/k8s/kube-sync.yaml)
  meshflows-kube-sync --registry https://meshflows-registry:7400 --identity kube-sync \
    --registry-ca /etc/meshflows/tls/ca.crt --registry-cert /etc/meshflows/tls/tls.crt --registry-key /etc/meshflows/tls/tls.key

  # from a workstation, two namespaces, one replica
  meshflows-kube-sync --kubeconfig ~/.kube/config --namespace shop --namespace payments --leader-elect=false`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			logger, err := telemetry.NewLogger(cmd.ErrOrStderr(), f.log)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", f.listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", f.listen, err)
			}
			g, ctx := errgroup.WithContext(cmd.Context())
			if err := startKubeSync(ctx, g, &f, ln, logger); err != nil {
				ln.Close()
				return err
			}
			return g.Wait()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7406", "address to serve /metrics and /healthz on")
	fl.StringSliceVar(&f.registries, "registry", envList("MESHFLOWS_REGISTRY", "http://127.0.0.1:7400"), "registry base URL; repeat or comma-separate for failover (env MESHFLOWS_REGISTRY)")
	fl.StringVar(&f.creds.ca, "registry-ca", os.Getenv("MESHFLOWS_CA"), "CA bundle the registry's certificate must chain to (https URLs; env MESHFLOWS_CA)")
	fl.StringVar(&f.creds.cert, "registry-cert", os.Getenv("MESHFLOWS_CLIENT_CERT"), "client certificate with which the syncer authenticates to the registry (mTLS; env MESHFLOWS_CLIENT_CERT)")
	fl.StringVar(&f.creds.key, "registry-key", os.Getenv("MESHFLOWS_CLIENT_KEY"), "key of --registry-cert (env MESHFLOWS_CLIENT_KEY)")
	fl.StringVar(&f.creds.tokenFile, "registry-token-file", os.Getenv("MESHFLOWS_TOKEN_FILE"), "file holding a bearer token for the registry instead of a client certificate (env MESHFLOWS_TOKEN_FILE)")
	fl.DurationVar(&f.tlsReload, "tls-reload-interval", client.DefaultTLSReloadInterval, "how often --registry-ca, --registry-cert and --registry-key are read again (a rotated set is used by new connections)")
	fl.StringVar(&f.identity, "identity", "", "the identity the registry knows this syncer by, which it records as the owner of what it registers (default: the identity --registry-cert names); a restart adopts that owner's instances")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in cluster, the pod's ServiceAccount; else $KUBECONFIG or ~/.kube/config)")
	fl.StringSliceVar(&f.namespaces, "namespace", nil, "namespace to watch; repeat for several (default: all)")
	fl.DurationVar(&f.heartbeat, "heartbeat-interval", 0, "how often every instance is renewed (0: the registry's interval)")
	fl.DurationVar(&f.coalesce, "coalesce", 50*time.Millisecond, "under a burst of changes, the window they gather in: one batch of registry writes per window (a change after a quiet spell goes at once)")
	fl.IntVar(&f.workers, "workers", 16, "registry requests in flight at most")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect one leader among the replicas with a coordination.k8s.io Lease (turn off only when one replica runs)")
	fl.StringVar(&f.leaseNamespace, "lease-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, else meshflows)")
	fl.StringVar(&f.leaseName, "lease-name", "meshflows-kube-sync", "name of the Lease")
	fl.StringVar(&f.replica, "replica-id", "", "this replica's name in the Lease (default: $POD_NAME, else the host name)")
	fl.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "how long a leader that stopped renewing keeps the others waiting")
	fl.DurationVar(&f.leaseRetry, "lease-retry", 2*time.Second, "how often the leader renews the Lease and the others try for it")
	fl.StringVar(&f.log.Level, "log-level", envOr("MESHFLOWS_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env MESHFLOWS_LOG_LEVEL)")
	fl.StringVar(&f.log.Format, "log-format", envOr("MESHFLOWS_LOG_FORMAT", "json"), "log format: json or text (env MESHFLOWS_LOG_FORMAT)")
	return cmd
}

// kubeConfig is the API server connection: --kubeconfig, else the pod's ServiceAccount, else
// the default kubeconfig rules ($KUBECONFIG, ~/.kube/config).
func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		} else if !errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("kube-sync: in-cluster configuration: %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kube-sync: no Kubernetes API server (not in a cluster, and no usable kubeconfig): %w", err)
	}
	return cfg, nil
}

// validate refuses flags that cannot work before anything is contacted.
func (f *kubeSyncFlags) validate() error {
	switch {
	case f.coalesce < 0 || f.heartbeat < 0 || f.workers < 0:
		return errors.New("--coalesce, --heartbeat-interval and --workers must not be negative")
	case f.coalesce > time.Second:
		return fmt.Errorf("--coalesce %s: a change would wait over a second; at most 1s", f.coalesce)
	case f.leaderElect && (f.leaseRetry <= 0 || f.leaseRetry >= f.leaseDuration):
		return fmt.Errorf("--lease-retry %s must be positive and shorter than --lease-duration %s", f.leaseRetry, f.leaseDuration)
	case len(f.registries) == 0:
		return errors.New("--registry: at least one registry URL")
	}
	return nil
}

// syncerIdentity is --identity, else the identity --registry-cert names.
func (f *kubeSyncFlags) syncerIdentity() (string, error) {
	if f.identity != "" || f.creds.cert == "" {
		return f.identity, nil
	}
	pair, err := tls.LoadX509KeyPair(f.creds.cert, f.creds.key)
	if err != nil {
		return "", fmt.Errorf("--registry-cert: %w", err)
	}
	return auth.CertificateIdentity(pair.Leaf, "")
}

func startKubeSync(ctx context.Context, g *errgroup.Group, f *kubeSyncFlags, ln net.Listener, logger *slog.Logger) error {
	kcfg, err := kubeConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	kcfg.UserAgent = "meshflows-kube-sync"
	kube, err := kubesync.NewClient(kcfg)
	if err != nil {
		return err
	}
	identity, err := f.syncerIdentity()
	if err != nil {
		return err
	}
	promReg := telemetry.NewRegistry()
	certs := auth.NewCertMetrics("kube-sync")
	promReg.MustRegister(certs)
	metrics, err := kubesync.NewMetrics(promReg)
	if err != nil {
		return err
	}
	httpClient, token, err := f.creds.client(ctx, g, f.tlsReload, certs, logger)
	if err != nil {
		return err
	}
	reg, err := client.New(client.Config{Registries: f.registries, HTTPClient: httpClient, BearerToken: token})
	if err != nil {
		return err
	}
	cfg := kubesync.Config{Kube: kube, Namespaces: f.namespaces, Registry: reg, Identity: identity,
		HeartbeatInterval: f.heartbeat, Coalesce: f.coalesce, Workers: f.workers, Logger: logger, Metrics: metrics}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if identity == "" {
		logger.Warn("kube-sync: no --identity: a restarted syncer cannot tell its instances from others', so it adopts none (it registers them again) and leaves those whose pods went while it was away to their lease's end")
	}
	lead := func(ctx context.Context) error {
		s, err := kubesync.New(cfg)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	g.Go(func() error {
		return httpapi.Serve(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, httpapi.Shutdown{})
	})
	logger.Info("kube-sync: starting", slog.String("api_server", kcfg.Host), slog.Any("namespaces", orAll(f.namespaces)),
		slog.Any("registries", f.registries), slog.String("identity", identity), slog.String("metrics", ln.Addr().String()))
	if !f.leaderElect {
		g.Go(func() error { return lead(ctx) })
		return nil
	}
	el, err := kubesync.NewElector(kubesync.ElectorConfig{Leases: kube, Namespace: orEnv(f.leaseNamespace, "POD_NAMESPACE", "meshflows"),
		Name: f.leaseName, Identity: orEnv(f.replica, "POD_NAME", hostname()), LeaseDuration: f.leaseDuration, RetryPeriod: f.leaseRetry,
		Logger: logger, Metrics: metrics})
	if err != nil {
		return err
	}
	g.Go(func() error { return el.Run(ctx, lead) })
	return nil
}

func orAll(ns []string) any {
	if len(ns) == 0 {
		return "all"
	}
	return ns
}

// orEnv is v, else the variable env, else def.
func orEnv(v, env, def string) string {
	if v != "" {
		return v
	}
	if e := os.Getenv(env); e != "" {
		return e
	}
	return def
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "kube-sync"
	}
	return h
}

// registryCreds are the syncer's credentials at the registry.
type registryCreds struct{ ca, cert, key, tokenFile string }

// client returns the HTTP client and the bearer token for the registry: with TLS files,
// they are read again every interval in g (a rotated set is used by new connections; a bad
// one refused and logged) and certs exports their expiry.
func (c *registryCreds) client(ctx context.Context, g *errgroup.Group, interval time.Duration, certs *auth.CertMetrics, logger *slog.Logger) (*http.Client, string, error) {
	var token string
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--registry-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return nil, "", fmt.Errorf("--registry-token-file %s is empty", c.tokenFile)
		}
	}
	if c.ca == "" && c.cert == "" && c.key == "" {
		return client.HTTPClient(nil), token, nil
	}
	files, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: c.ca, CertFile: c.cert, KeyFile: c.key, Logger: logger})
	if err != nil {
		return nil, "", err
	}
	certs.Add(files)
	g.Go(func() error { return files.Run(ctx, interval) })
	return files.HTTPClient(), token, nil
}

func envOr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

func envList(env, def string) []string { return strings.Split(envOr(env, def), ",") }
