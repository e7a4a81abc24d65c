package notify

import (
	"slices"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// Instance says what a notification names of an instance: its owner (the team its
// registration named, or the identity that registered it), service and zone.
type Instance struct {
	Owner, Service, Zone string
}

// FromTransitions returns the eligibility monitor's OnTransition hook that queues a
// notification for each owner defect an instance enters: quarantined (FLAPPING), withdrawn as a
// relative outlier (OUTLIER_RELATIVE), degraded as a latency outlier (OUTLIER_LATENCY),
// withdrawn on its own failing self-report (SELF_REPORTED_FAILING). lookup names the
// instance's owner; incident finds the incident raised for it, if any (a quarantine's). It
// only queues, so it may run under the monitor's lock — after the incident hook, so that a
// quarantine's incident exists.
func FromTransitions(n *Notifier, lookup func(id string) Instance, incident func(kind, subject string) (string, bool)) func(health.Transition) {
	return func(t health.Transition) {
		if n == nil || t.InstanceID == "" || t.From == t.To {
			return
		}
		cause := defect(t)
		if cause == "" {
			return
		}
		in := lookup(t.InstanceID)
		nt := Notice{At: t.At, Owner: in.Owner, InstanceID: t.InstanceID, Service: in.Service, Zone: in.Zone, Cause: cause,
			State: t.To, Reasons: slices.Clone(t.Reasons),
			Evidence: "GET /v1/services/" + t.InstanceID + "/eligibility explains the verdict with its evidence; meshflows describe instance " + t.InstanceID}
		if cause == health.ReasonFlapping && incident != nil {
			if id, ok := incident(apiv1.IncidentQuarantine, t.InstanceID); ok {
				nt.Incident = &IncidentRef{ID: id, Kind: apiv1.IncidentQuarantine, Path: incidentPath + id}
			}
		}
		n.Notify(nt)
	}
}

// defect is the owner defect a transition enters ("" for none).
func defect(t health.Transition) string {
	switch {
	case t.To == apiv1.EligibilityQuarantined:
		return health.ReasonFlapping
	case t.To == apiv1.EligibilityWithdrawn && slices.Contains(t.Reasons, health.ReasonOutlierRelative):
		return health.ReasonOutlierRelative
	case t.To == apiv1.EligibilityDegraded && slices.Contains(t.Reasons, health.ReasonOutlierLatency):
		return health.ReasonOutlierLatency
	case t.To == apiv1.EligibilityWithdrawn && slices.Contains(t.Reasons, health.ReasonSelfReportedFailing):
		return health.ReasonSelfReportedFailing
	}
	return ""
}
