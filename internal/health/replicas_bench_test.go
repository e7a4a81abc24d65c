package health

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSetRampClock: a follower of 100,000 instances whose slow starts have ended, and
// 1,000 still ramping, takes a new ramp clock (one per op).
func BenchmarkSetRampClock(b *testing.B) {
	m, err := NewMonitor(MonitorConfig{Engine: Config{SlowStart: 10 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	m.SetFollowing(true)
	for i := range 100_000 {
		m.Register(Instance{ID: fmt.Sprintf("old-%d", i), Zone: "z", Capabilities: []string{"c.x"}}, 1, t0)
	}
	t1 := t0.Add(time.Minute)
	m.SetRampClock(t1, t1) // their ramps ended
	for i := range 1_000 {
		m.Register(Instance{ID: fmt.Sprintf("new-%d", i), Zone: "z", Capabilities: []string{"c.x"}}, 1, t1)
	}
	m.Sync(t1, nil)
	b.ResetTimer()
	for i := range b.N {
		at := t1.Add(time.Duration(i%9000) * time.Millisecond) // within the new ones' ramp
		m.SetRampClock(at, at)
	}
}
