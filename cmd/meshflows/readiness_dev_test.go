package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/freeport"
)

// TestAWarmingProviderGetsNoRequestBeforeItIsReady: a registry, a gateway, and an example
// provider warming up for 3 s as the first member of a brand-new service, with publishes
// through the gateway from the moment it starts. It registers not ready (publish when
// ready): no publish reaches it before it says it is ready (its own counter of requests
// before ready stays 0), and publishes succeed once it is. Without publish-when-ready the
// panic answer of a brand-new service would send it traffic at its registration.
func TestAWarmingProviderGetsNoRequestBeforeItIsReady(t *testing.T) {
	t.Parallel()
	regPort, gwPort, provPort := freeport.Port(t), freeport.Port(t), freeport.Port(t)
	reg := "http://127.0.0.1:" + strconv.Itoa(regPort)
	gw := "http://127.0.0.1:" + strconv.Itoa(gwPort)
	prov := "http://127.0.0.1:" + strconv.Itoa(provPort)
	startCommand(t, reg+"/healthz", "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(regPort), "--sweep-interval", "100ms", "--log-level", "error")
	startPolicyGateway(t, reg, gwPort, "path_prefixes: {egress-jms: [/api/messaging/jms]}\n")
	started := time.Now()
	startCommand(t, prov+"/metrics", "example-provider", "--kind", "jms", "--registry", reg, "--listen", "127.0.0.1:"+strconv.Itoa(provPort),
		"--warmup", "3s", "--log-level", "error")
	var first time.Duration
	for first == 0 {
		if time.Since(started) > 30*time.Second {
			t.Fatal("no publish succeeded through the gateway within 30 s of the provider's start")
		}
		resp, err := http.Post(gw+"/api/messaging/jms/publish", "application/json", strings.NewReader(`{"destination":"warm","payload":1}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				first = time.Since(started)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if before := metricValue(t, http.DefaultClient, prov+"/metrics", `meshflows_example_provider_requests_before_ready_total{kind="jms"}`); before != 0 {
		t.Errorf("%v publishes reached the provider while it warmed up, want none", before)
	}
	if first < 3*time.Second {
		t.Errorf("the first publish succeeded %s after the provider started, before its 3 s warm-up ended", first)
	}
	t.Logf("warm-up 3 s: the first publish through the gateway succeeded %s after the provider started", first.Round(10*time.Millisecond))
}
