package apiv1_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func validRequest() *apiv1.RegisterRequest {
	return &apiv1.RegisterRequest{
		InstanceID:     "egress-jms-7c9f5d8c4f-9x2kq",
		ServiceName:    "egress-jms",
		ServiceVersion: "0.1.3",
		Endpoint:       "http://egress-jms:8080",
		Zone:           "a",
		Capabilities: []apiv1.Capability{{
			CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0",
			Provider: "jms", Metadata: json.RawMessage(`{"validate_supported": true}`),
		}},
		Manifest: &apiv1.Manifest{
			FARP:    "1.0",
			Service: apiv1.ManifestService{Name: "egress-jms", Instance: "egress-jms-7c9f5d8c4f-9x2kq", Version: "0.1.3"},
			Health:  &apiv1.ManifestHealth{Path: "/healthz", Interval: "5s", UnhealthyAfter: apiv1.Int(3)},
			Routes:  []apiv1.ManifestRoute{{Path: "/api/messaging/jms/publish", Methods: []string{"POST"}}},
		},
	}
}

// detailPaths returns the paths of the details of an INVALID_REQUEST error.
func detailPaths(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ae *apiv1.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an *apiv1.Error", err)
	}
	if ae.Code != apiv1.CodeInvalidRequest || ae.Status != 400 {
		t.Fatalf("error = %s/%d, want INVALID_REQUEST/400", ae.Code, ae.Status)
	}
	var ps []string
	for _, d := range ae.Details {
		ps = append(ps, d.Path)
	}
	return ps
}

func TestRegisterRequestValidate(t *testing.T) {
	cap2 := apiv1.Capability{CapabilityID: "messaging.publish", CapabilityVersion: "2.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}
	tests := []struct {
		name   string
		mutate func(r *apiv1.RegisterRequest)
		want   []string
	}{
		{"valid", func(*apiv1.RegisterRequest) {}, nil},
		{"valid without zone, metadata or manifest", func(r *apiv1.RegisterRequest) {
			r.Zone, r.Capabilities[0].Metadata, r.Manifest = "", nil, nil
		}, nil},
		{"valid with pre-release and build metadata", func(r *apiv1.RegisterRequest) {
			r.ServiceVersion = "1.0.0-rc.1+build.5"
		}, nil},
		{"instance id empty", func(r *apiv1.RegisterRequest) { r.InstanceID = ""; r.Manifest = nil }, []string{"instance_id"}},
		{"instance id too long", func(r *apiv1.RegisterRequest) { r.InstanceID = strings.Repeat("a", 254); r.Manifest = nil }, []string{"instance_id"}},
		{"instance id 253 chars", func(r *apiv1.RegisterRequest) { r.InstanceID = strings.Repeat("a", 253); r.Manifest = nil }, nil},
		{"instance id bad char", func(r *apiv1.RegisterRequest) { r.InstanceID = "a/b"; r.Manifest = nil }, []string{"instance_id"}},
		{"instance id all allowed chars", func(r *apiv1.RegisterRequest) { r.InstanceID = "A-z_0.9:x"; r.Manifest = nil }, nil},
		{"instance id dot", func(r *apiv1.RegisterRequest) { r.InstanceID = "."; r.Manifest = nil }, []string{"instance_id"}},
		{"instance id dot dot", func(r *apiv1.RegisterRequest) { r.InstanceID = ".."; r.Manifest = nil }, []string{"instance_id"}},
		{"instance id with dots inside", func(r *apiv1.RegisterRequest) { r.InstanceID = "a..b"; r.Manifest = nil }, nil},
		{"service name upper case", func(r *apiv1.RegisterRequest) { r.ServiceName = "Egress"; r.Manifest = nil }, []string{"service_name"}},
		{"service name leading dash", func(r *apiv1.RegisterRequest) { r.ServiceName = "-egress"; r.Manifest = nil }, []string{"service_name"}},
		{"service name trailing dash", func(r *apiv1.RegisterRequest) { r.ServiceName = "egress-"; r.Manifest = nil }, []string{"service_name"}},
		{"service name 64 chars", func(r *apiv1.RegisterRequest) { r.ServiceName = strings.Repeat("a", 64); r.Manifest = nil }, []string{"service_name"}},
		{"service name 63 chars", func(r *apiv1.RegisterRequest) { r.ServiceName = strings.Repeat("a", 63); r.Manifest = nil }, nil},
		{"service version with v", func(r *apiv1.RegisterRequest) { r.ServiceVersion = "v0.1.3" }, []string{"service_version"}},
		{"service version short", func(r *apiv1.RegisterRequest) { r.ServiceVersion = "1.0" }, []string{"service_version"}},
		{"endpoint missing", func(r *apiv1.RegisterRequest) { r.Endpoint = "" }, []string{"endpoint"}},
		{"endpoint relative", func(r *apiv1.RegisterRequest) { r.Endpoint = "/x" }, []string{"endpoint"}},
		{"endpoint ftp", func(r *apiv1.RegisterRequest) { r.Endpoint = "ftp://host" }, []string{"endpoint"}},
		{"endpoint no host", func(r *apiv1.RegisterRequest) { r.Endpoint = "http://" }, []string{"endpoint"}},
		{"endpoint user info", func(r *apiv1.RegisterRequest) { r.Endpoint = "https://u:p@host" }, []string{"endpoint"}},
		{"endpoint https with port", func(r *apiv1.RegisterRequest) { r.Endpoint = "https://10.0.0.1:8443" }, nil},
		{"zone bad", func(r *apiv1.RegisterRequest) { r.Zone = "Zone A" }, []string{"zone"}},
		{"no capabilities", func(r *apiv1.RegisterRequest) { r.Capabilities = nil }, []string{"capabilities"}},
		{"65 capabilities", func(r *apiv1.RegisterRequest) {
			r.Capabilities = nil
			for i := range 65 {
				c := cap2
				c.CapabilityVersion = fmt.Sprintf("1.0.%d", i)
				r.Capabilities = append(r.Capabilities, c)
			}
		}, []string{"capabilities"}},
		{"capability id not dotted", func(r *apiv1.RegisterRequest) { r.Capabilities[0].CapabilityID = "messaging" }, []string{"capabilities[0].capability_id"}},
		{"capability id upper", func(r *apiv1.RegisterRequest) { r.Capabilities[0].CapabilityID = "Messaging.publish" }, []string{"capabilities[0].capability_id"}},
		{"capability id digit first", func(r *apiv1.RegisterRequest) { r.Capabilities[0].CapabilityID = "messaging.1publish" }, []string{"capabilities[0].capability_id"}},
		{"capability version", func(r *apiv1.RegisterRequest) { r.Capabilities[0].CapabilityVersion = "1.x" }, []string{"capabilities[0].capability_version"}},
		{"contract schema version", func(r *apiv1.RegisterRequest) { r.Capabilities[0].ContractSchemaVersion = "1.0.0" }, []string{"capabilities[0].contract_schema_version"}},
		{"contract schema leading zero", func(r *apiv1.RegisterRequest) { r.Capabilities[0].ContractSchemaVersion = "01.0" }, []string{"capabilities[0].contract_schema_version"}},
		{"provider", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Provider = "JMS" }, []string{"capabilities[0].provider"}},
		{"metadata array", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Metadata = json.RawMessage(`[1]`) }, []string{"capabilities[0].metadata"}},
		{"metadata string", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Metadata = json.RawMessage(`"x"`) }, []string{"capabilities[0].metadata"}},
		{"metadata null", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Metadata = json.RawMessage(`null`) }, nil},
		{"priority an integer", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Metadata = json.RawMessage(`{"priority": -3}`) }, nil},
		{"priority a string", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Metadata = json.RawMessage(`{"priority": "high"}`) }, []string{"capabilities[0].metadata.priority"}},
		{"priority a fraction", func(r *apiv1.RegisterRequest) { r.Capabilities[0].Metadata = json.RawMessage(`{"priority": 1.5}`) }, []string{"capabilities[0].metadata.priority"}},
		{"public paths fine", func(r *apiv1.RegisterRequest) {
			r.Capabilities[0].Metadata = json.RawMessage(`{"public_paths": ["/api/messaging/jms/send"]}`)
		}, nil},
		{"public paths not a list", func(r *apiv1.RegisterRequest) {
			r.Capabilities[0].Metadata = json.RawMessage(`{"public_paths": "/x"}`)
		}, []string{"capabilities[0].metadata.public_paths"}},
		{"public path with dot segments", func(r *apiv1.RegisterRequest) {
			r.Capabilities[0].Metadata = json.RawMessage(`{"public_paths": ["/ok", "/api/../admin", "/api/%2e%2e/admin"]}`)
		}, []string{"capabilities[0].metadata.public_paths[1]", "capabilities[0].metadata.public_paths[2]"}},
		{"manifest route with an encoded dot segment", func(r *apiv1.RegisterRequest) {
			r.Manifest.Routes[0].Path = "/api/messaging/jms/%2E%2e/x"
		}, []string{"manifest.routes[0].path"}},
		{"priority only in a nested object", func(r *apiv1.RegisterRequest) {
			r.Capabilities[0].Metadata = json.RawMessage(`{"labels": {"priority": "high"}}`)
		}, nil},
		{"metadata over 16 KiB", func(r *apiv1.RegisterRequest) {
			r.Capabilities[0].Metadata = json.RawMessage(`{"pad":"` + strings.Repeat("x", 16<<10) + `"}`)
		}, []string{"capabilities[0].metadata"}},
		{"duplicate capability", func(r *apiv1.RegisterRequest) {
			r.Capabilities = append(r.Capabilities, r.Capabilities[0])
		}, []string{"capabilities[1]"}},
		{"same capability other version", func(r *apiv1.RegisterRequest) { r.Capabilities = append(r.Capabilities, cap2) }, nil},
		{"manifest service name differs", func(r *apiv1.RegisterRequest) { r.Manifest.Service.Name = "other" }, []string{"manifest.service.name"}},
		{"manifest instance differs", func(r *apiv1.RegisterRequest) { r.Manifest.Service.Instance = "other" }, []string{"manifest.service.instance"}},
		{"manifest bad route", func(r *apiv1.RegisterRequest) { r.Manifest.Routes[0].Methods = []string{"get"} }, []string{"manifest.routes[0].methods[0]"}},
		{"every problem at once", func(r *apiv1.RegisterRequest) {
			*r = apiv1.RegisterRequest{Capabilities: []apiv1.Capability{{}}}
		}, []string{"instance_id", "service_name", "service_version", "endpoint",
			"capabilities[0].capability_id", "capabilities[0].capability_version",
			"capabilities[0].contract_schema_version", "capabilities[0].provider"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.mutate(r)
			got := detailPaths(t, r.Validate())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() detail paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeartbeatRequestValidate(t *testing.T) {
	tests := []struct {
		name string
		req  apiv1.HeartbeatRequest
		want []string
	}{
		{"ok", apiv1.HeartbeatRequest{Generation: 4, Health: "ok"}, nil},
		{"empty health means ok", apiv1.HeartbeatRequest{Generation: 4}, nil},
		{"degraded", apiv1.HeartbeatRequest{Generation: 4, Health: "degraded"}, nil},
		{"failing", apiv1.HeartbeatRequest{Generation: 4, Health: "failing"}, nil},
		{"no generation", apiv1.HeartbeatRequest{Health: "ok"}, []string{"generation"}},
		{"bad health and generation", apiv1.HeartbeatRequest{Generation: -1, Health: "sick"}, []string{"generation", "health"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := detailPaths(t, tt.req.Validate())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() detail paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorJSON(t *testing.T) {
	e := apiv1.InvalidRequest([]apiv1.Detail{{Path: "capabilities[0].capability_version", Message: `not a semantic version: "1.x"`}})
	got, err := json.Marshal(apiv1.ErrorBody{Error: e})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"error":{"code":"INVALID_REQUEST","message":"the request has 1 problem","details":[{"path":"capabilities[0].capability_version","message":"not a semantic version: \"1.x\""}]}}`
	if string(got) != want {
		t.Errorf("Marshal(error) = %s, want %s", got, want)
	}
	if s := e.Error(); !strings.Contains(s, "capabilities[0].capability_version") {
		t.Errorf("Error() = %q, want the detail path in it", s)
	}
}

// TestProblemsNameCharacters: a message names the character, not the first byte of its
// UTF-8 encoding ('é', never 'Ã').
func TestProblemsNameCharacters(t *testing.T) {
	msg := apiv1.InstanceIDProblem("abcé")
	if want := "character 'é' at offset 3"; !strings.Contains(msg, want) {
		t.Fatalf("InstanceIDProblem = %q, want it to contain %q", msg, want)
	}
}

func TestUnknownFields(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"none", `{"instance_id":"a","capabilities":[{"capability_id":"x.y","metadata":{"anything":1}}]}`, nil},
		{"top level", `{"instance_id":"a","zoen":"a"}`, []string{"zoen"}},
		{"in a capability", `{"capabilities":[{"capability_id":"x.y"},{"provder":"jms"}]}`, []string{"capabilities[1].provder"}},
		{"in the manifest", `{"manifest":{"farp":"1.0","routes":[{"path":"/x","methdos":["GET"]}],"helth":{}}}`,
			[]string{"manifest.helth", "manifest.routes[0].methdos"}},
		{"case is ignored, as decoding does", `{"Instance_ID":"a","Capabilities":[{"PROVIDER":"jms"}]}`, nil},
		{"metadata is free-form", `{"capabilities":[{"metadata":{"zoen":1,"nested":{"x":2}}}]}`, nil},
		{"wrong types are decoding's business", `{"capabilities":"x","manifest":[1]}`, nil},
		{"not json", `{`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, w := range apiv1.UnknownFields([]byte(tt.body), &apiv1.RegisterRequest{}) {
				if w.Code != apiv1.CodeUnknownField || w.Message == "" {
					t.Errorf("warning %+v", w)
				}
				got = append(got, w.Path)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzUnknownFields(f *testing.F) {
	f.Add([]byte(`{"instance_id":"a","zoen":"a","capabilities":[{"provder":"x","metadata":{"y":1}}],"manifest":{"routes":[{"methdos":[]}]}}`))
	f.Add([]byte(`[1,{"a":null}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ws := apiv1.UnknownFields(raw, &apiv1.RegisterRequest{})
		for _, w := range ws {
			if w.Path == "" || w.Code != apiv1.CodeUnknownField {
				t.Fatalf("warning %+v", w)
			}
		}
		if len(ws) > 0 && !json.Valid(raw) {
			t.Fatal("warnings for a document that is not JSON")
		}
	})
}
