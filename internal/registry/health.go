package registry

import (
	"log/slog"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Health returns the answer of /v1/discovery/health.
func (r *Registry) Health(startedAt time.Time) apiv1.HealthResponse {
	n, c := r.store.Counts()
	out := apiv1.HealthResponse{Status: "ok", RegistryEpoch: r.store.Epoch().ID, Region: r.cfg.Region, Revision: r.revision(),
		ActiveInstances: n, ActiveCapabilities: c, Store: r.store.Name(),
		UptimeSeconds: int64(r.cfg.Now().Sub(startedAt) / time.Second), LeaseTTLSeconds: int64(r.cfg.LeaseTTL / time.Second),
		SelfPreservation: r.cfg.Eligibility != nil && r.cfg.Eligibility.SelfPreservation(), ZoneOutliers: []apiv1.ZoneOutlier{}}
	if r.cfg.Eligibility != nil {
		out.ZoneOutliers = r.cfg.Eligibility.OutlierZones()
		b := r.cfg.Eligibility.Budgets(r.cfg.Now())
		out.Budgets = &b
	}
	if err := r.storeErr.Load(); err != nil {
		out.Status, out.StoreError = "store_unreachable", (*err).Error()
	}
	return out
}

// maxReported bounds the lines reportEndpoints writes, one per registration.
const maxReported = 20

// reportEndpoints logs, once after start, the registrations the registry holds (restored
// from a snapshot or read from the shared store) whose endpoint a registration would be
// refused for today: a query, a fragment, user info, a link-local or metadata address.
// They are served as before — withdrawing them is the operator's call — and counted in
// meshflows_registry_refusable_endpoints.
func (r *Registry) reportEndpoints() {
	n := 0
	for _, rec := range r.store.Records() {
		msg := r.cfg.Endpoints.Check(rec.Endpoint)
		if msg == "" {
			continue
		}
		n++
		if n <= maxReported {
			r.cfg.Logger.Warn("a registration held breaks the endpoint rules: it is served, but would be refused if it registered again",
				slog.String("instance_id", rec.InstanceID), slog.String("endpoint", rec.Endpoint), slog.String("problem", msg))
		}
	}
	r.metrics.refusableEndpoints.Set(float64(n))
	if n > maxReported {
		r.cfg.Logger.Warn("more registrations held break the endpoint rules", slog.Int("total", n), slog.Int("logged", maxReported))
	}
}
