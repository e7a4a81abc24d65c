package provider

import "time"

// Backoff is the retry schedule of registrations: Initial × Multiplier^attempt, at most Max,
// plus a uniform jitter in [0, Jitter).
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     time.Duration
}

// DefaultBackoff returns the registration retry schedule of the design: 100 ms, ×2, at most
// 5 min, plus 0–100 ms of jitter. (A function, so no caller can change it for everyone.)
func DefaultBackoff() Backoff {
	return Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: 5 * time.Minute, Jitter: 100 * time.Millisecond}
}

// Delay returns the wait before retry number attempt (0 for the first retry); rnd returns a
// uniform value in [0, 1).
func (b Backoff) Delay(attempt int, rnd func() float64) time.Duration {
	d := float64(b.Initial)
	for range attempt {
		d *= b.Multiplier
		if d >= float64(b.Max) {
			break
		}
	}
	wait := time.Duration(min(d, float64(b.Max)))
	if b.Jitter > 0 {
		wait += time.Duration(rnd() * float64(b.Jitter))
	}
	return wait
}

// Clock is the time the Agent waits on; tests inject one that does not sleep.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
