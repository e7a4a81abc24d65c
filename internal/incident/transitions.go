package incident

import (
	"fmt"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// FromTransitions returns the eligibility monitor's OnTransition hook that raises and clears
// incidents in l: quarantine (for the instance's owner, which owner looks up), panic per
// (capability, zone) once it has lasted the monitor's PanicIncidentAfter, and
// self-preservation.
func FromTransitions(l *Log, owner func(instanceID string) string) func(health.Transition) {
	return func(t health.Transition) {
		switch {
		case t.To == apiv1.EligibilityQuarantined:
			l.Raise(apiv1.IncidentQuarantine, t.InstanceID, owner(t.InstanceID),
				fmt.Sprintf("%s is quarantined for flapping: it left rotation too often within the flap window", t.InstanceID))
		case t.From == apiv1.EligibilityQuarantined:
			l.Clear(apiv1.IncidentQuarantine, t.InstanceID)
		case t.To == health.TransitionPanicSustained && len(t.Reasons) == 2:
			l.Raise(apiv1.IncidentPanic, t.Reasons[0]+"/"+t.Reasons[1],
				"", fmt.Sprintf("fewer than the panic threshold of %s's instances in zone %q are in rotation: discovery answers all of them", t.Reasons[0], t.Reasons[1]))
		case t.To == health.TransitionPanicOver && len(t.Reasons) == 2:
			l.Clear(apiv1.IncidentPanic, t.Reasons[0]+"/"+t.Reasons[1])
		case t.To == health.TransitionSelfPreservation:
			l.Raise(apiv1.IncidentSelfPreservation, "registry", "",
				"lease expiry stopped evicting: "+strings.Join(t.Reasons, "; ")+" (the registry is likelier cut off than the fleet dead)")
		case t.To == health.TransitionSelfPreservationOver:
			l.Clear(apiv1.IncidentSelfPreservation, "registry")
		case t.To == health.TransitionZoneOutlier && len(t.Reasons) == 3:
			capability, zone := t.Reasons[0], t.Reasons[1]
			l.Raise(apiv1.IncidentZoneOutlier, capability+"/"+zone, "", t.Reasons[2]+
				". The zone fails as a whole; nothing is evacuated automatically. If its failures are the zone's (not a bad release everywhere), evacuate it: "+
				EvacuateCommand(capability, zone))
		case t.To == health.TransitionCohortFlapping && len(t.Reasons) == 3:
			l.Raise(apiv1.IncidentCohortFlapping, t.Reasons[0]+"/"+t.Reasons[1], "", t.Reasons[2]+
				". Look for what the cohort shares (a dependency, the health check's timeout under load) before blaming its instances: docs/runbooks/eligibility.md")
		case t.To == health.TransitionCohortFlappingOver && len(t.Reasons) == 3:
			l.Clear(apiv1.IncidentCohortFlapping, t.Reasons[0]+"/"+t.Reasons[1])
		case t.To == health.TransitionZoneOutlierOver && len(t.Reasons) == 3:
			l.Clear(apiv1.IncidentZoneOutlier, t.Reasons[0]+"/"+t.Reasons[1])
		}
	}
}

// EvacuateCommand is the command that evacuates zone of capability, as an incident names it.
func EvacuateCommand(capability, zone string) string {
	return fmt.Sprintf("meshflows evacuate zone %s --capability %s --for 2h --reason 'zone outlier: incident'", zone, capability)
}
