// Package provider is the MeshFlows provider SDK: an Agent that keeps one instance
// registered with the registry, and HTTP handlers for the capability endpoints a provider
// serves (validate and invoke).
//
// The Agent follows the provider lifecycle of docs/architecture.md exactly: register at start, retrying
// with exponential backoff (100 ms, ×2, at most 5 min, plus 0–100 ms jitter, longer when the
// registry says Retry-After); heartbeat on the interval the registry returned; register
// again — never keep heartbeating — on 404, 410, a new registry epoch, three heartbeat
// failures in a row, or UpdateCapabilities; and deregister with its generation when it stops.
//
//	agent, err := provider.New(provider.Config{
//		Registries:   []string{"http://127.0.0.1:7400"},
//		Registration: apiv1.RegisterRequest{InstanceID: "egress-jms-1", ServiceName: "egress-jms", …},
//	})
//	if err != nil { … }
//	go agent.Run(ctx) // returns after deregistering, once ctx ends
//
// The package is public: it imports the wire types of api/v1 and nothing of the server.
package provider
