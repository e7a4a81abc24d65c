package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUnauthenticated: the request carries no acceptable credential.
var ErrUnauthenticated = errors.New("unauthenticated")

// CertificateIdentity returns the identity a client certificate names: the first URI SAN
// spiffe://<trust-domain>/<name> gives <name>; without one, the subject CN. When
// trustDomain is set, a SPIFFE ID of another trust domain is refused.
func CertificateIdentity(cert *x509.Certificate, trustDomain string) (string, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		if trustDomain != "" && u.Host != trustDomain {
			return "", fmt.Errorf("%w: SPIFFE ID %s is not in trust domain %q", ErrUnauthenticated, u, trustDomain)
		}
		name := strings.Trim(u.Path, "/")
		if name == "" {
			return "", fmt.Errorf("%w: SPIFFE ID %s names no workload", ErrUnauthenticated, u)
		}
		return name, nil
	}
	if cn := cert.Subject.CommonName; cn != "" {
		return cn, nil
	}
	return "", fmt.Errorf("%w: the client certificate has neither a SPIFFE URI SAN nor a common name", ErrUnauthenticated)
}

// Authenticator identifies callers by client certificate (verified by the TLS handshake
// against the client CA) or by JWT bearer token.
type Authenticator struct {
	// TrustDomain, when set, is the only SPIFFE trust domain accepted.
	TrustDomain string
	// JWT verifies bearer tokens; nil accepts none.
	JWT *JWTVerifier
}

// Identify returns the caller's identity, or an error wrapping ErrUnauthenticated. A
// verified client certificate wins over a token.
func (a *Authenticator) Identify(r *http.Request) (string, error) {
	return a.IdentifyConn(r.TLS, r.Header.Get("Authorization"))
}

// IdentifyConn is Identify from a connection's TLS state (nil: plaintext) and the value of
// its Authorization header (or gRPC metadata).
func (a *Authenticator) IdentifyConn(state *tls.ConnectionState, h string) (string, error) {
	if state != nil && len(state.VerifiedChains) > 0 && len(state.PeerCertificates) > 0 {
		return CertificateIdentity(state.PeerCertificates[0], a.TrustDomain)
	}
	if h == "" {
		return "", fmt.Errorf("%w: no client certificate and no bearer token", ErrUnauthenticated)
	}
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return "", fmt.Errorf("%w: the Authorization header is not a bearer token", ErrUnauthenticated)
	}
	if a.JWT == nil {
		return "", fmt.Errorf("%w: bearer tokens are not accepted here (no --jwt-keys)", ErrUnauthenticated)
	}
	return a.JWT.Verify(strings.TrimSpace(token))
}
