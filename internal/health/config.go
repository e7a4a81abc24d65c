package health

import (
	"fmt"
	"time"
)

// Config holds the settings of docs/reference/eligibility.md; zero fields take the defaults.
type Config struct {
	HeartbeatInterval time.Duration // default 30 s
	LeaseTTL          time.Duration // default 90 s
	AdmitAfter        int           // consecutive ok probes to admit (default 2)
	// AdmitRate bounds the instances with a probe class admitted per second per (capability,
	// zone), with a burst of as many (default 50, at least 1); the rest wait, oldest first.
	AdmitRate      float64
	UnhealthyAfter int           // default 3; an instance's manifest may set its own
	SlowStart      time.Duration // default 30 s
	DegradedWeight int           // default 50
	PanicThreshold float64       // default 0.5
	FlapLimit      int           // withdrawals within FlapWindow that quarantine (default 3)
	FlapWindow     time.Duration // default 10 min
	Quarantine     time.Duration // first quarantine, doubling each time (default 5 min)
	QuarantineMax  time.Duration // default 1 h
	// FlapCohortShare: when more than this share of a (capability, zone) cohort, and at
	// least two of its instances, flap within one FlapWindow (enter withdrawn twice or more),
	// their withdrawals are one cohort event and quarantine none of them (default 0.3).
	FlapCohortShare float64

	// The decaying failure score (score.go): a failed or timed-out probe, or a consumer's
	// window with connect failures, adds 1; the score halves every ProbeScoreHalfLife
	// (default 60 s); a failed probe that brings it to ProbeScoreOut (default 2.5) withdraws
	// with PROBE_SCORE, and the instance comes back when its probes passed as for
	// PROBE_FAILING and the score fell under ProbeScoreIn (default 1).
	ProbeScoreHalfLife time.Duration
	ProbeScoreOut      float64
	ProbeScoreIn       float64

	OutlierMinRequests     int           // requests in an outcome for the error rate to count (default 20)
	OutlierErrorRate       float64       // error share that ejects (default 0.5)
	OutlierConnectFailures int           // connect failures in an outcome that eject (default 5)
	EjectionBase           time.Duration // k-th ejection lasts k × this (default 30 s)
	MaxEjectionPercent     int           // at most this share of a group ejected at once (default 50)

	// Relative outliers (grey failure): over OutlierWindow (default 60 s) an instance with at
	// least OutlierMinVolume requests (default 100), pooled over every reporter, is an
	// outlier when the Wilson lower bound of its error share at OutlierZ (default 3) is above
	// its peers' median share plus OutlierRelativeFloor (default 0.01) and above
	// OutlierRelativeFactor (default 3) times it, with and without its top reporter.
	OutlierWindow         time.Duration
	OutlierMinVolume      int
	OutlierZ              float64
	OutlierRelativeFloor  float64
	OutlierRelativeFactor float64

	// Latency outliers: a comparable instance (OutlierMinVolume requests over OutlierWindow)
	// whose pooled p99 over the last LatencyWindow (default 20 s, two of the gateways' 10 s
	// report windows, or OutlierWindow when shorter) is above LatencyOutlierFactor (default
	// 3) times the median p99 of its comparable peers and above that median plus
	// LatencyOutlierFloor (default 50 ms) is degraded until its pooled p99 over LatencyWindow
	// is under both again.
	LatencyOutlierFactor float64
	LatencyOutlierFloor  time.Duration
	LatencyWindow        time.Duration

	SelfPreservationEnter        float64       // renewal ratio under which expiry stops evicting (default 0.6)
	SelfPreservationExit         float64       // renewal ratio that ends the mode (default 0.8)
	SelfPreservationMinInstances int           // fewer instances never enter the mode (default 10)
	SelfPreservationMax          time.Duration // the mode ends after this at the latest (default 15 min)

	// The way back from an evacuation: weight ReturnSteps (default 10, 25, 50) each for
	// ReturnDwell (default 60 s), then serving. EvacuationMax bounds an evacuation (default
	// 72 h); EvacuationMinRemaining is the share of a capability's instances in rotation an
	// evacuation must leave unless forced (default 0.5; the registry checks it).
	ReturnSteps            []int
	ReturnDwell            time.Duration
	EvacuationMax          time.Duration
	EvacuationMinRemaining float64

	// ExternalLeases says the store expires leases itself and renewals reach other replicas
	// (the etcd store): the engine then neither evicts on lease expiry nor judges silence nor
	// enters self-preservation; an instance is present while the store holds it.
	ExternalLeases bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	orDefault(&c.HeartbeatInterval, 30*time.Second)
	orDefault(&c.LeaseTTL, 90*time.Second)
	orDefault(&c.AdmitAfter, 2)
	orDefault(&c.AdmitRate, 50)
	orDefault(&c.UnhealthyAfter, 3)
	orDefault(&c.SlowStart, 30*time.Second)
	orDefault(&c.DegradedWeight, 50)
	orDefault(&c.PanicThreshold, 0.5)
	orDefault(&c.FlapLimit, 3)
	orDefault(&c.FlapWindow, 10*time.Minute)
	orDefault(&c.Quarantine, 5*time.Minute)
	orDefault(&c.QuarantineMax, time.Hour)
	orDefault(&c.FlapCohortShare, 0.3)
	orDefault(&c.ProbeScoreHalfLife, time.Minute)
	orDefault(&c.ProbeScoreOut, 2.5)
	orDefault(&c.ProbeScoreIn, 1.0)
	orDefault(&c.OutlierMinRequests, 20)
	orDefault(&c.OutlierErrorRate, 0.5)
	orDefault(&c.OutlierConnectFailures, 5)
	orDefault(&c.EjectionBase, 30*time.Second)
	orDefault(&c.MaxEjectionPercent, 50)
	orDefault(&c.OutlierWindow, time.Minute)
	orDefault(&c.OutlierMinVolume, 100)
	orDefault(&c.OutlierZ, 3.0)
	orDefault(&c.OutlierRelativeFloor, 0.01)
	orDefault(&c.OutlierRelativeFactor, 3.0)
	orDefault(&c.LatencyOutlierFactor, 3.0)
	orDefault(&c.LatencyOutlierFloor, 50*time.Millisecond)
	orDefault(&c.LatencyWindow, min(20*time.Second, c.OutlierWindow))
	orDefault(&c.SelfPreservationEnter, 0.6)
	orDefault(&c.SelfPreservationExit, 0.8)
	orDefault(&c.SelfPreservationMinInstances, 10)
	orDefault(&c.SelfPreservationMax, 15*time.Minute)
	if len(c.ReturnSteps) == 0 {
		c.ReturnSteps = []int{10, 25, 50}
	}
	orDefault(&c.ReturnDwell, time.Minute)
	orDefault(&c.EvacuationMax, 72*time.Hour)
	orDefault(&c.EvacuationMinRemaining, 0.5)
	return c
}

// orDefault sets *p to d when it is the zero value.
func orDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	switch {
	case c.HeartbeatInterval < 0 || c.LeaseTTL < 0 || c.SlowStart < 0 || c.FlapWindow < 0 || c.Quarantine < 0 || c.QuarantineMax < 0:
		return fmt.Errorf("health config: durations must not be negative")
	case c.AdmitAfter < 0 || c.UnhealthyAfter < 0 || c.FlapLimit < 0:
		return fmt.Errorf("health config: probe counts must not be negative")
	case c.DegradedWeight < 0 || c.DegradedWeight > 100:
		return fmt.Errorf("health config: degraded_weight %d is outside 0..100", c.DegradedWeight)
	case c.OutlierErrorRate < 0 || c.OutlierErrorRate > 1 || c.MaxEjectionPercent < 0 || c.MaxEjectionPercent > 100:
		return fmt.Errorf("health config: outlier_error_rate must be within 0..1 and max_ejection_percent within 0..100")
	case c.AdmitRate != 0 && c.AdmitRate < 1:
		return fmt.Errorf("health config: admit_rate %v is under 1 a second", c.AdmitRate)
	case c.FlapCohortShare < 0 || c.FlapCohortShare > 1:
		return fmt.Errorf("health config: flap_cohort_share %v is outside 0..1", c.FlapCohortShare)
	case c.ProbeScoreHalfLife < 0 || c.ProbeScoreIn < 0 || c.ProbeScoreOut < 0 || (c.ProbeScoreOut > 0 && c.ProbeScoreIn >= c.ProbeScoreOut):
		return fmt.Errorf("health config: probe_score_half_life must not be negative and 0 < probe_score_in (%v) < probe_score_out (%v): re-entry is slower than removal", c.ProbeScoreIn, c.ProbeScoreOut)
	case c.PanicThreshold < 0 || c.PanicThreshold > 1:
		return fmt.Errorf("health config: panic_threshold %v is outside 0..1", c.PanicThreshold)
	case c.OutlierWindow < 0 || c.EjectionBase < 0 || c.OutlierMinRequests < 0 || c.OutlierConnectFailures < 0 || c.OutlierMinVolume < 0:
		return fmt.Errorf("health config: outlier_window, ejection_base, outlier_min_requests, outlier_connect_failures and outlier_min_volume must not be negative")
	case c.OutlierZ < 0 || c.OutlierRelativeFloor < 0 || c.OutlierRelativeFloor >= 1 || (c.OutlierRelativeFactor != 0 && c.OutlierRelativeFactor < 1):
		return fmt.Errorf("health config: outlier_z must not be negative, outlier_relative_floor must be within 0..1 and outlier_relative_factor at least 1")
	case c.LatencyOutlierFloor < 0 || (c.LatencyOutlierFactor != 0 && c.LatencyOutlierFactor < 1):
		return fmt.Errorf("health config: latency_outlier_floor must not be negative and latency_outlier_factor at least 1")
	case c.LatencyWindow < 0 || (c.OutlierWindow > 0 && c.LatencyWindow > c.OutlierWindow):
		return fmt.Errorf("health config: latency_window %s must not be negative nor longer than outlier_window (%s)", c.LatencyWindow, c.OutlierWindow)
	case c.ReturnDwell < 0 || c.EvacuationMax < 0 || c.EvacuationMinRemaining < 0 || c.EvacuationMinRemaining > 1:
		return fmt.Errorf("health config: return_dwell and evacuation_max must be positive, evacuation_min_remaining within 0..1")
	}
	for i, w := range c.ReturnSteps {
		if w <= 0 || w >= 100 || (i > 0 && w <= c.ReturnSteps[i-1]) {
			return fmt.Errorf("health config: return_steps %v: want rising weights within 1..99", c.ReturnSteps)
		}
	}
	return nil
}
