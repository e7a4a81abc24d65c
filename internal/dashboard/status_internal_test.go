package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// TestUpstreamStatus: a component's 400 and 404 are the request's fault and pass on as they
// came; anything else (a 5xx, no answer) is the dashboard's upstream failing, 502.
func TestUpstreamStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "not a workflow"), 400},
		{fmt.Errorf("upload: %w", apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no such workflow")), 404},
		{apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "warming up"), 502},
		{errors.New("connection refused"), 502},
	} {
		if got := upstreamStatus(tc.err); got != tc.want {
			t.Errorf("upstreamStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
