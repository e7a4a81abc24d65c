package apiv1

import (
	"cmp"
	"slices"
	"strings"
)

// Apply returns the manifests and public paths a routes delta watcher holds after d, given
// those it held at the delta's base (see RoutesDelta), in the answer's order: the reset's,
// or what it held with the instances d removes or puts dropped and d's put in place. It
// costs one pass over what is held. The held slices are not modified.
func (d *RoutesDelta) Apply(manifests []ManifestEntry, paths []PublicPath) ([]ManifestEntry, []PublicPath) {
	if d.Reset {
		return slices.Clone(d.Manifests), slices.Clone(d.PublicPaths)
	}
	gone := make(map[string]int64, len(d.Removed))
	for _, r := range d.Removed {
		gone[r.InstanceID] = max(gone[r.InstanceID], r.Generation)
	}
	put := make(map[string]bool, len(d.Manifests))
	for i := range d.Manifests {
		put[d.Manifests[i].InstanceID] = true
	}
	for i := range d.PublicPaths {
		put[d.PublicPaths[i].InstanceID] = true
	}
	dropped := func(k routeKey) bool {
		g, ok := gone[k.instance]
		return put[k.instance] || ok && k.generation <= g
	}
	return mergeRoutes(manifests, d.Manifests, manifestKey, dropped), mergeRoutes(paths, d.PublicPaths, pathKey, dropped)
}

// routeKey is where a route input stands in a routes answer: by service, then instance (an
// instance's paths keep the order they were sent in).
type routeKey struct {
	service, instance string
	generation        int64
}

func (k routeKey) compare(o routeKey) int {
	return cmp.Or(strings.Compare(k.service, o.service), strings.Compare(k.instance, o.instance))
}

func manifestKey(m *ManifestEntry) routeKey {
	return routeKey{service: m.ServiceName, instance: m.InstanceID, generation: m.Generation}
}

func pathKey(p *PublicPath) routeKey {
	return routeKey{service: p.ServiceName, instance: p.InstanceID, generation: p.Generation}
}

// mergeRoutes is held without what dropped names, with puts (ordered stably by key) put
// in place.
func mergeRoutes[T any](held, puts []T, key func(*T) routeKey, dropped func(routeKey) bool) []T {
	puts = slices.Clone(puts)
	slices.SortStableFunc(puts, func(a, b T) int { return key(&a).compare(key(&b)) })
	out := make([]T, 0, len(held)+len(puts))
	p := 0
	for i := range held {
		k := key(&held[i])
		if dropped(k) {
			continue
		}
		for p < len(puts) && key(&puts[p]).compare(k) < 0 {
			out = append(out, puts[p])
			p++
		}
		out = append(out, held[i])
	}
	return append(out, puts[p:]...)
}
