package dashboard

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// fiftyRoutes is a gateway table of 50 routes over 10 services of 2 instances each.
func fiftyRoutes() (*routing.RoutesAnswer, *apiv1.CatalogResponse) {
	gr := &routing.RoutesAnswer{}
	cat := &apiv1.CatalogResponse{}
	for s := range 10 {
		insts := []string{fmt.Sprintf("svc%d-a", s), fmt.Sprintf("svc%d-b", s)}
		for _, in := range insts {
			cat.Instances = append(cat.Instances, apiv1.Instance{InstanceID: in, Capabilities: []apiv1.Capability{{Provider: fmt.Sprintf("p%d", s%3)}}})
		}
		for r := range 5 {
			gr.Routes = append(gr.Routes, routing.Route{Pattern: fmt.Sprintf("/svc%d/r%d", s, r), Method: "GET", Source: "dynamic", Service: fmt.Sprintf("svc%d", s), Version: "1.0.0", Instances: insts})
		}
	}
	return gr, cat
}

func TestLayoutOneNodePerRouteAndInstance(t *testing.T) {
	gr, cat := fiftyRoutes()
	m := layout(gr, cat, nil)
	kinds := map[string]int{}
	for _, n := range m.Nodes {
		kinds[n.Kind]++
	}
	if kinds["route"] != 50 || kinds["service"] != 10 || kinds["capability"] != 1 || kinds["provider"] != 3 || kinds["instance"] != 20 {
		t.Errorf("nodes = %v", kinds)
	}
	if m.Height < 50*rowH {
		t.Errorf("height %d too small for 50 rows", m.Height)
	}
}

// BenchmarkRouteMap50 lays out and renders the map of 50 routes (server time).
func BenchmarkRouteMap50(b *testing.B) {
	d, err := New(Config{Insecure: true})
	if err != nil {
		b.Fatal(err)
	}
	gr, cat := fiftyRoutes()
	var tmpl *template.Template = d.tmpl
	for b.Loop() {
		m := layout(gr, cat, nil)
		if err := tmpl.ExecuteTemplate(io.Discard, "routemap", page{Title: "Route map", Data: m}); err != nil {
			b.Fatal(err)
		}
	}
}

// The force layout keeps what is linked together: the mean length of a link is well under
// the mean distance between any two nodes, and no two boxes sit on one another.
func TestForceLayoutKeepsLinkedNodesNear(t *testing.T) {
	gr, cat := fiftyRoutes()
	m := layout(gr, cat, nil)
	centre := func(n mapNode) point { return point{float64(n.X + n.W/2), float64(n.Y + n.H/2)} }
	dist := func(a, b point) float64 { return math.Hypot(a.X-b.X, a.Y-b.Y) }
	var links, all float64
	for _, e := range m.Edges {
		links += dist(point{float64(e.X1), float64(e.Y1)}, point{float64(e.X2), float64(e.Y2)})
	}
	links /= float64(len(m.Edges))
	pairs, stacked := 0, 0
	for i := range m.Nodes {
		for j := i + 1; j < len(m.Nodes); j++ {
			d := dist(centre(m.Nodes[i]), centre(m.Nodes[j]))
			all += d
			pairs++
			if d < 5 {
				stacked++
			}
		}
	}
	all /= float64(pairs)
	if links > all/2 {
		t.Errorf("mean link %.0f px against %.0f px between any two nodes: the layout does not gather what is linked", links, all)
	}
	if stacked > 0 {
		t.Errorf("%d pairs of nodes on one another", stacked)
	}
	if again := layout(gr, cat, nil); fmt.Sprint(again.Nodes) != fmt.Sprint(m.Nodes) {
		t.Error("the layout is not deterministic")
	}
}
