package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultTrustDomain is the SPIFFE trust domain of development certificates.
const DefaultTrustDomain = "meshflows.local"

// Files of a development CA directory.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

// DevCA is a development certificate authority.
type DevCA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewDevCA creates a CA valid for ten years from now.
func NewDevCA(now time.Time) (*DevCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "MeshFlows development CA", Organization: []string{"MeshFlows"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &DevCA{Cert: cert, Key: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// Identity becomes the subject CN and, with TrustDomain, the SPIFFE URI SAN.
	Identity    string
	TrustDomain string
	// Hosts are DNS names or IP addresses (server certificates).
	Hosts []string
	// Server and Client select the extended key usages.
	Server, Client bool
	NotBefore      time.Time
	NotAfter       time.Time
}

// Issue signs a new key pair for l.
func (ca *DevCA) Issue(l Leaf) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.Identity, Organization: []string{"MeshFlows"}},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if l.TrustDomain != "" {
		tmpl.URIs = []*url.URL{{Scheme: "spiffe", Host: l.TrustDomain, Path: "/" + l.Identity}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Pool returns a pool holding the CA.
func (ca *DevCA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ErrInitialized is what InitDir returns when dir already holds a CA and a server
// certificate from it valid at now for every host asked: they are kept, nothing is written.
var ErrInitialized = errors.New("already initialised")

// InitDir creates a development CA and a server certificate for localhost, 127.0.0.1, ::1 and
// the extra hosts (DNS names or IP addresses) in dir. Existing files are never overwritten: a
// dir that already holds what would be written (a CA, and a server certificate it signed,
// valid now for every host) is kept, with ErrInitialized; one that holds a part of it, or a
// server certificate for other hosts, is an error that says which.
func InitDir(dir string, now time.Time, extraHosts ...string) error {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	for _, h := range extraHosts {
		if net.ParseIP(h) == nil && !validDNSName(h) {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", h)
		}
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	var present []string
	for _, f := range []string{CAFile, CAKeyFile, ServerFile, ServerKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			present = append(present, f)
		}
	}
	switch len(present) {
	case 0:
	case 4:
		if err := keptInit(dir, now, hosts); err != nil {
			return fmt.Errorf("%s already holds a CA and a server certificate, not overwritten: %w", dir, err)
		}
		return ErrInitialized
	default:
		return fmt.Errorf("%s holds %s but not the rest of a CA and server certificate; not overwriting: remove them or use another --dir",
			dir, strings.Join(present, ", "))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := NewDevCA(now)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, CAFile), "CERTIFICATE", ca.Cert.Raw, 0o644); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, CAKeyFile), ca.Key); err != nil {
		return err
	}
	srv, err := ca.Issue(Leaf{Identity: "meshflows-registry", TrustDomain: DefaultTrustDomain, Hosts: hosts,
		Server: true, Client: true, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour)})
	if err != nil {
		return err
	}
	return writePair(dir, "server", srv)
}

// keptInit checks that dir's server certificate is signed by its CA and valid at now for
// every host.
func keptInit(dir string, now time.Time, hosts []string) error {
	ca, err := LoadDevCA(dir)
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
		return fmt.Errorf("%s is not signed by %s: %w", ServerFile, CAFile, err)
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("%s is not valid now (until %s)", ServerFile, leaf.NotAfter.Format(time.RFC3339))
	}
	for _, h := range hosts {
		if err := leaf.VerifyHostname(h); err != nil {
			return fmt.Errorf("%s is not valid for %s (issue with another --dir)", ServerFile, h)
		}
	}
	return nil
}

// IssueInDir issues a client certificate for identity with the CA in dir, as
// IDENTITY.pem and IDENTITY-key.pem, valid from an hour before now for validFor (0: a year).
func IssueInDir(dir, identity, trustDomain string, now time.Time, validFor time.Duration) (certPath, keyPath string, err error) {
	if validFor < 0 {
		return "", "", fmt.Errorf("validity %s is negative", validFor)
	}
	if validFor == 0 {
		validFor = 365 * 24 * time.Hour
	}
	if identity == "" || filepath.Base(identity) != identity || identity == "server" || identity == "ca" {
		return "", "", fmt.Errorf("identity %q cannot name a certificate file", identity)
	}
	ca, err := LoadDevCA(dir)
	if err != nil {
		return "", "", err
	}
	leaf, err := ca.Issue(Leaf{Identity: identity, TrustDomain: trustDomain, Client: true,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor)})
	if err != nil {
		return "", "", err
	}
	if err := writePair(dir, identity, leaf); err != nil {
		return "", "", err
	}
	return filepath.Join(dir, identity+".pem"), filepath.Join(dir, identity+"-key.pem"), nil
}

// LoadDevCA reads the CA of dir.
func LoadDevCA(dir string) (*DevCA, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load CA from %s (run 'meshflows certs init' first): %w", dir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("the CA key cannot sign, or the certificate is not a CA")
	}
	return &DevCA{Cert: cert, Key: signer}, nil
}

func writePair(dir, name string, c tls.Certificate) error {
	if err := writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", c.Certificate[0], 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+"-key.pem"), c.PrivateKey.(crypto.Signer))
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// validDNSName reports whether s is a DNS name a certificate can carry: dot-separated labels
// of letters, digits and hyphens (a leading "*." for a wildcard), none empty or over 63.
func validDNSName(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
