package orchestrator

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

// Trigger health: per workflow, its runs in 5-minute slices over 24 hours — how many, how
// many succeeded, and a histogram of their durations for the p95. It is kept beside the run
// history (which keeps whole runs, the last MaxRuns) and persisted with it.
const (
	triggerSlice  = 5 * time.Minute
	triggerSlices = int(24 * time.Hour / triggerSlice)
	// Durations fall in logarithmic buckets: bucket i holds (histBase·histGrowth^(i-1),
	// histBase·histGrowth^i] ms; the last also everything slower.
	histBuckets = 96
	histBase    = 0.1 // ms
	histGrowth  = 1.25
)

// Defaults of the trigger thresholds.
const (
	DefaultTriggerWarning  = 0.95
	DefaultTriggerCritical = 0.90
)

// runSlice is one slice of a workflow's runs.
type runSlice struct {
	Period    int64          `json:"period"` // unix time / 300
	Runs      int            `json:"runs"`
	Succeeded int            `json:"succeeded"`
	MaxMS     float64        `json:"max_ms"`
	Hist      map[int]uint32 `json:"hist"` // bucket -> runs (sparse: a slice has few)
}

// triggerStats is one workflow's slices, a ring by period.
type triggerStats struct {
	slices [triggerSlices]runSlice
}

func bucketOf(ms float64) int {
	if ms <= histBase {
		return 0
	}
	b := int(math.Ceil(math.Log(ms/histBase) / math.Log(histGrowth)))
	return min(max(b, 0), histBuckets-1)
}

func bucketUpper(b int) float64 { return histBase * math.Pow(histGrowth, float64(b)) }

// record counts run r.
func (ts *triggerStats) record(r *apiv1.Run) {
	p := r.StartedAt.Unix() / int64(triggerSlice/time.Second)
	s := &ts.slices[p%int64(triggerSlices)]
	if s.Period != p {
		*s = runSlice{Period: p, Hist: map[int]uint32{}}
	}
	s.Runs++
	if r.Status == apiv1.RunSucceeded {
		s.Succeeded++
	}
	s.MaxMS = max(s.MaxMS, r.DurationMS)
	s.Hist[bucketOf(r.DurationMS)]++
}

// p95 of a histogram of n runs whose slowest took maxMS.
func p95(hist map[int]uint32, n int, maxMS float64) float64 {
	if n == 0 {
		return 0
	}
	need := uint32(math.Ceil(0.95 * float64(n)))
	var seen uint32
	for b := range histBuckets {
		if seen += hist[b]; seen >= need {
			return min(bucketUpper(b), maxMS)
		}
	}
	return maxMS
}

// health is the last 24 hours up to now.
func (ts *triggerStats) health(name string, now time.Time) apiv1.TriggerHealth {
	sec := int64(triggerSlice / time.Second)
	last := now.Unix() / sec
	h := apiv1.TriggerHealth{Workflow: name, Slices: []apiv1.TriggerSlice{}}
	all := map[int]uint32{}
	maxMS := 0.0
	for p := last - int64(triggerSlices) + 1; p <= last; p++ {
		s := &ts.slices[p%int64(triggerSlices)]
		if s.Period != p || s.Runs == 0 {
			continue
		}
		h.Runs += s.Runs
		h.Succeeded += s.Succeeded
		for b, c := range s.Hist {
			all[b] += c
		}
		maxMS = max(maxMS, s.MaxMS)
		h.Slices = append(h.Slices, apiv1.TriggerSlice{Start: time.Unix(p*sec, 0).UTC(), Runs: s.Runs, Succeeded: s.Succeeded,
			SuccessRate: float64(s.Succeeded) / float64(s.Runs), P95MS: p95(s.Hist, s.Runs, s.MaxMS)})
	}
	if h.Runs > 0 {
		h.SuccessRate = float64(h.Succeeded) / float64(h.Runs)
		h.P95MS = p95(all, h.Runs, maxMS)
	}
	return h
}

// recent returns the success rate and runs over the slices that began within d before now.
func (ts *triggerStats) recent(now time.Time, d time.Duration) (float64, int) {
	sec := int64(triggerSlice / time.Second)
	last := now.Unix() / sec
	runs, ok := 0, 0
	for p := now.Add(-d).Unix() / sec; p <= last; p++ {
		if s := &ts.slices[p%int64(triggerSlices)]; s.Period == p {
			runs, ok = runs+s.Runs, ok+s.Succeeded
		}
	}
	if runs == 0 {
		return 1, 0
	}
	return float64(ok) / float64(runs), runs
}

// kept returns the slices to persist (those with runs), oldest first.
func (ts *triggerStats) kept() []runSlice {
	var out []runSlice
	for _, s := range ts.slices {
		if s.Runs > 0 {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b runSlice) int { return int(a.Period - b.Period) })
	return out
}

// restore puts persisted slices back.
func (ts *triggerStats) restore(kept []runSlice) {
	for _, s := range kept {
		if s.Runs <= 0 || s.Period <= 0 {
			continue
		}
		if s.Hist == nil {
			s.Hist = map[int]uint32{}
		}
		cur := &ts.slices[s.Period%int64(triggerSlices)]
		if cur.Period <= s.Period {
			*cur = s
		}
	}
}

// TriggerHealth returns every workflow's last 24 hours, by name.
func (o *Orchestrator) TriggerHealth() apiv1.TriggerHealthResponse {
	now := o.cfg.Now()
	o.mu.Lock()
	names := make([]string, 0, len(o.workflows))
	for name := range o.workflows {
		names = append(names, name)
	}
	slices.Sort(names)
	out := apiv1.TriggerHealthResponse{SliceSeconds: int64(triggerSlice / time.Second), Warning: o.cfg.TriggerWarning, Critical: o.cfg.TriggerCritical,
		Workflows: make([]apiv1.TriggerHealth, 0, len(names))}
	for _, name := range names {
		out.Workflows = append(out.Workflows, o.workflows[name].stats.health(name, now))
	}
	o.mu.Unlock()
	return out
}

// writeTriggerCSV answers h as a CSV download: a header, then a row per workflow and slice.
func writeTriggerCSV(w http.ResponseWriter, h apiv1.TriggerHealthResponse) error {
	return httpapi.WriteCSV(w, "meshflows-trigger-health.csv", []string{"workflow", "slice_start", "runs", "succeeded", "success_rate", "p95_ms"},
		func(emit func(...string)) {
			for _, wf := range h.Workflows {
				for _, s := range wf.Slices {
					emit(wf.Workflow, s.Start.Format(time.RFC3339), strconv.Itoa(s.Runs), strconv.Itoa(s.Succeeded),
						strconv.FormatFloat(s.SuccessRate, 'f', 4, 64), strconv.FormatFloat(s.P95MS, 'f', 1, 64))
				}
			}
		})
}
