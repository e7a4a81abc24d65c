// Package reconnect bounds how fast a server accepts the clients that come back together
// after it restarts or fails over: registrations, long-poll watches that need a whole answer,
// xDS streams. A Cap is a token bucket that also counts whom it refused lately, so that each
// refused client is told to come back after the time the bucket needs to serve those refused
// before it: a herd refused at once comes back spread over that time, not at once again.
package reconnect

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The refusals of the last slots × slot make the backlog a refused client is told to wait for.
const (
	slot  = 100 * time.Millisecond
	slots = 20
)

// Cap is a token bucket over arrivals with a count of the ones it refused lately. Its zero
// value is not usable; a nil *Cap admits everything.
type Cap struct {
	rate float64
	mu   sync.Mutex
	lim  *rate.Limiter
	shed [slots]int // refusals by slot
	at   int64      // the slot of shed[at % slots]
}

// New returns a cap admitting perSecond arrivals a second and burst at once (at least 1);
// nil when perSecond is zero or negative: no bound.
func New(perSecond float64, burst int) *Cap {
	if perSecond <= 0 {
		return nil
	}
	return &Cap{rate: perSecond, lim: rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))}
}

// Admit takes a token at now, or says how long the caller should wait: the time the bucket
// needs to serve the backlog refused before it (whole seconds, at least one), to which the
// caller adds as much again at random.
func (c *Cap) Admit(now time.Time) (bool, time.Duration) {
	if c == nil {
		return true, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lim.AllowN(now, 1) {
		return true, 0
	}
	s := now.UnixNano() / int64(slot)
	for i := max(c.at+1, s-slots+1); i <= s; i++ { // slots gone by are emptied
		c.shed[i%slots] = 0
	}
	c.at = max(c.at, s)
	c.shed[s%slots]++
	backlog := 0
	for _, n := range c.shed {
		backlog += n
	}
	wait := time.Duration(math.Ceil(float64(backlog)/c.rate)) * time.Second
	return false, max(wait, time.Second)
}
