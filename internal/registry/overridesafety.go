package registry

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// emptiedPools returns the pools a withdrawal of rec would leave with nothing in rotation:
// each would panic and serve rec again, undoing the withdrawal. The pools are those the
// consumers judge panic on:
//   - its (capability, zone) groups (discovery answers, DNS names, xDS clusters);
//   - the candidates of a workflow step calling one of its capabilities from its provider,
//     in any zone (the registry does not hold the workflows: every step that names the
//     capability and provider is concerned);
//   - the routes of its manifest and its public paths: the other instances of its service
//     that publish the same method and path, and those that declare the same public path.
//
// Each pool is a Detail: its Path names it (group/CAPABILITY/ZONE, step/CAPABILITY/PROVIDER,
// route/METHOD PATH) and its Message says what would be left. It walks the fleet once:
// an operator's action, not a hot path.
func (r *Registry) emptiedPools(rec *Record) []apiv1.Detail {
	m := r.cfg.Eligibility
	if m == nil {
		return nil
	}
	recs := r.store.Records()
	type step struct{ capability, provider string }
	type route struct{ method, path string }
	steps := map[step]int{}     // others in rotation
	routes := map[route]int{}   // likewise, of its service
	publics := map[string]int{} // public path -> others in rotation declaring it
	for _, c := range rec.Capabilities {
		steps[step{c.CapabilityID, c.Provider}] = 0
		for _, p := range c.PublicPaths {
			publics[c.CapabilityID+" "+p] = 0
		}
	}
	if rec.Manifest != nil {
		for _, rt := range rec.Manifest.Routes {
			for _, meth := range rt.Methods {
				routes[route{strings.ToUpper(meth), rt.Path}] = 0
			}
		}
	}
	groups := map[string]int{} // capability -> others of its zone in rotation
	var selfIn bool
	m.Read(func(rd health.Reader) {
		state, _ := verdictOf(rd, rec)
		selfIn = apiv1.InRotation(state)
		rd.Groups(func(c, z string, _, inRotation int) {
			if z == rec.Zone && slices.ContainsFunc(rec.Capabilities, func(x Capability) bool { return x.CapabilityID == c }) {
				groups[c] = inRotation
			}
		})
		for _, o := range recs {
			if o.InstanceID == rec.InstanceID {
				continue
			}
			if state, _ := verdictOf(rd, o); !apiv1.InRotation(state) {
				continue
			}
			for _, c := range o.Capabilities {
				if n, ok := steps[step{c.CapabilityID, c.Provider}]; ok {
					steps[step{c.CapabilityID, c.Provider}] = n + 1
				}
				for _, p := range c.PublicPaths {
					if n, ok := publics[c.CapabilityID+" "+p]; ok {
						publics[c.CapabilityID+" "+p] = n + 1
					}
				}
			}
			if o.Manifest != nil && o.ServiceName == rec.ServiceName && len(routes) > 0 {
				for _, rt := range o.Manifest.Routes {
					for _, meth := range rt.Methods {
						if n, ok := routes[route{strings.ToUpper(meth), rt.Path}]; ok {
							routes[route{strings.ToUpper(meth), rt.Path}] = n + 1
						}
					}
				}
			}
		}
	})
	var out []apiv1.Detail
	for c, inRotation := range groups {
		if selfIn {
			inRotation--
		}
		if inRotation <= 0 {
			out = append(out, apiv1.Detail{Path: "group/" + c + "/" + rec.Zone,
				Message: fmt.Sprintf("no other instance of %s in zone %q is in rotation: the group would panic and serve %s again", c, rec.Zone, rec.InstanceID)})
		}
	}
	for s, n := range steps {
		if n == 0 {
			out = append(out, apiv1.Detail{Path: "step/" + s.capability + "/" + s.provider,
				Message: fmt.Sprintf("no other instance of %s from provider %s is in rotation in any zone: workflow steps calling it would have no candidate but this one", s.capability, s.provider)})
		}
	}
	for rt, n := range routes {
		if n == 0 {
			out = append(out, apiv1.Detail{Path: "route/" + rt.method + " " + rt.path,
				Message: fmt.Sprintf("no other instance of %s publishing %s %s is in rotation: the route's pool would panic and send it every request", rec.ServiceName, rt.method, rt.path)})
		}
	}
	for p, n := range publics {
		if n == 0 {
			capability, path, _ := strings.Cut(p, " ")
			out = append(out, apiv1.Detail{Path: "route/" + path,
				Message: fmt.Sprintf("no other instance declaring the public path %s of %s is in rotation", path, capability)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// poolNames lists the pools of ds by name ("none" without any).
func poolNames(ds []apiv1.Detail) string {
	if len(ds) == 0 {
		return "none"
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Path
	}
	return strings.Join(names, ", ")
}
