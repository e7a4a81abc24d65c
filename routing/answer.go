package routing

import "time"

// RoutesAnswer is the body of a gateway's GET /v1/gateway/routes: the canonical table,
// where it came from ("fresh", "cache" or "snapshot" — the last-known-good served while the
// registry is away) and how old it is, and why each rejected manifest was rejected.
type RoutesAnswer struct {
	Canonical
	Source           string    `json:"source"`
	AgeSeconds       int64     `json:"age_seconds"`
	RegistryRevision int64     `json:"registry_revision"`
	RegistryEpoch    string    `json:"registry_epoch"`
	DerivedAt        time.Time `json:"derived_at"`
	// Reasons explain each rejected manifest, by instance.
	Reasons map[string]string `json:"rejection_reasons"`
	// RefusingCount is how many routes refuse requests now (503 STALE_VIEW_EXPIRED): their
	// view is older than their max_stale while the registry is away.
	RefusingCount int `json:"refusing_count"`
	// Serving is what each dynamic route sends requests to now, by "METHOD pattern": its
	// upstreams in rotation with their weights (an instance withdrawn, ejected or evacuated
	// is listed in the route's instances but not here).
	Serving map[string]map[string]int `json:"serving,omitempty"`
}

// RoutesSummary is the body of GET /v1/gateway/routes for a caller without the
// gateway_admin permission: how big the table is and where it comes from, not its routes.
type RoutesSummary struct {
	Summary          bool      `json:"summary"`
	RouteCount       int       `json:"route_count"`
	RejectedCount    int       `json:"rejected_count"`
	ConflictCount    int       `json:"conflict_count"`
	Source           string    `json:"source"`
	AgeSeconds       int64     `json:"age_seconds"`
	RegistryRevision int64     `json:"registry_revision"`
	RegistryEpoch    string    `json:"registry_epoch"`
	DerivedAt        time.Time `json:"derived_at"`
	// RefusingCount: see RoutesAnswer.RefusingCount.
	RefusingCount int `json:"refusing_count"`
	// FullTable says why the routes are not shown.
	FullTable string `json:"full_table"`
}
