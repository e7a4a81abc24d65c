package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

const rbacYAML = `
identities:
  egress-jms: [messaging-provider]
  reports: [reports-provider]
  intruder: [messaging-provider]
  gateway: [consumer, edge]
  ops: [admin]
  lonely: []
roles:
  messaging-provider:
    capabilities: ["messaging.*"]
    path_prefixes: ["/api/messaging/jms"]
  reports-provider:
    capabilities: ["reports.*"]
    path_prefixes: ["/reports"]
  consumer:
    discover: true
  edge:
    gateway: true
  admin:
    admin: true
`

type secure struct {
	url       string
	ca        *auth.DevCA
	policy    *auth.PolicyFile
	rbacPath  string
	audit     *registrytest.SyncBuffer
	jwtKey    *ecdsa.PrivateKey
	incidents *incident.Log
}

func newSecure(t *testing.T, limiter server.Limiter) *secure {
	t.Helper()
	return newSecureWith(t, limiter, nil)
}

// newSecureWith is newSecure with opt applied to the server's configuration.
func newSecureWith(t *testing.T, limiter server.Limiter, opt func(*server.Config)) *secure {
	t.Helper()
	now := time.Now()
	ca, err := auth.NewDevCA(now)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := ca.Issue(auth.Leaf{Identity: "registry", Hosts: []string{"127.0.0.1"}, Server: true, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rbacPath := filepath.Join(dir, "rbac.yaml")
	os.WriteFile(rbacPath, []byte(rbacYAML), 0o600)
	policy, err := auth.LoadPolicyFile(rbacPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	jwtKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(jwtKey.Public())
	keysPath := filepath.Join(dir, "jwt.pem")
	os.WriteFile(keysPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	verifier, err := auth.NewJWTVerifier(auth.JWTConfig{KeysFile: keysPath, Audience: "meshflows"})
	if err != nil {
		t.Fatal(err)
	}
	monitor, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := registry.New(memstore.New(nil), registry.Config{SnapshotDir: dir, Eligibility: monitor})
	audit := &registrytest.SyncBuffer{}
	incidents, _ := incident.New(incident.Config{})
	cfg := server.Config{Authenticator: &auth.Authenticator{TrustDomain: auth.DefaultTrustDomain, JWT: verifier}, Policy: policy,
		Audit: auth.NewAuditLog(audit), Incidents: incidents, Journal: journal.New(0, nil)}
	if limiter != nil {
		cfg.Limiter = limiter
	}
	if opt != nil {
		opt(&cfg)
	}
	srv, err := server.New(reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return &secure{url: ts.URL, ca: ca, policy: policy, rbacPath: rbacPath, audit: audit, jwtKey: jwtKey, incidents: incidents}
}

// client returns an HTTPS client presenting a certificate for identity ("" for none),
// signed by ca (the registry's CA when nil), valid until notAfter.
func (s *secure) client(t *testing.T, identity string, ca *auth.DevCA, notAfter time.Time) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Pool()}
	if identity != "" {
		if ca == nil {
			ca = s.ca
		}
		c, err := ca.Issue(auth.Leaf{Identity: identity, TrustDomain: auth.DefaultTrustDomain, Client: true,
			NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func (s *secure) token(t *testing.T, sub string, exp time.Time) string {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": sub, "aud": "meshflows", "exp": exp.Unix()}).SignedString(s.jwtKey)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type call struct {
	method, path, body, bearer string
}

func (s *secure) do(t *testing.T, c *http.Client, cl call) (int, *apiv1.Error, http.Header, error) {
	t.Helper()
	var rd io.Reader
	if cl.body != "" {
		rd = strings.NewReader(cl.body)
	}
	req, _ := http.NewRequest(cl.method, s.url+cl.path, rd)
	if cl.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+cl.bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb apiv1.ErrorBody
	if resp.StatusCode >= 400 {
		json.Unmarshal(b, &eb)
	}
	return resp.StatusCode, eb.Error, resp.Header, nil
}

func registration(id, service, capability string, paths ...string) string {
	req := apiv1.RegisterRequest{InstanceID: id, ServiceName: service, ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9000",
		Capabilities: []apiv1.Capability{{CapabilityID: capability, CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p"}}}
	if len(paths) > 0 {
		req.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: service, Instance: id, Version: "1.0.0"}}
		for _, p := range paths {
			req.Manifest.Routes = append(req.Manifest.Routes, apiv1.ManifestRoute{Path: p, Methods: []string{"GET"}})
		}
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// publicPaths gives the first capability of a registration body metadata.public_paths.
func publicPaths(body string, paths ...string) string {
	var req apiv1.RegisterRequest
	json.Unmarshal([]byte(body), &req)
	meta, _ := json.Marshal(map[string][]string{"public_paths": paths})
	req.Capabilities[0].Metadata = meta
	b, _ := json.Marshal(req)
	return string(b)
}

func TestSecurity(t *testing.T) {
	s := newSecure(t, nil)
	hour := time.Now().Add(time.Hour)
	otherCA, _ := auth.NewDevCA(time.Now())
	var (
		anonymous = s.client(t, "", nil, hour)
		jms       = s.client(t, "egress-jms", nil, hour)
		reports   = s.client(t, "reports", nil, hour)
		intruder  = s.client(t, "intruder", nil, hour)
		gateway   = s.client(t, "gateway", nil, hour)
		ops       = s.client(t, "ops", nil, hour)
		lonely    = s.client(t, "lonely", nil, hour)
		foreign   = s.client(t, "egress-jms", otherCA, hour)
		expired   = s.client(t, "egress-jms", nil, time.Now().Add(-time.Hour))
	)
	// a quarantine incident raised for egress-jms (1), and a panic incident for nobody (2)
	s.incidents.Raise(apiv1.IncidentQuarantine, "jms-1", "egress-jms", "flapping")
	s.incidents.Raise(apiv1.IncidentPanic, "messaging.publish/a", "", "panic")
	// the owner registers first
	if code, e, _, err := s.do(t, jms, call{"POST", "/v1/services/register", registration("jms-1", "egress-jms", "messaging.publish", "/api/messaging/jms/publish"), ""}); err != nil || code != 200 {
		t.Fatalf("owner registration = %d %v %v", code, e, err)
	}
	tests := []struct {
		name    string
		client  *http.Client
		call    call
		status  int // 0: the TLS handshake must fail
		details []string
	}{
		{"no credential: register", anonymous, call{"POST", "/v1/services/register", registration("x-1", "egress-jms", "messaging.publish"), ""}, 401, nil},
		{"no credential: discovery", anonymous, call{"GET", "/v1/discovery/capabilities", "", ""}, 401, nil},
		{"no credential: health stays open", anonymous, call{"GET", "/healthz", "", ""}, 200, nil},
		{"outcomes from a provider", jms, call{"POST", "/v1/outcomes", `{"gateway_id":"g","outcomes":[{"instance_id":"jms-1","generation":1,"ok":1}]}`, ""}, 403, nil},
		{"drain ack from a provider", jms, call{"POST", "/v1/discovery/ack", `{"gateway_id":"fake","registry_epoch":"e","revision":1}`, ""}, 403, nil},
		{"drain ack from another provider", reports, call{"POST", "/v1/discovery/ack", `{"gateway_id":"fake","registry_epoch":"e","revision":1}`, ""}, 403, nil},
		{"drain ack from a gateway", gateway, call{"POST", "/v1/discovery/ack", `{"gateway_id":"g","registry_epoch":"e","revision":1}`, ""}, 200, nil},
		{"outcomes from a gateway", gateway, call{"POST", "/v1/outcomes", `{"gateway_id":"g","outcomes":[{"instance_id":"jms-1","generation":1,"ok":1}]}`, ""}, 200, nil},
		{"malformed outcomes", gateway, call{"POST", "/v1/outcomes", `{"outcomes":[{"instance_id":"","generation":0,"ok":-1}]}`, ""}, 400, []string{"gateway_id", "outcomes[0].instance_id", "outcomes[0].generation", "outcomes[0]"}},
		{"reports from a provider", jms, call{"POST", "/v1/reports", `{"reporter":"x","conditions":[{"kind":"route","subject":"GET /x","active":true}]}`, ""}, 403, nil},
		{"a gateway's events from a provider", jms, call{"POST", "/v1/reports", `{"reporter":"x","events":[{"type":"route.conflict","severity":"warning","subject":"GET /x","message":"m"}]}`, ""}, 403, []string{"events[0].type"}},
		{"a runtime syncer's events from a provider", jms, call{"POST", "/v1/reports", `{"reporter":"kube-sync","events":[{"type":"runtime.rejected","severity":"warning","subject":"kubernetes/shop/payments","message":"invalid annotations"}]}`, ""}, 200, nil},
		{"nor from an identity without a role", lonely, call{"POST", "/v1/reports", `{"reporter":"kube-sync","events":[{"type":"runtime.rejected","severity":"warning","subject":"kubernetes/shop/payments","message":"m"}]}`, ""}, 403, nil},
		{"reports from a gateway", gateway, call{"POST", "/v1/reports", `{"reporter":"g","events":[{"type":"route.conflict","severity":"warning","subject":"GET /x","message":"m"}]}`, ""}, 200, nil},
		{"events need discover", lonely, call{"GET", "/v1/events", "", ""}, 403, nil},
		{"events", gateway, call{"GET", "/v1/events?severity=warning", "", ""}, 200, nil},
		{"the owner ignores its incident with a comment", jms, call{"POST", "/v1/incidents/1/ignore", `{"comment":"known"}`, ""}, 200, nil},
		{"bulk acknowledge of another's incident", jms, call{"POST", "/v1/incidents/acknowledge", `{"ids":["2"]}`, ""}, 403, nil},
		{"eligibility needs discover", lonely, call{"GET", "/v1/services/jms-1/eligibility", "", ""}, 403, nil},
		{"eligibility of an instance", gateway, call{"GET", "/v1/services/jms-1/eligibility", "", ""}, 200, nil},
		{"incidents need discover", lonely, call{"GET", "/v1/incidents", "", ""}, 403, nil},
		{"incidents", gateway, call{"GET", "/v1/incidents?status=open", "", ""}, 200, nil},
		{"incidents with a bad status", gateway, call{"GET", "/v1/incidents?status=sleeping", "", ""}, 400, []string{"status"}},
		{"the owner acknowledges its incident", jms, call{"POST", "/v1/incidents/1/acknowledge", "", ""}, 200, nil},
		{"another identity may not", intruder, call{"POST", "/v1/incidents/1/resolve", "", ""}, 403, nil},
		{"nor an incident raised for nobody", jms, call{"POST", "/v1/incidents/2/resolve", "", ""}, 403, nil},
		{"an admin resolves any", ops, call{"POST", "/v1/incidents/2/resolve", "", ""}, 200, nil},
		{"unknown incident", ops, call{"POST", "/v1/incidents/77/resolve", "", ""}, 404, nil},
		{"eligibility of an unknown instance", gateway, call{"GET", "/v1/services/nope/eligibility", "", ""}, 404, nil},
		{"certificate of another CA", foreign, call{"GET", "/v1/discovery/capabilities", "", ""}, 0, nil},
		{"expired certificate", expired, call{"GET", "/v1/discovery/capabilities", "", ""}, 0, nil},
		{"identity with no roles: register", lonely, call{"POST", "/v1/services/register", registration("l-1", "lonely", "messaging.publish"), ""}, 403, nil},
		{"identity with no roles: discovery", lonely, call{"GET", "/v1/discovery/capabilities", "", ""}, 403, nil},
		// 403 whether or not the instance exists: a role-less identity learns nothing of the catalog
		{"identity with no roles: heartbeat of an instance that exists", lonely, call{"PUT", "/v1/services/jms-1/heartbeat", `{"generation":1}`, ""}, 403, nil},
		{"identity with no roles: heartbeat of one that does not", lonely, call{"PUT", "/v1/services/nope/heartbeat", `{"generation":1}`, ""}, 403, nil},
		{"identity with no roles: deregister of one that does not", lonely, call{"DELETE", "/v1/services/nope", "", ""}, 403, nil},
		{"capability outside role", jms, call{"POST", "/v1/services/register", registration("jms-2", "egress-jms", "payments.charge"), ""}, 403, []string{"capabilities[0].capability_id"}},
		{"service name not own", intruder, call{"POST", "/v1/services/register", registration("i-1", "egress-jms", "messaging.publish"), ""}, 403, []string{"service_name"}},
		{"public path outside prefix", reports, call{"POST", "/v1/services/register", publicPaths(registration("r-2", "reports", "reports.daily", "/reports/daily"), "/reports/run", "/admin/users"), ""},
			403, []string{"capabilities[0].metadata.public_paths[1]"}},
		{"route outside prefix (admin-path attack)", reports, call{"POST", "/v1/services/register", registration("r-1", "reports", "reports.daily", "/reports/daily", "/admin/users"), ""}, 403, []string{"manifest.routes[1].path"}},
		{"shape errors before permission", jms, call{"POST", "/v1/services/register", `{"instance_id":"bad id"}`, ""}, 400, nil},
		{"someone else's heartbeat", intruder, call{"PUT", "/v1/services/jms-1/heartbeat", `{"generation":1}`, ""}, 403, nil},
		{"someone else's deregister", intruder, call{"DELETE", "/v1/services/jms-1?generation=1", "", ""}, 403, nil},
		{"someone else's instance id", intruder, call{"POST", "/v1/services/register", registration("jms-1", "intruder", "messaging.publish"), ""}, 403, nil},
		{"the owner's heartbeat", jms, call{"PUT", "/v1/services/jms-1/heartbeat", `{"generation":1}`, ""}, 200, nil},
		{"consumer discovery", gateway, call{"GET", "/v1/discovery/capabilities?capability_id=messaging.publish", "", ""}, 200, nil},
		{"consumer catalog", gateway, call{"GET", "/v1/services", "", ""}, 200, nil},
		{"consumer catalog summary", gateway, call{"GET", "/v1/catalog/summary", "", ""}, 200, nil},
		{"identity with no roles: catalog summary", lonely, call{"GET", "/v1/catalog/summary", "", ""}, 403, nil},
		{"provider discovery", jms, call{"GET", "/v1/discovery/routes", "", ""}, 200, nil},
		{"consumer may not register", gateway, call{"POST", "/v1/services/register", registration("g-1", "gateway", "messaging.publish"), ""}, 403, []string{"capabilities[0].capability_id"}},
		{"snapshot needs admin", gateway, call{"POST", "/v1/admin/snapshot", "", ""}, 403, nil},
		{"an evacuation needs admin", gateway, call{"POST", "/v1/admin/evacuations", `{"zone":"z1","duration":"1h","reason":"r"}`, ""}, 403, nil},
		{"an override needs admin", jms, call{"POST", "/v1/admin/overrides", `{"instance_id":"jms-1","action":"withdraw","duration":"1h","reason":"r"}`, ""}, 403, nil},
		{"the evacuations list needs admin", gateway, call{"GET", "/v1/admin/evacuations", "", ""}, 403, nil},
		{"an override by admin: authorised (refused only because jms-1 has nothing to release)", ops, call{"POST", "/v1/admin/overrides", `{"instance_id":"jms-1","action":"release","reason":"drill"}`, ""}, 409, nil},
		{"snapshot by admin: authorised (refused only because the registry is warming up)", ops, call{"POST", "/v1/admin/snapshot", "", ""}, 503, nil},
		{"bearer token", anonymous, call{"GET", "/v1/discovery/capabilities", "", s.token(t, "gateway", hour)}, 200, nil},
		{"bearer token expired", anonymous, call{"GET", "/v1/discovery/capabilities", "", s.token(t, "gateway", time.Now().Add(-time.Hour))}, 401, nil},
		{"bearer token of a stranger", anonymous, call{"GET", "/v1/discovery/capabilities", "", s.token(t, "stranger", hour)}, 403, nil},
		{"not a bearer token", anonymous, call{"GET", "/v1/discovery/capabilities", "", "x"}, 401, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, e, hdr, err := s.do(t, tt.client, tt.call)
			if tt.status == 0 {
				if err == nil {
					t.Fatalf("the handshake succeeded (status %d)", code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.status {
				t.Fatalf("status = %d (%v), want %d", code, e, tt.status)
			}
			if code == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if code >= 400 && (e == nil || e.Code == "") {
				t.Fatal("no error body")
			}
			var got []string
			if e != nil {
				for _, d := range e.Details {
					got = append(got, d.Path)
				}
			}
			if tt.details != nil && strings.Join(got, ",") != strings.Join(tt.details, ",") {
				t.Errorf("details = %v, want %v", got, tt.details)
			}
		})
	}
	// every request above is in the audit log, the refused ones included
	lines := strings.Split(strings.TrimSpace(s.audit.String()), "\n")
	var sawRefused, sawAllowed bool
	for _, l := range lines {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit line is not JSON: %s", l)
		}
		if e["identity"] == "intruder" && e["status"] == 403.0 && e["instance_id"] == "jms-1" && e["method"] == "PUT" {
			sawRefused = true
		}
		if e["identity"] == "egress-jms" && e["status"] == 200.0 && e["path"] == "/v1/services/jms-1/heartbeat" {
			sawAllowed = true
		}
	}
	if !sawRefused || !sawAllowed {
		t.Errorf("audit log lacks the refused (%v) or the allowed (%v) heartbeat:\n%s", sawRefused, sawAllowed, s.audit.String())
	}
}

func TestRBACHotReload(t *testing.T) {
	s := newSecure(t, nil)
	lonely := s.client(t, "lonely", nil, time.Now().Add(time.Hour))
	if code, _, _, _ := s.do(t, lonely, call{"GET", "/v1/discovery/capabilities", "", ""}); code != 403 {
		t.Fatalf("before the change: %d", code)
	}
	os.WriteFile(s.rbacPath, []byte(strings.Replace(rbacYAML, "lonely: []", "lonely: [consumer]", 1)), 0o600)
	if _, err := s.policy.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, _, _, _ := s.do(t, lonely, call{"GET", "/v1/discovery/capabilities", "", ""}); code != 200 {
		t.Fatalf("after the reload: %d", code)
	}
	os.WriteFile(s.rbacPath, []byte("identities: {lonely: [nope]}"), 0o600)
	if _, err := s.policy.Reload(); err == nil {
		t.Fatal("an invalid policy was accepted")
	}
	if code, _, _, _ := s.do(t, lonely, call{"GET", "/v1/discovery/capabilities", "", ""}); code != 200 {
		t.Fatalf("after a refused reload the old policy must stay: %d", code)
	}
}

func TestRegistrationRateLimit(t *testing.T) {
	s := newSecure(t, auth.NewRateLimiter(0.5, 2, nil))
	jms := s.client(t, "egress-jms", nil, time.Now().Add(time.Hour))
	for i := range 2 {
		if code, e, _, _ := s.do(t, jms, call{"POST", "/v1/services/register", registration("jms-1", "egress-jms", "messaging.publish"), ""}); code != 200 {
			t.Fatalf("registration %d = %d %v", i, code, e)
		}
	}
	code, e, hdr, _ := s.do(t, jms, call{"POST", "/v1/services/register", registration("jms-1", "egress-jms", "messaging.publish"), ""})
	if code != 429 || e.Code != apiv1.CodeRateLimited || hdr.Get("Retry-After") != "2" {
		t.Fatalf("over the limit: %d %v Retry-After %q; want 429 RATE_LIMITED, Retry-After 2", code, e, hdr.Get("Retry-After"))
	}
	// heartbeats are not limited
	if code, _, _, _ := s.do(t, jms, call{"PUT", "/v1/services/jms-1/heartbeat", `{"generation":2}`, ""}); code != 200 {
		t.Errorf("heartbeat while registrations are limited = %d", code)
	}
}

// TestConsoleActsForItsViewer: the console acts on incidents with its own identity, naming
// its viewer; the registry judges the viewer (the incident's owner, or an admin) and records
// it, and takes the naming only from the console's identity (--console-identity).
func TestConsoleActsForItsViewer(t *testing.T) {
	s := newSecureWith(t, nil, func(c *server.Config) { c.Delegators = []string{"gateway"} }) // the console's identity here
	hour := time.Now().Add(time.Hour)
	console, intruder := s.client(t, "gateway", nil, hour), s.client(t, "intruder", nil, hour)
	s.incidents.Raise(apiv1.IncidentQuarantine, "jms-1", "egress-jms", "flapping") // 1, egress-jms's
	s.incidents.Raise(apiv1.IncidentPanic, "messaging.publish/a", "", "panic")     // 2, nobody's
	act := func(c *http.Client, id, viewer string, admin bool) (int, string) {
		req, _ := http.NewRequest("POST", s.url+"/v1/incidents/"+id+"/acknowledge", nil)
		if viewer != "" {
			req.Header.Set(apiv1.HeaderActingFor, viewer)
		}
		if admin {
			req.Header.Set(apiv1.HeaderActingAdmin, "true")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var in apiv1.Incident
		json.NewDecoder(resp.Body).Decode(&in)
		by := ""
		if n := len(in.Actions); n > 0 {
			by = in.Actions[n-1].By
		}
		return resp.StatusCode, by
	}
	if code, _ := act(console, "1", "lonely", false); code != http.StatusForbidden {
		t.Errorf("the console acting for a viewer who is neither owner nor admin: %d, want 403", code)
	}
	if code, by := act(console, "1", "egress-jms", false); code != 200 || by != "egress-jms (through gateway)" {
		t.Errorf("the console acting for the incident's owner: %d by %q, want 200 by the owner through the console", code, by)
	}
	if code, _ := act(console, "2", "egress-jms", false); code != http.StatusForbidden {
		t.Errorf("the console acting for the owner of another incident: %d, want 403", code)
	}
	if code, by := act(console, "2", "admin (token)", true); code != 200 || by != "admin (token) (through gateway)" {
		t.Errorf("the console acting for its admin-token viewer: %d by %q", code, by)
	}
	if code, _ := act(intruder, "1", "ops", false); code != http.StatusForbidden {
		t.Errorf("an identity that is not the console naming a viewer: %d, want 403", code)
	}
}
