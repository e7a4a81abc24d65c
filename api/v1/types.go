package apiv1

import (
	"encoding/json"
	"fmt"
	"time"
)

// Health values an instance reports about itself in a heartbeat.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded"
	HealthFailing  = "failing"
	// HealthNotReady is reported for an instance by the runtime that runs it (Kubernetes
	// readiness, through meshflows kube-sync): out of rotation with RUNTIME_NOT_READY.
	HealthNotReady = "not_ready"
)

// Eligibility verdicts (docs/reference/eligibility.md). A registry run without the eligibility engine
// answers EligibilityServing at weight 100 for every instance with a live lease.
const (
	EligibilityUnknown     = "unknown"
	EligibilitySlowStart   = "slow_start"
	EligibilityServing     = "serving"
	EligibilityDegraded    = "degraded"
	EligibilityWithdrawn   = "withdrawn"
	EligibilityQuarantined = "quarantined"
	EligibilityDraining    = "draining"
	EligibilityAbsent      = "absent"
	// EligibilityEvacuated: its zone is evacuated by an operator (out of rotation, still
	// registered and probed); EligibilityReturning: the evacuation ended and it comes back
	// at a capped weight, in steps.
	EligibilityEvacuated = "evacuated"
	EligibilityReturning = "returning"
)

// InRotation reports whether an eligibility state puts an instance in rotation.
func InRotation(eligibility string) bool {
	return eligibility == EligibilityServing || eligibility == EligibilitySlowStart || eligibility == EligibilityDegraded ||
		eligibility == EligibilityReturning
}

// Pool counts the pool a consumer picks from (a gateway route's upstreams, an orchestrator
// step's candidates) by the panic rule the registry applies to a (capability, zone): members
// are its instances but the draining and absent ones and those never admitted (unknown);
// the pool panics when fewer than the threshold of its members are in rotation, and a pool
// of never-admitted instances only (a brand-new service) is all of them, in panic.
type Pool struct {
	Members, InRotation, NeverAdmitted int
}

// Add counts one instance by its eligibility; inPanic (an entry the registry answered in
// panic) counts it in rotation. An empty eligibility (a registry without the engine) is in
// rotation.
func (p *Pool) Add(eligibility string, inPanic bool) {
	switch {
	case eligibility == "" || inPanic || InRotation(eligibility):
		p.Members++
		p.InRotation++
	case eligibility == EligibilityUnknown:
		p.NeverAdmitted++
	case eligibility != EligibilityDraining && eligibility != EligibilityAbsent && eligibility != EligibilityEvacuated:
		p.Members++ // evacuated instances are no members while the evacuation holds
	}
}

// New reports a pool of never-admitted instances only: they are the pool, served in panic.
func (p Pool) New() bool { return p.Members == 0 && p.NeverAdmitted > 0 }

// Panic reports whether the pool is in panic at threshold: every member serves (and, when
// New, every never-admitted one).
func (p Pool) Panic(threshold float64) bool {
	return p.New() || float64(p.InRotation) < threshold*float64(p.Members)
}

// Capability is one versioned capability an instance offers.
type Capability struct {
	CapabilityID          string `json:"capability_id"`
	CapabilityVersion     string `json:"capability_version"`
	ContractSchemaVersion string `json:"contract_schema_version"`
	Provider              string `json:"provider"`
	// Metadata is a free JSON object (constraints, validate_supported, priority,
	// public_paths, payload hints), kept as sent.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// RegisterRequest is the body of POST /v1/services/register.
type RegisterRequest struct {
	InstanceID     string       `json:"instance_id"`
	ServiceName    string       `json:"service_name"`
	ServiceVersion string       `json:"service_version"`
	Endpoint       string       `json:"endpoint"`
	Zone           string       `json:"zone,omitempty"`
	Capabilities   []Capability `json:"capabilities"`
	Manifest       *Manifest    `json:"manifest,omitempty"`
	// Health is the health the instance starts with, as a heartbeat reports it (ok when
	// empty): a syncer registers a runtime's not-ready endpoint not_ready, out of rotation
	// from its first instant.
	Health string `json:"health,omitempty"`
	// Readiness, when "runtime", says the runtime that runs the instance reports its
	// readiness (meshflows kube-sync registers Kubernetes endpoints so); empty otherwise. The
	// registry derives "probe" and "none" itself.
	Readiness string `json:"readiness,omitempty"`
	// Team names the team that owns the instance: it is told of the instance's defects (a
	// quarantine, an outlier ejection, a failing self-report) through the webhook the
	// registry's --owners file gives it. Empty: the identity that registers it.
	Team string `json:"team,omitempty"`
}

// Readiness values: what tells the registry an instance is ready to serve. ReadinessProbe:
// the registry probes the health endpoint its manifest declares; ReadinessRuntime: the
// runtime that runs it says (Kubernetes readiness, through kube-sync); ReadinessNone:
// nothing does — it is in rotation on its registration and heartbeats alone.
const (
	ReadinessProbe   = "probe"
	ReadinessRuntime = "runtime"
	ReadinessNone    = "none"
)

// RegisterResponse is the 200 answer to a registration.
type RegisterResponse struct {
	Accepted                 bool   `json:"accepted"`
	LeaseTTLSeconds          int64  `json:"lease_ttl_seconds"`
	HeartbeatIntervalSeconds int64  `json:"heartbeat_interval_seconds"`
	Generation               int64  `json:"generation"`
	RegistryEpoch            string `json:"registry_epoch"`
	// Warnings says what the registration got away with: fields the contract does not
	// define (a misspelled optional field is ignored, not an error).
	Warnings []Warning `json:"warnings,omitempty"`
}

// HeartbeatRequest is the body of PUT /v1/services/{instance_id}/heartbeat.
type HeartbeatRequest struct {
	Generation int64 `json:"generation"`
	// Health is ok, degraded, failing or not_ready; empty means ok.
	Health string `json:"health,omitempty"`
}

// HeartbeatResponse is the 200 answer to a heartbeat.
type HeartbeatResponse struct {
	Generation     int64     `json:"generation"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	RegistryEpoch  string    `json:"registry_epoch"`
}

// Instance is one registered instance as the catalog shows it.
type Instance struct {
	InstanceID     string `json:"instance_id"`
	ServiceName    string `json:"service_name"`
	ServiceVersion string `json:"service_version"`
	Endpoint       string `json:"endpoint"`
	Zone           string `json:"zone,omitempty"`
	// Readiness is what tells the registry the instance is ready (ReadinessProbe,
	// ReadinessRuntime or ReadinessNone).
	Readiness      string       `json:"readiness,omitempty"`
	Generation     int64        `json:"generation"`
	RegisteredAt   time.Time    `json:"registered_at"`
	LeaseExpiresAt time.Time    `json:"lease_expires_at"`
	Health         string       `json:"health"`
	Eligibility    string       `json:"eligibility"`
	Weight         int          `json:"weight"`
	Capabilities   []Capability `json:"capabilities"`
	Manifest       *Manifest    `json:"manifest,omitempty"`
	// Owner is the identity that registered the instance (empty when the registry runs open).
	Owner string `json:"owner,omitempty"`
	// Team is the team its registration named as owning it (RegisterRequest.Team).
	Team string `json:"team,omitempty"`
	// Restored is set while the instance is known only from a snapshot the registry was
	// restored from: it has not heartbeated since, and may have gone away meanwhile. A
	// consumer merging an incomplete answer keeps such an instance only if it knew it already.
	Restored bool `json:"restored,omitempty"`
}

// CatalogResponse is the answer of GET /v1/services.
type CatalogResponse struct {
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region    string     `json:"region,omitempty"`
	Revision  int64      `json:"revision"`
	Instances []Instance `json:"instances"`
	// NextPageToken, on a paged answer (limit) with more instances, asks for the next page
	// (page_token); every page of one listing is cut from the same revision.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// MaxLimit is the largest limit a listing takes: a page of the catalog or of a discovery
// answer, and the instances a catalog summary lists.
const MaxLimit = 10_000

// CatalogSummary is the answer of GET /v1/catalog/summary: what a console shows of a
// catalog of any size, counted by the registry in one pass over its records, so that a look
// at a fleet of a million instances never carries the fleet.
type CatalogSummary struct {
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region   string `json:"region,omitempty"`
	Revision int64  `json:"revision"`
	// Total counts every instance of the catalog; Matching those the filters keep
	// (service_name, capability_id, provider). Expired and ExpiringSoon count among Matching
	// the instances whose lease has ended (an instance the registry holds past its lease:
	// self-preservation, or not yet swept) or ends within expiring_within.
	Total        int `json:"total"`
	Matching     int `json:"matching"`
	Expired      int `json:"expired"`
	ExpiringSoon int `json:"expiring_soon"`
	// Providers and CapabilityIDs are every value of the catalog, sorted, whatever the
	// filters: what a filter can choose from.
	Providers     []string `json:"providers"`
	CapabilityIDs []string `json:"capability_ids"`
	// Instances are the first limit of Matching, in the catalog's order (service name, then
	// instance id), each whole.
	Instances []Instance `json:"instances"`
	// Outcomes are the outcome windows of the listed instances that reporters reported on,
	// by instance id: each one's error share beside its peers' baseline.
	Outcomes map[string]*OutcomeWindow `json:"outcomes,omitempty"`
}

// CapabilityEntry is one (instance, capability) pair in a discovery answer.
type CapabilityEntry struct {
	CapabilityID          string          `json:"capability_id"`
	CapabilityVersion     string          `json:"capability_version"`
	ContractSchemaVersion string          `json:"contract_schema_version"`
	Provider              string          `json:"provider"`
	Metadata              json.RawMessage `json:"metadata"`
	InstanceID            string          `json:"instance_id"`
	ServiceName           string          `json:"service_name"`
	ServiceVersion        string          `json:"service_version"`
	Endpoint              string          `json:"endpoint"`
	Zone                  string          `json:"zone,omitempty"`
	// Readiness is what tells the registry the instance is ready (Instance.Readiness).
	Readiness  string `json:"readiness,omitempty"`
	Generation int64  `json:"generation"`
	// LeaseExpiresAt is the lease expiry as of the answer's revision: heartbeats that change
	// nothing else do not advance the revision, so the catalog has the live value.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Health         string    `json:"health"`
	Eligibility    string    `json:"eligibility"`
	Weight         int       `json:"weight"`
	// Panic is set when fewer than the panic threshold of the instances of this
	// (capability, zone) are in rotation: the answer then holds all of them, at weight 100,
	// and consumers use them all.
	Panic bool `json:"panic,omitempty"`
	// Excluded is set on an instance an operator forced out of rotation past
	// OVERRIDE_UNSAFE: it is no member of any pool and is never used, even in panic (the
	// operator's decision wins). Answers with include=all carry it; others leave it out.
	Excluded bool `json:"excluded,omitempty"`
	// Restored: see Instance.Restored.
	Restored bool `json:"restored,omitempty"`
}

// DiscoveryResponse is the answer of GET /v1/discovery/capabilities.
type DiscoveryResponse struct {
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region   string `json:"region,omitempty"`
	Revision int64  `json:"revision"`
	// Complete is false while a registry whose state started empty is inside its warm-up
	// window: instances that are alive may be missing, so consumers must not drop endpoints.
	Complete     bool              `json:"complete"`
	Capabilities []CapabilityEntry `json:"capabilities"`
	// Removed, only while Complete is false, lists the incarnations the registry has
	// deregistered or evicted since its epoch began: a consumer that keeps entries it knew
	// before (an incomplete answer may lack live instances) drops these. An answer to a query
	// that names a service_name lists only that service's; one that names a capability_id and
	// no service, only that capability's; one that names neither, every service's. At most
	// the newest 1,000 are listed, each for a minute after it was made.
	Removed []Removal `json:"removed,omitempty"`
	// NextPageToken, on a paged answer (limit) with more entries, asks for the next page
	// (page_token); every page of one listing is cut from the same revision.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// DiscoveryDelta is the answer of a delta watch, GET /v1/discovery/capabilities with
// index=N&delta=true: what changed in the answer to the same query since the answer at
// revision N — or, with Reset, the whole answer (Capabilities and the warm-up's Removed, as
// DiscoveryResponse has them), when the registry cannot tell the changes since N (another
// epoch, a revision it holds no answer of, or one further back than the changes it keeps).
//
// A watcher applies a delta to the answer it holds at N: it drops every entry of each
// instance in Removed whose generation is at or below the one named, then puts every entry
// of Added and Updated in place of the entry with the same (instance_id, capability_id,
// provider, capability_version), and orders the result by SortCapabilityEntries. It then
// holds the answer at Revision, byte for byte but for lease_expires_at, which a delta
// carries as of the entry's last change (the catalog has the live value). Added are
// entries the answer at N did not hold, Updated those it held with another eligibility,
// weight, health, panic or restored; Removed names the instances whose entries left the
// answer, and, while Complete is false, the warm-up's removals of incarnations newer than
// the answer at N, which a watcher that merges incomplete answers drops from what it kept.
type DiscoveryDelta struct {
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region   string `json:"region,omitempty"`
	Revision int64  `json:"revision"`
	Complete bool   `json:"complete"`
	// Reset: this is the whole answer (Capabilities), not a change.
	Reset        bool              `json:"reset,omitempty"`
	Capabilities []CapabilityEntry `json:"capabilities,omitempty"`
	Added        []CapabilityEntry `json:"added,omitempty"`
	Updated      []CapabilityEntry `json:"updated,omitempty"`
	Removed      []Removal         `json:"removed,omitempty"`
}

// Removal is one incarnation a registry removed (deregistered or evicted) during its warm-up.
type Removal struct {
	InstanceID string `json:"instance_id"`
	Generation int64  `json:"generation"`
}

// ManifestEntry is one instance's manifest in a routes answer.
type ManifestEntry struct {
	InstanceID     string    `json:"instance_id"`
	ServiceName    string    `json:"service_name"`
	ServiceVersion string    `json:"service_version"`
	Endpoint       string    `json:"endpoint"`
	Generation     int64     `json:"generation"`
	Manifest       *Manifest `json:"manifest"`
	// Eligibility and Weight are the verdict on the instance; Panic says one of its
	// (capability, zone) groups is in panic, so gateways use it whatever its verdict. The
	// routes themselves are derived from every manifest: eligibility only picks upstreams.
	Eligibility string `json:"eligibility"`
	Weight      int    `json:"weight"`
	Panic       bool   `json:"panic,omitempty"`
	// Excluded: see CapabilityEntry.Excluded; gateways never send it a request.
	Excluded bool `json:"excluded,omitempty"`
	// Restored: see Instance.Restored.
	Restored bool `json:"restored,omitempty"`
}

// PublicPath is a path a capability declares public in its metadata (public_paths).
type PublicPath struct {
	Path         string `json:"path"`
	CapabilityID string `json:"capability_id"`
	Provider     string `json:"provider"`
	InstanceID   string `json:"instance_id"`
	// ServiceName is the instance's service: with the instance, the answer's order (a
	// routes delta watcher puts the paths it gets in place by it). Registries before the
	// routes delta watch do not send it.
	ServiceName string `json:"service_name,omitempty"`
	Endpoint    string `json:"endpoint"`
	Generation  int64  `json:"generation"`
}

// RoutesResponse is the answer of GET /v1/discovery/routes: the inputs from which every
// gateway derives its own routing table.
type RoutesResponse struct {
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region      string          `json:"region,omitempty"`
	Revision    int64           `json:"revision"`
	Complete    bool            `json:"complete"`
	Manifests   []ManifestEntry `json:"manifests"`
	PublicPaths []PublicPath    `json:"public_paths"`
	// Removed is DiscoveryResponse.Removed, of the route inputs (the instances with a
	// manifest or a public path): a routes view holds those alone.
	Removed []Removal `json:"removed,omitempty"`
}

// RoutesDelta is the answer of a delta watch of the routes view, GET /v1/discovery/routes
// with index=N&delta=true: the route inputs of the instances that changed since the answer
// at revision N — or, with Reset, the whole answer (Manifests, PublicPaths and the warm-up's
// Removed, as RoutesResponse has them), when the registry cannot tell the changes since N.
//
// A watcher applies a delta to the answer it holds at N (Apply): it drops the manifest and
// the public paths of each instance in Removed whose generation is at or below the one named,
// and of each instance the delta puts, then puts Manifests and PublicPaths in the answer's
// order (service_name, then instance_id; an instance's paths in the order sent). It then
// holds the answer at Revision. Removed names every instance that changed (a gone one at the
// highest generation), so a delta restates the route inputs of each, or drops them.
type RoutesDelta struct {
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region   string `json:"region,omitempty"`
	Revision int64  `json:"revision"`
	Complete bool   `json:"complete"`
	// Reset: this is the whole answer, not a change.
	Reset       bool            `json:"reset,omitempty"`
	Manifests   []ManifestEntry `json:"manifests"`
	PublicPaths []PublicPath    `json:"public_paths"`
	Removed     []Removal       `json:"removed"`
}

// HealthResponse is the answer of GET /v1/discovery/health.
type HealthResponse struct {
	// Status is "ok", or "store_unreachable" while the registry cannot reach its store
	// (StoreError says why): writes then fail with 503 STORE_UNAVAILABLE.
	Status        string `json:"status"`
	RegistryEpoch string `json:"registry_epoch"`
	// Region is the registry's region (--region), when it has one.
	Region             string `json:"region,omitempty"`
	Revision           int64  `json:"revision"`
	ActiveInstances    int    `json:"active_instances"`
	ActiveCapabilities int    `json:"active_capabilities"`
	Store              string `json:"store"`
	UptimeSeconds      int64  `json:"uptime_seconds"`
	// LeaseTTLSeconds is the lease every heartbeat renews: an instance's last heartbeat was
	// a lease before its lease_expires_at.
	LeaseTTLSeconds int64 `json:"lease_ttl_seconds,omitempty"`
	// SelfPreservation is true while lease expiry is suspended because too few renewals
	// arrive (the registry is more likely cut off than the fleet dead).
	SelfPreservation bool `json:"self_preservation"`
	// StoreError is the last error reaching the store, while it is unreachable.
	StoreError string `json:"store_error,omitempty"`
	// ZoneOutliers are the zones of a capability failing as a whole against its other zones
	// (judged every 10 s; empty when none or without the eligibility engine).
	ZoneOutliers []ZoneOutlier `json:"zone_outliers"`
	// Budgets are the withdrawal and admission budgets beside what the last window
	// measured (absent without the eligibility engine).
	Budgets *Budgets `json:"budgets,omitempty"`
}

// Budgets are the two budgets of the eligibility engine — a withdrawal within 5 s of its
// first evidence, an admission within 30 s of the registration — with the count and the
// 99th percentile of each over the last WindowSeconds (0 when none came).
type Budgets struct {
	WindowSeconds           int64   `json:"window_seconds"`
	WithdrawalBudgetSeconds float64 `json:"withdrawal_budget_seconds"`
	Withdrawals             int     `json:"withdrawals"`
	WithdrawalP99Seconds    float64 `json:"withdrawal_p99_seconds"`
	AdmissionBudgetSeconds  float64 `json:"admission_budget_seconds"`
	Admissions              int     `json:"admissions"`
	AdmissionP99Seconds     float64 `json:"admission_p99_seconds"`
}

// Over says which budgets the window's 99th percentiles exceed ("" when none).
func (b *Budgets) Over() []string {
	var out []string
	if b == nil {
		return nil
	}
	if b.Withdrawals > 0 && b.WithdrawalP99Seconds > b.WithdrawalBudgetSeconds {
		out = append(out, fmt.Sprintf("withdrawals take %.1f s at p99, over their %.0f s budget", b.WithdrawalP99Seconds, b.WithdrawalBudgetSeconds))
	}
	if b.Admissions > 0 && b.AdmissionP99Seconds > b.AdmissionBudgetSeconds {
		out = append(out, fmt.Sprintf("admissions take %.1f s at p99, over their %.0f s budget", b.AdmissionP99Seconds, b.AdmissionBudgetSeconds))
	}
	return out
}

// ZoneOutlier is one zone of a capability judged against the capability's other zones:
// its pooled outcomes over the outlier window, the median error share of the other zones
// with enough requests (Baseline, of OtherZones), and the Wilson lower bound of its share.
type ZoneOutlier struct {
	CapabilityID string  `json:"capability_id"`
	Zone         string  `json:"zone"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	ErrorShare   float64 `json:"error_share"`
	LowerBound   float64 `json:"lower_bound"`
	Baseline     float64 `json:"baseline"`
	OtherZones   int     `json:"other_zones"`
	Outlier      bool    `json:"outlier"`
}

// OutcomesRequest is the body of POST /v1/outcomes: a gateway's per-instance outcomes for
// one reporting window.
type OutcomesRequest struct {
	GatewayID string    `json:"gateway_id"`
	Outcomes  []Outcome `json:"outcomes"`
}

// Outcome is what one gateway saw of one instance incarnation in one window.
type Outcome struct {
	InstanceID      string `json:"instance_id"`
	Generation      int64  `json:"generation"`
	OK              int    `json:"ok"`
	Errors          int    `json:"errors"`
	ConnectFailures int    `json:"connect_failures"`
	// LatencyMsP99 is the 99th percentile latency of the window's requests, in
	// milliseconds (optional: 0 or absent when not measured).
	LatencyMsP99 float64 `json:"latency_ms_p99,omitempty"`
}

// OutcomesResponse is the answer of POST /v1/outcomes.
type OutcomesResponse struct {
	// Accepted counts the outcomes applied; outcomes of instances or generations the
	// registry no longer holds are ignored, not errors.
	Accepted int `json:"accepted"`
	Ignored  int `json:"ignored"`
}

// SnapshotResponse is the answer of POST /v1/admin/snapshot.
type SnapshotResponse struct {
	Path          string    `json:"path"`
	Timestamp     time.Time `json:"timestamp"`
	RegistryEpoch string    `json:"registry_epoch"`
	Revision      int64     `json:"revision"`
	Instances     int       `json:"instances"`
	Capabilities  int       `json:"capabilities"`
}

// AckRequest is the body of POST /v1/discovery/ack: a gateway reports the registry revision
// its routing table now reflects (the drain handshake). Only an identity with the gateway
// role may send it; each acknowledgement renews the gateway's place among the live ones.
type AckRequest struct {
	GatewayID     string `json:"gateway_id"`
	RegistryEpoch string `json:"registry_epoch"`
	Revision      int64  `json:"revision"`
}

// AckResponse is the answer of POST /v1/discovery/ack: how long the registry counts the
// gateway as live without another acknowledgement, and how often it should acknowledge (a
// third of that, at least a second) to stay live.
type AckResponse struct {
	GatewayTTLSeconds  int64 `json:"gateway_ttl_seconds"`
	AckIntervalSeconds int64 `json:"ack_interval_seconds"`
}

// WithdrawalResponse is the answer of GET /v1/services/{instance_id}/withdrawal: whether
// every live gateway has applied the deregistration of that incarnation.
type WithdrawalResponse struct {
	InstanceID   string `json:"instance_id"`
	Generation   int64  `json:"generation"`
	Revision     int64  `json:"revision"`
	Acknowledged bool   `json:"acknowledged"`
	// Pending names the live gateways that have not applied it yet.
	Pending []string `json:"pending"`
	// Reason says why it is not acknowledged when no gateway is pending: the registry has not
	// run long enough to have heard from every live gateway.
	Reason string `json:"reason,omitempty"`
}

// Headers of an action on an incident taken on behalf of a viewer: the console, acting with
// its own identity, names the viewer (HeaderActingFor), and says when the viewer signed in
// with the console's admin token (HeaderActingAdmin). The registry takes them only from the
// identities it was told are the console's (--console-identity).
const (
	HeaderActingFor   = "X-MeshFlows-Acting-For"
	HeaderActingAdmin = "X-MeshFlows-Acting-Admin"
)

// Incident kinds and statuses (GET /v1/incidents).
const (
	IncidentQuarantine       = "quarantine"
	IncidentPanic            = "panic"
	IncidentSelfPreservation = "self_preservation"
	// IncidentTrigger: a workflow's success rate over the last 10 minutes is below the
	// orchestrator's critical threshold (reported by the orchestrator).
	IncidentTrigger = "trigger"
	// IncidentRoute: a route has had no eligible upstream for a minute (reported by a gateway).
	IncidentRoute = "route"
	// IncidentValidation: a published workflow that validated passed no longer does — a
	// scheduled re-validation found its contract or its providers failing (reported by the
	// orchestrator; subject the workflow). It clears when the workflow validates again.
	IncidentValidation = "validation"
	// IncidentZoneOutlier: a zone of a capability fails as a whole against its other zones
	// (subject "capability/zone"); the summary names the evacuation command.
	IncidentZoneOutlier = "zone_outlier"
	// IncidentCohortFlapping: more than flap_cohort_share of a (capability, zone) cohort left
	// rotation within one flap window (subject "capability/zone") — one event, no quarantines.
	IncidentCohortFlapping = "cohort_flapping"

	IncidentOpen         = "open"
	IncidentAcknowledged = "acknowledged"
	IncidentResolved     = "resolved"
	// IncidentIgnored: someone judged the condition not worth acting on; it no longer counts
	// as open, and the condition returning counts as an occurrence, not a new incident.
	IncidentIgnored = "ignored"

	IncidentCritical = "critical"
	IncidentWarning  = "warning"
	// Deprecated: no incident has this severity (every kind is critical or warning); it
	// stays so that code naming it still builds.
	IncidentInfo = "info"
)

// Actions on an incident: POST /v1/incidents/{id}/{action}, or POST
// /v1/incidents/acknowledge for many at once.
const (
	IncidentActionAcknowledge = "acknowledge"
	IncidentActionResolve     = "resolve"
	IncidentActionIgnore      = "ignore"
)

// OwnerNotice is one notification of an instance's owner about a defect.
type OwnerNotice struct {
	At         time.Time `json:"at"`
	Owner      string    `json:"owner"`
	InstanceID string    `json:"instance_id"`
	Cause      string    `json:"cause"`
	// Delivery is webhook (its webhook answered 2xx), journal (no webhook for this owner:
	// the journal's owner.notified event is the notification) or failed (every attempt
	// refused).
	Delivery string `json:"delivery"`
	Attempts int    `json:"attempts,omitempty"`
}

// Deliveries of an OwnerNotice.
const (
	DeliveryWebhook = "webhook"
	DeliveryJournal = "journal"
	DeliveryFailed  = "failed"
)

// IncidentActionRequest is the optional body of an action on one incident.
type IncidentActionRequest struct {
	// Comment says why (at most 1,000 characters); it is kept on the incident and in the
	// event journal.
	Comment string `json:"comment,omitempty"`
}

// BulkAcknowledgeRequest acknowledges many incidents at once.
type BulkAcknowledgeRequest struct {
	IDs     []string `json:"ids"`
	Comment string   `json:"comment,omitempty"`
}

// IncidentComment is one action taken on an incident: who, when, what and why.
type IncidentComment struct {
	At      time.Time `json:"at"`
	By      string    `json:"by"`
	Action  string    `json:"action"`
	Comment string    `json:"comment,omitempty"`
}

// Incident is a condition the eligibility engine raised for people: an instance quarantined
// for flapping (raised for its owner), a (capability, zone) in panic, or the registry in
// self-preservation.
type Incident struct {
	ID string `json:"id"`
	// Kind is quarantine, panic, self_preservation, trigger or route.
	Kind string `json:"kind"`
	// Subject is the instance id, "capability_id/zone", "registry", the workflow (trigger)
	// or "METHOD pattern" (route).
	Subject string `json:"subject"`
	// Owner is the identity that registered the instance (quarantine), when known.
	Owner string `json:"owner,omitempty"`
	// Notified says who was told of it, when, and how (owner notifications).
	Notified []OwnerNotice `json:"notified,omitempty"`
	Summary  string        `json:"summary"`
	// Severity is critical, warning or info.
	Severity string `json:"severity"`
	// Status is open, acknowledged, resolved or ignored.
	Status   string    `json:"status"`
	OpenedAt time.Time `json:"opened_at"`
	// Occurrences counts how often the condition was raised while the incident stood.
	Occurrences    int        `json:"occurrences"`
	AcknowledgedAt *time.Time `json:"acknowledged_at,omitempty"`
	AcknowledgedBy string     `json:"acknowledged_by,omitempty"`
	ResolvedAt     *time.Time `json:"resolved_at,omitempty"`
	ResolvedBy     string     `json:"resolved_by,omitempty"`
	IgnoredAt      *time.Time `json:"ignored_at,omitempty"`
	IgnoredBy      string     `json:"ignored_by,omitempty"`
	// Actions lists every action taken on the incident, oldest first.
	Actions []IncidentComment `json:"actions,omitempty"`
	// TraceID is the trace of the latest failure reported with it (a trigger incident: the
	// failed run's), when the reporter traces.
	TraceID string `json:"trace_id,omitempty"`
}

// IncidentsResponse is the answer of GET /v1/incidents: newest first.
type IncidentsResponse struct {
	Incidents []Incident `json:"incidents"`
}

// TimelineBucket is one slice of a capability's health history.
type TimelineBucket struct {
	Start time.Time `json:"start"`
	// Instances is the most instances (not draining) seen in the slice; MinInRotation the
	// fewest of them in rotation.
	Instances     int `json:"instances"`
	MinInRotation int `json:"min_in_rotation"`
	// Level is the worst seen: ok (all in rotation), partial (some out), panic, or none (no
	// instances).
	Level string `json:"level"`
}

// CapabilityTimeline is the health history of one capability, oldest slice first.
type CapabilityTimeline struct {
	CapabilityID string           `json:"capability_id"`
	Buckets      []TimelineBucket `json:"buckets"`
}

// TimelineResponse is the answer of GET /v1/eligibility/timeline: the last 24 hours.
type TimelineResponse struct {
	BucketSeconds int64                `json:"bucket_seconds"`
	Capabilities  []CapabilityTimeline `json:"capabilities"`
}

// Explanation is the answer of GET /v1/services/{id}/eligibility: an instance's
// eligibility state and weight, since when, every reason with the evidence behind it, and
// its last transitions.
type Explanation struct {
	InstanceID  string              `json:"instance_id"`
	Generation  int64               `json:"generation"`
	State       string              `json:"state"`
	Weight      int                 `json:"weight"`
	Since       time.Time           `json:"since"`
	Reasons     []EligibilityReason `json:"reasons"`
	Transitions []Transition        `json:"transitions"`
	// Outcomes is what reporters saw of it over the outlier window, beside its peers'
	// baseline (absent when nothing was reported).
	Outcomes *OutcomeWindow `json:"outcomes,omitempty"`
}

// OutcomeWindow is an instance's pooled outcomes over the outlier window and the baseline
// of each of its (capability, zone) cohorts: the figures the relative-outlier rule compares.
type OutcomeWindow struct {
	WindowSeconds int     `json:"window_seconds"`
	Requests      int     `json:"requests"`
	Errors        int     `json:"errors"`
	ErrorShare    float64 `json:"error_share"`
	// LatencyMsP99 is the highest 99th percentile latency a reporter sent in the window
	// (the latency-outlier rule pools the reporters' p99s, each weighed by its requests).
	LatencyMsP99 float64           `json:"latency_ms_p99,omitempty"`
	Reporters    []ReporterOutcome `json:"reporters"`
	Cohorts      []CohortBaseline  `json:"cohorts"`
}

// ReporterOutcome is one reporter's part of an outcome window.
type ReporterOutcome struct {
	Reporter string `json:"reporter"`
	Requests int    `json:"requests"`
	Errors   int    `json:"errors"`
}

// CohortBaseline is the baseline an instance is compared with in one (capability, zone): the
// median error share of the other comparable instances (Comparable counts them; with none
// there is no baseline and Baseline is null).
type CohortBaseline struct {
	CapabilityID string   `json:"capability_id"`
	Zone         string   `json:"zone"`
	Comparable   int      `json:"comparable"`
	Baseline     *float64 `json:"baseline"`
}

// EligibilityReason is one reason of a verdict (a reason code) with its evidence.
type EligibilityReason struct {
	Code     string   `json:"code"`
	Evidence Evidence `json:"evidence"`
}

// Evidence is what a reason rests on: when it was seen, and what.
type Evidence struct {
	At     time.Time `json:"at"`
	Detail string    `json:"detail"`
}

// Transition is one change of an instance's eligibility state (or, without an instance, a
// fleet event: a panic sustained, self-preservation).
type Transition struct {
	InstanceID string    `json:"instance_id,omitempty"`
	At         time.Time `json:"at"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Reasons    []string  `json:"reasons"`
}

// RouteHealthSlice is one 5-minute slice of a route's requests at a gateway.
type RouteHealthSlice struct {
	Start    time.Time `json:"start"`
	Requests int64     `json:"requests"`
	// Failed counts the answers that were a 5xx, a connection failure or no eligible upstream.
	Failed       int64   `json:"failed"`
	Availability float64 `json:"availability"`
}

// RouteHealth is one route's last 24 hours at a gateway: slices without requests are left out.
type RouteHealth struct {
	// Route is "METHOD pattern".
	Route        string             `json:"route"`
	Requests     int64              `json:"requests"`
	Failed       int64              `json:"failed"`
	Availability float64            `json:"availability"`
	Slices       []RouteHealthSlice `json:"slices"`
}

// RouteHealthResponse is the answer of GET /v1/gateway/routes/health.
type RouteHealthResponse struct {
	SliceSeconds int64         `json:"slice_seconds"`
	Routes       []RouteHealth `json:"routes"`
}
