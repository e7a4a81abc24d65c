package health

import "fmt"

// cohortTransitions tells OnTransition about the cohorts that started or stopped flapping
// together since the last call (the cohort flap guard). Entries into withdrawn come with
// evidence as well as at ticks, so this runs after both.
func (m *Monitor) cohortTransitions() {
	for _, c := range m.engine.TakeCohortChanges() {
		m.metrics.cohortFlaps(c)
		if m.cfg.OnTransition == nil {
			continue
		}
		to := TransitionCohortFlapping
		if !c.Flapping {
			to = TransitionCohortFlappingOver
		}
		m.cfg.OnTransition(Transition{At: c.At.UTC(), To: to, Reasons: []string{c.Capability, c.Zone, c.Detail(m.engine.cfg.FlapWindow)}})
	}
}

// zoneTransition is the transition OnTransition hears for a zone outlier change.
func zoneTransition(zc ZoneChange) Transition {
	f := zc.Figures
	to := TransitionZoneOutlier
	detail := fmt.Sprintf("zone %s of %s: %d errors in %d requests (%.2f%%, lower bound %.2f%%) against the median %.2f%% of %d other zones",
		f.Zone, f.CapabilityID, f.Errors, f.Requests, 100*f.ErrorShare, 100*f.LowerBound, 100*f.Baseline, f.OtherZones)
	if !zc.Outlier {
		to = TransitionZoneOutlierOver
		detail = fmt.Sprintf("zone %s of %s is no longer a zone outlier (it was at %d errors in %d requests)", f.Zone, f.CapabilityID, f.Errors, f.Requests)
	}
	return Transition{At: zc.At.UTC(), To: to, Reasons: []string{f.CapabilityID, f.Zone, detail}}
}
