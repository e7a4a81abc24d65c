package registry

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

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

// reconnectSlots spread the backlog count over the last reconnectSlots × reconnectSlot.
const (
	reconnectSlot  = 100 * time.Millisecond
	reconnectSlots = 20
)

// reconnectCap is a token bucket over registrations with a count of the ones it shed lately:
// a shed registration is told to come back after Retry-After, the time the bucket needs to
// serve the backlog that came before it (the SDKs add as much again at random), so that a
// herd that was refused together comes back spread over that time, not at once.
type reconnectCap struct {
	rate float64
	mu   sync.Mutex
	lim  *rate.Limiter
	shed [reconnectSlots]int // by slot of reconnectSlot
	slot int64               // the slot of shed[slot % reconnectSlots]
}

func newReconnectCap(perSecond float64, burst int) *reconnectCap {
	return &reconnectCap{rate: perSecond, lim: rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))}
}

// admit takes a token at now, or says how long the caller should wait.
func (c *reconnectCap) admit(now time.Time) (bool, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lim.AllowN(now, 1) {
		return true, 0
	}
	slot := now.UnixNano() / int64(reconnectSlot)
	for s := max(c.slot+1, slot-reconnectSlots+1); s <= slot; s++ { // slots gone by are emptied
		c.shed[s%reconnectSlots] = 0
	}
	c.slot = max(c.slot, slot)
	c.shed[slot%reconnectSlots]++
	backlog := 0
	for _, n := range c.shed {
		backlog += n
	}
	wait := time.Duration(math.Ceil(float64(backlog)/c.rate)) * time.Second
	return false, max(wait, time.Second)
}

// shedRegistration answers a registration the reconnection cap refuses.
func (r *Registry) shedRegistration(wait time.Duration) error {
	r.metrics.registerFail.WithLabelValues("shed").Inc()
	return apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
		"the registry admits %g registrations a second (--reconnect-rate) and more are coming in: come back after the Retry-After, with jitter",
		r.cfg.ReconnectRate).WithRetryAfter(wait)
}
