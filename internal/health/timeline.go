package health

import (
	"sort"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Defaults of the health timeline.
const (
	DefaultTimelineBucket = 5 * time.Minute
	TimelineSpan          = 24 * time.Hour
)

// levelRank orders timeline levels from best to worst.
var levelRank = map[string]int{"none": 0, "ok": 1, "partial": 2, "panic": 3}

// sample records the state of every capability at now in its timeline.
func (m *Monitor) sample(now time.Time) {
	type agg struct {
		members, inRotation int
		panic               bool
	}
	caps := map[string]*agg{}
	for k := range m.groups {
		a := caps[k.capability]
		if a == nil {
			a = &agg{}
			caps[k.capability] = a
		}
		g := m.groups[k]
		a.members += g.members
		a.inRotation += g.inRotation
		a.panic = a.panic || m.panics[k]
	}
	start := now.Truncate(m.cfg.TimelineBucket).UTC()
	for c, a := range caps {
		level := "ok"
		switch {
		case a.members == 0:
			level = "none"
		case a.panic:
			level = "panic"
		case a.inRotation < a.members:
			level = "partial"
		}
		h := m.timeline[c]
		if n := len(h); n > 0 && h[n-1].Start.Equal(start) {
			b := &h[n-1]
			b.Instances = max(b.Instances, a.members)
			b.MinInRotation = min(b.MinInRotation, a.inRotation)
			if levelRank[level] > levelRank[b.Level] {
				b.Level = level
			}
			continue
		}
		m.timeline[c] = append(h, apiv1.TimelineBucket{Start: start, Instances: a.members, MinInRotation: a.inRotation, Level: level})
	}
	cut := now.Add(-TimelineSpan)
	for c, h := range m.timeline {
		i := 0
		for i < len(h) && h[i].Start.Before(cut) {
			i++
		}
		if i == len(h) {
			delete(m.timeline, c)
			continue
		}
		m.timeline[c] = h[i:]
	}
}

// Timeline returns the last 24 hours of every capability's health, by capability id.
func (m *Monitor) Timeline() apiv1.TimelineResponse {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := apiv1.TimelineResponse{BucketSeconds: int64(m.cfg.TimelineBucket / time.Second), Capabilities: []apiv1.CapabilityTimeline{}}
	for c, h := range m.timeline {
		out.Capabilities = append(out.Capabilities, apiv1.CapabilityTimeline{CapabilityID: c, Buckets: append([]apiv1.TimelineBucket(nil), h...)})
	}
	sort.Slice(out.Capabilities, func(i, j int) bool { return out.Capabilities[i].CapabilityID < out.Capabilities[j].CapabilityID })
	return out
}
