package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/routing"
)

// mapNode is a box of the route map.
type mapNode struct {
	ID, Label, Kind, Href string
	X, Y, W, H            int
	// Figures are what the node's detail panel shows (opened by a click: ?node=ID).
	Figures []string
	// Subject is what the journal and the incidents name the node by (an instance id, a
	// capability id, "METHOD pattern"); Members are the instances under it. Neither is drawn:
	// the detail panel (nodeDetail) reads them.
	Subject string   `json:"-"`
	Members []string `json:"-"`
	// Version is a capability node's capability version.
	Version string `json:"-"`
	// Metadata, Errors and Incidents fill the detail panel of the selected node only.
	Metadata  []string
	Errors    []eventRow
	Incidents string
}

// mapEdge joins two nodes.
type mapEdge struct{ X1, Y1, X2, Y2 int }

type mapData struct {
	Filter        mapFilter
	FilterQuery   template.URL // the filter, encoded by url.Values: kept by the node links
	Providers     []string     // the providers of the drawn routes' instances, for the filter
	Nodes         []mapNode
	Edges         []mapEdge
	Width, Height int
	List          []string // above the limit: a searchable list instead
	Query         string
	Routes        int
	Selected      *mapNode // the node whose figures are shown
}

const (
	nodeW, nodeH, rowH, colGap, margin = 250, 24, 32, 280, 10
	mapColumns                         = 5
)

// mapKinds are the columns: route → service@version → capability → provider → instance.
var mapKinds = [mapColumns]string{"route", "service", "capability", "provider", "instance"}

// layout lays the map out in five columns — route, service@version, capability, provider,
// instance — each node in the row order of its first appearance, with the figures of its
// detail panel: a route's requests and failures over 24 hours at the gateway (health may be
// nil), an instance's eligibility and weight, the others' instances in rotation.
func layout(gr *routing.RoutesAnswer, cat *apiv1.CatalogResponse, health *apiv1.RouteHealthResponse) *mapData {
	instances := map[string]*apiv1.Instance{}
	for i := range cat.Instances {
		instances[cat.Instances[i].InstanceID] = &cat.Instances[i]
	}
	routeHealth := map[string]apiv1.RouteHealth{}
	if health != nil {
		for _, rh := range health.Routes {
			routeHealth[rh.Route] = rh
		}
	}
	data := &mapData{Routes: len(gr.Routes)}
	cols := [mapColumns][]string{}
	index := map[string]*mapNode{}
	members := map[string]map[string]bool{} // node -> the instances under it
	node := func(col int, id, label, href string) *mapNode {
		key := strings.Join([]string{string(rune('0' + col)), id}, "|")
		if n := index[key]; n != nil {
			return n
		}
		cols[col] = append(cols[col], key)
		n := &mapNode{ID: key, Label: label, Kind: mapKinds[col], Href: href,
			X: margin + col*colGap, Y: margin + (len(cols[col])-1)*rowH, W: nodeW, H: nodeH}
		index[key], members[key] = n, map[string]bool{}
		return n
	}
	seen := map[[2]string]bool{}
	var links [][2]string
	edge := func(a, b *mapNode) {
		if seen[[2]string{a.ID, b.ID}] {
			return
		}
		seen[[2]string{a.ID, b.ID}] = true
		links = append(links, [2]string{a.ID, b.ID})
	}
	for _, rt := range gr.Routes {
		name := rt.Method + " " + rt.Pattern
		rn := node(0, name, name, "/routes#"+url.QueryEscape(name))
		rn.Subject = name
		if h, ok := routeHealth[name]; ok && h.Requests > 0 {
			rn.Figures = []string{fmt.Sprintf("%d requests in 24 hours at this gateway", h.Requests),
				fmt.Sprintf("%d failed (%.1f%% error share), availability %.2f%%", h.Failed, 100*(1-h.Availability), 100*h.Availability)}
		} else {
			rn.Figures = []string{"no requests in 24 hours at this gateway"}
		}
		if rt.Source == "static" {
			edge(rn, node(1, "static "+rt.Upstream, "static → "+rt.Upstream, "/routes"))
			continue
		}
		sv := rt.Service + "@" + rt.Version
		sn := node(1, sv, sv, "/capabilities?service_name="+url.QueryEscape(rt.Service))
		edge(rn, sn)
		for _, id := range rt.Instances {
			in := node(4, id, id, "/capabilities?instance="+url.QueryEscape(id))
			in.Subject = id
			members[rn.ID][id], members[sn.ID][id], members[in.ID][id] = true, true, true
			inst := instances[id]
			if inst == nil || len(inst.Capabilities) == 0 {
				pn := node(3, "(unknown)", "provider (unknown)", "/capabilities")
				edge(sn, pn)
				edge(pn, in)
				continue
			}
			in.Figures = []string{fmt.Sprintf("eligibility %s, weight %d", inst.Eligibility, inst.Weight),
				fmt.Sprintf("%s %s at %s, generation %d", inst.ServiceName, inst.ServiceVersion, inst.Endpoint, inst.Generation)}
			for _, c := range inst.Capabilities {
				cn := node(2, c.CapabilityID+"@"+c.CapabilityVersion, c.CapabilityID+" "+c.CapabilityVersion, "/capabilities?capability_id="+url.QueryEscape(c.CapabilityID))
				cn.Subject, cn.Version = c.CapabilityID, c.CapabilityVersion
				pn := node(3, c.Provider, "provider "+c.Provider, "/capabilities?provider="+url.QueryEscape(c.Provider))
				members[cn.ID][id], members[pn.ID][id] = true, true
				edge(sn, cn)
				edge(cn, pn)
				edge(pn, in)
			}
		}
	}
	rows := 0
	for c := range cols {
		rows = max(rows, len(cols[c]))
		for _, k := range cols[c] {
			n := index[k]
			for id := range members[k] {
				n.Members = append(n.Members, id)
			}
			slices.Sort(n.Members)
			if n.Kind != "instance" && len(members[k]) > 0 {
				in := 0
				for id := range members[k] {
					if inst := instances[id]; inst != nil && apiv1.InRotation(inst.Eligibility) {
						in++
					}
				}
				n.Figures = append(n.Figures, fmt.Sprintf("%d of %d instances in rotation", in, len(members[k])))
			}
			data.Nodes = append(data.Nodes, *n)
		}
	}
	data.Width, data.Height = 2*margin+(mapColumns-1)*colGap+nodeW, 2*margin+rows*rowH
	place(data, links)
	return data
}

// place lays the nodes out by force (forceLayout) from their columns, each box as wide as
// its label, and draws the links centre to centre.
func place(data *mapData, links [][2]string) {
	at := make(map[string]int, len(data.Nodes))
	start := make([]point, len(data.Nodes))
	halfW := make([]float64, len(data.Nodes))
	for i := range data.Nodes {
		n := &data.Nodes[i]
		at[n.ID] = i
		n.W, n.H = min(7*len([]rune(n.Label))+16, nodeW), nodeH
		start[i] = point{X: float64(n.X) / 2, Y: float64(n.Y) / 3} // the column layout, squeezed: a good start
		halfW[i] = float64(n.W) / 2
	}
	edges := make([][2]int, len(links))
	for i, l := range links {
		edges[i] = [2]int{at[l[0]], at[l[1]]}
	}
	pos := forceLayout(start, halfW, edges)
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for i, p := range pos {
		minX, maxX = math.Min(minX, p.X-halfW[i]), math.Max(maxX, p.X+halfW[i])
		minY, maxY = math.Min(minY, p.Y), math.Max(maxY, p.Y+nodeH)
	}
	for i := range data.Nodes {
		n := &data.Nodes[i]
		n.X, n.Y = int(pos[i].X-halfW[i]-minX)+margin, int(pos[i].Y-minY)+margin
	}
	data.Edges = data.Edges[:0]
	for _, e := range edges {
		a, b := &data.Nodes[e[0]], &data.Nodes[e[1]]
		data.Edges = append(data.Edges, mapEdge{X1: a.X + a.W/2, Y1: a.Y + a.H/2, X2: b.X + b.W/2, Y2: b.Y + b.H/2})
	}
	if len(pos) > 0 {
		data.Width, data.Height = int(maxX-minX)+2*margin, int(maxY-minY)+2*margin
	}
}

// mapFilter narrows the route map: Service (exact), Path (a substring of the pattern),
// Status (ok, failing — under 95 % answered over 24 hours — or idle: no requests) and
// Provider (a route with an instance of that provider). A filter that brings a large table
// under the map's limit draws it.
type mapFilter struct {
	Provider, Service, Path, Status string
}

// query is the filter as a query string (for the node links, which keep it).
func (f mapFilter) query() string {
	v := url.Values{}
	for k, s := range map[string]string{"provider": f.Provider, "service": f.Service, "path": f.Path, "status": f.Status} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

// routeStatus is a route's status over 24 hours at the gateway.
func routeStatus(h apiv1.RouteHealth, ok bool) string {
	switch {
	case !ok || h.Requests == 0:
		return "idle"
	case h.Availability < warnAvailability:
		return "failing"
	}
	return "ok"
}

// keep filters the table's routes by everything but the provider (which needs the catalog).
func (f mapFilter) keep(gr *routing.RoutesAnswer, health *apiv1.RouteHealthResponse) []routing.Route {
	byRoute := map[string]apiv1.RouteHealth{}
	if health != nil {
		for _, h := range health.Routes {
			byRoute[h.Route] = h
		}
	}
	var out []routing.Route
	for _, rt := range gr.Routes {
		h, ok := byRoute[rt.Method+" "+rt.Pattern]
		if (f.Service == "" || rt.Service == f.Service) && (f.Path == "" || strings.Contains(rt.Pattern, f.Path)) &&
			(f.Status == "" || routeStatus(h, ok) == f.Status) {
			out = append(out, rt)
		}
	}
	return out
}

func (d *Dashboard) routeMap(w http.ResponseWriter, r *http.Request) {
	gr, err := d.gatewayTable(r.Context())
	v := r.URL.Query()
	f := mapFilter{Provider: v.Get("provider"), Service: v.Get("service"), Path: v.Get("path"), Status: v.Get("status")}
	health, _ := d.gateway.GatewayRouteHealth(r.Context()) // figures only: the map stands without them
	all := len(gr.Routes)
	kept := *gr
	kept.Routes = f.keep(gr, health)
	gr = &kept
	var data *mapData
	var errs []string
	if len(gr.Routes) > d.cfg.MapLimit {
		q := r.URL.Query().Get("q")
		data = &mapData{Query: q, Routes: all, Filter: f}
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
		// The catalog only for the map: a table too large for one is listed without it (at a
		// million instances the catalog is about 700 MB of JSON).
		cat := &apiv1.CatalogResponse{}
		if err == nil {
			cat, err = d.registry.Services(r.Context(), client.Page{})
		}
		if f.Provider != "" {
			gr.Routes = byProvider(gr.Routes, cat, f.Provider)
		}
		data = layout(gr, cat, health)
		data.Filter, data.Routes, data.FilterQuery = f, all, template.URL(f.query())
		data.Providers = providersOf(cat)
		if id := r.URL.Query().Get("node"); id != "" {
			for i := range data.Nodes {
				if data.Nodes[i].ID == id {
					data.Selected = &data.Nodes[i]
				}
			}
			if data.Selected != nil {
				errs = append(errs, d.nodeDetail(r.Context(), data.Selected, cat)...)
			}
		}
	}
	d.render(w, r, "routemap", "Route map", data, append(errString("gateway or registry", err), errs...))
}

// Bounds of a node's detail panel: the errors of the last hour, the newest first.
const (
	nodeErrorWindow = time.Hour
	nodeErrorsShown = 5
)

// nodeDetail fills the detail panel of the selected node: the metadata of an instance (its
// zone, health, registration and capabilities' metadata) or of a capability, the warnings and
// errors the journal holds about it or its instances over the last hour, and how often it
// triggered an incident. It returns what it could not read; the panel stands without it.
func (d *Dashboard) nodeDetail(ctx context.Context, n *mapNode, cat *apiv1.CatalogResponse) []string {
	members := map[string]bool{}
	for _, id := range n.Members {
		members[id] = true
	}
	for i := range cat.Instances {
		inst := &cat.Instances[i]
		switch {
		case n.Kind == "instance" && inst.InstanceID == n.Subject:
			n.Metadata = append(n.Metadata, "zone "+cmp.Or(inst.Zone, "(none)")+", health "+inst.Health,
				"registered "+inst.RegisteredAt.UTC().Format(time.RFC3339)+", lease until "+inst.LeaseExpiresAt.UTC().Format(time.RFC3339))
			for _, c := range inst.Capabilities {
				n.Metadata = append(n.Metadata, c.CapabilityID+" "+c.CapabilityVersion+" metadata "+compactJSON(c.Metadata))
			}
		case n.Kind == "capability" && members[inst.InstanceID] && len(n.Metadata) == 0:
			for _, c := range inst.Capabilities {
				if c.CapabilityID == n.Subject && c.CapabilityVersion == n.Version {
					n.Metadata = append(n.Metadata, "contract schema "+c.ContractSchemaVersion+", metadata "+compactJSON(c.Metadata)+" (as "+inst.InstanceID+" registered it)")
				}
			}
		}
	}
	// about says whether a journal subject or an incident's subject concerns the node.
	about := func(subject string) bool {
		switch {
		case members[subject] || subject == n.Subject && n.Subject != "":
			return true
		case n.Kind == "capability":
			return strings.HasPrefix(subject, n.Subject+"/") // a panic or zone incident: capability/zone
		}
		return false
	}
	var errs []string
	now := d.cfg.Now()
	if ev, err := d.registry.Events(ctx, apiv1.EventsQuery{From: now.Add(-nodeErrorWindow), Limit: 1000}); err != nil {
		errs = append(errs, errString("registry events", err)...)
	} else {
		for _, e := range slices.Backward(ev.Events) {
			if e.Severity == apiv1.SeverityInfo || !about(e.Subject) && !(n.Kind == "route" && strings.Contains(e.Message, n.Subject)) {
				continue
			}
			if len(n.Errors) < nodeErrorsShown {
				n.Errors = append(n.Errors, eventRow{Event: e, Link: subjectLink(e)})
			}
		}
	}
	if list, err := d.registry.Incidents(ctx, ""); err != nil {
		errs = append(errs, errString("registry incidents", err)...)
	} else {
		raised, occurrences, standing := 0, 0, 0
		for _, in := range list.Incidents {
			if !about(in.Subject) {
				continue
			}
			raised++
			occurrences += in.Occurrences
			if in.Status == apiv1.IncidentOpen || in.Status == apiv1.IncidentAcknowledged {
				standing++
			}
		}
		n.Incidents = fmt.Sprintf("triggered %s (%s), %d unresolved", plural(raised, "incident"), plural(occurrences, "occurrence"), standing)
	}
	return errs
}

// plural is "1 incident", "2 incidents".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// compactJSON is a metadata object on one line ("{}" when there is none).
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if len(raw) == 0 || json.Compact(&b, raw) != nil {
		return "{}"
	}
	return b.String()
}

// byProvider keeps the routes with an instance of provider.
func byProvider(routes []routing.Route, cat *apiv1.CatalogResponse, provider string) []routing.Route {
	has := map[string]bool{}
	for _, in := range cat.Instances {
		for _, c := range in.Capabilities {
			if c.Provider == provider {
				has[in.InstanceID] = true
			}
		}
	}
	var out []routing.Route
	for _, rt := range routes {
		if slices.ContainsFunc(rt.Instances, func(id string) bool { return has[id] }) {
			out = append(out, rt)
		}
	}
	return out
}

// providersOf lists the catalog's providers, sorted.
func providersOf(cat *apiv1.CatalogResponse) []string {
	var out []string
	for _, in := range cat.Instances {
		for _, c := range in.Capabilities {
			if !slices.Contains(out, c.Provider) {
				out = append(out, c.Provider)
			}
		}
	}
	slices.Sort(out)
	return out
}
