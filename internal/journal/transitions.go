package journal

import (
	"fmt"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// FromTransitions returns the eligibility monitor's OnTransition hook that records every
// transition in j: an instance's state (with the reasons), a group entering or leaving panic,
// self-preservation entered or left. It only appends, so it may run under the monitor's lock.
//
// An incarnation's first verdict (out of absent) is not recorded: it is derived from the
// registration, whose event says it (attribute eligibility). Recorded, it was an event per
// registration beside that one: half of the journal's memory and of its writes to etcd while
// a fleet registers.
func FromTransitions(j *Journal) func(health.Transition) {
	return func(t health.Transition) {
		if j == nil || t.From == apiv1.EligibilityAbsent {
			return
		}
		why := strings.Join(t.Reasons, "; ")
		switch t.To {
		case health.TransitionPanic, health.TransitionPanicSustained, health.TransitionPanicOver:
			if len(t.Reasons) != 2 {
				return
			}
			capability, zone := t.Reasons[0], t.Reasons[1]
			e := apiv1.Event{Time: t.At, Type: apiv1.EventPanic, Severity: apiv1.SeverityWarning, Subject: capability,
				Attrs: map[string]any{"capability_id": capability, "zone": zone, "state": t.To}}
			switch t.To {
			case health.TransitionPanic:
				e.Message = fmt.Sprintf("%s in zone %q entered panic: too few instances in rotation, discovery answers all of them", capability, zone)
			case health.TransitionPanicSustained:
				e.Severity = apiv1.SeverityError
				e.Message = fmt.Sprintf("%s in zone %q stayed in panic: an incident is raised", capability, zone)
			default:
				e.Severity = apiv1.SeverityInfo
				e.Message = fmt.Sprintf("%s in zone %q left panic", capability, zone)
			}
			j.Append(e)
		case health.TransitionSelfPreservation:
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventSelfPreservation, Severity: apiv1.SeverityError, Subject: "registry",
				Message: "self-preservation entered: lease expiry stops evicting (" + why + ")", Attrs: map[string]any{"state": "entered", "reasons": t.Reasons}})
		case health.TransitionSelfPreservationOver:
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventSelfPreservation, Severity: apiv1.SeverityInfo, Subject: "registry",
				Message: "self-preservation left: lease expiry evicts again (" + why + ")", Attrs: map[string]any{"state": "left", "reasons": t.Reasons}})
		default:
			msg := fmt.Sprintf("%s: %s -> %s", t.InstanceID, t.From, t.To)
			if why != "" {
				msg += ": " + why
			}
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventEligibility, Severity: transitionSeverity(t.To), Subject: t.InstanceID,
				Message: msg, Attrs: map[string]any{"from": t.From, "to": t.To, "reasons": t.Reasons}})
		}
	}
}

// transitionSeverity: leaving rotation against the provider's will is a warning, quarantine
// an error; everything else is news.
func transitionSeverity(to string) string {
	switch to {
	case apiv1.EligibilityQuarantined:
		return apiv1.SeverityError
	case apiv1.EligibilityWithdrawn, apiv1.EligibilityDegraded:
		return apiv1.SeverityWarning
	default:
		return apiv1.SeverityInfo
	}
}
