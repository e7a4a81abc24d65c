package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const jmsBody = `{
  "instance_id": "egress-jms-7c9f5d8c4f-9x2kq",
  "service_name": "egress-jms",
  "service_version": "0.1.3",
  "endpoint": "http://egress-jms:8080",
  "zone": "a",
  "capabilities": [
    {"capability_id": "messaging.publish", "capability_version": "1.0.0", "contract_schema_version": "1.0",
     "provider": "jms", "metadata": {"supports_transactions": true, "max_payload_bytes": 1048576, "validate_supported": true}}
  ],
  "manifest": {"farp": "1.0", "service": {"name": "egress-jms", "instance": "egress-jms-7c9f5d8c4f-9x2kq", "version": "0.1.3"},
    "health": {"path": "/healthz", "interval": "5s", "unhealthy_after": 3},
    "routes": [{"path": "/api/messaging/jms/publish", "methods": ["POST"]}]},
  "unknown_field": "ignored"
}`

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url, body string, header ...string) response {
	t.Helper()
	return doVia(t, http.DefaultClient, method, url, body, header...)
}

// doVia is do through c.
func doVia(t *testing.T, c *http.Client, method, url, body string, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

// apiErr decodes an error body; it fails the test when the body is not docs/reference/api.md's shape.
func apiErr(t *testing.T, r response) *apiv1.Error {
	t.Helper()
	var eb apiv1.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("status %d body %s is not an error body: %v", r.status, r.body, err)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q", ct)
	}
	return eb.Error
}

func register(t *testing.T, s *registrytest.Server, body string) apiv1.RegisterResponse {
	t.Helper()
	r := do(t, "POST", s.URL+"/v1/services/register", body)
	if r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	var out apiv1.RegisterResponse
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRegistryAPIErrors(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	gen := register(t, s, jmsBody).Generation
	id := "egress-jms-7c9f5d8c4f-9x2kq"
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		details                  []string
		allow                    string
	}{
		{"not json", "POST", "/v1/services/register", `{"instance_id":`, 400, "INVALID_JSON", nil, ""},
		{"empty body", "POST", "/v1/services/register", ``, 400, "INVALID_JSON", nil, ""},
		{"wrong type", "POST", "/v1/services/register", `{"instance_id": 5}`, 400, "INVALID_JSON", []string{"instance_id"}, ""},
		{"array body", "POST", "/v1/services/register", `[]`, 400, "INVALID_JSON", []string{"(body)"}, ""},
		{"trailing garbage", "POST", "/v1/services/register", `{} {}`, 400, "INVALID_JSON", nil, ""},
		{"invalid values", "POST", "/v1/services/register", `{"instance_id":"a b","capabilities":[]}`, 400, "INVALID_REQUEST",
			[]string{"instance_id", "service_name", "service_version", "endpoint", "capabilities"}, ""},
		{"oversized", "POST", "/v1/services/register", `{"pad":"` + strings.Repeat("x", 65<<10) + `"}`, 413, "PAYLOAD_TOO_LARGE", nil, ""},
		{"heartbeat unknown", "PUT", "/v1/services/nobody/heartbeat", `{"generation":1}`, 404, "INSTANCE_NOT_FOUND", nil, ""},
		{"heartbeat old generation", "PUT", "/v1/services/" + id + "/heartbeat", `{"generation":999}`, 410, "GENERATION_MISMATCH", nil, ""},
		{"heartbeat bad health", "PUT", "/v1/services/" + id + "/heartbeat", `{"generation":1,"health":"meh"}`, 400, "INVALID_REQUEST", []string{"health"}, ""},
		{"heartbeat generation string", "PUT", "/v1/services/" + id + "/heartbeat", `{"generation":"1"}`, 400, "INVALID_JSON", []string{"generation"}, ""},
		{"deregister bad generation", "DELETE", "/v1/services/" + id + "?generation=x", ``, 400, "INVALID_REQUEST", []string{"generation"}, ""},
		{"deregister old generation", "DELETE", "/v1/services/" + id + "?generation=999", ``, 410, "GENERATION_MISMATCH", nil, ""},
		{"deregister unknown", "DELETE", "/v1/services/nobody", ``, 404, "INSTANCE_NOT_FOUND", nil, ""},
		{"instance unknown", "GET", "/v1/services/nobody", ``, 404, "INSTANCE_NOT_FOUND", nil, ""},
		{"bad constraint", "GET", "/v1/discovery/capabilities?version=%3E%3Dbanana", ``, 400, "INVALID_REQUEST", []string{"version"}, ""},
		{"bad min_version", "GET", "/v1/discovery/capabilities?min_version=x", ``, 400, "INVALID_REQUEST", []string{"min_version"}, ""},
		{"bad wait", "GET", "/v1/discovery/capabilities?index=1&wait=soon", ``, 400, "INVALID_REQUEST", []string{"wait"}, ""},
		{"bad index", "GET", "/v1/discovery/routes?index=-4", ``, 400, "INVALID_REQUEST", []string{"index"}, ""},
		{"unknown path", "GET", "/v1/nothing", ``, 404, "NOT_FOUND", nil, ""},
		{"method not allowed", "POST", "/v1/discovery/capabilities", `{}`, 405, "METHOD_NOT_ALLOWED", nil, "GET, HEAD"},
		{"method not allowed on catalog", "DELETE", "/v1/services", ``, 405, "METHOD_NOT_ALLOWED", nil, "GET, HEAD"},
		{"register needs POST", "PUT", "/v1/services/register", `{}`, 405, "METHOD_NOT_ALLOWED", nil, "DELETE, GET, HEAD, POST"},
		{"snapshot without dir: permanent, not retryable", "POST", "/v1/admin/snapshot", ``, 409, "NOT_CONFIGURED", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Registry.State()
			r := do(t, tt.method, s.URL+tt.path, tt.body)
			if r.status != tt.status {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, r.status, r.body, tt.status)
			}
			e := apiErr(t, r)
			if e.Code != tt.code {
				t.Errorf("code = %s, want %s (%s)", e.Code, tt.code, e.Message)
			}
			var paths []string
			for _, d := range e.Details {
				paths = append(paths, d.Path)
			}
			if diff := cmp.Diff(tt.details, paths); diff != "" {
				t.Errorf("detail paths (-want +got):\n%s", diff)
			}
			if got := r.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
			if after := s.Registry.State(); after != before {
				t.Errorf("a rejected request changed the state: %+v -> %+v", before, after)
			}
		})
	}
	if in, err := s.Registry.Instance(id); err != nil || in.Generation != gen {
		t.Errorf("the instance changed under rejected requests: %+v, %v", in, err)
	}
}

func TestLifecycleOverHTTP(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second})
	id := "egress-jms-7c9f5d8c4f-9x2kq"
	reg := register(t, s, jmsBody)
	if !reg.Accepted || reg.LeaseTTLSeconds != 90 || reg.HeartbeatIntervalSeconds != 30 || reg.Generation != 1 || reg.RegistryEpoch == "" {
		t.Fatalf("register answer = %+v", reg)
	}
	s.Clock.Advance(30 * time.Second)
	r := do(t, "PUT", s.URL+"/v1/services/"+id+"/heartbeat", `{"generation":1,"health":"ok"}`)
	if r.status != 200 {
		t.Fatalf("heartbeat = %d %s", r.status, r.body)
	}
	var hb apiv1.HeartbeatResponse
	json.Unmarshal(r.body, &hb)
	if want := registrytest.Epoch0.Add(120 * time.Second); !hb.LeaseExpiresAt.Equal(want) || hb.Generation != 1 || hb.RegistryEpoch != reg.RegistryEpoch {
		t.Errorf("heartbeat answer = %+v, want lease end %v", hb, want)
	}
	// the lease runs out: the sweeper evicts, the heartbeat gets 404, re-registration works
	s.Clock.Advance(90 * time.Second)
	if n, _ := s.Registry.Sweep(context.Background()); n != 1 {
		t.Fatalf("Sweep evicted %d, want 1", n)
	}
	if r := do(t, "PUT", s.URL+"/v1/services/"+id+"/heartbeat", `{"generation":1}`); r.status != 404 {
		t.Fatalf("heartbeat after eviction = %d, want 404", r.status)
	}
	reg2 := register(t, s, jmsBody)
	if reg2.Generation <= reg.Generation {
		t.Fatalf("generation after re-register = %d", reg2.Generation)
	}
	// a late deregister of the old incarnation is fenced off
	if r := do(t, "DELETE", s.URL+"/v1/services/"+id+"?generation=1", ""); r.status != 410 {
		t.Fatalf("late deregister = %d, want 410", r.status)
	}
	r = do(t, "GET", s.URL+"/v1/services/"+id, "")
	var in apiv1.Instance
	if err := json.Unmarshal(r.body, &in); r.status != 200 || err != nil || in.Generation != reg2.Generation {
		t.Fatalf("GET instance = %d %s", r.status, r.body)
	}
	if r := do(t, "DELETE", s.URL+"/v1/services/"+id+"?generation=2", ""); r.status != 204 || len(r.body) != 0 {
		t.Fatalf("deregister = %d %q, want 204", r.status, r.body)
	}
	var cat apiv1.CatalogResponse
	r = do(t, "GET", s.URL+"/v1/services", "")
	if err := json.Unmarshal(r.body, &cat); err != nil || len(cat.Instances) != 0 || cat.Revision != 4 {
		t.Errorf("catalog after deregister = %s", r.body)
	}
}

func TestDiscoveryETagAndWarmUp(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{LeaseTTL: 90 * time.Second, HeartbeatInterval: 30 * time.Second})
	register(t, s, jmsBody)
	url := s.URL + "/v1/discovery/capabilities?capability_id=messaging.publish"
	r := do(t, "GET", url, "")
	etag := r.header.Get("ETag")
	if r.status != 200 || etag == "" || r.header.Get("X-Registry-Revision") != "1" {
		t.Fatalf("discovery = %d, headers %v", r.status, r.header)
	}
	var d apiv1.DiscoveryResponse
	json.Unmarshal(r.body, &d)
	if d.Complete || etag != `"`+d.RegistryEpoch+`/1/incomplete"` {
		t.Errorf("during warm-up: complete=%v etag=%s", d.Complete, etag)
	}
	if r := do(t, "GET", url, "", "If-None-Match", etag); r.status != 304 {
		t.Errorf("If-None-Match during warm-up = %d, want 304", r.status)
	}
	s.Clock.Advance(90 * time.Second)
	r = do(t, "GET", url, "", "If-None-Match", etag)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"complete":true`)) {
		t.Fatalf("first answer after warm-up = %d %s, want 200 and complete", r.status, r.body)
	}
	etag = r.header.Get("ETag")
	if want := `"` + d.RegistryEpoch + `/1"`; etag != want {
		t.Errorf("ETag after warm-up = %s, want %s", etag, want)
	}
	if r := do(t, "GET", url, "", "If-None-Match", etag); r.status != 304 || len(r.body) != 0 {
		t.Errorf("If-None-Match with the current ETag = %d, want 304", r.status)
	}
	// a change of state changes the ETag
	register(t, s, strings.ReplaceAll(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", "egress-jms-2"))
	if r := do(t, "GET", url, "", "If-None-Match", etag); r.status != 200 || r.header.Get("ETag") == etag {
		t.Errorf("after a change: %d, ETag %s", r.status, r.header.Get("ETag"))
	}
}

func TestLongPollWakesOnChange(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	for _, path := range []string{"/v1/discovery/capabilities?capability_id=messaging.publish", "/v1/discovery/routes?"} {
		t.Run(path, func(t *testing.T) {
			rev := s.Registry.State().Revision
			got := make(chan response, 1)
			go func() {
				resp, err := http.Get(s.URL + path + "&index=" + itoa(rev) + "&wait=5m")
				if err != nil {
					got <- response{}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- response{resp.StatusCode, resp.Header, b}
			}()
			waitParked(t, s.Registry)
			register(t, s, strings.ReplaceAll(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", "egress-jms-"+itoa(rev)))
			r := <-got
			if r.status != 200 || r.header.Get("X-Registry-Revision") != itoa(rev+1) {
				t.Fatalf("long poll = %d rev %s, want 200 at %d", r.status, r.header.Get("X-Registry-Revision"), rev+1)
			}
			if !bytes.Contains(r.body, []byte("egress-jms-"+itoa(rev))) {
				t.Errorf("long poll answer lacks the new instance: %s", r.body)
			}
		})
	}
}

// waitParked returns once a long poll is parked in reg, so that the change a test makes
// next happens while it waits. It polls a counter; it asserts nothing about time.
func waitParked(t *testing.T, reg *registry.Registry) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for reg.Watchers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no long poll parked within 10s (did the request fail?)")
		}
		time.Sleep(time.Millisecond)
	}
}

func itoa(n int64) string { return strings.TrimSpace(string(must(json.Marshal(n)))) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestShutdownWakesLongPolls(t *testing.T) {
	store := memstore.New(nil)
	reg, _ := registry.New(store, registry.Config{})
	srv, err := server.New(reg, server.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/v1/discovery/capabilities?index=0&wait=5m")
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	waitParked(t, reg)
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
	if code := <-got; code != 200 {
		t.Errorf("the parked long poll got %d on shutdown, want 200", code)
	}
}

func TestOperationalEndpoints(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	register(t, s, jmsBody)
	for _, path := range []string{"/healthz", "/readyz", "/v1/discovery/health"} {
		if r := do(t, "GET", s.URL+path, ""); r.status != 200 {
			t.Errorf("GET %s = %d %s", path, r.status, r.body)
		}
	}
	var h apiv1.HealthResponse
	json.Unmarshal(do(t, "GET", s.URL+"/v1/discovery/health", "").body, &h)
	if h.Status != "ok" || h.ActiveInstances != 1 || h.ActiveCapabilities != 1 || h.Store != "memory" || h.Revision != 1 {
		t.Errorf("health = %+v", h)
	}
}

func TestSnapshotEndpoint(t *testing.T) {
	dir := t.TempDir()
	s := registrytest.NewServer(t, registry.Config{SnapshotDir: dir})
	register(t, s, jmsBody)
	// warming up: refused with Retry-After, so that the newest snapshot never lacks a live instance
	r := do(t, "POST", s.URL+"/v1/admin/snapshot", "")
	if r.status != 503 || r.header.Get("Retry-After") != "90" || !strings.Contains(string(r.body), "warming up") {
		t.Fatalf("snapshot in the warm-up = %d %s (Retry-After %q), want 503 with Retry-After 90", r.status, r.body, r.header.Get("Retry-After"))
	}
	s.Clock.Advance(registry.DefaultLeaseTTL)
	r = do(t, "POST", s.URL+"/v1/admin/snapshot", "")
	var sr apiv1.SnapshotResponse
	if err := json.Unmarshal(r.body, &sr); r.status != 200 || err != nil || sr.Instances != 1 || sr.Capabilities != 1 {
		t.Fatalf("snapshot = %d %s", r.status, r.body)
	}
	if _, err := os.Stat(sr.Path); err != nil || filepath.Dir(sr.Path) != dir {
		t.Errorf("snapshot file %s: %v", sr.Path, err)
	}
}

// TestGoldenAnswers pins the exact bytes of the discovery, routes and catalog answers for a
// fixed scenario; run with -update to rewrite them after an intended change.
func TestGoldenAnswers(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	register(t, s, jmsBody)
	register(t, s, `{"instance_id":"egress-rabbitmq-1","service_name":"egress-rabbitmq","service_version":"0.2.0","endpoint":"http://rmq:8080",
		"capabilities":[{"capability_id":"messaging.publish","capability_version":"1.1.0","contract_schema_version":"1.0","provider":"rabbitmq",
		"metadata":{"priority":1,"public_paths":["/api/messaging/rabbitmq/publish"]}}]}`)
	for name, path := range map[string]string{
		"capabilities.json": "/v1/discovery/capabilities?capability_id=messaging.publish",
		"routes.json":       "/v1/discovery/routes",
		"catalog.json":      "/v1/services",
		"summary.json":      "/v1/catalog/summary?capability_id=messaging.publish&provider=rabbitmq",
	} {
		t.Run(name, func(t *testing.T) {
			r := do(t, "GET", s.URL+path, "")
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, r.body, "", "  "); err != nil {
				t.Fatalf("%s: %v: %s", path, err, r.body)
			}
			golden := filepath.Join("testdata", name)
			if *update {
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), pretty.String()); diff != "" {
				t.Errorf("GET %s (-golden +got):\n%s", path, diff)
			}
		})
	}
}
