package messaging

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/provider"
)

// Faults make a provider misbehave on purpose, for drills and tests (meshflows
// example-provider --error-rate, --latency): each publish — over HTTP or invoked by a
// workflow — waits Latency first, and a share ErrorRate of them is answered 500.
type Faults struct {
	ErrorRate float64
	Latency   time.Duration
	// Rand draws in [0, 1) (default math/rand/v2); tests inject a fixed sequence.
	Rand func() float64
}

// Validate says what is wrong with f.
func (f Faults) Validate() error {
	if f.ErrorRate < 0 || f.ErrorRate > 1 || f.Latency < 0 {
		return fmt.Errorf("faults: error rate %g must be within 0..1 and latency %s not negative", f.ErrorRate, f.Latency)
	}
	return nil
}

// SetFaults makes the provider misbehave as f says from now on.
func (p *Provider) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Rand == nil {
		f.Rand = rand.Float64
	}
	p.faults.Store(&f)
	return nil
}

// fault applies the faults to one publish: the added latency (cut short when ctx ends), then
// an injected error or nil.
func (p *Provider) fault(ctx context.Context) error {
	f := p.faults.Load()
	if f == nil {
		return nil
	}
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if f.ErrorRate > 0 && f.Rand() < f.ErrorRate {
		p.injected.Inc()
		return apiv1.Errorf(http.StatusInternalServerError, apiv1.CodeInternal, "injected fault (--error-rate %g)", f.ErrorRate)
	}
	return nil
}

// handleFaults changes the faults at run time, from loopback only (a drill starts and ends a
// grey failure without restarting the provider): {"error_rate": 0.04, "latency": "200ms"};
// {} ends them. It answers the faults now in force.
func (p *Provider) handleFaults(w http.ResponseWriter, r *http.Request) {
	if !loopbackOnly(w, r) {
		return
	}
	var body struct {
		ErrorRate float64 `json:"error_rate"`
		Latency   string  `json:"latency"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		provider.WriteError(w, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, `want {"error_rate": 0..1, "latency": "200ms"}: %v`, err))
		return
	}
	f := Faults{ErrorRate: body.ErrorRate}
	if body.Latency != "" {
		d, err := time.ParseDuration(body.Latency)
		if err != nil {
			provider.WriteError(w, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "latency %q: %v", body.Latency, err))
			return
		}
		f.Latency = d
	}
	if err := p.SetFaults(f); err != nil {
		provider.WriteError(w, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "%v", err))
		return
	}
	provider.WriteJSON(w, http.StatusOK, map[string]any{"error_rate": f.ErrorRate, "latency": f.Latency.String()})
}

// loopbackOnly refuses (403) a request to an admin endpoint that does not come from
// loopback, and says whether it may go on.
func loopbackOnly(w http.ResponseWriter, r *http.Request) bool {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		provider.WriteError(w, apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, "%s answers loopback only", r.URL.Path))
		return false
	}
	return true
}
