package messaging

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
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
