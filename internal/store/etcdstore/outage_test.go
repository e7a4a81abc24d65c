package etcdstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/etcdstore"
)

// TestWritesFailFastWhileEtcdIsAway stops etcd under a registry: a registration must fail
// within the store timeout with 503 STORE_UNAVAILABLE and Retry-After (it used to hang 42 s,
// then succeed), and /v1/discovery/health must say the store is unreachable (it said ok).
func TestWritesFailFastWhileEtcdIsAway(t *testing.T) {
	cli, stopEtcd := startEtcdServer(t)
	s, err := etcdstore.New(context.Background(), etcdstore.Config{Client: cli, Prefix: "/outage/", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(s, registry.Config{StoreTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx) }() // runs the store too
	// etcd's election resigns with the client's own context when cancelled mid-campaign:
	// with etcd away, only closing the client ends it (as the registry command does).
	t.Cleanup(func() { cancel(); cli.Close(); <-done })
	srv, err := server.New(reg, server.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	body := func(id string) string {
		return `{"instance_id":"` + id + `","service_name":"svc","service_version":"1.0.0","endpoint":"http://` + id + `",
			"capabilities":[{"capability_id":"a.b","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"p"}]}`
	}
	health := func() (h apiv1.HealthResponse) {
		resp, err := http.Get(hs.URL + "/v1/discovery/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&h)
		return h
	}
	resp, err := http.Post(hs.URL+"/v1/services/register", "application/json", strings.NewReader(body("up-1")))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("register with etcd up: %v %v", resp, err)
	}
	var up apiv1.RegisterResponse
	json.NewDecoder(resp.Body).Decode(&up)
	resp.Body.Close()
	if h := health(); h.Status != "ok" {
		t.Fatalf("health with etcd up: %+v", h)
	}

	stopEtcd()
	// The store timeout (500 ms) is what ends the write: the answer says so, and the cause is
	// its deadline (the client's 30 s only ends a broken test).
	resp, err = (&http.Client{Timeout: 30 * time.Second}).Post(hs.URL+"/v1/services/register", "application/json", strings.NewReader(body("down-1")))
	if err != nil {
		t.Fatal(err)
	}
	var e apiv1.ErrorBody
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || e.Error == nil || e.Error.Code != apiv1.CodeStoreUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("register with etcd away: %d %+v Retry-After %q; want 503 STORE_UNAVAILABLE with Retry-After", resp.StatusCode, e.Error, resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(e.Error.Message, "within the store timeout of 500ms") || !strings.Contains(e.Error.Message, "deadline exceeded") {
		t.Fatalf("register with etcd away: %q, want the store timeout's deadline as the cause", e.Error.Message)
	}
	if _, err := reg.Heartbeat(context.Background(), "up-1", &apiv1.HeartbeatRequest{Generation: up.Generation}); !errors.Is(err, registry.ErrStoreUnavailable) {
		t.Errorf("heartbeat with etcd away: %v, want ErrStoreUnavailable", err)
	}
	if h := health(); h.Status != "store_unreachable" || h.StoreError == "" {
		t.Fatalf("health with etcd away: %+v, want store_unreachable with the error", h)
	}
}
