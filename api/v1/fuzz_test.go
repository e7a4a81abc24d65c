package apiv1_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// FuzzRegisterDecodeValidate feeds arbitrary bodies through the registration decoder and
// validator: they must never panic, a rejection must be a well-formed INVALID_REQUEST, and
// an accepted request must survive an encode/decode round trip and still validate.
func FuzzRegisterDecodeValidate(f *testing.F) {
	seed, _ := json.Marshal(validRequest())
	f.Add(seed)
	f.Add([]byte(`{"instance_id":"a","service_name":"b","service_version":"1.0.0","endpoint":"http://h","capabilities":[{"capability_id":"a.b","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p"}]}`))
	f.Add([]byte(`{"capabilities":[{"metadata":[]}],"manifest":{"routes":[{"path":"/{a...}/{a}","weight":"x"}],"health":{"unhealthy_after":1e3}}}`))
	f.Add([]byte(`{"endpoint":"http://[::1]:80","zone":"-"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apiv1.RegisterRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		err := req.Validate()
		if err != nil {
			var ae *apiv1.Error
			if !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidRequest || len(ae.Details) == 0 {
				t.Fatalf("Validate() = %v, want INVALID_REQUEST with details", err)
			}
			return
		}
		again, err := json.Marshal(&req)
		if err != nil {
			t.Fatalf("Marshal of a valid request: %v", err)
		}
		var back apiv1.RegisterRequest
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatalf("Unmarshal of %s: %v", again, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("valid request %s no longer validates after a round trip: %v", again, err)
		}
	})
}

// FuzzManifestProblems: arbitrary manifests never panic the rule checker, and the
// segments Analyze hands back (parsed into one array per manifest) are each route's own.
func FuzzManifestProblems(f *testing.F) {
	f.Add([]byte(`{"farp":"1.0","service":{"name":"a","instance":"a","version":"1.0.0"},"routes":[{"path":"/a/{b}/{c...}","methods":["GET"],"weight":5}]}`))
	f.Add([]byte(`{"routes":[{"path":"/{}","methods":["GET","GET"],"idempotent":["PUT"]},{"path":"/{...}"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var m apiv1.Manifest
		if json.Unmarshal(body, &m) != nil {
			return
		}
		ps, infos := m.Analyze()
		for _, p := range ps {
			if p.Code == "" || p.Path == "" {
				t.Fatalf("problem without code or path: %+v", p)
			}
		}
		for i, r := range m.Routes {
			if want, err := apiv1.ParsePath(r.Path); err == nil && !slices.Equal(infos[i].Segments, want) {
				t.Fatalf("route %d (%q): Analyze gives %v, ParsePath %v", i, r.Path, infos[i].Segments, want)
			}
		}
	})
}

// FuzzIsSemver checks the hand-written semantic version check against Masterminds' strict
// parser, which the registry uses to order versions.
func FuzzIsSemver(f *testing.F) {
	for _, s := range []string{"1.0.0", "v1.0.0", "1.0", "01.0.0", "1.0.0-rc.1", "1.0.0-01", "1.0.0+b.01", "1.0.0-", "1.0.0+", "1.0.0-a..b", "0.0.0-0.a-b+c-d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := semver.StrictNewVersion(s)
		if got, want := apiv1.IsSemver(s), err == nil; got != want {
			t.Fatalf("IsSemver(%q) = %v, StrictNewVersion says %v (%v)", s, got, want, err)
		}
	})
}

// FuzzReportDecodeValidate: arbitrary report bodies never panic decoding and validation,
// and a refused one is an INVALID_REQUEST with details.
func FuzzReportDecodeValidate(f *testing.F) {
	f.Add([]byte(`{"reporter":"gw-1","events":[{"type":"route.conflict","severity":"warning","subject":"GET /x","message":"m"}],"conditions":[{"kind":"route","subject":"GET /x","active":true}]}`))
	f.Add([]byte(`{"reporter":"","events":[{"attrs":{"a":[1,{"b":null}]}}],"conditions":[{"kind":"x"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apiv1.ReportRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		if err := req.Validate(); err != nil {
			var ae *apiv1.Error
			if !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidRequest || len(ae.Details) == 0 {
				t.Fatalf("Validate() = %v, want INVALID_REQUEST with details", err)
			}
		}
	})
}

// FuzzOutcomesDecodeValidate: arbitrary outcome bodies never panic decoding and validation;
// a refused one is an INVALID_REQUEST with details, and an accepted one has every count within
// 0..10^9 and a latency within 0..24 h.
func FuzzOutcomesDecodeValidate(f *testing.F) {
	f.Add([]byte(`{"gateway_id":"gw-1","outcomes":[{"instance_id":"a","generation":1,"ok":40,"errors":2,"connect_failures":0,"latency_ms_p99":12.5}]}`))
	f.Add([]byte(`{"gateway_id":"","outcomes":[{"instance_id":"..","generation":0,"ok":-1,"errors":1e12,"latency_ms_p99":-1}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req apiv1.OutcomesRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		if err := req.Validate(); err != nil {
			var ae *apiv1.Error
			if !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidRequest || len(ae.Details) == 0 {
				t.Fatalf("Validate() = %v, want INVALID_REQUEST with details", err)
			}
			return
		}
		for _, o := range req.Outcomes {
			for _, n := range []int{o.OK, o.Errors, o.ConnectFailures} {
				if n < 0 || n > apiv1.MaxOutcomeCount {
					t.Fatalf("accepted a count of %d", n)
				}
			}
			if !(o.LatencyMsP99 >= 0 && o.LatencyMsP99 <= apiv1.MaxOutcomeLatencyMs) {
				t.Fatalf("accepted a latency of %v", o.LatencyMsP99)
			}
		}
	})
}
