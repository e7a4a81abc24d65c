package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
)

// TestUnfilteredAnswersAreBounded: an answer without capability_id or service_name larger
// than MaxAnswerInstances (--max-answer-instances) is refused with 400 naming the paging
// parameters; paged, narrowed or as a delta watch it is answered.
func TestUnfilteredAnswersAreBounded(t *testing.T) {
	s := registrytest.NewServerWith(t, registry.Config{}, server.Config{MaxAnswerInstances: 3}, registrytest.Epoch0)
	s.Clock.Advance(registry.DefaultLeaseTTL)
	for i := range 4 {
		req := registrytest.Orders(fmt.Sprintf("o-%d", i), "http://10.0.0.1:8080")
		if _, err := s.Registry.Register(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
	}
	r := do(t, "GET", s.URL+"/v1/discovery/capabilities", "")
	if r.status != 400 {
		t.Fatalf("unfiltered, over the bound: %d %s, want 400", r.status, r.body)
	}
	if e := apiErr(t, r); e.Code != apiv1.CodeInvalidRequest || len(e.Details) != 1 || e.Details[0].Path != "limit" ||
		!strings.Contains(e.Details[0].Message, "page_token") || !strings.Contains(e.Details[0].Message, "--max-answer-instances") {
		t.Errorf("the refusal %+v does not name limit, page_token and the flag", e)
	}
	for _, ok := range []string{
		"/v1/discovery/capabilities?capability_id=orders.write",
		"/v1/discovery/capabilities?service_name=orders",
		"/v1/discovery/capabilities?limit=2",
		"/v1/discovery/capabilities?delta=true&index=0",
	} {
		if r := do(t, "GET", s.URL+ok, ""); r.status != 200 {
			t.Errorf("%s: %d %s, want 200", ok, r.status, r.body)
		}
	}
}
