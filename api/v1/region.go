package apiv1

import "time"

// Error codes of the routing control (meshflows region).
const (
	// CodeRegionUnsafe: switching the region off would leave fewer regions on than the
	// routing control's min_regions_on, or none at all (--force never switches off the last).
	CodeRegionUnsafe = "REGION_UNSAFE"
	// CodeUnknownRegion: the routing control has never held the region (declare it with
	// `meshflows region on` first).
	CodeUnknownRegion = "UNKNOWN_REGION"
)

// Region states in the routing control.
const (
	RegionOn  = "on"
	RegionOff = "off"
)

// RoutingSignal is the routing control's document: one per routing-control cluster, every
// region's switch in it, so that the safety rules are checked in the transaction that
// changes it. A region the document does not hold counts as on for consumers.
type RoutingSignal struct {
	Regions map[string]RegionSwitch `json:"regions"`
	// MinRegionsOn: switching a region off is refused when it would leave fewer regions on
	// (0: the default, 1).
	MinRegionsOn int `json:"min_regions_on,omitempty"`
	// ChangeMinIntervalSeconds: at most one change per region per this many seconds (0: the
	// default, 30).
	ChangeMinIntervalSeconds int64 `json:"change_min_interval_seconds,omitempty"`
}

// RegionSwitch is one region's switch: its state and the last change's who, why and when.
type RegionSwitch struct {
	State  string    `json:"state"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	// ReturnedAt is when the region last went from off to on (not when it was declared):
	// a consumer that starts within the way back after it starts the way back again.
	ReturnedAt time.Time `json:"returned_at,omitzero"`
}

// RegionAudit is one routing-control action, done or refused, as kept in the cluster.
type RegionAudit struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Region string    `json:"region"`
	// Action is on, off or configure.
	Action string `json:"action"`
	Reason string `json:"reason"`
	Force  bool   `json:"force,omitempty"`
	// Outcome is done, unchanged or refused; Code and Message say why a refusal.
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// RegionStatus is what `meshflows region status -o json` prints: the signal as the routing
// control holds it, and its recent actions.
type RegionStatus struct {
	Revision int64                   `json:"revision"`
	Regions  map[string]RegionSwitch `json:"regions"`
	On       []string                `json:"on"`
	Off      []string                `json:"off"`
	MinOn    int                     `json:"min_regions_on"`
	Interval int64                   `json:"change_min_interval_seconds"`
	Audit    []RegionAudit           `json:"audit,omitempty"`
}

// GatewayRegions is the answer of GET /v1/gateway/regions: how a regional gateway sends
// requests among its regions.
type GatewayRegions struct {
	Home string `json:"home"`
	// Priority is the order regions are tried in: home first, then --region-priority.
	Priority []string   `json:"priority"`
	Signal   SignalView `json:"signal"`
	// Regions are in Priority order.
	Regions []RegionRoute `json:"regions"`
}

// SignalView is a consumer's copy of the routing control.
type SignalView struct {
	// Configured: the consumer follows a routing control (--routing-control); without
	// one every region counts as on.
	Configured bool `json:"configured"`
	// Read: the routing control answered at least once since the consumer started.
	Read     bool      `json:"read"`
	Stale    bool      `json:"stale"`
	Revision int64     `json:"revision,omitempty"`
	ReadAt   time.Time `json:"read_at,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// RegionRoute is one region as a regional consumer sees it.
type RegionRoute struct {
	Region string `json:"region"`
	On     bool   `json:"on"`
	// Share is the part of what the region would get that it gets now: 1, or a step of
	// its way back while Ramping.
	Share   float64 `json:"share"`
	Ramping bool    `json:"ramping,omitempty"`
	// Step is the ramp's step (0 for its first), StepSince when it began; Held: the step
	// is not advanced while the region is an outlier against the others.
	Step      int       `json:"step,omitempty"`
	StepSince time.Time `json:"step_since,omitzero"`
	Held      bool      `json:"held,omitempty"`
	// Requests and Errors (5xx answers) sent to the region over the outlier window.
	Requests int  `json:"requests"`
	Errors   int  `json:"errors"`
	Outlier  bool `json:"outlier,omitempty"`
	// ViewSource is fresh or snapshot (the region's registry is not answering), ViewAge
	// the view's age in seconds.
	ViewSource string `json:"view_source"`
	ViewAge    int64  `json:"view_age_seconds"`
}
