package testtool

import (
	"sync/atomic"
	"time"
)

// OffsetClock is the real clock moved by what Advance added: a component under test judges
// staleness on it (its Now), while its tickers and the network run in real time. Advance
// may move it back too (a negative duration).
type OffsetClock struct{ off atomic.Int64 }

// Now is the real time plus the offset.
func (c *OffsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// Advance moves the clock by d.
func (c *OffsetClock) Advance(d time.Duration) { c.off.Add(int64(d)) }
