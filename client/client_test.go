package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

func TestDo(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Query().Get("q") != "1" {
				w.WriteHeader(400)
				return
			}
			w.Write([]byte(`{"n": 7}`))
		case "/gone":
			w.WriteHeader(410)
			w.Write([]byte(`{"error":{"code":"GENERATION_MISMATCH","message":"old"}}`))
		case "/busy":
			w.Header().Set("Retry-After", now.Add(9*time.Second).Format(http.TimeFormat))
			w.WriteHeader(503)
		case "/garbage":
			w.Write([]byte(`{"n":`))
		}
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Registries: []string{srv.URL + "/"}, BearerToken: "tok", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out struct{ N int }
	if err := c.Do(ctx, client.Request{Method: "GET", Path: "/ok", Query: map[string][]string{"q": {"1"}}}, &out); err != nil || out.N != 7 {
		t.Errorf("Do(/ok) = %v, %+v", err, out)
	}
	var ae *apiv1.Error
	if err := c.Do(ctx, client.Request{Method: "GET", Path: "/gone"}, nil); !errors.As(err, &ae) || ae.Status != 410 || ae.Code != "GENERATION_MISMATCH" {
		t.Errorf("Do(/gone) = %v", err)
	}
	var ra *client.RetryAfterError
	if err := c.Do(ctx, client.Request{Method: "GET", Path: "/busy"}, nil); !errors.As(err, &ra) || ra.After != 9*time.Second || ra.Err.Status != 503 {
		t.Errorf("Do(/busy) = %v", err)
	}
	if err := c.Do(ctx, client.Request{Method: "GET", Path: "/garbage"}, &out); err == nil || errors.As(err, &ae) {
		t.Errorf("Do(/garbage) = %v, want a decode error that is not an API error", err)
	}
}

func TestFailover(t *testing.T) {
	// Port 1 refuses, as everywhere in the tests (a closed test server's port can be taken
	// again by a parallel test's listener).
	const dead = "http://127.0.0.1:1"
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{}`)) }))
	defer live.Close()
	c, _ := client.New(client.Config{Registries: []string{dead, live.URL}})
	// the first call cannot connect to the first registry: it is answered by the next at
	// once (a dashboard's first page, a CLI's only request), and the next calls start there
	if err := c.Do(context.Background(), client.Request{Method: "POST", Path: "/x", Body: []byte(`{"a":1}`)}, nil); err != nil {
		t.Fatalf("the first call, its first registry refusing connections: %v, want the next one's answer", err)
	}
	if got := c.Registry(); got != live.URL {
		t.Fatalf("Registry() = %s after a transport error, want %s", got, live.URL)
	}
	if err := c.Do(context.Background(), client.Request{Method: "GET", Path: "/x"}, nil); err != nil {
		t.Errorf("second call: %v", err)
	}
	// every registry refusing: the error, after one try each
	all, _ := client.New(client.Config{Registries: []string{dead, "http://127.0.0.1:2"}})
	if err := all.Do(context.Background(), client.Request{Method: "GET", Path: "/x"}, nil); err == nil {
		t.Error("no registry answered, and the call did not fail")
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, regs := range [][]string{nil, {"localhost:7400"}, {"ftp://x"}} {
		if _, err := client.New(client.Config{Registries: regs}); err == nil {
			t.Errorf("New(%v) succeeded", regs)
		}
	}
}

// TestCatalogSummaryAsks: CatalogSummary sends the filters, the window and the limit it is
// given, and leaves out what is zero (the registry's defaults).
func TestCatalogSummaryAsks(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.Query().Encode()
		w.Write([]byte(`{"total": 3, "matching": 1, "instances": [{"instance_id": "i-1"}]}`))
	}))
	defer srv.Close()
	c, err := client.New(client.Config{Registries: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		q    client.SummaryQuery
		want string
	}{
		{client.SummaryQuery{}, apiv1.PathCatalogSummary + "?"},
		{client.SummaryQuery{ServiceName: "s", CapabilityID: "a.b", Provider: "p", ExpiringWithin: 45 * time.Second, Limit: 500},
			apiv1.PathCatalogSummary + "?capability_id=a.b&expiring_within=45s&limit=500&provider=p&service_name=s"},
	} {
		sum, err := c.CatalogSummary(context.Background(), tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("CatalogSummary(%+v) asked %s, want %s", tc.q, got, tc.want)
		}
		if sum.Total != 3 || sum.Matching != 1 || len(sum.Instances) != 1 || sum.Instances[0].InstanceID != "i-1" {
			t.Errorf("answer read as %+v", sum)
		}
	}
}
