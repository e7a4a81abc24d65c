package messaging_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/examples/providers/jms"
	"github.com/meshflows/meshflows/examples/providers/rabbitmq"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/provider"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	p, err := jms.New("http://127.0.0.1:7410", "a")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	tests := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"publish", "/api/messaging/jms/publish", `{"destination":"orders.events","payload":{"id":1},"headers":{"k":"v"}}`, 202, `{"message_id":"jms-1","destination":"orders.events"}`},
		{"publish without destination", "/api/messaging/jms/publish", `{"payload":1}`, 400, `INVALID_REQUEST`},
		{"publish bad json", "/api/messaging/jms/publish", `{`, 400, `INVALID_JSON`},
		{"publish over the limit", "/api/messaging/jms/publish", `{"destination":"d","payload":"` + strings.Repeat("x", 1<<20) + `"}`, 413, `PAYLOAD_TOO_LARGE`},
		{"invoke", "/v1/capabilities/messaging.publish/invoke", `{"request":{"destination":"orders.events"},"payload":{"id":2}}`, 200, `{"output":{"message_id":"jms-2","destination":"orders.events"}}`},
		{"invoke without destination", "/v1/capabilities/messaging.publish/invoke", `{"request":{}}`, 400, `INVALID_REQUEST`},
		{"validate warns on content-type", "/v1/capabilities/messaging.publish/validate",
			`{"step":{"type":"service_call","request":{"destination":"d","headers":{"content-type":"json"}}}}`, 200, `"valid":true,"diagnostics":[{"severity":"warning","code":"JMS_HEADER_NON_STANDARD"`},
		{"validate rejects empty destination", "/v1/capabilities/messaging.publish/validate",
			`{"step":{"type":"service_call","request":{"destination":""}}}`, 200, `"valid":false,"diagnostics":[{"severity":"error","code":"DESTINATION_REQUIRED"`},
		{"unknown", "/nope", `{}`, 404, `NOT_FOUND`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, srv.URL+tt.path, tt.body)
			if status != tt.status || !strings.Contains(body, tt.want) {
				t.Errorf("POST %s = %d %s, want %d with %s", tt.path, status, body, tt.status, tt.want)
			}
		})
	}
	resp, err := http.Get(srv.URL + "/api/messaging/jms/messages?destination=orders.events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Messages []struct {
			MessageID string          `json:"message_id"`
			Payload   json.RawMessage `json:"payload"`
		} `json:"messages"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	if len(got.Messages) != 2 || got.Messages[0].MessageID != "jms-1" || string(got.Messages[1].Payload) != `{"id":2}` {
		t.Errorf("messages = %+v", got)
	}
}

func TestRegistrationMatchesTheContract(t *testing.T) {
	for _, kind := range []string{"jms", "rabbitmq"} {
		t.Run(kind, func(t *testing.T) {
			var reg apiv1.RegisterRequest
			if kind == "jms" {
				p, _ := jms.New("http://127.0.0.1:7410", "")
				reg = p.Registration()
			} else {
				p, _ := rabbitmq.New("http://127.0.0.1:7411", "")
				reg = p.Registration()
			}
			if err := reg.Validate(); err != nil {
				t.Fatal(err)
			}
			c := reg.Capabilities[0]
			var meta map[string]any
			json.Unmarshal(c.Metadata, &meta)
			if reg.ServiceName != "egress-"+kind || c.CapabilityID != "messaging.publish" || c.CapabilityVersion != "1.0.0" || c.Provider != kind || meta["validate_supported"] != true {
				t.Errorf("registration = %+v %s", reg, c.Metadata)
			}
			var routes []string
			for _, r := range reg.Manifest.Routes {
				routes = append(routes, r.Methods[0]+" "+r.Path)
			}
			want := []string{"POST /api/messaging/" + kind + "/publish", "GET /api/messaging/" + kind + "/messages"}
			if diff := cmp.Diff(want, routes); diff != "" {
				t.Errorf("manifest routes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunRegistersAndDeregisters(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := rabbitmq.New("http://"+ln.Addr().String(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// a registry just started cannot confirm a withdrawal (no gateway known yet): no drain wait
		done <- p.Run(ctx, ln, provider.Config{Registries: []string{s.URL}, HeartbeatInterval: 10 * time.Millisecond, DrainTimeout: -1}, slogDiscard())
	}()
	id := p.Registration().InstanceID
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Registry.Instance(id); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the provider never registered")
		}
		time.Sleep(time.Millisecond)
	}
	// the registered endpoint answers
	if status, _ := post(t, p.Registration().Endpoint+"/api/messaging/rabbitmq/publish", `{"destination":"d"}`); status != 202 {
		t.Errorf("publish through the registered endpoint = %d", status)
	}
	// POST /admin/health flips what the heartbeats report
	for _, tt := range []struct {
		body string
		want int
	}{{`{"health":"degraded"}`, 200}, {`{"health":"sideways"}`, 400}, {`nope`, 400}} {
		if status, body := post(t, p.Registration().Endpoint+"/admin/health", tt.body); status != tt.want {
			t.Errorf("POST /admin/health %s = %d %s, want %d", tt.body, status, body, tt.want)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if in, _ := s.Registry.Instance(id); in.Health == apiv1.HealthDegraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registry never heard degraded")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if _, err := s.Registry.Instance(id); err == nil {
		t.Error("still registered after Run ended")
	}
}
