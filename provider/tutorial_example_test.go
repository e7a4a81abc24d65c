package provider_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/provider"
)

// exampleTB lets an Example use registrytest, which wants a testing.TB.
type exampleTB struct{ testing.TB }

func (*exampleTB) Helper()                   {}
func (*exampleTB) Cleanup(func())            {}
func (*exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// ExampleAgent is the provider SDK tutorial (docs/provider-tutorial.md) end to end: a
// webhook provider serves its capability, registers, is discovered, and deregisters when
// its context ends.
func ExampleAgent() {
	// A registry to register with (registrytest runs the real one on httptest; in real
	// life this is the URL of 'meshflows registry' or 'meshflows dev').
	reg := registrytest.NewServer(&exampleTB{}, registry.Config{})
	defer reg.Close()

	// 1. Serve the capability: validation of workflow steps, and invocation.
	mux := http.NewServeMux()
	mux.Handle("/v1/capabilities/", provider.NewHandler(provider.Capability{
		ID: "webhook.send",
		Validate: func(_ context.Context, req *apiv1.ValidateRequest) ([]apiv1.Diagnostic, error) {
			if !strings.Contains(string(req.Step.Request), `"url"`) {
				return []apiv1.Diagnostic{{Severity: apiv1.SeverityError, Code: "URL_REQUIRED", Message: "a url is required", Path: "request.url"}}, nil
			}
			return nil, nil
		},
		Invoke: func(_ context.Context, req *apiv1.InvokeRequest) (any, error) {
			return map[string]int{"status": 200}, nil
		},
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// 2. Say who it is and what it offers, and keep that registered.
	agent, err := provider.New(provider.Config{
		Registries: []string{reg.URL},
		Registration: apiv1.RegisterRequest{
			InstanceID: "egress-webhook-1", ServiceName: "egress-webhook", ServiceVersion: "0.1.0", Endpoint: srv.URL,
			Capabilities: []apiv1.Capability{{CapabilityID: "webhook.send", CapabilityVersion: "1.2.0",
				ContractSchemaVersion: "1.0", Provider: "webhook"}},
		},
		DrainTimeout: -1, // no gateway here to wait for
	})
	if err != nil {
		panic(err) // the registration is invalid: every problem is in the error
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	for !agent.Status().Registered {
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("registered, generation", agent.Status().Generation)

	// 3. Consumers find it by capability and semver constraint.
	disc, _ := discovery.New(discovery.Config{Registries: []string{reg.URL}, Consumer: "tutorial"})
	res, _ := disc.Capabilities(context.Background(), discovery.Query{CapabilityID: "webhook.send", Version: "^1.0"})
	for _, e := range res.Entries {
		fmt.Println("discovered", e.InstanceID, e.Provider, e.CapabilityVersion)
	}

	// 4. On shutdown, cancel the context: Run deregisters and returns.
	stop()
	fmt.Println("run ended:", <-done)
	n, _ := reg.Registry.Store().Counts()
	fmt.Println("instances left:", n)
	// Output:
	// registered, generation 1
	// discovered egress-webhook-1 webhook 1.2.0
	// run ended: <nil>
	// instances left: 0
}
