package dashboard

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/routing"
)

// mapNode is a box of the route map.
type mapNode struct {
	ID, Label, Kind, Href string
	X, Y, W, H            int
}

// mapEdge joins two nodes.
type mapEdge struct{ X1, Y1, X2, Y2 int }

type mapData struct {
	Nodes         []mapNode
	Edges         []mapEdge
	Width, Height int
	List          []string // above the limit: a searchable list instead
	Query         string
	Routes        int
}

const (
	nodeW, nodeH, rowH, colGap, margin = 270, 24, 32, 320, 10
)

// layout lays the map out in four columns — route, service@version, provider, instance —
// each node in the row order of its first appearance.
func layout(gr *routing.RoutesAnswer, cat *apiv1.CatalogResponse) *mapData {
	providers := map[string][]string{} // instance -> providers
	for _, in := range cat.Instances {
		for _, c := range in.Capabilities {
			if !slices.Contains(providers[in.InstanceID], c.Provider) {
				providers[in.InstanceID] = append(providers[in.InstanceID], c.Provider)
			}
		}
	}
	data := &mapData{Routes: len(gr.Routes)}
	cols := [4][]string{}
	index := map[string]*mapNode{}
	node := func(col int, id, label, href string) *mapNode {
		key := strings.Join([]string{string(rune('0' + col)), id}, "|")
		if n := index[key]; n != nil {
			return n
		}
		cols[col] = append(cols[col], key)
		n := &mapNode{ID: key, Label: label, Kind: [4]string{"route", "service", "provider", "instance"}[col], Href: href,
			X: margin + col*colGap, Y: margin + (len(cols[col])-1)*rowH, W: nodeW, H: nodeH}
		index[key] = n
		return n
	}
	seen := map[[2]string]bool{}
	edge := func(a, b *mapNode) {
		if seen[[2]string{a.ID, b.ID}] {
			return
		}
		seen[[2]string{a.ID, b.ID}] = true
		data.Edges = append(data.Edges, mapEdge{X1: a.X + a.W, Y1: a.Y + a.H/2, X2: b.X, Y2: b.Y + b.H/2})
	}
	for _, rt := range gr.Routes {
		rn := node(0, rt.Method+" "+rt.Pattern, rt.Method+" "+rt.Pattern, "/routes#"+url.QueryEscape(rt.Method+" "+rt.Pattern))
		if rt.Source == "static" {
			sn := node(1, "static "+rt.Upstream, "static → "+rt.Upstream, "/routes")
			edge(rn, sn)
			continue
		}
		sv := rt.Service + "@" + rt.Version
		sn := node(1, sv, sv, "/capabilities?service_name="+url.QueryEscape(rt.Service))
		edge(rn, sn)
		for _, inst := range rt.Instances {
			in := node(3, inst, inst, "/capabilities?instance="+url.QueryEscape(inst))
			ps := providers[inst]
			if len(ps) == 0 {
				ps = []string{"(unknown)"}
			}
			for _, p := range ps {
				pn := node(2, p, "provider "+p, "/capabilities?provider="+url.QueryEscape(p))
				edge(sn, pn)
				edge(pn, in)
			}
		}
	}
	rows := 0
	for c := range cols {
		rows = max(rows, len(cols[c]))
		for _, k := range cols[c] {
			data.Nodes = append(data.Nodes, *index[k])
		}
	}
	data.Width, data.Height = 2*margin+3*colGap+nodeW, 2*margin+rows*rowH
	return data
}

func (d *Dashboard) routeMap(w http.ResponseWriter, r *http.Request) {
	cat := &apiv1.CatalogResponse{}
	gr, err := d.gatewayTable(r.Context())
	if err == nil {
		cat, err = d.registry.Services(r.Context(), client.Page{})
	}
	var data *mapData
	if len(gr.Routes) > d.cfg.MapLimit {
		q := r.URL.Query().Get("q")
		data = &mapData{Query: q, Routes: len(gr.Routes)}
		for _, rt := range gr.Routes {
			line := rt.Method + " " + rt.Pattern + " → " + rt.Service + "@" + rt.Version + " (" + strings.Join(rt.Instances, ", ") + ")"
			if rt.Source == "static" {
				line = rt.Method + " " + rt.Pattern + " → static " + rt.Upstream
			}
			if q == "" || strings.Contains(line, q) {
				data.List = append(data.List, line)
			}
		}
	} else {
		data = layout(gr, cat)
	}
	d.render(w, r, "routemap", "Route map", data, errString("gateway or registry", err))
}
