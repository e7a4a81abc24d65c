package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/prometheus/client_golang/prometheus"
)

// TestBadInputIsRefused lists bad inputs with the exact status and code each must get; after
// every refusal the registry's state is what it was.
func TestBadInputIsRefused(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	register(t, s, jmsBody)
	body := func(id, metadata string) string {
		return `{"instance_id":"` + id + `","service_name":"egress-jms","service_version":"1.0.0","endpoint":"http://e:1",
			"capabilities":[{"capability_id":"messaging.publish","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"jms","metadata":` + metadata + `}]}`
	}
	at := func(id, endpoint string) string {
		return strings.Replace(body(id, "{}"), `"http://e:1"`, strconv.Quote(endpoint), 1)
	}
	asJSON := []string{"Content-Type", "application/json"}
	tests := []struct {
		name, method, path, body string
		header                   []string
		status                   int
		code                     string
		details                  []string // the paths the error names
		says                     string   // a part of the message or of a detail
	}{
		{"misspelled discovery filter", "GET", "/v1/discovery/capabilities?capabilty_id=messaging.publish", "", nil,
			400, apiv1.CodeUnknownParameter, []string{"capabilty_id"}, "did you mean capability_id?"},
		{"two unknown parameters", "GET", "/v1/discovery/capabilities?zone=a&x=1&y=2", "", nil,
			400, apiv1.CodeUnknownParameter, []string{"x", "y"}, "2 unknown query parameters"},
		{"include takes only all", "GET", "/v1/discovery/capabilities?include=some", "", nil,
			400, apiv1.CodeInvalidRequest, []string{"include"}, "the only value is all"},
		{"a filter on the routes view", "GET", "/v1/discovery/routes?capability_id=x", "", nil,
			400, apiv1.CodeUnknownParameter, []string{"capability_id"}, "not a parameter of this endpoint"},
		{"instance id .", "POST", "/v1/services/register", body(".", "{}"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"instance_id"}, "path segment"},
		{"instance id ..", "POST", "/v1/services/register", body("..", "{}"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"instance_id"}, "path segment"},
		{"a character, not a byte", "POST", "/v1/services/register", body("abcé", "{}"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"instance_id"}, "character 'é' at offset 3"},
		{"priority not an integer", "POST", "/v1/services/register", body("jms-2", `{"priority":"high"}`), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"capabilities[0].metadata.priority"}, `must be an integer, got "high"`},
		{"an endpoint with a query aims at another path", "POST", "/v1/services/register", at("jms-2", "http://127.0.0.1:7601/v1/workflows/rec/run?x="), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"endpoint"}, "must not carry a query"},
		{"an endpoint with a fragment", "POST", "/v1/services/register", at("jms-2", "http://e:1/p#x"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"endpoint"}, "must not carry a fragment"},
		{"the metadata service", "POST", "/v1/services/register", at("jms-2", "http://169.254.169.254/latest"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"endpoint"}, "--allow-endpoint-cidr"},
		{"a link-local IPv6 address", "POST", "/v1/services/register", at("jms-2", "http://[fe80::1]:8080"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"endpoint"}, "link-local"},
		{"the metadata service by name", "POST", "/v1/services/register", at("jms-2", "http://metadata.google.internal/computeMetadata/v1"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"endpoint"}, "metadata service"},
		{"the metadata service as a number", "POST", "/v1/services/register", at("jms-2", "http://2852039166/latest"), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"endpoint"}, "non-canonical"},
		{"a key twice: one reader keeps the first, another the last", "POST", "/v1/services/register",
			strings.Replace(body("jms-2", "{}"), `"service_name":"egress-jms"`, `"service_name":"egress-jms","service_name":"other"`, 1), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"service_name"}, "appears twice"},
		{"a key twice in a capability", "POST", "/v1/services/register",
			strings.Replace(body("jms-2", "{}"), `"provider":"jms"`, `"provider":"jms","provider":"x"`, 1), asJSON,
			400, apiv1.CodeInvalidRequest, []string{"capabilities[0].provider"}, "appears twice"},
		{"a form, not JSON", "POST", "/v1/services/register", body("jms-2", "{}"), []string{"Content-Type", "application/x-www-form-urlencoded"},
			415, apiv1.CodeUnsupportedMediaType, nil, "takes application/json"},
		{"plain text", "PUT", "/v1/services/jms-1/heartbeat", `{"generation":1}`, []string{"Content-Type", "text/plain"},
			415, apiv1.CodeUnsupportedMediaType, nil, "takes application/json"},
		{"a misspelled summary filter", "GET", "/v1/catalog/summary?servce_name=a", "", nil,
			400, apiv1.CodeUnknownParameter, []string{"servce_name"}, "did you mean service_name?"},
		{"a summary's limit and window", "GET", "/v1/catalog/summary?limit=10001&expiring_within=-1s", "", nil,
			400, apiv1.CodeInvalidRequest, []string{"limit", "expiring_within"}, "must be an integer from 0 to 10000"},
		{"errors do not escape < and >", "GET", "/v1/discovery/capabilities?version=%3E%3D1.0+%3Cfoo", "", nil,
			400, apiv1.CodeInvalidRequest, []string{"version"}, ">=1.0 <foo"},
	}
	before := s.Registry.Catalog()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, s.URL+tt.path, tt.body, tt.header...)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			e := apiErr(t, r)
			if e.Code != tt.code {
				t.Errorf("code %s, want %s", e.Code, tt.code)
			}
			var paths []string
			text := e.Message
			for _, d := range e.Details {
				paths = append(paths, d.Path)
				text += " | " + d.Message
			}
			if diff := cmp.Diff(tt.details, paths); diff != "" {
				t.Errorf("detail paths (-want +got):\n%s", diff)
			}
			if !strings.Contains(text, tt.says) || strings.Contains(string(r.body), `\u003c`) || strings.Contains(string(r.body), `\u003e`) {
				t.Errorf("body %s, want it to say %q, with < and > as written", r.body, tt.says)
			}
			if after := s.Registry.Catalog(); after.Revision != before.Revision || len(after.Instances) != len(before.Instances) {
				t.Errorf("state changed: revision %d -> %d, %d -> %d instances", before.Revision, after.Revision, len(before.Instances), len(after.Instances))
			}
		})
	}
}

// TestUnknownFieldsAreReported: a registration with fields the contract does not define is
// accepted, and the answer names them.
func TestUnknownFieldsAreReported(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	r := do(t, "POST", s.URL+"/v1/services/register", strings.Replace(jmsBody, `"zone": "a"`, `"zoen": "a"`, 1), "Content-Type", "application/json")
	if r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	var resp apiv1.RegisterResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range resp.Warnings {
		if w.Code != apiv1.CodeUnknownField {
			t.Errorf("warning %+v", w)
		}
		got = append(got, w.Path)
	}
	if diff := cmp.Diff([]string{"unknown_field", "zoen"}, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestSlowBodiesAreCutOff: a client that sends its body slowly gets 408 within the body
// timeout instead of holding a connection and a handler; a long poll, which sends no body,
// is not cut off by it.
func TestSlowBodiesAreCutOff(t *testing.T) {
	reg := registrytest.NewServerWith(t, registry.Config{}, server.Config{BodyTimeout: 200 * time.Millisecond}, registrytest.Epoch0)
	conn, err := net.Dial("tcp", strings.TrimPrefix(reg.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/services/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"instance_id\":")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // ends a broken test only
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", resp.StatusCode)
	}
	// a long poll outlives the body timeout
	start := time.Now()
	r := do(t, "GET", reg.URL+"/v1/discovery/capabilities?index="+strconv.FormatInt(reg.Registry.State().Revision, 10)+"&wait=500ms", "")
	if r.status != 200 || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("long poll: %d after %s, want 200 after its wait", r.status, time.Since(start))
	}
}

// TestConcurrentColdQueriesShareOneAnswer: identical discovery requests that arrive together
// at a new revision build and encode the answer once, and all get it.
func TestConcurrentColdQueriesShareOneAnswer(t *testing.T) {
	prom := prometheus.NewRegistry()
	reg := registrytest.NewServerWith(t, registry.Config{}, server.Config{Registerer: prom}, registrytest.Epoch0)
	for i := range 2000 {
		register(t, reg, strings.Replace(strings.Replace(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", fmt.Sprintf("jms-%d", i), 2), `"zone": "a",`, `"zone": "a", "x": 1,`, 1))
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if r := do(t, "GET", reg.URL+"/v1/discovery/capabilities?capability_id=messaging.publish", ""); r.status != 200 || len(r.body) < 2000*100 {
				t.Errorf("answer %d of %d bytes", r.status, len(r.body))
			}
		})
	}
	wg.Wait()
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "meshflows_registry_discovery_encodes_total" && m.GetLabel()[0].GetValue() == "capabilities" {
				n = m.GetCounter().GetValue()
			}
		}
	}
	if n != 1 {
		t.Errorf("16 concurrent identical requests built the answer %v times, want once", n)
	}
}

// TestEveryRegistrationRefusalIsCounted: register_fail_total counts the refusals at the
// decoding layer too — malformed JSON, a duplicate key, a wrong type, a body too large —
// not only those the registry's rules make.
func TestEveryRegistrationRefusalIsCounted(t *testing.T) {
	prom := prometheus.NewRegistry()
	reg := registrytest.NewServerWith(t, registry.Config{Registerer: prom}, server.Config{MaxBodyBytes: 4 << 10}, registrytest.Epoch0)
	bodies := map[string]int{
		`{"instance_id": "x",`: 400, // malformed
		`{"instance_id":"a","instance_id":"b","service_name":"s","service_version":"1.0.0","endpoint":"http://127.0.0.1:1","capabilities":[]}`: 400, // duplicate key
		`{"instance_id": 7}`: 400, // wrong type
		`{"instance_id": "` + strings.Repeat("x", 5<<10) + `"}`: 413,
		`{"instance_id": "y"}`: 400, // the registry's own rules
	}
	for body, want := range bodies {
		if r := do(t, "POST", reg.URL+"/v1/services/register", body); r.status != want {
			t.Errorf("register %.40q… = %d, want %d", body, r.status, want)
		}
	}
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "meshflows_registry_register_fail_total" {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if got["invalid"] != 4 || got["too_large"] != 1 {
		t.Errorf("register_fail_total = %v, want invalid 4 and too_large 1", got)
	}
}
