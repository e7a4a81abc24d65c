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
var levelRank = map[string]int{"none": 0, "ok": 1, LevelWarmingUp: 2, "partial": 3, "panic": 4}

// LevelWarmingUp is the timeline level of a capability whose instances out of rotation have
// all not been probed yet (a fresh start): expected, and over within a second or two, so
// neither "panic" nor "partial".
const LevelWarmingUp = "warming_up"

// firstProbeGrace is how long after its registration an instance that has not been probed
// yet counts as warming up: its first probe comes within a second; one still missing after
// this is a problem, shown as such.
const firstProbeGrace = 10 * time.Second

// capSample is one capability's state at a sample.
type capSample struct {
	held                bool // it has groups
	members, inRotation int
	panic, warming      bool
}

// sample records the state of every capability at now in its timeline; moved says that
// some group's counters moved since the last sample.
//
// A sample within the bucket of the last one, with no counter moved and no group in panic,
// would record what the last one did, and trim nothing more (a bucket ages out only as a
// bucket's boundary passes): it is skipped. Walking 30,000 groups took 20 ms of each sweep
// of a million instances whose verdicts did not change.
func (m *Monitor) sample(now time.Time, moved bool) {
	start := now.Truncate(m.cfg.TimelineBucket).UTC()
	if !moved && len(m.panics) == 0 && !now.Before(m.sampledAt) && m.sampledAt.After(start) {
		return
	}
	m.sampledAt = now
	caps := m.sampleBuf // kept between sweeps: no allocation per capability per sweep
	if caps == nil {
		caps = map[string]*capSample{}
		m.sampleBuf = caps
	}
	for _, a := range caps {
		*a = capSample{}
	}
	// A group in panic only because its members have not been probed yet is warming up.
	var awaiting map[groupKey]int // out of rotation and never probed, per group in panic
	if len(m.panics) > 0 {
		awaiting = map[groupKey]int{}
		for _, v := range m.views {
			if in := v.in; in != nil && in.Probe && !in.admitted && in.troubles().lastProbe.At.IsZero() && v.state == apiv1.EligibilityUnknown &&
				sinceNanos(now, in.registeredAt) < firstProbeGrace {
				for _, g := range v.groups {
					if m.panics[g.key] {
						awaiting[g.key]++
					}
				}
			}
		}
	}
	for k, g := range m.groups {
		a := g.sample // a lookup by capability per group per sweep was a fifth of a sweep of a million views in slow start
		if a == nil {
			if a = caps[k.capability]; a == nil {
				a = &capSample{}
				caps[k.capability] = a
			}
			g.sample = a
		}
		a.held = true
		all := g.members + g.admitting // the timeline counts the never-admitted among its instances
		a.members += all
		a.inRotation += g.inRotation
		if len(m.panics) > 0 && m.panics[k] {
			if awaiting[k] == all-g.inRotation {
				a.warming = true
				continue
			}
			a.panic = true
		}
	}
	for c, a := range caps {
		if !a.held { // no group of it any more
			delete(caps, c)
			continue
		}
		level := "ok"
		switch {
		case a.members == 0:
			level = "none"
		case a.panic:
			level = "panic"
		case a.warming:
			level = LevelWarmingUp
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
		switch {
		case i == len(h):
			delete(m.timeline, c)
		case i > 0:
			m.timeline[c] = h[i:]
		}
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
