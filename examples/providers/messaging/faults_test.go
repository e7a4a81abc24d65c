package messaging_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/examples/providers/messaging"
)

// TestFaults: with --error-rate a share of publishes is answered 500 (drawn from the
// injected sequence), the others published; a bad setting is refused.
func TestFaults(t *testing.T) {
	p, err := messaging.New(messaging.Config{Kind: "jms", Endpoint: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	draws := []float64{0.01, 0.5, 0.03, 0.9}
	i := 0
	if err := p.SetFaults(messaging.Faults{ErrorRate: 0.04, Rand: func() float64 { i++; return draws[(i-1)%len(draws)] }}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	var codes []int
	for range 4 {
		resp, err := http.Post(srv.URL+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"d","payload":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{500, 202, 500, 202}; len(codes) != 4 || codes[0] != want[0] || codes[1] != want[1] || codes[2] != want[2] || codes[3] != want[3] {
		t.Errorf("codes = %v, want %v", codes, want)
	}
	if n := len(p.Messages("d")); n != 2 {
		t.Errorf("%d messages published, want 2", n)
	}
	for _, f := range []messaging.Faults{{ErrorRate: 1.5}, {ErrorRate: -1}, {Latency: -1}} {
		if p.SetFaults(f) == nil {
			t.Errorf("faults %+v accepted", f)
		}
	}
}

// TestFaultsChangeAtRunTime: POST /admin/faults sets the faults from loopback, refuses
// unknown fields and bad values, and {} ends them.
func TestFaultsChangeAtRunTime(t *testing.T) {
	p, err := messaging.New(messaging.Config{Kind: "jms", Endpoint: "http://127.0.0.1:7410"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	post := func(body string) int {
		resp, err := http.Post(srv.URL+"/admin/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for body, want := range map[string]int{`{"error_rate":1}`: 200, `{"eror_rate":1}`: 400, `{"error_rate":2}`: 400, `{"latency":"soon"}`: 400} {
		if got := post(body); got != want {
			t.Errorf("POST /admin/faults %s = %d, want %d", body, got, want)
		}
	}
	publish := func() int {
		resp, err := http.Post(srv.URL+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"d"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := publish(); got != http.StatusInternalServerError {
		t.Errorf("a publish at error rate 1 = %d, want 500", got)
	}
	if got := post(`{}`); got != 200 {
		t.Fatalf("ending the faults = %d", got)
	}
	if got := publish(); got != http.StatusAccepted {
		t.Errorf("a publish once the faults ended = %d, want 202", got)
	}
}
