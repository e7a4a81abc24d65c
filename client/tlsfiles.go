package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTLSReloadInterval is how often TLSFiles looks at its files.
const DefaultTLSReloadInterval = 10 * time.Second

// TLSFiles is the client side of (m)TLS read from files — the CA bundle the server's
// certificate must chain to and the client certificate with its key — and read again when
// they change (cert-manager, spiffe-helper or Vault rewriting them). New handshakes get what
// was last loaded; established connections are not cut. A changed set that does not parse,
// whose key is not its certificate's, whose certificate has expired, or whose CA bundle holds
// no certificate is refused: the set in force stays, Reload returns why and the Logger says
// it once. Run it (or call Reload) for the files to be read again.
type TLSFiles struct {
	cfg      TLSFilesConfig
	cur      atomic.Pointer[clientCerts]
	failures atomic.Int64
	mu       sync.Mutex // one reload at a time; guards refused, lastWarns, onReload
	refused  string
	// lastWarns is when each subject was last said to near its end (once a day).
	lastWarns map[string]time.Time
	onReload  []func()
}

// TLSFilesConfig configures TLSFiles. CAFile empty trusts the system roots; CertFile and
// KeyFile go together (none: no certificate of one's own).
type TLSFilesConfig struct {
	CAFile, CertFile, KeyFile string
	// Role names the certificate in Certificates ("client" when empty; a server that loads
	// its own with TLSFiles says "server").
	Role string
	// Check, when set, is asked about every set before it comes in force, the first one
	// included (prev is then nil): an error refuses the set as a bad file is refused.
	Check  func(prev, next *CertSet) error
	Logger *slog.Logger
	Now    func() time.Time
}

// CertSet is one set TLSFiles loaded.
type CertSet struct {
	Certificate *tls.Certificate // nil without a certificate of one's own
	Leaf        *x509.Certificate
	CAs         []*x509.Certificate // the CA bundle's, in its order
	Pool        *x509.CertPool      // of CAs; nil without a CA file (the system roots)
}

// clientCerts is one loaded set and the bytes it came from.
type clientCerts struct {
	CertSet
	raw [3][]byte
}

// Certificate is one certificate TLSFiles holds: its role ("client" or "ca"), subject and
// validity.
type Certificate struct {
	Role, Subject       string
	NotBefore, NotAfter time.Time
}

// NewTLSFiles loads the files; the first load must succeed.
func NewTLSFiles(cfg TLSFilesConfig) (*TLSFiles, error) {
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("a client certificate needs both the certificate and the key file")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Role == "" {
		cfg.Role = "client"
	}
	f := &TLSFiles{cfg: cfg, lastWarns: map[string]time.Time{}}
	set, err := f.load(nil)
	if err != nil {
		return nil, err
	}
	f.cur.Store(set)
	return f, nil
}

// Current returns the set in force.
func (f *TLSFiles) Current() *CertSet { return &f.cur.Load().CertSet }

// TLSConfig returns a client configuration whose handshakes use the set in force: the
// client certificate through GetClientCertificate, the server's chain verified against the
// CA bundle in force (and its name, as crypto/tls would).
func (f *TLSFiles) TLSConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.cfg.CertFile != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return f.cur.Load().Certificate, nil }
	}
	if f.cfg.CAFile != "" {
		// The roots change with the files, which tls.Config.RootCAs cannot: the chain is
		// verified here instead, exactly as crypto/tls verifies it with RootCAs set.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: f.cur.Load().Pool, Intermediates: inter,
				DNSName: cs.ServerName, CurrentTime: f.cfg.Now()})
			return err
		}
	}
	return c
}

// HTTPClient returns an *http.Client (as HTTPClient) over TLSConfig whose idle connections
// are closed when a new set comes in force, so that the next requests handshake with it.
func (f *TLSFiles) HTTPClient() *http.Client {
	hc := HTTPClient(f.TLSConfig())
	f.mu.Lock()
	f.onReload = append(f.onReload, hc.CloseIdleConnections)
	f.mu.Unlock()
	return hc
}

// Leaf returns the certificate in force; nil without one.
func (f *TLSFiles) Leaf() *x509.Certificate { return f.cur.Load().Leaf }

// Certificates lists what is in force: the certificate (of Role), then the CA bundle's.
func (f *TLSFiles) Certificates() []Certificate {
	set := f.cur.Load()
	var out []Certificate
	if set.Leaf != nil {
		out = append(out, Certificate{Role: f.cfg.Role, Subject: set.Leaf.Subject.String(), NotBefore: set.Leaf.NotBefore, NotAfter: set.Leaf.NotAfter})
	}
	for _, c := range set.CAs {
		out = append(out, Certificate{Role: "ca", Subject: c.Subject.String(), NotBefore: c.NotBefore, NotAfter: c.NotAfter})
	}
	return out
}

// ReloadFailures counts the changed sets refused.
func (f *TLSFiles) ReloadFailures() int64 { return f.failures.Load() }

// Reload reads the files and puts a changed, valid set in force; it reports whether it did,
// and why a changed set was refused (a set refused before is not refused again: false, nil).
func (f *TLSFiles) Reload() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.cur.Load()
	set, err := f.load(old)
	var rf *tlsRefusal
	if errors.As(err, &rf) {
		if rf.raw == f.refused {
			return false, nil
		}
		f.refused = rf.raw
		err = rf.err
	}
	switch {
	case err != nil:
		f.failures.Add(1)
		attrs := []any{slog.String("role", f.cfg.Role), slog.Any("error", err)}
		if old.Leaf != nil {
			attrs = append(attrs, slog.String("in_force_serial", old.Leaf.SerialNumber.String()), slog.Time("in_force_not_after", old.Leaf.NotAfter))
		}
		f.cfg.Logger.Error("certificate files changed and were refused; the certificates in force stay", attrs...)
		return false, err
	case set == old:
		f.warnLifetime(old)
		return false, nil
	}
	f.cur.Store(set)
	attrs := []any{slog.String("role", f.cfg.Role), slog.String("ca_bundle", f.cfg.CAFile)}
	if set.Leaf != nil {
		attrs = append(attrs, slog.String("serial", set.Leaf.SerialNumber.String()), slog.String("subject", set.Leaf.Subject.String()), slog.Time("not_after", set.Leaf.NotAfter))
	}
	f.cfg.Logger.Info("certificates reloaded: new handshakes get them", attrs...)
	f.warnLifetime(set)
	for _, fn := range f.onReload {
		fn()
	}
	return true, nil
}

// Run reloads every interval (DefaultTLSReloadInterval when not positive) until ctx ends.
func (f *TLSFiles) Run(ctx context.Context, interval time.Duration) error {
	return f.RunWithSignal(ctx, interval, nil)
}

// RunWithSignal is Run that also reloads at once on each value of signal (a server's
// SIGHUP; nil: none).
func (f *TLSFiles) RunWithSignal(ctx context.Context, interval time.Duration, signal <-chan os.Signal) error {
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
		case <-signal:
		}
		f.Reload() // a refusal is logged and counted there
	}
}

// tlsRefusal is a set of files refused, and why.
type tlsRefusal struct {
	raw string
	err error
}

func (r *tlsRefusal) Error() string { return r.err.Error() }
func (r *tlsRefusal) Unwrap() error { return r.err }

// load reads the files; it returns old when they hold what old came from.
func (f *TLSFiles) load(old *clientCerts) (*clientCerts, error) {
	var raw [3][]byte
	for i, name := range []string{f.cfg.CAFile, f.cfg.CertFile, f.cfg.KeyFile} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		raw[i] = b
	}
	if old != nil && bytes.Equal(raw[0], old.raw[0]) && bytes.Equal(raw[1], old.raw[1]) && bytes.Equal(raw[2], old.raw[2]) {
		return old, nil
	}
	set, err := f.parse(raw)
	if err == nil && f.cfg.Check != nil {
		var prev *CertSet
		if old != nil {
			prev = &old.CertSet
		}
		err = f.cfg.Check(prev, &set.CertSet)
	}
	if err != nil {
		return nil, &tlsRefusal{raw: string(raw[0]) + "\x00" + string(raw[1]) + "\x00" + string(raw[2]), err: err}
	}
	return set, nil
}

// parse validates raw (CA bundle, certificate, key) and builds its set.
func (f *TLSFiles) parse(raw [3][]byte) (*clientCerts, error) {
	set := &clientCerts{raw: raw}
	if f.cfg.CAFile != "" {
		set.Pool = x509.NewCertPool()
		for rest := raw[0]; ; {
			block, next := pem.Decode(rest)
			if block == nil {
				break
			}
			rest = next
			if block.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("CA bundle %s: %w", f.cfg.CAFile, err)
			}
			set.Pool.AddCert(c)
			set.CAs = append(set.CAs, c)
		}
		if len(set.CAs) == 0 {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", f.cfg.CAFile)
		}
	}
	if f.cfg.CertFile == "" {
		return set, nil
	}
	pair, err := tls.X509KeyPair(raw[1], raw[2])
	if err != nil {
		return nil, fmt.Errorf("%s with %s: %w (a half-written file, the certificates of a chain in the wrong order — the %s's own must come first — or a key of another certificate)",
			f.cfg.CertFile, f.cfg.KeyFile, err, f.cfg.Role)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.cfg.CertFile, err)
	}
	if !f.cfg.Now().Before(leaf.NotAfter) {
		return nil, fmt.Errorf("%s: the certificate expired at %s", f.cfg.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	set.Certificate, set.Leaf = &pair, leaf
	return set, nil
}

// warnLifetime logs, once a day, a certificate in force with less than a quarter of its
// lifetime left.
func (f *TLSFiles) warnLifetime(set *clientCerts) {
	now := f.cfg.Now()
	certs := set.CAs
	if set.Leaf != nil {
		certs = append([]*x509.Certificate{set.Leaf}, certs...)
	}
	for _, c := range certs {
		life, left := c.NotAfter.Sub(c.NotBefore), c.NotAfter.Sub(now)
		if left >= life/4 {
			continue
		}
		subject := c.Subject.String()
		if last, ok := f.lastWarns[subject]; ok && now.Sub(last) < 24*time.Hour {
			continue
		}
		f.lastWarns[subject] = now
		f.cfg.Logger.Warn("a certificate has less than a quarter of its lifetime left: rotate it",
			slog.String("subject", subject), slog.Time("not_after", c.NotAfter), slog.String("left", left.Round(time.Minute).String()))
	}
}
