package dashboard

import (
	"fmt"
	"html/template"
	"io"
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
