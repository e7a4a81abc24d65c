package registry

import (
	"net/http"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// DefaultReconnectRate and DefaultReconnectBurst bound the registrations a registry accepts a
// second (--reconnect-rate, --reconnect-burst): after a restart or a failover the whole fleet
// registers again at once, and the bound keeps the registry answering while it does.
// Heartbeats of registered instances are never shed.
const (
	DefaultReconnectRate  = 5000
	DefaultReconnectBurst = 5000
)

// shedRegistration answers a registration the reconnection cap refuses.
func (r *Registry) shedRegistration(wait time.Duration) error {
	r.metrics.registerFail.WithLabelValues("shed").Inc()
	return apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
		"the registry admits %g registrations a second (--reconnect-rate) and more are coming in: come back after the Retry-After, with jitter",
		r.cfg.ReconnectRate).WithRetryAfter(wait)
}

// AdmitWatch is asked by a long poll (index given) before it is held or answered. A watch
// that holds no answer of this registry's history — another epoch (a consumer back after a
// restart or a failover), or no epoch and index 0 or past the revision — needs a whole
// answer, the costly kind: those are admitted at the reconnection rate, and the excess is
// answered 429 with a Retry-After spread over the backlog. A watch that holds an answer of
// this epoch re-arms freely, as a heartbeat is never shed.
func (r *Registry) AdmitWatch(epoch string, index int64) error {
	if r.arms == nil {
		return nil
	}
	if epoch == r.store.Epoch().ID {
		return nil
	}
	if index > 0 && epoch == "" && index <= r.revision() {
		return nil
	}
	ok, wait := r.arms.Admit(r.cfg.Now())
	if ok {
		return nil
	}
	r.metrics.watchesShed.Inc()
	return apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
		"the registry answers %g new watches a second (--reconnect-rate) and more are coming in: come back after the Retry-After, with jitter",
		r.cfg.ReconnectRate).WithRetryAfter(wait)
}
