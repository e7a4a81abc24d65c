// Package apiv1 holds the MeshFlows wire contract, version 1: the JSON types exchanged by the
// registry, providers, gateways and the orchestrator, the error body every component answers
// with, and the shape rules of a registration (docs/reference/api.md).
//
// The package is public and depends only on the standard library, so that provider SDKs
// and third-party gateways can import it without the server:
//
//	var req apiv1.RegisterRequest
//	if err := json.Unmarshal(body, &req); err != nil { … }
//	if err := req.Validate(); err != nil {
//		var apiErr *apiv1.Error // code INVALID_REQUEST, one detail per problem
//		errors.As(err, &apiErr)
//	}
//
// Validation here is about shape and values only; whether an identity may register a
// capability, and what the registry does with it, belong to the server.
package apiv1
