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
