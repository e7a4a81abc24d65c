package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/routing"
)

// TestStaleMeansBounded: past the stale allowance (--max-stale) without the registry, the
// dynamic routes answer 503 STALE_VIEW_EXPIRED with Retry-After, the static routes are still
// served, and the registry's return serves the dynamic routes again.
func TestStaleMeansBounded(t *testing.T) {
	e := newEnvWith(t, registry.Config{}, gateway.Config{}, func(c *discovery.Config) {
		c.StaleAllowance, c.RetryInterval = 600*time.Millisecond, 50*time.Millisecond
	})
	a := upstream(t, "a")
	e.register(t, "orders-a", a.URL, ordersRoutes...)
	registrytest.Until(t, "served", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
	e.front.down.Store(true)
	registrytest.Until(t, "the view expires", func() bool { return e.do(t, "GET", "/orders/1", "").status == 503 })
	got := e.do(t, "GET", "/orders/1", "")
	if !strings.Contains(got.body, apiv1.CodeStaleViewExpired) || got.header.Get("Retry-After") == "" || got.header.Get("X-Cache-Source") != "snapshot" {
		t.Errorf("past --max-stale: %d %s %v, want 503 STALE_VIEW_EXPIRED with Retry-After", got.status, got.body, got.header)
	}
	if got := e.do(t, "GET", "/static/x", ""); got.status != 200 {
		t.Errorf("a static route past --max-stale: %d %s, want it served", got.status, got.body)
	}
	e.front.down.Store(false)
	registrytest.Until(t, "served again", func() bool { return e.do(t, "GET", "/orders/1", "").status == 200 })
}

// TestConnectFailuresAreRetried: a refused connection sent nothing, so the request goes to
// another upstream whatever its method (a POST as well as a GET: after a SIGKILL of one
// instance, no request of any method fails); its body arrives whole.
func TestConnectFailuresAreRetried(t *testing.T) {
	e := newEnv(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // connection refused
	a := upstream(t, "a")
	e.register(t, "orders-a", a.URL, ordersRoutes...)
	e.register(t, "orders-dead", dead.URL, ordersRoutes...)
	registrytest.Until(t, "two instances in the table", func() bool {
		var r routing.RoutesAnswer
		json.Unmarshal([]byte(e.do(t, "GET", "/v1/gateway/routes", "").body), &r)
		return len(r.Routes) > 0 && len(r.Routes[0].Instances) == 2
	})
	for i := range 10 {
		if got := e.do(t, "GET", "/orders/1", ""); got.status != 200 {
			t.Fatalf("GET %d = %d %q: a refused connection must be retried on the live instance", i, got.status, got.body)
		}
	}
	for i := range 10 {
		got := e.do(t, "POST", "/orders/1", "payload")
		if got.status != 200 || !strings.HasSuffix(got.body, "payload") {
			t.Fatalf("POST %d = %d %q: a refused connection sent nothing, so a POST is retried too, its body whole", i, got.status, got.body)
		}
	}
	if got := testutil.ToFloat64(counter(t, e.prom, "meshflows_gateway_retries_total")); got < 10 {
		t.Errorf("retries_total = %v, want >= 10", got)
	}
}

// TestAdminRefusesUnknownParameters: the gateway's admin endpoints refuse a parameter they
// do not take, as the registry's do, instead of ignoring it.
func TestAdminRefusesUnknownParameters(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/v1/gateway/routes?fromat=json", "/v1/gateway/routes/health?format=csv&window=1h"} {
		got := e.do(t, "GET", path, "")
		if got.status != 400 || !strings.Contains(got.body, apiv1.CodeUnknownParameter) {
			t.Errorf("GET %s = %d %s, want 400 UNKNOWN_PARAMETER", path, got.status, got.body)
		}
	}
	if got := e.do(t, "GET", "/v1/gateway/routes/health?format=csv", ""); got.status != 200 {
		t.Errorf("a known parameter: %d %s", got.status, got.body)
	}
}
