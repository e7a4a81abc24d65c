package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// The reconnection cap on watches: a long poll that needs a whole answer — index 0, or an
// epoch the registry does not have (a consumer back after a restart) — takes a token and is
// shed past the burst with 429 and a Retry-After; a watch that holds an answer of this
// epoch re-arms however many there are, and a plain read (no index) is no watch.
func TestWatchesThatNeedAWholeAnswerAreShedRearmsAreNot(t *testing.T) {
	metrics := prometheus.NewRegistry()
	s := registrytest.NewServer(t, registry.Config{ReconnectRate: 1, ReconnectBurst: 2, Registerer: metrics})
	base := s.URL + "/v1/discovery/capabilities?capability_id=x.y"
	get := func(query string) (int, string, apiv1.DiscoveryResponse) {
		t.Helper()
		resp, err := http.Get(base + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ans apiv1.DiscoveryResponse
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &ans); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, resp.Header.Get("Retry-After"), ans
	}
	for range 5 {
		if code, _, _ := get(""); code != http.StatusOK {
			t.Fatalf("a plain read answered %d", code)
		}
	}
	_, _, first := get("")
	for i := range 2 {
		if code, _, _ := get("&index=0&wait=1ms"); code != http.StatusOK {
			t.Fatalf("new watch %d of the burst answered %d", i, code)
		}
	}
	for _, q := range []string{"&index=0&wait=1ms", "&index=7&epoch=before-the-restart&wait=1ms"} {
		code, after, _ := get(q)
		if code != http.StatusTooManyRequests || after == "" {
			t.Fatalf("a new watch past the burst (%s) answered %d, Retry-After %q; want 429 with one", q, code, after)
		}
	}
	for i := range 10 {
		q := fmt.Sprintf("&index=%d&epoch=%s&wait=1ms", first.Revision, first.RegistryEpoch)
		if code, _, _ := get(q); code != http.StatusOK {
			t.Fatalf("re-arm %d of a watch holding this epoch answered %d", i, code)
		}
	}
	if got := counterValue(t, metrics, "meshflows_registry_watches_shed_total"); got != 2 {
		t.Errorf("watches shed %v, want 2", got)
	}
	s.Clock.Advance(2e9) // two tokens
	if code, _, _ := get("&index=0&wait=1ms"); code != http.StatusOK {
		t.Errorf("a new watch after the bucket refilled answered %d", code)
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
