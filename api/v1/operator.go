package apiv1

import "time"

// Paths of the operator actions (admin only).
const (
	PathEvacuations = "/v1/admin/evacuations"
	PathOverrides   = "/v1/admin/overrides"
)

// Error codes of the operator actions.
const (
	// CodeEvacuationUnsafe: the evacuation would leave a capability with fewer than half of
	// its in-rotation instances, or none (force overrides it).
	CodeEvacuationUnsafe = "EVACUATION_UNSAFE"
	// CodeEvacuationExists: an evacuation of the same zone and scope holds already.
	CodeEvacuationExists = "EVACUATION_EXISTS"
	// CodeUnknownZone: no instance ever registered in the zone.
	CodeUnknownZone = "UNKNOWN_ZONE"
	// CodeOverrideUnsafe: the withdrawal would leave a pool (a capability's group in a zone,
	// a workflow step's candidates, a route's upstreams) with nothing in rotation, and the
	// pool's panic would serve the instance again; the details name the pools (force
	// overrides it).
	CodeOverrideUnsafe = "OVERRIDE_UNSAFE"
	// CodeNothingToRelease: a release of an instance with no active withdrawal and no
	// quarantine (it would record an action that changed nothing).
	CodeNothingToRelease = "NOTHING_TO_RELEASE"
)

// MaxOperatorDuration bounds an evacuation's or an override's duration.
const MaxOperatorDuration = 72 * time.Hour

// EvacuationRequest is the body of POST /v1/admin/evacuations.
type EvacuationRequest struct {
	Zone string `json:"zone"`
	// CapabilityID limits the evacuation to one capability ("" every capability of the zone).
	CapabilityID string `json:"capability_id,omitempty"`
	// Duration is how long it holds ("2h"), at most 72 h.
	Duration string `json:"duration"`
	Reason   string `json:"reason"`
	// Force evacuates even when too little would remain (the refusal is EVACUATION_UNSAFE).
	Force bool `json:"force,omitempty"`
	// Practice marks a drill: it ends by itself, and an operator's real evacuation of the
	// same zone supersedes it (outcome interrupted).
	Practice bool `json:"practice,omitempty"`
}

// ExtendRequest is the body of PATCH /v1/admin/evacuations/{id}: the new duration, from now.
type ExtendRequest struct {
	Duration string `json:"duration"`
}

// Evacuation states and outcomes.
const (
	EvacuationActive    = "active"
	EvacuationReturning = "returning"
	EvacuationHeld      = "held"
	EvacuationEnded     = "ended"

	OutcomeExpired     = "expired"
	OutcomeCancelled   = "cancelled"
	OutcomeInterrupted = "interrupted"
)

// Evacuation is one evacuation, as the operator actions answer it.
type Evacuation struct {
	ID           string    `json:"id"`
	Zone         string    `json:"zone"`
	CapabilityID string    `json:"capability_id,omitempty"`
	CreatedBy    string    `json:"created_by"`
	Reason       string    `json:"reason"`
	Force        bool      `json:"force,omitempty"`
	Practice     bool      `json:"practice,omitempty"`
	StartsAt     time.Time `json:"starts_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// State is active, returning (Step, Weight, NextStepAt), held or ended (EndedAt,
	// Outcome, EndedBy).
	State             string     `json:"state"`
	AffectedInstances int        `json:"affected_instances"`
	Return            *Return    `json:"return,omitempty"`
	EndedAt           *time.Time `json:"ended_at,omitempty"`
	EndedBy           string     `json:"ended_by,omitempty"`
	Outcome           string     `json:"outcome,omitempty"`
	// Alarmed says, for a practice run, whether anything alarmed while it held: a group of
	// a remaining zone in panic.
	Alarmed *bool    `json:"alarmed,omitempty"`
	Alarms  []string `json:"alarms,omitempty"`
	// Remaining is, per capability of the zone, its in-rotation instances outside the zone
	// when the evacuation was created (and in all).
	Remaining []Remaining `json:"remaining,omitempty"`
}

// Return is the way back of an evacuation that ended: the weight of each step, the step
// its instances are at, and when the next comes.
type Return struct {
	Steps        []int     `json:"steps"`
	DwellSeconds int64     `json:"dwell_seconds"`
	Step         int       `json:"step"`
	Weight       int       `json:"weight"`
	StepSince    time.Time `json:"step_since"`
	NextStepAt   time.Time `json:"next_step_at"`
}

// Remaining is what an evacuation leaves of one capability.
type Remaining struct {
	CapabilityID string `json:"capability_id"`
	InRotation   int    `json:"in_rotation"`
	Remaining    int    `json:"remaining"`
}

// EvacuationList is the answer of GET /v1/admin/evacuations: active and returning ones,
// then the last ended ones, newest first.
type EvacuationList struct {
	Evacuations []Evacuation `json:"evacuations"`
}

// Override actions.
const (
	OverrideWithdraw = "withdraw"
	OverrideRelease  = "release"
)

// OverrideRequest is the body of POST /v1/admin/overrides.
type OverrideRequest struct {
	InstanceID string `json:"instance_id"`
	// Action is withdraw (Duration needed) or release (ends a withdrawal, or a quarantine).
	Action   string `json:"action"`
	Duration string `json:"duration,omitempty"`
	Reason   string `json:"reason"`
	// Force withdraws even when a pool would be left with nothing in rotation (the refusal
	// is OVERRIDE_UNSAFE); the instance then stays out even when its pools panic.
	Force bool `json:"force,omitempty"`
}

// Override is one override.
type Override struct {
	ID         string     `json:"id"`
	InstanceID string     `json:"instance_id"`
	Action     string     `json:"action"`
	CreatedBy  string     `json:"created_by"`
	Reason     string     `json:"reason"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	// Force says the withdrawal was forced: the instance is kept out even in panic.
	Force bool `json:"force,omitempty"`
	// Emptied names the pools a forced withdrawal left with nothing in rotation (as
	// OVERRIDE_UNSAFE would have named them).
	Emptied []Detail `json:"emptied,omitempty"`
	// Active says a withdrawal still holds.
	Active  bool       `json:"active"`
	EndedAt *time.Time `json:"ended_at,omitempty"`
	EndedBy string     `json:"ended_by,omitempty"`
}

// OverrideList is the answer of GET /v1/admin/overrides, newest first.
type OverrideList struct {
	Overrides []Override `json:"overrides"`
}
