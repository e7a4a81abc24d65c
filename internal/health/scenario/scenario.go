package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/meshflows/meshflows/internal/health"
)

// Scenario is an executable scenario of the eligibility rules (docs/reference/eligibility.md): instances, timestamped evidence and
// the answers expected at given instants.
type Scenario struct {
	Name        string           `json:"name"`
	Description string           `json:"description,omitempty"`
	Config      map[string]any   `json:"config"`
	Instances   []Instance       `json:"instances"`
	Events      []Event          `json:"events"`
	Expect      []map[string]any `json:"expect"`
	config      health.Config
	offsets     map[*Event]time.Duration
}

// Instance declares one instance of a scenario.
type Instance struct {
	ID             string   `json:"id"`
	Zone           string   `json:"zone"`
	Capabilities   []string `json:"capabilities"`
	Probe          bool     `json:"probe"`
	UnhealthyAfter int      `json:"unhealthy_after,omitempty"`
}

// Event is one event of a scenario; T is an offset from its start ("10.5s").
type Event struct {
	T      string `json:"t"`
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Health string `json:"health,omitempty"`
	Result string `json:"result,omitempty"`

	OK              int `json:"ok,omitempty"`
	Errors          int `json:"errors,omitempty"`
	ConnectFailures int `json:"connect_failures,omitempty"`
	// LatencyMsP99 is the outcome window's 99th percentile latency in milliseconds.
	LatencyMsP99 float64 `json:"latency_ms_p99,omitempty"`
	// Reporter names who reported an outcome (default "gw").
	Reporter string `json:"reporter,omitempty"`

	// Operator actions: an override of ID (action withdraw or release, until an offset
	// from the event), an evacuation of a zone (of one capability, or all) until an offset
	// from the event, and the end of one.
	Action string `json:"action,omitempty"`
	Until  string `json:"until,omitempty"`
	// Force, on a withdraw override: the operator forced it past OVERRIDE_UNSAFE; the
	// instance stays out even in panic.
	Force      bool   `json:"force,omitempty"`
	Evacuation string `json:"evacuation,omitempty"`
	Zone       string `json:"zone,omitempty"`
	Capability string `json:"capability,omitempty"`
}

// scenarioTick is how often the scenario runner ticks the engine, as a registry would.
const scenarioTick = 100 * time.Millisecond

// Parse decodes and checks a scenario file.
func Parse(raw []byte) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	cfg, err := scenarioConfig(s.Config)
	if err != nil {
		return nil, err
	}
	s.config = cfg
	ids := map[string]bool{}
	for _, in := range s.Instances {
		if in.ID == "" || ids[in.ID] {
			return nil, fmt.Errorf("scenario: instance id %q is empty or repeated", in.ID)
		}
		ids[in.ID] = true
	}
	s.offsets = map[*Event]time.Duration{}
	for i := range s.Events {
		ev := &s.Events[i]
		d, err := offset(ev.T)
		if err != nil {
			return nil, fmt.Errorf("scenario: events[%d]: %w", i, err)
		}
		switch ev.Kind {
		case health.KindRegistered, health.KindHeartbeat, health.KindDeregistered, health.KindProbe, health.KindOutcome:
			if !ids[ev.ID] {
				return nil, fmt.Errorf("scenario: events[%d]: unknown instance %q", i, ev.ID)
			}
		case health.KindOverride:
			if !ids[ev.ID] {
				return nil, fmt.Errorf("scenario: events[%d]: unknown instance %q", i, ev.ID)
			}
			if ev.Action == health.ActionWithdraw {
				if _, err := untilOf(ev.Until); err != nil {
					return nil, fmt.Errorf("scenario: events[%d]: %w", i, err)
				}
			}
		case health.KindEvacuate:
			if ev.Evacuation == "" || ev.Zone == "" {
				return nil, fmt.Errorf("scenario: events[%d]: an evacuate event needs evacuation and zone", i)
			}
			if _, err := untilOf(ev.Until); err != nil {
				return nil, fmt.Errorf("scenario: events[%d]: %w", i, err)
			}
		case health.KindEvacuationEnded:
			if ev.Evacuation == "" {
				return nil, fmt.Errorf("scenario: events[%d]: an evacuation_ended event needs evacuation", i)
			}
		default:
			return nil, fmt.Errorf("scenario: events[%d]: unknown kind %q", i, ev.Kind)
		}
		s.offsets[ev] = d
	}
	for i, x := range s.Expect {
		if _, err := offsetOf(x); err != nil {
			return nil, fmt.Errorf("scenario: expect[%d]: %w", i, err)
		}
		_, hasID := x["id"].(string)
		_, hasCap := x["capability"].(string)
		_, hasSP := x["self_preservation"]
		if n := btoi(hasID) + btoi(hasCap) + btoi(hasSP); n != 1 {
			return nil, fmt.Errorf("scenario: expect[%d]: ask about one instance (id), one group (capability, zone) or self_preservation", i)
		}
	}
	return &s, nil
}

// untilOf reads an event's until: a positive duration after the event.
func untilOf(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("until %q is not a positive duration", s)
	}
	return d, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// maxScenarioTime bounds a scenario's instants, so that replaying it stays cheap.
const maxScenarioTime = 6 * time.Hour

func offset(t string) (time.Duration, error) {
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 || d > maxScenarioTime {
		return 0, fmt.Errorf("t %q is not a duration within 0..%s", t, maxScenarioTime)
	}
	return d, nil
}

func offsetOf(x map[string]any) (time.Duration, error) {
	t, _ := x["t"].(string)
	return offset(t)
}

// scenarioConfig reads a scenario's config block; settings of rules the engine lacks are refused.
func scenarioConfig(m map[string]any) (health.Config, error) {
	var c health.Config
	for k, v := range m {
		var err error
		switch k {
		case "heartbeat_interval":
			c.HeartbeatInterval, err = durationSetting(v)
		case "lease_ttl":
			c.LeaseTTL, err = durationSetting(v)
		case "slow_start":
			c.SlowStart, err = durationSetting(v)
		case "admit_after":
			c.AdmitAfter, err = intSetting(v)
		case "unhealthy_after":
			c.UnhealthyAfter, err = intSetting(v)
		case "degraded_weight":
			c.DegradedWeight, err = intSetting(v)
		case "flap_limit":
			c.FlapLimit, err = intSetting(v)
		case "flap_window":
			c.FlapWindow, err = durationSetting(v)
		case "quarantine":
			c.Quarantine, err = durationSetting(v)
		case "quarantine_max":
			c.QuarantineMax, err = durationSetting(v)
		case "outlier_min_requests":
			c.OutlierMinRequests, err = intSetting(v)
		case "outlier_connect_failures":
			c.OutlierConnectFailures, err = intSetting(v)
		case "max_ejection_percent":
			c.MaxEjectionPercent, err = intSetting(v)
		case "ejection_base":
			c.EjectionBase, err = durationSetting(v)
		case "outlier_error_rate":
			f, ok := v.(float64)
			if !ok {
				err = fmt.Errorf("want a number")
			}
			c.OutlierErrorRate = f
		case "self_preservation_min_instances":
			c.SelfPreservationMinInstances, err = intSetting(v)
		case "self_preservation_max":
			c.SelfPreservationMax, err = durationSetting(v)
		case "self_preservation_enter", "self_preservation_exit":
			f, ok := v.(float64)
			if !ok || f <= 0 || f > 1 {
				err = fmt.Errorf("want a number within 0..1")
			}
			if k == "self_preservation_enter" {
				c.SelfPreservationEnter = f
			} else {
				c.SelfPreservationExit = f
			}
		case "outlier_window":
			c.OutlierWindow, err = durationSetting(v)
		case "outlier_min_volume":
			c.OutlierMinVolume, err = intSetting(v)
		case "outlier_z", "outlier_relative_floor", "outlier_relative_factor", "latency_outlier_factor":
			f, ok := v.(float64)
			if !ok || f <= 0 {
				err = fmt.Errorf("want a positive number")
			}
			switch k {
			case "outlier_z":
				c.OutlierZ = f
			case "outlier_relative_floor":
				c.OutlierRelativeFloor = f
			case "latency_outlier_factor":
				c.LatencyOutlierFactor = f
			default:
				c.OutlierRelativeFactor = f
			}
		case "latency_outlier_floor":
			c.LatencyOutlierFloor, err = durationSetting(v)
		case "latency_window":
			c.LatencyWindow, err = durationSetting(v)
		case "admit_rate":
			f, ok := v.(float64)
			if !ok || f < 1 {
				err = fmt.Errorf("want a number of at least 1")
			}
			c.AdmitRate = f
		case "probe_score_half_life":
			c.ProbeScoreHalfLife, err = durationSetting(v)
		case "probe_score_out", "probe_score_in", "flap_cohort_share":
			f, ok := v.(float64)
			if !ok || f <= 0 {
				err = fmt.Errorf("want a positive number")
			}
			switch k {
			case "probe_score_out":
				c.ProbeScoreOut = f
			case "probe_score_in":
				c.ProbeScoreIn = f
			default:
				c.FlapCohortShare = f
			}
		case "return_dwell":
			c.ReturnDwell, err = durationSetting(v)
		case "evacuation_max":
			c.EvacuationMax, err = durationSetting(v)
		case "evacuation_min_remaining":
			f, ok := v.(float64)
			if !ok || f < 0 || f > 1 {
				err = fmt.Errorf("want a number within 0..1")
			}
			c.EvacuationMinRemaining = f
		case "return_steps":
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				err = fmt.Errorf("want a list of weights")
			}
			for _, x := range list {
				w, werr := intSetting(x)
				if werr != nil {
					err = werr
				}
				c.ReturnSteps = append(c.ReturnSteps, w)
			}
		case "panic_threshold":
			f, ok := v.(float64)
			if !ok {
				err = fmt.Errorf("want a number")
			}
			c.PanicThreshold = f
		default:
			return health.Config{}, fmt.Errorf("scenario: config %q is not a setting of docs/reference/eligibility.md", k)
		}
		if err != nil {
			return health.Config{}, fmt.Errorf("scenario: config %q: %w", k, err)
		}
	}
	c = c.WithDefaults()
	return c, c.Validate()
}

func durationSetting(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("want a duration string")
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}

func intSetting(v any) (int, error) {
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) || f <= 0 {
		return 0, fmt.Errorf("want a positive integer")
	}
	return int(f), nil
}

// Answers runs s and returns one answer per expectation, in order, with the keys docs/reference/eligibility.md
// names: state, weight and reasons for an instance; panic and instances for a group.
func (s *Scenario) Answers() ([]map[string]any, error) {
	start := time.Unix(0, 0).UTC()
	events := make([]*Event, len(s.Events))
	for i := range s.Events {
		events[i] = &s.Events[i]
	}
	sort.SliceStable(events, func(i, j int) bool { return s.offsets[events[i]] < s.offsets[events[j]] })
	order := make([]int, len(s.Expect)) // expectations by time; answers keep the file's order
	for i := range order {
		order[i] = i
	}
	at := func(i int) time.Duration { d, _ := offsetOf(s.Expect[i]); return d }
	sort.SliceStable(order, func(a, b int) bool { return at(order[a]) < at(order[b]) })

	e, err := health.New(s.config)
	if err != nil {
		return nil, err
	}
	for _, in := range s.Instances {
		e.Declare(health.Instance{ID: in.ID, Zone: in.Zone, Capabilities: in.Capabilities, Probe: in.Probe, UnhealthyAfter: in.UnhealthyAfter})
	}
	// the owner's ticks: every scenarioTick from the start, between events
	tick := time.Duration(0)
	tickTo := func(until time.Duration) {
		for ; tick <= until; tick += scenarioTick {
			e.Tick(start.Add(tick))
		}
	}
	out := make([]map[string]any, len(s.Expect))
	next := 0
	for _, i := range order {
		t := at(i)
		for ; next < len(events) && s.offsets[events[next]] <= t; next++ {
			ev := events[next]
			if next == 0 || s.offsets[events[next-1]] != s.offsets[ev] {
				// time moves on before an instant's first event, not between events of one
				// instant: they apply together, as one batch of outcomes would
				tickTo(s.offsets[ev] - 1)
				e.Tick(start.Add(s.offsets[ev]))
			}
			at := start.Add(s.offsets[ev])
			until, _ := untilOf(ev.Until)
			if err := e.Apply(health.Event{At: at, ID: ev.ID, Kind: ev.Kind, Health: ev.Health, Result: ev.Result,
				OK: ev.OK, Errors: ev.Errors, ConnectFailures: ev.ConnectFailures, LatencyMsP99: ev.LatencyMsP99, Reporter: ev.Reporter,
				Action: ev.Action, Force: ev.Force, Evacuation: ev.Evacuation, Zone: ev.Zone, Capability: ev.Capability, Until: at.Add(until), By: "scenario"}); err != nil {
				return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
			}
		}
		tickTo(t)
		now := start.Add(t)
		e.Tick(now)
		x := s.Expect[i]
		id, isInstance := x["id"].(string)
		capability, isGroup := x["capability"].(string)
		switch {
		case isInstance:
			v := e.Verdict(id, now)
			out[i] = map[string]any{"state": v.State, "weight": v.Weight, "reasons": v.Reasons}
		case isGroup && x["zone_outliers"] != nil:
			out[i] = map[string]any{"zone_outliers": e.ZoneOutliers(capability, now)}
		case isGroup:
			zone, _ := x["zone"].(string)
			g := e.Group(capability, zone, now)
			out[i] = map[string]any{"panic": g.Panic, "instances": g.Instances}
		default:
			out[i] = map[string]any{"self_preservation": e.SelfPreservation()}
		}
	}
	return out, nil
}
