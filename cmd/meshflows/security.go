package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/telemetry"
)

// security is what the registry's flags made of authentication and its companions; all nil
// in open mode.
type security struct {
	tls           *tls.Config
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

// buildSecurity turns the flags into a security setup and starts its loops (RBAC reload,
// audit flushing) in g. Open mode needs --insecure; TLS needs an RBAC file and a way to
// authenticate.
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
	tlsOn := s.tlsCert != "" || s.tlsKey != ""
	switch {
	case f.insecure && tlsOn:
		return nil, errors.New("--insecure and --tls-cert/--tls-key contradict each other")
	case f.insecure:
		return &sec, nil
	case !tlsOn:
		return nil, errors.New("refusing to run without authentication: give --tls-cert, --tls-key, --client-ca and/or --jwt-keys, and --rbac " +
			"(create development certificates with 'meshflows certs init'), or pass --insecure to run the registry open (development only)")
	case s.rbac == "":
		return nil, errors.New("--rbac is required with TLS: without a policy nobody may do anything")
	case s.clientCA == "" && s.jwtKeys == "":
		return nil, errors.New("give --client-ca (client certificates) and/or --jwt-keys (bearer tokens): otherwise nobody can authenticate")
	}
	var err error
	if sec.tls, err = auth.ServerTLSConfig(s.tlsCert, s.tlsKey, s.clientCA); err != nil {
		return nil, err
	}
	domain := s.trustDomain
	if domain == "any" {
		domain = ""
		logger.Warn("accepting client certificates' SPIFFE IDs of any trust domain (--trust-domain any): a certificate any CA in --client-ca signed for another domain is admitted under its name")
	} else if s.clientCA != "" {
		logger.Info("client certificates: SPIFFE IDs accepted only in trust domain "+domain, slog.String("trust_domain", domain))
	}
	sec.authenticator = &auth.Authenticator{TrustDomain: domain}
	if s.jwtKeys != "" {
		if sec.authenticator.JWT, err = auth.NewJWTVerifier(auth.JWTConfig{KeysFile: s.jwtKeys, Audience: s.jwtAudience, Issuer: s.jwtIssuer}); err != nil {
			return nil, err
		}
	}
	if sec.policy, err = auth.LoadPolicyFile(s.rbac, logger); err != nil {
		return nil, err
	}
	g.Go(func() error { return sec.policy.Run(ctx, s.rbacReload) })
	if s.registerRate > 0 {
		sec.limiter = auth.NewRateLimiter(s.registerRate, max(s.registerBurst, 1), nil)
	}
	return &sec, nil
}
