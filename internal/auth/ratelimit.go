package auth

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLimiters bounds the per-identity limiters kept; past it the oldest are forgotten.
const maxLimiters = 10000

// RateLimiter limits registrations per identity with a token bucket each.
type RateLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

// NewRateLimiter allows perSecond registrations per identity with bursts of burst.
func NewRateLimiter(perSecond float64, burst int, now func() time.Time) *RateLimiter {
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{limit: rate.Limit(perSecond), burst: burst, now: now, limiters: map[string]*rate.Limiter{}}
}

// Allow takes one token for identity; when none is left it returns false and how long to
// wait, in whole seconds (for Retry-After).
func (l *RateLimiter) Allow(identity string) (bool, time.Duration) {
	l.mu.Lock()
	lim := l.limiters[identity]
	if lim == nil {
		if len(l.limiters) >= maxLimiters {
			clear(l.limiters) // forgetting limiters only ever grants a fresh burst
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.limiters[identity] = lim
	}
	l.mu.Unlock()
	now := l.now()
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	d := r.DelayFrom(now)
	if d == 0 {
		return true, 0
	}
	r.CancelAt(now)
	return false, time.Duration(math.Ceil(d.Seconds())) * time.Second
}
