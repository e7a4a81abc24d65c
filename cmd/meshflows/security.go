package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/endpoint"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/telemetry"
)

// security is what the registry's flags made of authentication and its companions; all nil
// in open mode.
type security struct {
	tls           *tls.Config
	certs         *auth.ServerCerts
	certMetrics   *auth.CertMetrics // nil in open mode
	authenticator *auth.Authenticator
	policy        *auth.PolicyFile
	limiter       *auth.RateLimiter
	audit         *auth.AuditLog
	// close flushes and closes the audit log; it runs after the server has stopped, so that
	// the lines of the last requests are written too.
	close func() error
}

// apply sets the security parts that exist on cfg (a nil pointer in an interface field
// would not read as "none").
func (s *security) apply(cfg server.Config) server.Config {
	if s.authenticator != nil {
		cfg.Authenticator, cfg.Policy = s.authenticator, s.policy
	}
	if s.limiter != nil {
		cfg.Limiter = s.limiter
	}
	if s.audit != nil {
		cfg.Audit = s.audit
	}
	return cfg
}

// serverAuthFlags configure how a server (the registry, the gateway, the orchestrator)
// authenticates its callers and what the RBAC file lets them do.
type serverAuthFlags struct {
	tlsCert, tlsKey, clientCA, trustDomain string
	jwtKeys, jwtAudience, jwtIssuer        string
	rbac                                   string
	rbacReload                             time.Duration
	tlsReload                              time.Duration
}

// bind adds the flags to fs; rbacUsage is --rbac's help, which differs per server.
func (s *serverAuthFlags) bind(fs *pflag.FlagSet, rbacUsage string) {
	fs.StringVar(&s.tlsCert, "tls-cert", "", "server certificate (PEM); with --tls-key turns on TLS")
	fs.StringVar(&s.tlsKey, "tls-key", "", "server private key (PEM)")
	fs.StringVar(&s.clientCA, "client-ca", "", "CA bundle that client certificates must chain to (mTLS identities)")
	fs.StringVar(&s.trustDomain, "trust-domain", auth.DefaultTrustDomain, "accept only SPIFFE IDs of this trust domain (the one 'meshflows certs init' writes by default); 'any' accepts every domain")
	fs.StringVar(&s.jwtKeys, "jwt-keys", "", "public keys for bearer tokens: a PEM file or a JWKS file (RS256, ES256, EdDSA)")
	fs.StringVar(&s.jwtAudience, "jwt-audience", "", "audience bearer tokens must carry")
	fs.StringVar(&s.jwtIssuer, "jwt-issuer", "", "issuer bearer tokens must carry")
	fs.StringVar(&s.rbac, "rbac", "", rbacUsage)
	fs.DurationVar(&s.rbacReload, "rbac-reload-interval", 2*time.Second, "how often the RBAC file is checked for changes")
	fs.DurationVar(&s.tlsReload, "tls-reload-interval", auth.DefaultTLSReloadInterval, "how often --tls-cert, --tls-key and --client-ca are read again (and on SIGHUP): a changed, valid set serves new handshakes, an invalid one is refused and logged")
}

// serverAuth is what a server's flags made of authentication: all nil in open mode.
type serverAuth struct {
	tls   *tls.Config
	certs *auth.ServerCerts // what tls serves, reloaded from the files
	// certMetrics exports the expiry of every certificate the server holds: its own and
	// those of its registry client (clientCreds.watchedClient adds them). Never nil.
	certMetrics   *auth.CertMetrics
	authenticator *auth.Authenticator
	policy        *auth.PolicyFile
}

// register adds the certificates' metrics (expiry, refused reloads) to reg.
func (a *serverAuth) register(reg prometheus.Registerer) error {
	return reg.Register(a.certMetrics)
}

// serve returns the listener to serve on — ln in TLS when the server authenticates — and
// the authoriser of its protected endpoints; in open mode ln itself and nil, after a warning
// that anyone who reaches ln can do what exposed says.
func (a *serverAuth) serve(ln net.Listener, component, exposed string, logger *slog.Logger) (net.Listener, *auth.Guard) {
	if a.authenticator == nil {
		logger.Warn("INSECURE: the " + component + " runs without authentication; anyone who reaches " + ln.Addr().String() +
			" can " + exposed + ". Never use --insecure outside development.")
		return ln, nil
	}
	return tls.NewListener(ln, a.tls), auth.NewGuard(a.authenticator, a.policy)
}

// buildServerAuth turns a server's flags into its authentication and starts the RBAC
// reload in g. Open mode needs insecure (--insecure); TLS needs an RBAC file and a way to
// authenticate. component names the server in errors and logs.
func buildServerAuth(ctx context.Context, g *errgroup.Group, component string, s serverAuthFlags, insecure bool, logger *slog.Logger) (*serverAuth, error) {
	a := serverAuth{certMetrics: auth.NewCertMetrics(component)}
	tlsOn := s.tlsCert != "" || s.tlsKey != ""
	switch {
	case insecure && tlsOn:
		return nil, errors.New("--insecure and --tls-cert/--tls-key contradict each other")
	case insecure:
		return &a, nil
	case !tlsOn:
		return nil, fmt.Errorf("refusing to run the %s without authentication: give --tls-cert, --tls-key, --client-ca and/or --jwt-keys, and --rbac "+
			"(create development certificates with 'meshflows certs init'), or pass --insecure to run it open (development only)", component)
	case s.rbac == "":
		return nil, errors.New("--rbac is required with TLS: without a policy nobody may do anything")
	case s.clientCA == "" && s.jwtKeys == "":
		return nil, errors.New("give --client-ca (client certificates) and/or --jwt-keys (bearer tokens): otherwise nobody can authenticate")
	}
	var err error
	if a.certs, err = startServerCerts(ctx, g, component, s, logger); err != nil {
		return nil, err
	}
	a.tls = a.certs.TLSConfig()
	a.certMetrics.Add(a.certs)
	if a.authenticator, a.policy, err = buildIdentities(ctx, g, s, logger); err != nil {
		return nil, err
	}
	return &a, nil
}

// startServerCerts loads the server certificate of s and reloads it in g every
// --tls-reload-interval and on SIGHUP.
func startServerCerts(ctx context.Context, g *errgroup.Group, component string, s serverAuthFlags, logger *slog.Logger) (*auth.ServerCerts, error) {
	certs, err := auth.NewServerCerts(auth.ServerCertsConfig{CertFile: s.tlsCert, KeyFile: s.tlsKey, ClientCAFile: s.clientCA, Component: component, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	g.Go(func() error { defer signal.Stop(hup); return certs.Run(ctx, s.tlsReload, hup) })
	return certs, nil
}

// buildIdentities makes the authenticator of s (client certificates of --trust-domain,
// bearer tokens of --jwt-keys) and loads --rbac, reloaded in g.
func buildIdentities(ctx context.Context, g *errgroup.Group, s serverAuthFlags, logger *slog.Logger) (*auth.Authenticator, *auth.PolicyFile, error) {
	domain := s.trustDomain
	if domain == "any" {
		domain = ""
		logger.Warn("accepting client certificates' SPIFFE IDs of any trust domain (--trust-domain any): a certificate any CA in --client-ca signed for another domain is admitted under its name")
	} else if s.clientCA != "" {
		logger.Info("client certificates: SPIFFE IDs accepted only in trust domain "+domain, slog.String("trust_domain", domain))
	}
	authn := &auth.Authenticator{TrustDomain: domain}
	var err error
	if s.jwtKeys != "" {
		if authn.JWT, err = auth.NewJWTVerifier(auth.JWTConfig{KeysFile: s.jwtKeys, Audience: s.jwtAudience, Issuer: s.jwtIssuer}); err != nil {
			return nil, nil, err
		}
	}
	policy, err := auth.LoadPolicyFile(s.rbac, logger)
	if err != nil {
		return nil, nil, err
	}
	g.Go(func() error { return policy.Run(ctx, s.rbacReload) })
	return authn, policy, nil
}

// buildSecurity turns the registry's flags into a security setup and starts its loops
// (RBAC reload, audit flushing) in g.
func buildSecurity(ctx context.Context, g *errgroup.Group, f *registryFlags, logger *slog.Logger) (*security, error) {
	s := f.security
	sec := security{close: func() error { return nil }}
	if s.auditLog != "" {
		var w io.Writer = os.Stdout
		var file *os.File
		if s.auditLog != "-" {
			var err error
			if file, err = os.OpenFile(s.auditLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
				return nil, fmt.Errorf("audit log: %w", err)
			}
			w = file
		}
		bw := telemetry.NewBufferedWriter(w)
		g.Go(func() error { return bw.Run(ctx, 100*time.Millisecond) })
		sec.audit = auth.NewAuditLog(bw)
		sec.close = func() error {
			err := bw.Flush()
			if file != nil {
				err = errors.Join(err, file.Close())
			}
			return err
		}
	}
	a, err := buildServerAuth(ctx, g, "registry", s.serverAuthFlags, f.insecure, logger)
	if err != nil {
		return nil, err
	}
	if a.authenticator == nil {
		return &sec, nil
	}
	sec.tls, sec.certs, sec.authenticator, sec.policy = a.tls, a.certs, a.authenticator, a.policy
	sec.certMetrics = a.certMetrics
	if s.registerRate > 0 {
		sec.limiter = auth.NewRateLimiter(s.registerRate, max(s.registerBurst, 1), nil)
	}
	return &sec, nil
}

// allowEndpointCIDRUsage is the help of --allow-endpoint-cidr, the same on every command
// that registers or calls endpoints.
const allowEndpointCIDRUsage = "allow endpoints in this range although it is link-local or a cloud metadata address (refused by default: 169.254.0.0/16, fe80::/10, fd00:ec2::254, 100.100.100.200); a CIDR prefix or an address, repeat or comma-separate"

// endpointPolicy parses --allow-endpoint-cidr.
func endpointPolicy(values []string) (endpoint.Policy, error) {
	return endpoint.ParseAllow(values)
}
