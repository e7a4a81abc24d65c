package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// RoutesConfig configures RunRoutes.
type RoutesConfig struct {
	Services, Instances, Changes int
}

// RoutesReport is what RunRoutes measured: the time per change of a full derivation and of
// the incremental one, over the same changes.
type RoutesReport struct {
	Services        int     `json:"services"`
	Instances       int     `json:"instances_per_service"`
	Routes          int     `json:"routes"`
	Changes         int     `json:"changes"`
	FullNs          float64 `json:"full_ns_per_change"`
	IncrementalNs   float64 `json:"incremental_ns_per_change"`
	Speedup         float64 `json:"speedup"`
	Equal           bool    `json:"tables_equal"`
	FullChanges     int     `json:"full_changes_timed"`
	IncrementalTook string  `json:"incremental_took"`
}

// RunRoutes builds a fleet of cfg.Services services (1–3 routes each) of cfg.Instances
// instances, and applies cfg.Changes changes — instances withdrawn and back, manifests
// replaced — through the incremental deriver, and as many as take about ten seconds (at least
// three) through a full derivation; it reports both per change and whether the two final
// tables of the full-derivation run agree.
func RunRoutes(cfg RoutesConfig) (*RoutesReport, error) {
	if cfg.Services < 1 || cfg.Instances < 1 || cfg.Changes < 1 {
		return nil, fmt.Errorf("bench routes: --services, --instances and --changes must be at least 1")
	}
	in := routing.Input{Policy: routing.Policy{}}
	gen := int64(0)
	for s := range cfg.Services {
		svc := fmt.Sprintf("svc-%d", s)
		in.Policy[svc] = []string{"/" + svc}
		routes := []apiv1.ManifestRoute{
			{Path: "/" + svc + "/items", Methods: []string{"GET", "POST"}, Idempotent: []string{"GET"}},
			{Path: "/" + svc + "/items/{id}", Methods: []string{"GET", "PUT"}},
			{Path: "/" + svc + "/files/{rest...}", Methods: []string{"GET"}},
		}[:1+s%3]
		for i := range cfg.Instances {
			gen++
			inst := fmt.Sprintf("%s-%d", svc, i)
			m := &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: svc, Version: "1.2.3", Instance: inst}, Routes: routes}
			in.Manifests = append(in.Manifests, routing.ManifestInput{InstanceID: inst, Generation: gen, Endpoint: "http://" + inst + ":8080", Parsed: m})
		}
	}
	change := func(i int) []routing.Change { // the i-th change: instance k withdrawn, or back with a new generation
		k := (i / 2 * 7919) % len(in.Manifests)
		if i%2 == 0 {
			return []routing.Change{{DeleteManifest: in.Manifests[k].InstanceID}}
		}
		gen++
		mi := in.Manifests[k]
		mi.Generation = gen
		in.Manifests[k] = mi
		return []routing.Change{{PutManifest: &mi}}
	}
	d := routing.NewDeriver(in)
	rep := &RoutesReport{Services: cfg.Services, Instances: cfg.Instances, Changes: cfg.Changes, Routes: len(d.Table().Entries())}
	start := time.Now()
	for i := range cfg.Changes {
		d.Apply(change(i)...)
	}
	took := time.Since(start)
	rep.IncrementalNs = float64(took.Nanoseconds()) / float64(cfg.Changes)
	rep.IncrementalTook = took.Round(time.Millisecond).String()
	// the full derivation of each change, from a copy of the input the changes make
	live := map[string]routing.ManifestInput{}
	for _, mi := range in.Manifests {
		live[mi.InstanceID] = mi
	}
	full := routing.Input{Policy: in.Policy}
	start = time.Now()
	var last *routing.Table
	for i := 0; i < cfg.Changes && (i < 3 || time.Since(start) < 10*time.Second); i++ {
		for _, c := range change(cfg.Changes + i) {
			if c.PutManifest != nil {
				live[c.PutManifest.InstanceID] = *c.PutManifest
			} else {
				delete(live, c.DeleteManifest)
			}
			d.Apply(c)
		}
		full.Manifests = full.Manifests[:0]
		for _, mi := range live {
			full.Manifests = append(full.Manifests, mi)
		}
		last = routing.Derive(full)
		rep.FullChanges++
	}
	rep.FullNs = float64(time.Since(start).Nanoseconds()) / float64(rep.FullChanges)
	rep.Speedup = rep.FullNs / rep.IncrementalNs
	a, _ := jsonOf(last.Canonical())
	b, _ := jsonOf(d.Table().Canonical())
	rep.Equal = a == b
	return rep, nil
}

// WriteRoutes prints rep as text.
func WriteRoutes(w io.Writer, rep *RoutesReport) error {
	_, err := fmt.Fprintf(w, "%d services × %d instances, %d routes\nincremental: %d changes in %s, %.1f µs a change\nfull:        %.1f ms a change (%d timed)\nspeedup:     %.0f×   tables equal: %v\n",
		rep.Services, rep.Instances, rep.Routes, rep.Changes, rep.IncrementalTook, rep.IncrementalNs/1e3, rep.FullNs/1e6, rep.FullChanges, rep.Speedup, rep.Equal)
	return err
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
