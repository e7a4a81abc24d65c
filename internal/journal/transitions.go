package journal

import (
	"encoding/json"
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
			why := strings.Join(t.Reasons, "; ")
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventSelfPreservation, Severity: apiv1.SeverityError, Subject: "registry",
				Message: "self-preservation entered: lease expiry stops evicting (" + why + ")", Attrs: map[string]any{"state": "entered", "reasons": t.Reasons}})
		case health.TransitionOutcomeDisputed:
			if len(t.Reasons) != 2 {
				return
			}
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventOutcomeDisputed, Severity: apiv1.SeverityWarning, Subject: t.InstanceID,
				Message: "outcome about " + t.InstanceID + " ignored: " + t.Reasons[1], Attrs: map[string]any{"reporter": t.Reasons[0]}})
		case health.TransitionZoneOutlier, health.TransitionZoneOutlierOver:
			if len(t.Reasons) != 3 {
				return
			}
			sev, state := apiv1.SeverityError, "outlier"
			if t.To == health.TransitionZoneOutlierOver {
				sev, state = apiv1.SeverityInfo, "over"
			}
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventZoneOutlier, Severity: sev, Subject: t.Reasons[0],
				Message: t.Reasons[2], Attrs: map[string]any{"capability_id": t.Reasons[0], "zone": t.Reasons[1], "state": state}})
		case health.TransitionSelfPreservationOver:
			why := strings.Join(t.Reasons, "; ")
			j.Append(apiv1.Event{Time: t.At, Type: apiv1.EventSelfPreservation, Severity: apiv1.SeverityInfo, Subject: "registry",
				Message: "self-preservation left: lease expiry evicts again (" + why + ")", Attrs: map[string]any{"state": "left", "reasons": t.Reasons}})
		default:
			j.appendStored(Stored{Event: apiv1.Event{Time: t.At, Type: apiv1.EventEligibility, Severity: transitionSeverity(t.To), Subject: t.InstanceID},
				deferred: &transitionEvent{id: t.InstanceID, from: t.From, to: t.To, reasons: t.Reasons}})
		}
	}
}

// transitionEvent is an instance's transition as the journal keeps it (Deferred): its
// message and attributes are written when it is read. After a restart a whole fleet ends its
// slow start within a few minutes, an event each: written at once, with a message, a map of
// attributes and their JSON, they were half of the cost of the sweeps that ended the ramps.
// The monitor never changes a verdict's reasons once made, so they are kept as they are.
type transitionEvent struct {
	id, from, to string
	reasons      []string
}

// Message writes "<id>: <from> -> <to>", then ": " and the reasons, joined by "; ", when
// there are any.
func (e *transitionEvent) Message() string {
	msg := e.id + ": " + e.from + " -> " + e.to
	if len(e.reasons) > 0 {
		msg += ": " + strings.Join(e.reasons, "; ")
	}
	return msg
}

// Attrs writes the attributes from, reasons and to (in their keys' byte order, as a map of
// them encodes).
func (e *transitionEvent) Attrs() json.RawMessage {
	var buf [256]byte
	return NewObject(buf[:]).Str("from", e.from).strs("reasons", e.reasons).Str("to", e.to).JSON()
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
