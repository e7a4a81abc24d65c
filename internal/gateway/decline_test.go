package gateway_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// closedURL is an address nothing listens on: connections to it are refused.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// TestADeclinedRequestIsNotAnswered: with a Decline in its context, a request every upstream
// of which refuses the connection is not answered, and its body can be read again; a request
// one upstream answers is served as usual; without a Decline, the refusal is a 502.
func TestADeclinedRequestIsNotAnswered(t *testing.T) {
	e := newEnv(t)
	e.register(t, "orders-1", closedURL(t), ordersRoutes...)
	e.register(t, "orders-2", closedURL(t), ordersRoutes...)
	registrytest.Until(t, "the route is served", func() bool { return e.do(t, "POST", "/orders/1", "x").status == http.StatusBadGateway })

	req := httptest.NewRequest(http.MethodPost, "/orders/1", strings.NewReader(`{"n":1}`))
	ctx, d := gateway.WithDecline(req.Context())
	rec := httptest.NewRecorder()
	e.gw.ServeHTTP(rec, req.WithContext(ctx))
	if !d.Declined || rec.Body.Len() != 0 || d.Err == nil {
		t.Fatalf("declined %v, answered %d %q, err %v", d.Declined, rec.Code, rec.Body, d.Err)
	}
	body, err := d.Body()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(body); string(b) != `{"n":1}` {
		t.Errorf("the body again: %q", b)
	}

	req = httptest.NewRequest(http.MethodPost, "/orders/1", strings.NewReader(`{"n":2}`))
	ctx, d = gateway.WithDecline(req.Context())
	rec = httptest.NewRecorder()
	e.gw.ServeHTTP(rec, req.WithContext(gateway.WithoutDecline(ctx)))
	if d.Declined || rec.Code != http.StatusBadGateway {
		t.Errorf("without a decline: declined %v, answered %d", d.Declined, rec.Code)
	}
}
