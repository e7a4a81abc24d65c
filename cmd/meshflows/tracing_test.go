package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/tracing/otlptest"
)

// TestTracesFollowARequestAndARunIntoTheProviders runs meshflows dev with an OTLP receiver
// as its collector, sends one request through the gateway and one order-batch run, and
// checks both trees as the receiver decoded them: gateway server span → upstream client span
// → provider span, one trace; run → steps → iterations → branches → service_call → provider.
func TestTracesFollowARequestAndARunIntoTheProviders(t *testing.T) {
	rcv := otlptest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx, "--otlp-endpoint", rcv.URL)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)

	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+strconv.Itoa(base+devGatewayOffset)+"/api/messaging/jms/publish",
		strings.NewReader(`{"destination":"orders.events","payload":{"id":1}}`))
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("publish through the gateway: %d", resp.StatusCode)
	}
	resp, err = http.Post("http://127.0.0.1:"+strconv.Itoa(base+devOrchestratorOffset)+"/v1/workflows/order-batch/run", "application/json",
		strings.NewReader(`{"batch":"b1","orders":[{"id":1},{"id":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var run struct {
		Status, TraceID string
		RunID           string `json:"run_id"`
	}
	var raw map[string]any
	json.Unmarshal(body, &raw)
	run.Status, _ = raw["status"].(string)
	run.TraceID, _ = raw["trace_id"].(string)
	if run.Status != "succeeded" || len(run.TraceID) != 32 {
		t.Fatalf("the run: %s", body)
	}

	gatewayTrace := "0af7651916cd43dd8448eb211c80319c"
	spans := rcv.Await(t, "the request's three spans and the run's tree", func(s []otlptest.Span) bool {
		var request, providerSpans int
		for _, sp := range s {
			if sp.TraceID == gatewayTrace {
				request++
			}
			if sp.TraceID == run.TraceID && sp.Service == "meshflows-provider-jms" || sp.TraceID == run.TraceID && sp.Service == "meshflows-provider-rabbitmq" {
				providerSpans++
			}
		}
		return request >= 3 && providerSpans >= 4 // two orders and two announcements
	})
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	// the chain from a span to its root, as "service kind name" from the root down
	chain := func(s otlptest.Span) []string {
		var out []string
		for {
			out = append([]string{s.Service + " " + s.Kind + " " + s.Name}, out...)
			p, ok := byID[s.Parent]
			if !ok {
				return out
			}
			s = p
		}
	}
	var providerOfRequest otlptest.Span
	var runChains [][]string
	for _, s := range spans {
		switch {
		case s.TraceID == gatewayTrace && s.Service == "meshflows-provider-jms":
			providerOfRequest = s
		case s.TraceID == run.TraceID && strings.HasPrefix(s.Service, "meshflows-provider-"):
			runChains = append(runChains, chain(s))
		}
	}
	want := []string{"meshflows-gateway SERVER POST /api/messaging/jms/publish", "meshflows-gateway CLIENT POST /api/messaging/jms/publish",
		"meshflows-provider-jms SERVER POST /api/messaging/jms/publish"}
	if got := chain(providerOfRequest); strings.Join(got, " > ") != strings.Join(want, " > ") || byID[providerOfRequest.Parent].Parent == "" ||
		byID[byID[providerOfRequest.Parent].Parent].Parent != "b7ad6b7169203331" {
		t.Errorf("the request's chain:\n  %s\nwant\n  %s\n(the gateway's span a child of the caller's b7ad6b7169203331)\n%s", strings.Join(got, "\n  "), strings.Join(want, "\n  "), otlptest.Dump(spans))
	}
	run1 := "meshflows-orchestrator INTERNAL workflow.run order-batch"
	wantChains := map[string]bool{
		strings.Join([]string{run1, "meshflows-orchestrator INTERNAL step each_order", "meshflows-orchestrator INTERNAL iteration 0", "meshflows-orchestrator INTERNAL step publish_order",
			"meshflows-orchestrator CLIENT service_call messaging.publish", "meshflows-provider-jms SERVER POST /v1/capabilities/{capability_id}/invoke"}, " > "): false,
		strings.Join([]string{run1, "meshflows-orchestrator INTERNAL step each_order", "meshflows-orchestrator INTERNAL iteration 1", "meshflows-orchestrator INTERNAL step publish_order",
			"meshflows-orchestrator CLIENT service_call messaging.publish", "meshflows-provider-jms SERVER POST /v1/capabilities/{capability_id}/invoke"}, " > "): false,
		strings.Join([]string{run1, "meshflows-orchestrator INTERNAL step announce", "meshflows-orchestrator INTERNAL branch to_jms", "meshflows-orchestrator INTERNAL step announce_jms",
			"meshflows-orchestrator CLIENT service_call messaging.publish", "meshflows-provider-jms SERVER POST /v1/capabilities/{capability_id}/invoke"}, " > "): false,
		strings.Join([]string{run1, "meshflows-orchestrator INTERNAL step announce", "meshflows-orchestrator INTERNAL branch to_rabbitmq", "meshflows-orchestrator INTERNAL step announce_rabbitmq",
			"meshflows-orchestrator CLIENT service_call messaging.publish", "meshflows-provider-rabbitmq SERVER POST /v1/capabilities/{capability_id}/invoke"}, " > "): false,
	}
	for _, c := range runChains {
		k := strings.Join(c, " > ")
		if _, ok := wantChains[k]; ok {
			wantChains[k] = true
		} else {
			t.Errorf("a provider span of the run under an unexpected chain:\n  %s", strings.Join(c, "\n  "))
		}
	}
	for k, seen := range wantChains {
		if !seen {
			t.Errorf("no provider span under:\n  %s", strings.ReplaceAll(k, " > ", "\n  "))
		}
	}
	if t.Failed() {
		t.Logf("spans:\n%s", otlptest.Dump(spans))
	}
}
