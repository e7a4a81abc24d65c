package auth_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/auth"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func TestCertificateIdentity(t *testing.T) {
	spiffe := func(s string) []*url.URL { u, _ := url.Parse(s); return []*url.URL{u} }
	tests := []struct {
		name   string
		cert   *x509.Certificate
		domain string
		want   string
		ok     bool
	}{
		{"spiffe", &x509.Certificate{URIs: spiffe("spiffe://meshflows.local/egress-jms"), Subject: pkix.Name{CommonName: "cn"}}, "", "egress-jms", true},
		{"spiffe in the trust domain", &x509.Certificate{URIs: spiffe("spiffe://meshflows.local/egress-jms")}, "meshflows.local", "egress-jms", true},
		{"spiffe of another trust domain", &x509.Certificate{URIs: spiffe("spiffe://evil.example/egress-jms")}, "meshflows.local", "", false},
		{"spiffe without a name", &x509.Certificate{URIs: spiffe("spiffe://meshflows.local/")}, "", "", false},
		{"CN when no SPIFFE ID", &x509.Certificate{URIs: spiffe("https://example.test/x"), Subject: pkix.Name{CommonName: "gateway"}}, "", "gateway", true},
		{"nothing", &x509.Certificate{}, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := auth.CertificateIdentity(tt.cert, tt.domain)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("CertificateIdentity = %q, %v; want %q ok=%v", got, err, tt.want, tt.ok)
			}
			if err != nil && !errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("error %v does not wrap ErrUnauthenticated", err)
			}
		})
	}
}

// keys is one key pair of each supported kind.
type keys struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	ed  ed25519.PrivateKey
}

func newKeys(t testing.TB) keys {
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, d, _ := ed25519.GenerateKey(rand.Reader)
	return keys{r, e, d}
}

func pemFile(t testing.TB, pubs ...any) string {
	var b strings.Builder
	for _, p := range pubs {
		der, err := x509.MarshalPKIXPublicKey(p)
		if err != nil {
			t.Fatal(err)
		}
		pem.Encode(&b, &pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	f := filepath.Join(t.TempDir(), "keys.pem")
	os.WriteFile(f, []byte(b.String()), 0o600)
	return f
}

func jwksFile(t testing.TB, k keys) string {
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	ecx, ecy := k.ec.X.FillBytes(make([]byte, 32)), k.ec.Y.FillBytes(make([]byte, 32))
	doc := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "n": b64(k.rsa.N.Bytes()), "e": b64(big.NewInt(int64(k.rsa.E)).Bytes()), "use": "sig"},
		{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64(ecx), "y": b64(ecy)},
		{"kty": "OKP", "kid": "d1", "crv": "Ed25519", "x": b64(k.ed.Public().(ed25519.PublicKey))},
	}}
	data, _ := json.Marshal(doc)
	f := filepath.Join(t.TempDir(), "jwks.json")
	os.WriteFile(f, data, 0o600)
	return f
}

func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWT(t *testing.T) {
	k := newKeys(t)
	other := newKeys(t)
	valid := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "gateway", "aud": "meshflows", "exp": now.Add(time.Hour).Unix(), "nbf": now.Add(-time.Minute).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims { c := valid(); c[k] = v; return c }
	without := func(k string) jwt.MapClaims { c := valid(); delete(c, k); return c }
	noneToken := func() string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodNone, valid()).SignedString(jwt.UnsafeAllowNoneSignatureType)
		return s
	}()
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"RS256", sign(t, jwt.SigningMethodRS256, k.rsa, "", valid()), true},
		{"ES256", sign(t, jwt.SigningMethodES256, k.ec, "", valid()), true},
		{"EdDSA", sign(t, jwt.SigningMethodEdDSA, k.ed, "", valid()), true},
		{"expired", sign(t, jwt.SigningMethodES256, k.ec, "", with("exp", now.Add(-time.Hour).Unix())), false},
		{"not yet valid", sign(t, jwt.SigningMethodES256, k.ec, "", with("nbf", now.Add(time.Hour).Unix())), false},
		{"no exp", sign(t, jwt.SigningMethodES256, k.ec, "", without("exp")), false},
		{"no sub", sign(t, jwt.SigningMethodES256, k.ec, "", without("sub")), false},
		{"wrong audience", sign(t, jwt.SigningMethodES256, k.ec, "", with("aud", "someone-else")), false},
		{"bad signature", sign(t, jwt.SigningMethodES256, other.ec, "", valid()), false},
		{"alg none", noneToken, false},
		{"HS256 with the public key as secret", sign(t, jwt.SigningMethodHS256, []byte("secret"), "", valid()), false},
		{"garbage", "a.b.c", false},
		{"empty", "", false},
	}
	for _, src := range []string{"pem", "jwks"} {
		file := pemFile(t, k.rsa.Public(), k.ec.Public(), k.ed.Public())
		if src == "jwks" {
			file = jwksFile(t, k)
		}
		v, err := auth.NewJWTVerifier(auth.JWTConfig{KeysFile: file, Audience: "meshflows", Now: func() time.Time { return now }})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		for _, tt := range tests {
			t.Run(src+"/"+tt.name, func(t *testing.T) {
				sub, err := v.Verify(tt.token)
				if (err == nil) != tt.ok {
					t.Fatalf("Verify = %q, %v; want ok=%v", sub, err, tt.ok)
				}
				if err == nil && sub != "gateway" {
					t.Errorf("subject = %q", sub)
				}
				if err != nil && !errors.Is(err, auth.ErrUnauthenticated) {
					t.Errorf("error %v does not wrap ErrUnauthenticated", err)
				}
			})
		}
	}
	// a kid picks its key: a token whose kid names another key fails
	v, _ := auth.NewJWTVerifier(auth.JWTConfig{KeysFile: jwksFile(t, k), Now: func() time.Time { return now }})
	if _, err := v.Verify(sign(t, jwt.SigningMethodES256, k.ec, "r1", valid())); err == nil {
		t.Error("a token whose kid names the RSA key verified with the EC key")
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodES256, k.ec, "e1", valid())); err != nil {
		t.Errorf("kid e1: %v", err)
	}
}

func TestJWTKeysFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty.pem": "", "junk.json": "{", "nokeys.json": `{"keys":[]}`, "badrsa.json": `{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}`,
		"oct.json": `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := auth.NewJWTVerifier(auth.JWTConfig{KeysFile: p}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := auth.NewJWTVerifier(auth.JWTConfig{KeysFile: filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing file was accepted")
	}
}

const policyYAML = `
identities:
  egress-jms: [messaging-provider]
  reports: [reports-provider]
  gateway: [consumer]
  ops: [admin]
  lonely: []
roles:
  messaging-provider:
    capabilities: ["messaging.*"]
    path_prefixes: ["/api/messaging/jms"]
  reports-provider:
    capabilities: ["reports.**", "reports.*"]
    path_prefixes: ["/reports"]
  consumer:
    discover: true
  admin:
    admin: true
`

func TestPolicyCanRegister(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	reg := func(service string, caps []string, paths ...string) *apiv1.RegisterRequest {
		r := &apiv1.RegisterRequest{InstanceID: service + "-1", ServiceName: service, ServiceVersion: "1.0.0", Endpoint: "http://h"}
		for _, c := range caps {
			r.Capabilities = append(r.Capabilities, apiv1.Capability{CapabilityID: c, CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"})
		}
		if len(paths) > 0 {
			r.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: service, Instance: service + "-1", Version: "1.0.0"}}
			for _, path := range paths {
				r.Manifest.Routes = append(r.Manifest.Routes, apiv1.ManifestRoute{Path: path, Methods: []string{"GET"}})
			}
		}
		return r
	}
	tests := []struct {
		name     string
		identity string
		req      *apiv1.RegisterRequest
		details  []string // nil: allowed
		noRoles  bool
	}{
		{"own service, capability and prefix", "egress-jms", reg("egress-jms", []string{"messaging.publish"}, "/api/messaging/jms/publish", "/api/messaging/jms/{rest...}"), nil, false},
		{"service name not own", "egress-jms", reg("egress-rabbitmq", []string{"messaging.publish"}), []string{"service_name"}, false},
		{"capability outside role", "egress-jms", reg("egress-jms", []string{"messaging.publish", "payments.charge"}), []string{"capabilities[1].capability_id"}, false},
		{"one segment only", "egress-jms", reg("egress-jms", []string{"messaging.publish.batch"}), []string{"capabilities[0].capability_id"}, false},
		{"admin path attack", "reports", reg("reports", []string{"reports.daily"}, "/reports/daily", "/admin/users"), []string{"manifest.routes[1].path"}, false},
		{"prefix lookalike", "reports", reg("reports", []string{"reports.daily"}, "/reportsx"), []string{"manifest.routes[0].path"}, false},
		{"wildcard escaping the prefix", "reports", reg("reports", []string{"reports.daily"}, "/{rest...}"), []string{"manifest.routes[0].path"}, false},
		{"everything wrong at once", "egress-jms", reg("other", []string{"x.y"}, "/admin"), []string{"service_name", "capabilities[0].capability_id", "manifest.routes[0].path"}, false},
		{"double star", "reports", reg("reports", []string{"reports.a.b.c"}), nil, false},
		{"admin may register anything", "ops", reg("anything", []string{"x.y"}, "/admin"), nil, false},
		{"identity with no roles", "lonely", reg("lonely", []string{"x.y"}), nil, true},
		{"unknown identity", "stranger", reg("stranger", []string{"x.y"}), nil, true},
		{"consumer may not register", "gateway", reg("gateway", []string{"x.y"}), []string{"capabilities[0].capability_id"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.CanRegister(tt.identity, tt.req)
			if tt.details == nil && !tt.noRoles {
				if err != nil {
					t.Fatalf("CanRegister = %v, want allowed", err)
				}
				return
			}
			var ae *apiv1.Error
			if !errors.As(err, &ae) || ae.Status != 403 || ae.Code != apiv1.CodeForbidden {
				t.Fatalf("CanRegister = %v, want 403 FORBIDDEN", err)
			}
			var got []string
			for _, d := range ae.Details {
				got = append(got, d.Path)
			}
			if strings.Join(got, ",") != strings.Join(tt.details, ",") {
				t.Errorf("details = %v, want %v", got, tt.details)
			}
		})
	}
	for id, want := range map[string][3]bool{ // discover, admin
		"gateway": {true, false}, "egress-jms": {true, false}, "ops": {true, true}, "lonely": {false, false}, "": {false, false},
	} {
		if got := [3]bool{p.CanDiscover(id), p.IsAdmin(id)}; got != want {
			t.Errorf("%q: discover, admin = %v, want %v", id, got, want)
		}
	}
}

func TestParsePolicyRefusesBadFiles(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":            ``,
		"not yaml":         `identities: [`,
		"unknown role":     "identities:\n  a: [nope]\nroles:\n  r: {discover: true}\n",
		"unknown field":    "identities:\n  a: [r]\nroles:\n  r: {discovery: true}\n",
		"malformed glob":   "identities:\n  a: [r]\nroles:\n  r: {capabilities: ['messaging.[']}\n",
		"empty glob":       "identities:\n  a: [r]\nroles:\n  r: {capabilities: ['']}\n",
		"parameter prefix": "identities:\n  a: [r]\nroles:\n  r: {path_prefixes: ['/api/{x}']}\n",
		"relative prefix":  "identities:\n  a: [r]\nroles:\n  r: {path_prefixes: ['api']}\n",
		"wrong type":       "identities:\n  a: r\nroles:\n  r: {discover: true}\n",
		"unknown verb":     "identities:\n  a: [r]\nroles:\n  r: {workflows: [read, delete]}\n",
		"verb map":         "identities:\n  a: [r]\nroles:\n  r: {workflows: {read: true}}\n",
	} {
		if _, err := auth.ParsePolicy([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPolicyAllows: the verbs of the gateway's and the orchestrator's endpoints, one verb
// or a list, write and run implying read, admin implying everything.
func TestPolicyAllows(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(`
identities: {reader: [reader], author: [author], runner: [runner], both: [author, runner], gw: [gwadmin], ops: [admin], consumer: [consumer]}
roles:
  reader: {workflows: read}
  author: {workflows: [write]}
  runner: {workflows: run}
  gwadmin: {gateway_admin: true}
  admin: {admin: true}
  consumer: {discover: true, gateway: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	perms := []string{auth.WorkflowsRead, auth.WorkflowsWrite, auth.WorkflowsRun, auth.GatewayAdmin}
	for id, want := range map[string][4]bool{
		"reader":   {true, false, false, false},
		"author":   {true, true, false, false},
		"runner":   {true, false, true, false},
		"both":     {true, true, true, false},
		"gw":       {false, false, false, true},
		"ops":      {true, true, true, true},
		"consumer": {false, false, false, false},
		"stranger": {false, false, false, false},
	} {
		var got [4]bool
		for i, perm := range perms {
			got[i] = p.Allows(id, perm)
		}
		if got != want {
			t.Errorf("%s: read, write, run, gateway_admin = %v, want %v", id, got, want)
		}
	}
}

func TestPolicyFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rbac.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(policyYAML)
	f, err := auth.LoadPolicyFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.CanDiscover("newcomer") {
		t.Fatal("newcomer can discover before the change")
	}
	if changed, err := f.Reload(); changed || err != nil {
		t.Errorf("Reload of an unchanged file = %v, %v", changed, err)
	}
	write(policyYAML + "  newcomer-role:\n    discover: true\n")
	write(strings.Replace(policyYAML, "  lonely: []", "  lonely: []\n  newcomer: [consumer]", 1))
	if changed, err := f.Reload(); !changed || err != nil {
		t.Fatalf("Reload of a changed file = %v, %v", changed, err)
	}
	if !f.CanDiscover("newcomer") {
		t.Error("the reloaded policy is not in force")
	}
	write("identities:\n  newcomer: [ghost-role]\n")
	if _, err := f.Reload(); err == nil {
		t.Fatal("an invalid file was accepted")
	}
	if !f.CanDiscover("newcomer") || !f.IsAdmin("ops") {
		t.Error("the old policy is not in force after a refused reload")
	}
	if _, err := auth.LoadPolicyFile(path, nil); err == nil {
		t.Error("LoadPolicyFile accepted an invalid file")
	}
}

func TestRateLimiter(t *testing.T) {
	clock := now
	l := auth.NewRateLimiter(0.5, 2, func() time.Time { return clock })
	for i := range 2 {
		if ok, _ := l.Allow("egress-jms"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, after := l.Allow("egress-jms")
	if ok || after != 2*time.Second {
		t.Fatalf("over the burst: %v, retry after %v; want refused, 2s", ok, after)
	}
	if ok, _ := l.Allow("other"); !ok {
		t.Error("another identity was limited")
	}
	clock = clock.Add(2 * time.Second)
	if ok, _ := l.Allow("egress-jms"); !ok {
		t.Error("refused after waiting the time it asked for")
	}
}

func TestAuditLogLines(t *testing.T) {
	var b strings.Builder
	a := auth.NewAuditLog(&b)
	a.Record(auth.AuditEntry{Time: now, Identity: `we"ird`, Method: "PUT", Path: "/v1/services/x/heartbeat", InstanceID: "x", Status: 200, Latency: 1500 * time.Microsecond, Remote: "127.0.0.1"})
	a.Record(auth.AuditEntry{Time: now, Method: "GET", Path: "/v1/discovery/capabilities", Status: 401})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("line is not JSON: %s: %v", lines[0], err)
	}
	want := map[string]any{"time": "2026-06-01T12:00:00Z", "identity": `we"ird`, "method": "PUT", "path": "/v1/services/x/heartbeat",
		"instance_id": "x", "status": 200.0, "latency_ms": 1.5, "remote": "127.0.0.1"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestDevCertificates(t *testing.T) {
	dir := t.TempDir()
	if err := auth.InitDir(dir, now); err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(filepath.Join(dir, auth.CAFile))
	if err := auth.InitDir(dir, now); !errors.Is(err, auth.ErrInitialized) {
		t.Errorf("InitDir on an initialised dir = %v, want ErrInitialized (kept)", err)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(dir, auth.CAFile)); !bytes.Equal(caBefore, caAfter) {
		t.Error("InitDir overwrote an existing CA")
	}
	if err := auth.InitDir(dir, now, "registry.internal"); err == nil || errors.Is(err, auth.ErrInitialized) {
		t.Errorf("InitDir for a host the server certificate lacks = %v, want an error", err)
	}
	partial := t.TempDir()
	if err := os.WriteFile(filepath.Join(partial, auth.CAFile), caBefore, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := auth.InitDir(partial, now); err == nil || errors.Is(err, auth.ErrInitialized) || !strings.Contains(err.Error(), "not overwriting") {
		t.Errorf("InitDir on a dir with a part of the files = %v, want an error naming them", err)
	}
	certPath, keyPath, err := auth.IssueInDir(dir, "egress-jms", auth.DefaultTrustDomain, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	pool, err := auth.LoadPool(filepath.Join(dir, auth.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the issued certificate does not verify: %v", err)
	}
	if id, err := auth.CertificateIdentity(leaf, auth.DefaultTrustDomain); err != nil || id != "egress-jms" {
		t.Errorf("identity = %q, %v", id, err)
	}
	if _, err := auth.NewServerCerts(auth.ServerCertsConfig{CertFile: filepath.Join(dir, auth.ServerFile), KeyFile: filepath.Join(dir, auth.ServerKeyFile),
		ClientCAFile: filepath.Join(dir, auth.CAFile), Now: func() time.Time { return now }}); err != nil {
		t.Errorf("NewServerCerts: %v", err)
	}
	for _, bad := range []string{"", "../x", "server", "a/b"} {
		if _, _, err := auth.IssueInDir(dir, bad, auth.DefaultTrustDomain, now, 0); err == nil {
			t.Errorf("IssueInDir(%q) succeeded", bad)
		}
	}
}
