package greysim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Figures are the grey-failure figures of docs/performance-log.md ("Grey failure").
type Figures struct {
	Seeds      int           `json:"seeds"`
	EjectLimit time.Duration `json:"-"`
	Eject      []EjectRow    `json:"time_to_eject"`
	False      []FalseRow    `json:"false_ejections"`
	Shares     []ShareRow    `json:"shares_caught"`
}

// EjectRow: how long until a 4 % replica among nine at 0.1 % is ejected, over the seeds.
type EjectRow struct {
	RPS       float64 `json:"rps_per_instance"`
	Reporters int     `json:"reporters"`
	Ours      Summary `json:"meshflows"`
	Envoy     Summary `json:"envoy_success_rate"`
	// Consecutive5xx is the expected seconds of Envoy's consecutive-5xx detector.
	Consecutive5xx float64 `json:"envoy_consecutive_5xx_seconds"`
}

// Summary is a detector's time to the first ejection over the seeds: in how many runs it
// happened within the limit, and the median and the worst of those.
type Summary struct {
	Caught int     `json:"caught_runs"`
	Median float64 `json:"median_seconds"`
	Max    float64 `json:"max_seconds"`
}

// FalseRow: ejections of healthy instances (all ten at 0.1 %) per instance-hour.
type FalseRow struct {
	RPS       float64 `json:"rps_per_instance"`
	Reporters int     `json:"reporters"`
	Hours     float64 `json:"hours"`
	Ours      float64 `json:"meshflows_per_instance_hour"`
	Envoy     float64 `json:"envoy_success_rate_per_instance_hour"`
}

// ShareRow: of Bad bad instances in ten, the share each detector ejects at least once, and
// the share out of rotation after 5 minutes.
type ShareRow struct {
	Bad      int     `json:"bad_of_10"`
	Ours     float64 `json:"meshflows_caught"`
	Envoy    float64 `json:"envoy_success_rate_caught"`
	OursOut  float64 `json:"meshflows_out_at_end"`
	EnvoyOut float64 `json:"envoy_success_rate_out_at_end"`
}

// Rates, reporters and the windows the figures use.
var (
	FigureRPS       = []float64{10, 50, 500}
	FigureReporters = []int{1, 5, 50}
)

// Compute runs every figure with seeds seeds each; hours is the length of the false-ejection
// runs (24 in docs/performance-log.md ("Grey failure")).
func Compute(seeds int, hours float64) (*Figures, error) {
	const limit = 10 * time.Minute
	out := &Figures{Seeds: seeds, EjectLimit: limit}
	for _, rps := range FigureRPS {
		for _, reps := range FigureReporters {
			row := EjectRow{RPS: rps, Reporters: reps, Consecutive5xx: Consecutive5xxSeconds(0.04, rps, reps)}
			var ours, envoy []time.Duration
			for s := range seeds {
				o, e, err := Run(Fleet{Instances: 10, Bad: 1, GoodRate: 0.001, BadRate: 0.04, RPS: rps, Reporters: reps, Seed: uint64(s + 1)}, limit)
				if err != nil {
					return nil, err
				}
				if o.FirstEjection > 0 {
					ours = append(ours, o.FirstEjection)
				}
				if e.FirstEjection > 0 {
					envoy = append(envoy, e.FirstEjection)
				}
			}
			row.Ours, row.Envoy = summarise(ours), summarise(envoy)
			out.Eject = append(out.Eject, row)
			d := time.Duration(hours * float64(time.Hour))
			o, e, err := Run(Fleet{Instances: 10, GoodRate: 0.001, RPS: rps, Reporters: reps, Seed: 99}, d)
			if err != nil {
				return nil, err
			}
			out.False = append(out.False, FalseRow{RPS: rps, Reporters: reps, Hours: hours,
				Ours: float64(o.FalseEjections) / (10 * hours), Envoy: float64(e.FalseEjections) / (10 * hours)})
		}
	}
	for bad := 1; bad <= 5; bad++ {
		row := ShareRow{Bad: bad}
		for s := range seeds {
			o, e, err := Run(Fleet{Instances: 10, Bad: bad, GoodRate: 0.001, BadRate: 0.04, RPS: 50, Reporters: 5, Seed: uint64(s + 1)}, 5*time.Minute)
			if err != nil {
				return nil, err
			}
			row.Ours += float64(o.Caught) / float64(bad) / float64(seeds)
			row.Envoy += float64(e.Caught) / float64(bad) / float64(seeds)
			row.OursOut += o.OutAtEnd / float64(bad) / float64(seeds)
			row.EnvoyOut += e.OutAtEnd / float64(bad) / float64(seeds)
		}
		out.Shares = append(out.Shares, row)
	}
	return out, nil
}

func summarise(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	slices.Sort(ds)
	return Summary{Caught: len(ds), Median: ds[len(ds)/2].Seconds(), Max: ds[len(ds)-1].Seconds()}
}

// Write prints f as the tables of docs/performance-log.md ("Grey failure").
func (f *Figures) Write(w io.Writer) error {
	var b strings.Builder
	secs := func(s Summary) string {
		if s.Caught == 0 {
			return "never"
		}
		out := fmt.Sprintf("%.0f / %.0f s", s.Median, s.Max)
		if s.Caught < f.Seeds {
			out += fmt.Sprintf(" (%d of %d runs)", s.Caught, f.Seeds)
		}
		return out
	}
	fmt.Fprintf(&b, "Time to eject a 4 %% replica among nine at 0.1 %% (median / worst of %d runs, within %s; reports every %s):\n\n", f.Seeds, f.EjectLimit, Window)
	b.WriteString("| req/s an instance | reporters | MeshFlows | Envoy success rate | Envoy consecutive 5xx (expected) |\n|--:|--:|--|--|--:|\n")
	for _, r := range f.Eject {
		fmt.Fprintf(&b, "| %g | %d | %s | %s | %s |\n", r.RPS, r.Reporters, secs(r.Ours), secs(r.Envoy), humanSeconds(r.Consecutive5xx))
	}
	fmt.Fprintf(&b, "\nFalse ejections per instance-hour, ten instances at 0.1 %%:\n\n| req/s an instance | reporters | hours | MeshFlows | Envoy success rate |\n|--:|--:|--:|--:|--:|\n")
	for _, r := range f.False {
		fmt.Fprintf(&b, "| %g | %d | %g | %.3g | %.3g |\n", r.RPS, r.Reporters, r.Hours, r.Ours, r.Envoy)
	}
	fmt.Fprintf(&b, "\nShare of the bad instances (4 %%, the others 0.1 %%) ejected at least once in 5 minutes, and out of rotation at the end of them, 50 req/s an instance, 5 reporters:\n\n| bad of 10 | MeshFlows: caught | out at 5 min | Envoy success rate: caught | out at 5 min (per proxy) |\n|--:|--:|--:|--:|--:|\n")
	for _, r := range f.Shares {
		fmt.Fprintf(&b, "| %d | %.0f %% | %.0f %% | %.0f %% | %.0f %% |\n", r.Bad, 100*r.Ours, 100*r.OursOut, 100*r.Envoy, 100*r.EnvoyOut)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// humanSeconds writes a long expected time in its largest sensible unit.
func humanSeconds(s float64) string {
	switch {
	case s < 120:
		return fmt.Sprintf("%.0f s", s)
	case s < 2*3600:
		return fmt.Sprintf("%.0f min", s/60)
	case s < 2*86400:
		return fmt.Sprintf("%.0f h", s/3600)
	default:
		return fmt.Sprintf("%.0f days", s/86400)
	}
}
