package discovery_test

import (
	"context"
	"fmt"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

func ExampleClient_Capabilities() {
	// A registry with one JMS publisher (registrytest runs the real one on httptest).
	var t exampleT
	s := registrytest.NewServer(&t, registry.Config{})
	defer s.Close()
	req := apiv1.RegisterRequest{InstanceID: "egress-jms-1", ServiceName: "egress-jms", ServiceVersion: "0.1.3",
		Endpoint: "http://127.0.0.1:7410", Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish",
			CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	s.Registry.Register(context.Background(), &req)

	c, err := discovery.New(discovery.Config{Registries: []string{s.URL}, Consumer: "example"})
	if err != nil {
		panic(err)
	}
	res, err := c.Capabilities(context.Background(), discovery.Query{CapabilityID: "messaging.publish", Version: ">=1.0 <2.0"})
	if err != nil {
		panic(err) // errors.Is(err, discovery.ErrUnavailable): nothing known, fail the call
	}
	fmt.Println(res.Source, res.State)
	for _, e := range res.Entries {
		fmt.Println(e.Provider, e.CapabilityVersion, e.Endpoint)
	}
	res, _ = c.Capabilities(context.Background(), discovery.Query{CapabilityID: "messaging.publish", Version: ">=1.0 <2.0"})
	fmt.Println(res.Source)
	// Output:
	// fresh fresh
	// jms 1.0.0 http://127.0.0.1:7410
	// cache
}
