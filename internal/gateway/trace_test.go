package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/tracing"
	"github.com/meshflows/meshflows/internal/tracing/otlptest"
	"github.com/meshflows/meshflows/routing"
)

// TestARequestIsTracedIntoTheProvider: a request with a traceparent is continued by the
// gateway's server span (named by the route, not the path), an upstream client span is its
// child, and the provider receives a traceparent naming that client span.
func TestARequestIsTracedIntoTheProvider(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.URL, Component: "gateway", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer upstream.Close()
	srv := staticGateway(t, gateway.Config{Tracing: tr}, routing.StaticRoute{Path: "/orders/{id}", Methods: []string{"POST"}, Upstream: upstream.URL})
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest("POST", srv.URL+"/orders/42", nil)
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	parent := <-got
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Await(t, "the server and client spans", func(s []otlptest.Span) bool { return len(s) == 2 })
	var server, client otlptest.Span
	for _, s := range spans {
		switch s.Kind {
		case "SERVER":
			server = s
		case "CLIENT":
			client = s
		}
	}
	if server.Name != "POST /orders/{id}" || server.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || server.Parent != "00f067aa0ba902b7" ||
		server.Attrs["http.route"] != "/orders/{id}" || server.Attrs["meshflows.retries"] != "0" || server.Attrs["http.response.status_code"] != "202" {
		t.Errorf("server span %+v", server)
	}
	if client.Parent != server.SpanID || client.TraceID != server.TraceID || client.Attrs["meshflows.attempt"] != "1" {
		t.Errorf("client span %+v, server %s", client, server.SpanID)
	}
	if want := "00-" + client.TraceID + "-" + client.SpanID + "-01"; parent != want {
		t.Errorf("the provider got traceparent %q, want %q", parent, want)
	}
}

// TestTracingOffPassesTheCallersTraceOn: with tracing off the gateway makes no span, and the
// caller's traceparent reaches the provider as it was sent.
func TestTracingOffPassesTheCallersTraceOn(t *testing.T) {
	got := make(chan string, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("traceparent") }))
	defer upstream.Close()
	srv := staticGateway(t, gateway.Config{}, routing.StaticRoute{Path: "/orders", Methods: []string{"GET"}, Upstream: upstream.URL})
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest("GET", srv.URL+"/orders", nil)
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p := <-got; p != caller {
		t.Errorf("the provider got %q, want the caller's %q", p, caller)
	}
}

// TestAFailedTracedRequestIsInTheJournalWithItsTrace: a traced request the upstream answers
// 500 is reported to the journal with its trace id, one per route every 10 s.
func TestAFailedTracedRequestIsInTheJournalWithItsTrace(t *testing.T) {
	rcv := otlptest.Start(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.URL, Component: "gateway", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var sent []apiv1.ReportedEvent
	rep, err := report.New(report.Config{Reporter: "gw-1", Send: func(_ context.Context, r *apiv1.ReportRequest) error {
		sent = append(sent, r.Events...)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer upstream.Close()
	srv := staticGateway(t, gateway.Config{Tracing: tr, Reporter: rep, ID: "gw-1"}, routing.StaticRoute{Path: "/orders", Methods: []string{"GET"}, Upstream: upstream.URL})
	for range 3 {
		resp, err := http.Get(srv.URL + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if err := rep.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].Type != apiv1.EventRouteRequestFailed || sent[0].Subject != "GET /orders" || len(sent[0].Attrs["trace_id"].(string)) != 32 ||
		sent[0].Attrs["status"] != 500 {
		t.Errorf("reported %+v, want one route.request_failed with its trace", sent)
	}
}
