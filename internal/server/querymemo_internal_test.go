package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// TestDiscoveryQueriesAreParsedOnce: a discovery query string that parsed is remembered, and
// its next request answers as the first did; one that failed (an unknown parameter, a bad
// version), asks for a page, is a long poll (its index moves at every revision) or is too long
// to hold is parsed every time, with the same answer every time.
func TestDiscoveryQueriesAreParsedOnce(t *testing.T) {
	reg, err := registry.New(memstore.New(nil), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(context.Background(), &apiv1.RegisterRequest{InstanceID: "j-1", ServiceName: "egress-jms",
		ServiceVersion: "0.1.3", Endpoint: "http://j-1:8080", Capabilities: []apiv1.Capability{
			{CapabilityID: "messaging.publish", CapabilityVersion: "1.2.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}); err != nil {
		t.Fatal(err)
	}
	s, err := New(reg, Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		raw    string
		status int
		held   bool
	}{
		{"a query", "capability_id=messaging.publish&version=%3E%3D1.0", http.StatusOK, true},
		{"a long poll", "capability_id=messaging.publish&index=0&wait=1s", http.StatusOK, false},
		{"an unknown parameter", "capability=messaging.publish", http.StatusBadRequest, false},
		{"a bad version", "capability_id=messaging.publish&version=banana", http.StatusBadRequest, false},
		{"a page", "capability_id=messaging.publish&limit=1", http.StatusOK, false},
		{"too long to hold", "capability_id=messaging.publish&zone=" + strings.Repeat("z", maxMemoQueryLen), http.StatusOK, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bodies [2]string
			for i := range bodies {
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/discovery/capabilities?"+tt.raw, nil))
				if rec.Code != tt.status {
					t.Fatalf("request %d: status %d, want %d: %s", i+1, rec.Code, tt.status, rec.Body)
				}
				bodies[i] = rec.Body.String()
			}
			if bodies[0] != bodies[1] {
				t.Errorf("the second answer differs from the first:\n%s\n%s", bodies[0], bodies[1])
			}
			if _, held := s.queries.load(tt.raw); held != tt.held {
				t.Errorf("held = %v, want %v", held, tt.held)
			}
		})
	}
}

// TestQueryMemoIsBounded: a flood of distinct query strings starts the memo over rather than
// growing it.
func TestQueryMemoIsBounded(t *testing.T) {
	var qm queryMemo
	d := &discoveryQuery{key: "k"}
	qm.store("first", d)
	for i := range maxMemoQueries {
		qm.store(strconv.Itoa(i), d)
	}
	if _, held := qm.load("first"); held {
		t.Error("the first query string is still held after the memo's bound was passed")
	}
	n := 0
	qm.m.Range(func(any, any) bool { n++; return true })
	if n > maxMemoQueries {
		t.Errorf("the memo holds %d query strings, over its bound of %d", n, maxMemoQueries)
	}
}
