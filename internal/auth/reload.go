package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/meshflows/meshflows/client"
)

// DefaultTLSReloadInterval is how often a server looks at its certificate files.
const DefaultTLSReloadInterval = client.DefaultTLSReloadInterval

// ServerCerts is a server's certificate, key and client CA bundle, read from their files
// and read again when they change (cert-manager, spiffe-helper or Vault rewriting them): new
// handshakes get what was last loaded, established connections are not cut. A new set that
// does not parse, whose key is not its certificate's, whose certificate has expired, or whose
// CA bundle does not hold the issuer of the server's certificate (which would lock every
// client out when they share a CA) is refused: the set in force stays, an ERROR log names the
// file and why, and CertMetrics counts it. The files are read by client.TLSFiles, which
// clients use for theirs.
type ServerCerts struct {
	cfg   ServerCertsConfig
	files *client.TLSFiles
	conf  atomic.Pointer[serverConf] // of the set in force, built at its first handshake
}

// ServerCertsConfig configures ServerCerts.
type ServerCertsConfig struct {
	CertFile, KeyFile, ClientCAFile string
	// Component names the server in metrics and logs ("registry", "gateway", …).
	Component string
	Logger    *slog.Logger
	Now       func() time.Time
}

// serverConf is the TLS configuration of one set.
type serverConf struct {
	set  *client.CertSet
	conf *tls.Config
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
	s := &ServerCerts{cfg: cfg}
	files, err := client.NewTLSFiles(client.TLSFilesConfig{CAFile: cfg.ClientCAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Role: "server",
		Check: s.keepsItsIssuer, Logger: cfg.Logger.With(slog.String("component", cfg.Component)), Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	s.files = files
	return s, nil
}

// keepsItsIssuer refuses a client CA bundle that drops the issuer of the server's own
// certificate when the bundle in force held it: the clients of that CA would all be locked
// out. A server whose certificate comes from another CA than its clients' is not held to it.
func (s *ServerCerts) keepsItsIssuer(prev, next *client.CertSet) error {
	now := s.cfg.Now()
	if prev == nil || next.Pool == nil || prev.Pool == nil || verifySelf(prev, now) != nil {
		return nil
	}
	if err := verifySelf(next, now); err != nil {
		return fmt.Errorf("CA bundle %s does not hold the issuer of the server certificate %s (%v): the clients of that CA would all be locked out; keep the old CA in the bundle while certificates move to the new one",
			s.cfg.ClientCAFile, s.cfg.CertFile, err)
	}
	return nil
}

// verifySelf reports whether set's CA bundle holds the issuer of its certificate (nil), or why not.
func verifySelf(set *client.CertSet, now time.Time) error {
	inter := x509.NewCertPool()
	for _, der := range set.Certificate.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err := set.Leaf.Verify(x509.VerifyOptions{Roots: set.Pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// TLSConfig returns the server's TLS configuration: each handshake gets the set in force.
func (s *ServerCerts) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.serverConf(), nil
	}}
}

// serverConf returns the configuration of the set in force.
func (s *ServerCerts) serverConf() *tls.Config {
	set := s.files.Current()
	if c := s.conf.Load(); c != nil && c.set == set {
		return c.conf
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*set.Certificate}}
	if set.Pool != nil {
		conf.ClientCAs, conf.ClientAuth = set.Pool, tls.VerifyClientCertIfGiven
	}
	s.conf.Store(&serverConf{set: set, conf: conf})
	return conf
}

// Leaf returns the server certificate in force.
func (s *ServerCerts) Leaf() *x509.Certificate { return s.files.Leaf() }

// Reload reads the files and puts a changed, valid set in force; it reports whether it did,
// and why a changed set was refused.
func (s *ServerCerts) Reload() (bool, error) { return s.files.Reload() }

// Run reloads every interval, and on each value of hup (SIGHUP), until ctx ends.
func (s *ServerCerts) Run(ctx context.Context, interval time.Duration, hup <-chan os.Signal) error {
	return s.files.RunWithSignal(ctx, interval, hup)
}

// Certificates lists what is in force: the server certificate, then the CA bundle's.
func (s *ServerCerts) Certificates() []client.Certificate { return s.files.Certificates() }

// ReloadFailures counts the changed sets refused.
func (s *ServerCerts) ReloadFailures() int64 { return s.files.ReloadFailures() }
