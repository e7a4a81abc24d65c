package auth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshflows/meshflows/client"
)

// DefaultTLSReloadInterval is how often a server looks at its certificate files.
const DefaultTLSReloadInterval = 10 * time.Second

// ServerCerts is a server's certificate, key and client CA bundle, read from their files
// and read again when they change (cert-manager, spiffe-helper or Vault rewriting them): new
// handshakes get what was last loaded, established connections are not cut. A new set that
// does not parse, whose key is not its certificate's, whose certificate has expired, or whose
// CA bundle does not hold the issuer of the server's certificate (which would lock every
// client out when they share a CA) is refused: the set in force stays, an ERROR log names the
// file and why, and CertMetrics counts it.
type ServerCerts struct {
	cfg       ServerCertsConfig
	cur       atomic.Pointer[certSet]
	failures  atomic.Int64
	mu        sync.Mutex           // one reload at a time
	lastWarns map[string]time.Time // subject -> the last lifetime warning (once a day)
	refused   string               // the files of the last refusal, which is not said again
}

// ServerCertsConfig configures ServerCerts.
type ServerCertsConfig struct {
	CertFile, KeyFile, ClientCAFile string
	// Component names the server in metrics and logs ("registry", "gateway", …).
	Component string
	Logger    *slog.Logger
	Now       func() time.Time
}

// certSet is one loaded set, and the bytes it was loaded from.
type certSet struct {
	cert     tls.Certificate
	leaf     *x509.Certificate
	pool     *x509.CertPool
	cas      []*x509.Certificate
	raw      [3][]byte
	loadedAt time.Time
	// selfTrusted: the CA bundle holds the issuer of the server's certificate (they share a
	// CA); a rotation may not end that.
	selfTrusted bool
	serverConf  *tls.Config
}

// NewServerCerts loads the files; the first load must succeed.
func NewServerCerts(cfg ServerCertsConfig) (*ServerCerts, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &ServerCerts{cfg: cfg, lastWarns: map[string]time.Time{}}
	set, err := s.load(nil)
	if err != nil {
		return nil, err
	}
	s.cur.Store(set)
	return s, nil
}

// TLSConfig returns the server's TLS configuration: each handshake gets the set in force.
func (s *ServerCerts) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.cur.Load().serverConf, nil
	}}
}

// Leaf returns the server certificate in force.
func (s *ServerCerts) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Reload reads the files and puts a changed, valid set in force; it reports whether it did,
// and why a changed set was refused.
func (s *ServerCerts) Reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	set, err := s.load(old)
	var rf *refusal
	if errors.As(err, &rf) {
		if rf.raw == s.refused { // the same files as the last refusal: said once
			return false, nil
		}
		s.refused = rf.raw
		err = rf.err
	}
	switch {
	case err != nil:
		s.failures.Add(1)
		s.cfg.Logger.Error("certificate files changed and were refused; the certificates in force stay", slog.String("component", s.cfg.Component), slog.Any("error", err),
			slog.String("in_force_serial", old.leaf.SerialNumber.String()), slog.Time("in_force_not_after", old.leaf.NotAfter))
		return false, err
	case set == old:
		s.warnLifetime(old)
		return false, nil
	}
	s.cur.Store(set)
	s.cfg.Logger.Info("certificates reloaded: new handshakes get them", slog.String("component", s.cfg.Component),
		slog.String("serial", set.leaf.SerialNumber.String()), slog.String("subject", set.leaf.Subject.String()), slog.Time("not_after", set.leaf.NotAfter))
	s.warnLifetime(set)
	return true, nil
}

// Run reloads every interval, and on each value of hup (SIGHUP), until ctx ends.
func (s *ServerCerts) Run(ctx context.Context, interval time.Duration, hup <-chan os.Signal) error {
	if interval <= 0 {
		interval = DefaultTLSReloadInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-hup:
		}
		s.Reload() // a refusal is logged and counted there
	}
}

// load reads the files; it returns old when they hold what old was loaded from.
func (s *ServerCerts) load(old *certSet) (*certSet, error) {
	var raw [3][]byte
	for i, f := range []string{s.cfg.CertFile, s.cfg.KeyFile, s.cfg.ClientCAFile} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		raw[i] = b
	}
	if old != nil && bytes.Equal(raw[0], old.raw[0]) && bytes.Equal(raw[1], old.raw[1]) && bytes.Equal(raw[2], old.raw[2]) {
		return old, nil
	}
	set, err := s.parse(old, raw)
	if err != nil {
		return nil, &refusal{raw: string(raw[0]) + "\x00" + string(raw[1]) + "\x00" + string(raw[2]), err: err}
	}
	return set, nil
}

// refusal is a set of files refused, and why.
type refusal struct {
	raw string
	err error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// parse validates and builds the set of raw (certificate, key, CA bundle).
func (s *ServerCerts) parse(old *certSet, raw [3][]byte) (*certSet, error) {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("%s with %s: %w (a half-written file, the certificates of a chain in the wrong order — the server's must come first — or a key of another certificate)",
			s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.cfg.CertFile, err)
	}
	now := s.cfg.Now()
	if !now.Before(leaf.NotAfter) {
		return nil, fmt.Errorf("%s: the certificate expired at %s", s.cfg.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	set := &certSet{cert: cert, leaf: leaf, raw: raw, loadedAt: now}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if s.cfg.ClientCAFile != "" {
		pool := x509.NewCertPool()
		rest := raw[2]
		for len(rest) > 0 {
			var c *x509.Certificate
			c, rest, err = nextCert(rest)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.cfg.ClientCAFile, err)
			}
			if c == nil {
				break
			}
			pool.AddCert(c)
			set.cas = append(set.cas, c)
		}
		if len(set.cas) == 0 {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", s.cfg.ClientCAFile)
		}
		inter := x509.NewCertPool()
		for _, der := range cert.Certificate[1:] {
			if c, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(c)
			}
		}
		_, verr := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		set.selfTrusted = verr == nil
		if old != nil && old.selfTrusted && !set.selfTrusted {
			return nil, fmt.Errorf("CA bundle %s does not hold the issuer of the server certificate %s (%v): the clients of that CA would all be locked out; keep the old CA in the bundle while certificates move to the new one",
				s.cfg.ClientCAFile, s.cfg.CertFile, verr)
		}
		set.pool = pool
		conf.ClientCAs = pool
		conf.ClientAuth = tls.VerifyClientCertIfGiven
	}
	set.serverConf = conf
	return set, nil
}

// warnLifetime logs, once a day, a certificate with less than a quarter of its lifetime left.
func (s *ServerCerts) warnLifetime(set *certSet) {
	now := s.cfg.Now()
	for _, c := range append([]*x509.Certificate{set.leaf}, set.cas...) {
		life, left := c.NotAfter.Sub(c.NotBefore), c.NotAfter.Sub(now)
		if left >= life/4 {
			continue
		}
		subject := c.Subject.String()
		if last, ok := s.lastWarns[subject]; ok && now.Sub(last) < 24*time.Hour {
			continue
		}
		s.lastWarns[subject] = now
		s.cfg.Logger.Warn("a certificate has less than a quarter of its lifetime left: rotate it", slog.String("component", s.cfg.Component),
			slog.String("subject", subject), slog.Time("not_after", c.NotAfter), slog.String("left", left.Round(time.Minute).String()))
	}
}

// Certificates lists what is in force: the server certificate, then the CA bundle's.
func (s *ServerCerts) Certificates() []client.Certificate {
	set := s.cur.Load()
	out := []client.Certificate{{Role: "server", Subject: set.leaf.Subject.String(), NotBefore: set.leaf.NotBefore, NotAfter: set.leaf.NotAfter}}
	for _, c := range set.cas {
		out = append(out, client.Certificate{Role: "ca", Subject: c.Subject.String(), NotBefore: c.NotBefore, NotAfter: c.NotAfter})
	}
	return out
}

// ReloadFailures counts the changed sets refused.
func (s *ServerCerts) ReloadFailures() int64 { return s.failures.Load() }

// nextCert returns the first certificate of the PEM data and what follows it; nil at the end.
// Blocks that are not certificates are skipped.
func nextCert(data []byte) (*x509.Certificate, []byte, error) {
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			return nil, nil, nil
		}
		if block.Type != "CERTIFICATE" {
			data = rest
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		return c, rest, nil
	}
}
