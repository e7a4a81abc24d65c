package server

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// usualRegistration is a registration as providers send it.
const usualRegistration = `{"instance_id":"inst-1","service_name":"orders","service_version":"1.4.2",` +
	`"endpoint":"http://127.0.0.1:9001","zone":"z1","capabilities":[` +
	`{"capability_id":"orders.read","capability_version":"2.0.0","contract_schema_version":"1.0","provider":"grpc",` +
	`"metadata":{"owner":"team-a","priority":3,"public_paths":["/v1/orders"],"limits":{"rps":1.5e2,"burst":-1,"on":true,"off":false,"none":null}}},` +
	`{"capability_id":"orders.http","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"http"}]}`

func TestParseRegistration(t *testing.T) {
	usual := apiv1.RegisterRequest{InstanceID: "inst-1", ServiceName: "orders", ServiceVersion: "1.4.2",
		Endpoint: "http://127.0.0.1:9001", Zone: "z1", Capabilities: []apiv1.Capability{
			{CapabilityID: "orders.read", CapabilityVersion: "2.0.0", ContractSchemaVersion: "1.0", Provider: "grpc",
				Metadata: json.RawMessage(`{"owner":"team-a","priority":3,"public_paths":["/v1/orders"],"limits":{"rps":1.5e2,"burst":-1,"on":true,"off":false,"none":null}}`)},
			{CapabilityID: "orders.http", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "http"},
		}}
	for _, tc := range []struct {
		name string
		body string
		want *apiv1.RegisterRequest // nil: left to encoding/json
	}{
		{"usual", usualRegistration, &usual},
		{"spaced", " \n{ \"zone\" :\t\"z1\" ,\r\n \"capabilities\" : [ { \"provider\" : \"http\" , \"metadata\" : { \"a\" : [ 1 , 2 ] } } ] } \n",
			&apiv1.RegisterRequest{Zone: "z1", Capabilities: []apiv1.Capability{{Provider: "http", Metadata: json.RawMessage(`{ "a" : [ 1 , 2 ] }`)}}}},
		{"empty object", `{}`, &apiv1.RegisterRequest{}},
		{"no capabilities", `{"instance_id":"a","capabilities":[]}`, &apiv1.RegisterRequest{InstanceID: "a", Capabilities: []apiv1.Capability{}}},
		{"empty capability", `{"capabilities":[{}]}`, &apiv1.RegisterRequest{Capabilities: []apiv1.Capability{{}}}},
		{"empty strings", `{"instance_id":"","zone":""}`, &apiv1.RegisterRequest{}},
		{"UTF-8", `{"service_name":"commandes-été"}`, &apiv1.RegisterRequest{ServiceName: "commandes-été"}},
		{"metadata escapes and UTF-8", `{"capabilities":[{"metadata":{"d":"a\"b\\c\/\n\u00e9 é","e":{}}}]}`,
			&apiv1.RegisterRequest{Capabilities: []apiv1.Capability{{Metadata: json.RawMessage(`{"d":"a\"b\\c\/\n\u00e9 é","e":{}}`)}}}},
		{"manifest", `{"instance_id":"a","manifest":{"routes":[]}}`, nil},
		{"unknown field", `{"instance_id":"a","tags":["x"]}`, nil},
		{"unknown capability field", `{"capabilities":[{"capability_id":"a","weight":3}]}`, nil},
		{"key in other case", `{"Instance_ID":"a"}`, nil},
		{"escaped key", `{"instance\u005fid":"a"}`, nil},
		{"escape in a string", `{"instance_id":"a\u0062"}`, nil},
		{"control character", "{\"instance_id\":\"a\tb\"}", nil},
		{"invalid UTF-8", "{\"instance_id\":\"a\xffb\"}", nil},
		{"repeated key", `{"instance_id":"a","instance_id":"b"}`, nil},
		{"repeated capability key", `{"capabilities":[{"provider":"a","provider":"b"}]}`, nil},
		{"null string", `{"instance_id":null}`, nil},
		{"null capabilities", `{"capabilities":null}`, nil},
		{"null metadata", `{"capabilities":[{"metadata":null}]}`, nil},
		{"metadata not an object", `{"capabilities":[{"metadata":[1]}]}`, nil},
		{"number for a string", `{"zone":5}`, nil},
		{"capabilities not an array", `{"capabilities":{}}`, nil},
		{"trailing comma", `{"instance_id":"a",}`, nil},
		{"trailing comma in metadata", `{"capabilities":[{"metadata":{"a":1,}}]}`, nil},
		{"bad number in metadata", `{"capabilities":[{"metadata":{"a":01}}]}`, nil},
		{"bad fraction in metadata", `{"capabilities":[{"metadata":{"a":1.}}]}`, nil},
		{"bad exponent in metadata", `{"capabilities":[{"metadata":{"a":1e}}]}`, nil},
		{"bad escape in metadata", `{"capabilities":[{"metadata":{"a":"\x"}}]}`, nil},
		{"short unicode escape in metadata", `{"capabilities":[{"metadata":{"a":"\u12"}}]}`, nil},
		{"bad literal in metadata", `{"capabilities":[{"metadata":{"a":nul}}]}`, nil},
		{"unclosed metadata", `{"capabilities":[{"metadata":{"a":1}]}`, nil},
		{"deep metadata", `{"capabilities":[{"metadata":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}]}`, nil},
		{"two documents", `{} {}`, nil},
		{"unclosed", `{"instance_id":"a"`, nil},
		{"empty body", ``, nil},
		{"array", `[]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got apiv1.RegisterRequest
			ok := parseRegistration([]byte(tc.body), &got)
			if ok != (tc.want != nil) {
				t.Fatalf("parseRegistration = %v, want %v", ok, tc.want != nil)
			}
			if !ok {
				if !reflect.DeepEqual(got, apiv1.RegisterRequest{}) {
					t.Errorf("a refused body left %+v", got)
				}
				return
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			sameAsEncodingJSON(t, []byte(tc.body), &got)
		})
	}
}

// sameAsEncodingJSON fails unless encoding/json reads b as got, exactly (nil and empty
// slices told apart), and the unknown-field walk finds nothing in it.
func sameAsEncodingJSON(t *testing.T, b []byte, got *apiv1.RegisterRequest) {
	t.Helper()
	var want apiv1.RegisterRequest
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("parseRegistration accepted %q, encoding/json refuses it: %v", b, err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("%q:\nparseRegistration %#v\nencoding/json     %#v", b, *got, want)
	}
	if ws := apiv1.UnknownFieldsOfDecoded(b, &want); len(ws) > 0 {
		t.Fatalf("parseRegistration accepted %q, which has unknown fields %v", b, ws)
	}
}

// FuzzParseRegistration: a registration body is untrusted input. Whatever it holds, the
// direct reader never panics, and whatever it accepts encoding/json reads the same, with no
// unknown field for the warnings.
func FuzzParseRegistration(f *testing.F) {
	f.Add([]byte(usualRegistration))
	for _, s := range []string{`{}`, `{"capabilities":[]}`, `{"capabilities":[{"metadata":{"a":[1,-2.5e+3,"\u00e9",true,null,{}]}}]}`,
		`{"instance_id":"a","instance_id":"b"}`, `{"Zone":"z"}`, `{"manifest":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got apiv1.RegisterRequest
		if !parseRegistration(b, &got) {
			if !reflect.DeepEqual(got, apiv1.RegisterRequest{}) {
				t.Fatalf("a refused body left %+v", got)
			}
			return
		}
		sameAsEncodingJSON(t, b, &got)
	})
}

func TestAppendRegisterAnswer(t *testing.T) {
	usual := apiv1.RegisterResponse{Accepted: true, LeaseTTLSeconds: 30, HeartbeatIntervalSeconds: 10, Generation: 42,
		RegistryEpoch: "2026-11-30T18:01:49.765623051Z"}
	checkDirect(t, appendRegisterAnswer, []directCase[apiv1.RegisterResponse]{
		{"usual", usual, true},
		{"empty", apiv1.RegisterResponse{}, true},
		{"largest", apiv1.RegisterResponse{Accepted: true, LeaseTTLSeconds: math.MaxInt64, HeartbeatIntervalSeconds: math.MinInt64,
			Generation: math.MaxInt64, RegistryEpoch: "<&>"}, true},
		{"warnings", apiv1.RegisterResponse{Accepted: true, Warnings: []apiv1.Warning{{Code: apiv1.CodeUnknownField, Path: "tags"}}}, false},
		{"quote", apiv1.RegisterResponse{RegistryEpoch: `a"b`}, false},
		{"not ASCII", apiv1.RegisterResponse{RegistryEpoch: "é"}, false},
	})
}

// FuzzAppendRegisterAnswer: whatever the answer holds, written directly it is byte for byte
// what httpapi.Marshal writes.
func FuzzAppendRegisterAnswer(f *testing.F) {
	f.Add(true, int64(30), int64(10), int64(42), "2026-11-30T18:01:49.765623051Z")
	f.Add(false, int64(-1), int64(0), int64(math.MinInt64), "é\"\\")
	f.Fuzz(func(t *testing.T, accepted bool, ttl, interval, gen int64, epoch string) {
		resp := apiv1.RegisterResponse{Accepted: accepted, LeaseTTLSeconds: ttl, HeartbeatIntervalSeconds: interval,
			Generation: gen, RegistryEpoch: epoch}
		got, ok := appendRegisterAnswer(nil, &resp)
		if !ok {
			return
		}
		matchesMarshal(t, got, resp)
	})
}
