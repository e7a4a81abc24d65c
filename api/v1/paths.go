package apiv1

import (
	"net/url"
	"strconv"
)

// The paths of every operation of the MeshFlows servers. Clients build their requests
// with these; each server spells its own paths once more, in its route table.
const (
	// Registry.
	PathRegister             = "/v1/services/register"
	PathServices             = "/v1/services"
	PathCatalogSummary       = "/v1/catalog/summary"
	PathCapabilities         = "/v1/discovery/capabilities"
	PathDiscoveryRoutes      = "/v1/discovery/routes"
	PathDiscoveryHealth      = "/v1/discovery/health"
	PathAck                  = "/v1/discovery/ack"
	PathOutcomes             = "/v1/outcomes"
	PathTimeline             = "/v1/eligibility/timeline"
	PathIncidents            = "/v1/incidents"
	PathIncidentsAcknowledge = "/v1/incidents/acknowledge"
	PathSnapshot             = "/v1/admin/snapshot"
	PathCapabilityPrefix     = "/v1/capabilities/" // a provider's capability endpoints live below it
	PathInvalidate           = "/v1/discovery/invalidate"
	PathGatewayRoutes        = "/v1/gateway/routes"
	PathWorkflows            = "/v1/workflows"
	pathServicesSlash        = PathServices + "/"
	pathIncidentsSlash       = PathIncidents + "/"
	pathWorkflowsSlash       = PathWorkflows + "/"
	pathCapabilitiesSlash    = PathCapabilityPrefix
)

// InstancePath is /v1/services/{id}: the catalog entry of one instance, and its
// deregistration (with DeregisterQuery).
func InstancePath(id string) string { return pathServicesSlash + url.PathEscape(id) }

// HeartbeatPath is /v1/services/{id}/heartbeat.
func HeartbeatPath(id string) string { return InstancePath(id) + "/heartbeat" }

// WithdrawalPath is /v1/services/{id}/withdrawal, asked with the deregistered generation.
func WithdrawalPath(id string) string { return InstancePath(id) + "/withdrawal" }

// EligibilityPath is /v1/services/{id}/eligibility: why an instance is (not) in rotation.
func EligibilityPath(id string) string { return InstancePath(id) + "/eligibility" }

// GenerationQuery is ?generation=N, which fences a deregistration or asks a withdrawal.
func GenerationQuery(generation int64) url.Values {
	return url.Values{"generation": {strconv.FormatInt(generation, 10)}}
}

// IncidentActionPath is /v1/incidents/{id}/{action}, action "acknowledge" or "resolve".
func IncidentActionPath(id, action string) string {
	return pathIncidentsSlash + url.PathEscape(id) + "/" + action
}

// WorkflowPath is /v1/workflows/{name}; with a suffix ("validation", "validate",
// "publish", "run", "runs") one of the workflow's operations.
func WorkflowPath(name string, suffix ...string) string {
	p := pathWorkflowsSlash + url.PathEscape(name)
	for _, s := range suffix {
		p += "/" + s
	}
	return p
}

// ValidatePath is /v1/capabilities/{id}/validate on a provider.
func ValidatePath(capabilityID string) string {
	return pathCapabilitiesSlash + url.PathEscape(capabilityID) + "/validate"
}

// InvokePath is /v1/capabilities/{id}/invoke on a provider.
func InvokePath(capabilityID string) string {
	return pathCapabilitiesSlash + url.PathEscape(capabilityID) + "/invoke"
}

// PathGatewayRouteHealth is the gateway's per-route availability over 24 hours.
const PathGatewayRouteHealth = PathGatewayRoutes + "/health"

// PathGatewayRegions is a regional gateway's view of its regions: the routing control's
// signal as it holds it, each region's share (the capped way back) and view.
const PathGatewayRegions = "/v1/gateway/regions"
