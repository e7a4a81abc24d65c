package server

import (
	"github.com/prometheus/client_golang/prometheus/promhttp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// routes is the whole surface of the registry API.
func (s *Server) routes() {
	s.handle("POST /v1/services/register", provider, s.register)
	s.handle("PUT /v1/services/{instance_id}/heartbeat", provider, s.heartbeat)
	s.handle("DELETE /v1/services/{instance_id}", provider, s.deregister)
	s.handle("GET /v1/services/{instance_id}/withdrawal", provider, s.withdrawal)
	s.handle("GET /v1/services", discover, s.catalog)
	s.handle("GET /v1/services/{instance_id}", discover, s.instance)
	s.handle("GET /v1/catalog/summary", discover, s.catalogSummary)
	s.handle("GET /v1/services/{instance_id}/eligibility", discover, s.eligibility)
	s.handle("POST /v1/outcomes", gateway, s.outcomes)
	s.handle("GET /v1/eligibility/timeline", discover, s.timeline)
	s.handle("GET /v1/incidents", discover, s.incidents)
	s.handle("POST /v1/incidents/{incident_id}/acknowledge", provider, s.incidentAction)
	s.handle("POST /v1/incidents/{incident_id}/resolve", provider, s.incidentAction)
	s.handle("POST /v1/incidents/{incident_id}/ignore", provider, s.incidentAction)
	s.handle("POST /v1/incidents/acknowledge", provider, s.bulkAcknowledge)
	s.handle("GET /v1/events", discover, s.events)
	s.handle("GET "+apiv1.PathMetricsHistory, discover, s.metricsHistory)
	s.handle("POST /v1/reports", provider, s.report) // a gateway's types need a gateway role: checked by the handler

	s.handle("GET /v1/discovery/capabilities", discover, s.capabilities)
	s.handle("GET /v1/discovery/routes", discover, s.discoveryRoutes)
	s.handle("GET /v1/discovery/health", discover, s.discoveryHealth)
	s.handle("POST /v1/discovery/ack", gateway, s.ack)

	s.handle("POST /v1/admin/snapshot", admin, s.snapshot)
	s.operatorRoutes()

	s.handle("GET /healthz", open, s.healthz)
	s.handle("GET /readyz", open, s.readyz)
	if s.cfg.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	// Everything else: docs/reference/api.md's 404 or 405 body.
	s.mux.HandleFunc("/", s.notRouted)
}
