// Package server is the HTTP face of the registry: the route table of docs/reference/api.md's registry
// section (routes.go), one adapter that encodes JSON answers and maps typed errors to
// docs/reference/api.md's status codes and error body (respond.go), request decoding with a body limit,
// discovery answers encoded once per revision and query, ETag/304, long polls, and a
// graceful shutdown that wakes every long poll first.
package server
