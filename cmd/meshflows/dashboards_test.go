package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// grafanaDashboard is the part of a Grafana dashboard the checks below read.
type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos struct {
			W, H int
		} `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// loadDashboards reads every dashboard of deploy/grafana, by file name.
func loadDashboards(t *testing.T) map[string]grafanaDashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana: %v", err)
	}
	out := map[string]grafanaDashboard{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d grafanaDashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

// TestGrafanaPanelsMatchTheStack: every metric a panel queries is exported by the running
// product, and each dashboard is well formed enough for Grafana to import (unique uid,
// a Prometheus datasource variable every panel uses, panels with ids, sizes and queries).
// The real-Prometheus test runs every panel's query.
func TestGrafanaPanelsMatchTheStack(t *testing.T) {
	exported := devMetricNames(t)
	uids := map[string]string{}
	for file, d := range loadDashboards(t) {
		t.Run(file, func(t *testing.T) {
			if d.UID == "" || d.Title == "" {
				t.Errorf("uid %q, title %q: both are needed", d.UID, d.Title)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q is also the uid of %s", d.UID, other)
			}
			uids[d.UID] = file
			if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" {
				t.Errorf("no datasource variable; templating = %+v", d.Templating.List)
			}
			ids := map[int]bool{}
			for _, p := range d.Panels {
				if p.ID == 0 || ids[p.ID] || p.Title == "" || p.Type == "" || p.GridPos.W == 0 || p.GridPos.H == 0 {
					t.Errorf("panel %d %q: needs a unique id, a title, a type and a size", p.ID, p.Title)
				}
				ids[p.ID] = true
				if p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				for _, q := range p.Targets {
					names := metricName.FindAllString(q.Expr, -1)
					if q.RefID == "" || len(names) == 0 {
						t.Errorf("panel %q: query %q needs a refId and a MeshFlows metric", p.Title, q.Expr)
					}
					for _, m := range names {
						if !exported[m] {
							t.Errorf("panel %q queries %s, which no component of meshflows dev exports", p.Title, m)
						}
					}
				}
			}
		})
	}
}
