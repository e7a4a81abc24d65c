package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestEvacuationReachesTheGatewayInDev: meshflows dev, plus a second jms provider in zone b;
// publishes go through the gateway in a loop while zone a is evacuated (forced: the
// rabbitmq provider has no other zone) and its evacuation
// cancelled, round after round. It asserts that once the gateway's table holds an
// evacuation's revision zone a gets nothing, and logs how long after each evacuation call
// returned the table held it (the target: 2 s at p99); no time is asserted.
func TestEvacuationReachesTheGatewayInDev(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	url := func(offset int) string { return "http://127.0.0.1:" + strconv.Itoa(base+offset) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(context.Background())
	var g errgroup.Group
	t.Cleanup(func() { stop(); g.Wait() })
	if err := startExampleProvider(pctx, &g, exampleProviderOptions{kind: "jms", zone: "b", registries: []string{url(devRegistryOffset)}},
		ln, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	zoneA, zoneB := url(devProviderOffsetJMS), "http://"+ln.Addr().String()
	count := func(provider string) int {
		resp, err := http.Get(provider + "/api/messaging/jms/messages?destination=evac")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var m struct {
			Messages []json.RawMessage `json:"messages"`
		}
		json.NewDecoder(resp.Body).Decode(&m)
		return len(m.Messages)
	}
	publish := func() {
		resp, err := http.Post(url(devGatewayOffset)+"/api/messaging/jms/publish", "application/json", bytes.NewReader([]byte(`{"destination":"evac","payload":1}`)))
		if err == nil {
			resp.Body.Close()
		}
	}
	registrytest.Until(t, "the gateway sends to both zones", func() bool {
		publish()
		return count(zoneA) > 0 && count(zoneB) > 0
	})
	post := func(path, body string) apiv1.Evacuation {
		t.Helper()
		resp, err := http.Post(url(devRegistryOffset)+path, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ev apiv1.Evacuation
		json.NewDecoder(resp.Body).Decode(&ev)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s = %d", path, resp.StatusCode)
		}
		return ev
	}
	// revision reads the registry revision an answer says it is at
	revision := func(u string) int64 {
		resp, err := http.Get(u)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var a struct {
			Revision         int64 `json:"revision"`
			RegistryRevision int64 `json:"registry_revision"`
		}
		json.NewDecoder(resp.Body).Decode(&a)
		return max(a.Revision, a.RegistryRevision)
	}
	var lags []time.Duration
	for range 5 { // the rate limit allows 10 actions at once: 5 rounds of two
		ev := post(apiv1.PathEvacuations, `{"zone":"a","duration":"10m","reason":"propagation drill","force":true}`)
		called := time.Now()
		// once the gateway's table holds the evacuation's revision, nothing goes to zone a
		rev := revision(url(devRegistryOffset) + "/v1/discovery/health")
		registrytest.Until(t, "the gateway's table holds the evacuation", func() bool {
			return revision(url(devGatewayOffset)+"/v1/gateway/routes") >= rev
		})
		lags = append(lags, time.Since(called))
		before := count(zoneA)
		for range 30 {
			publish()
		}
		if n := count(zoneA); n != before {
			t.Errorf("%d of 30 publishes reached the evacuated zone after the gateway's table held the evacuation", n-before)
		}
		req, _ := http.NewRequest(http.MethodDelete, url(devRegistryOffset)+apiv1.PathEvacuations+"/"+ev.ID, nil)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
			t.Fatalf("cancel: %v", err)
		} else {
			resp.Body.Close()
		}
		time.Sleep(200 * time.Millisecond) // the way back starts: zone a takes a share again
	}
	slices.Sort(lags)
	t.Logf("from the evacuation call's return to the gateway's table holding it, over %d rounds: p50 %s, max %s", len(lags), lags[len(lags)/2], lags[len(lags)-1])
}
