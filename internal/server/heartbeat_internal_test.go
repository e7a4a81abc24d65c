package server

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

func TestParseHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		body string
		want *apiv1.HeartbeatRequest // nil: left to encoding/json
	}{
		{`{"generation":42}`, &apiv1.HeartbeatRequest{Generation: 42}},
		{`{"generation": 42, "health": "ok"}`, &apiv1.HeartbeatRequest{Generation: 42, Health: "ok"}},
		{" \n{ \"health\" :\t\"degraded\" ,\r\n \"generation\" : 7 } \n", &apiv1.HeartbeatRequest{Generation: 7, Health: "degraded"}},
		{`{"generation":0}`, &apiv1.HeartbeatRequest{}},
		{`{"health":"failing"}`, &apiv1.HeartbeatRequest{Health: "failing"}},
		{`{"generation":1,"health":"sleepy"}`, &apiv1.HeartbeatRequest{Generation: 1, Health: "sleepy"}}, // Validate refuses it
		{`{"generation":999999999999999999}`, &apiv1.HeartbeatRequest{Generation: 999999999999999999}},
		{`{"generation":9223372036854775807}`, nil}, // 19 digits: encoding/json's
		{`{"generation":-1}`, nil},
		{`{"generation":01}`, nil},
		{`{"generation":1.0}`, nil},
		{`{"generation":1e3}`, nil},
		{`{"generation":"1"}`, nil},
		{`{"generation":null}`, nil},
		{`{"Generation":1}`, nil},
		{`{"generation":1,"generation":2}`, nil},
		{`{"generation":1,"zone":"a"}`, nil},
		{`{"generation":1,"health":"o\u006b"}`, nil},
		{`{"generation":1,"health":"OK"}`, nil},
		{`{"generation":1,}`, nil},
		{`{"generation":1} {}`, nil},
		{`{"generation":1`, nil},
		{`{}`, nil},
		{``, nil},
		{`[]`, nil},
	} {
		t.Run(tc.body, func(t *testing.T) {
			var got apiv1.HeartbeatRequest
			ok := parseHeartbeat([]byte(tc.body), &got)
			if ok != (tc.want != nil) {
				t.Fatalf("parseHeartbeat = %v, want %v", ok, tc.want != nil)
			}
			if ok {
				if diff := cmp.Diff(*tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
				var viaJSON apiv1.HeartbeatRequest
				if err := json.Unmarshal([]byte(tc.body), &viaJSON); err != nil || viaJSON != got {
					t.Errorf("encoding/json reads %+v (%v)", viaJSON, err)
				}
			}
		})
	}
}

// FuzzParseHeartbeat: a heartbeat body is untrusted input. Whatever it holds, the direct reader
// never panics, and whatever it accepts encoding/json accepts too, with the same result.
func FuzzParseHeartbeat(f *testing.F) {
	for _, s := range []string{`{"generation":42}`, `{"generation": 42, "health": "ok"}`, `{"health":"degraded","generation":7}`,
		`{"generation":1,"generation":2}`, `{"generation":1e3}`, ` { } `, `{"generation":0012}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got apiv1.HeartbeatRequest
		if !parseHeartbeat(b, &got) {
			return
		}
		var want apiv1.HeartbeatRequest
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("parseHeartbeat accepted %q, encoding/json refuses it: %v", b, err)
		}
		if got != want {
			t.Fatalf("%q: parseHeartbeat %+v, encoding/json %+v", b, got, want)
		}
	})
}

func TestAppendHeartbeatAnswer(t *testing.T) {
	utc := time.Date(2026, 11, 30, 18, 31, 57, 800751195, time.UTC)
	checkDirect(t, appendHeartbeatAnswer, []directCase[apiv1.HeartbeatResponse]{
		{"usual", apiv1.HeartbeatResponse{Generation: 42, LeaseExpiresAt: utc, RegistryEpoch: "2026-11-30T18:01:49.765623051Z"}, true},
		{"whole second", apiv1.HeartbeatResponse{Generation: 1, LeaseExpiresAt: utc.Truncate(time.Second), RegistryEpoch: "e"}, true},
		{"zone", apiv1.HeartbeatResponse{Generation: 1, LeaseExpiresAt: utc.In(time.FixedZone("x", -5*3600-30*60)), RegistryEpoch: "e"}, true},
		{"empty", apiv1.HeartbeatResponse{}, true},
		{"largest", apiv1.HeartbeatResponse{Generation: math.MaxInt64, LeaseExpiresAt: utc, RegistryEpoch: "<&>"}, true},
		{"seconds in the offset", apiv1.HeartbeatResponse{LeaseExpiresAt: utc.In(time.FixedZone("lmt", 17)), RegistryEpoch: "e"}, false},
		{"year 10000", apiv1.HeartbeatResponse{LeaseExpiresAt: utc.AddDate(8000, 0, 0), RegistryEpoch: "e"}, false},
		{"quote", apiv1.HeartbeatResponse{LeaseExpiresAt: utc, RegistryEpoch: `a"b`}, false},
		{"backslash", apiv1.HeartbeatResponse{LeaseExpiresAt: utc, RegistryEpoch: `a\b`}, false},
		{"control", apiv1.HeartbeatResponse{LeaseExpiresAt: utc, RegistryEpoch: "a\nb"}, false},
		{"not ASCII", apiv1.HeartbeatResponse{LeaseExpiresAt: utc, RegistryEpoch: "é"}, false},
	})
}

// FuzzAppendHeartbeatAnswer: whatever the answer holds, written directly it is byte for byte
// what httpapi.Marshal writes.
func FuzzAppendHeartbeatAnswer(f *testing.F) {
	f.Add(int64(42), int64(1796063517800751195), 0, "2026-11-30T18:01:49.765623051Z")
	f.Add(int64(-1), int64(0), 3600, "")
	f.Add(int64(1), int64(-62135596800000000000/1000), -59, "é\"")
	f.Fuzz(func(t *testing.T, gen, nanos int64, offset int, epoch string) {
		resp := apiv1.HeartbeatResponse{Generation: gen, LeaseExpiresAt: time.Unix(0, nanos).In(time.FixedZone("z", offset%(18*3600))), RegistryEpoch: epoch}
		got, ok := appendHeartbeatAnswer(nil, &resp)
		if !ok {
			return
		}
		matchesMarshal(t, got, resp)
		if strings.Count(string(got), "\n") != 1 {
			t.Fatalf("not one line: %q", got)
		}
	})
}

// directCase is one answer of a table for a direct writer, and whether the writer takes it
// (false: it is left to encoding/json).
type directCase[T any] struct {
	name   string
	resp   T
	direct bool
}

// checkDirect runs write on each case: it must take exactly the cases marked direct, and
// write those byte for byte as httpapi.Marshal does.
func checkDirect[T any](t *testing.T, write func([]byte, *T) ([]byte, bool), cases []directCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := write(nil, &tc.resp)
			if ok != tc.direct {
				t.Fatalf("written directly = %v, want %v", ok, tc.direct)
			}
			if ok {
				matchesMarshal(t, got, tc.resp)
			}
		})
	}
}

// matchesMarshal fails unless got, an answer written directly, is byte for byte what
// httpapi.Marshal writes for v.
func matchesMarshal(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := httpapi.Marshal(v)
	if err != nil {
		t.Fatalf("written directly, but encoding/json fails: %v", err)
	}
	if string(got) != string(want) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
