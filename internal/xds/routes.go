package xds

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// RouteConfigName is the RouteConfiguration that carries the gateway's derived routing table,
// for an Envoy that replaces the built-in gateway (its listener asks for it over RDS).
const RouteConfigName = "meshflows-gateway"

// RouteClusterName names the cluster of one route of the table: the instances it sends to.
func RouteClusterName(method, pattern string) string { return "route:" + method + ":" + pattern }

// RouteResources turns a derived routing table into Envoy resources: one RouteConfiguration
// whose routes are the table's in the order that makes Envoy's first match the table's most
// specific match (segment by segment, a literal before a parameter before a wildcard), each
// matching its method and path and sending to a cluster of its own instances (or of its
// static upstream); a public alias rewrites the path to the capability's invoke endpoint.
func RouteResources(t *routing.Table) map[resourcev3.Type]map[string]types.Resource {
	res := map[resourcev3.Type]map[string]types.Resource{resourcev3.RouteType: {}, resourcev3.ClusterType: {}, resourcev3.EndpointType: {}}
	for _, e := range t.Entries() {
		if name, c, a, ok := routeCluster(e); ok {
			res[resourcev3.ClusterType][name] = c
			res[resourcev3.EndpointType][name] = a
		}
	}
	res[resourcev3.RouteType][RouteConfigName] = routeConfig(t)
	return res
}

// routeConfig is the RouteConfiguration of a table.
func routeConfig(t *routing.Table) *routev3.RouteConfiguration {
	entries := slices.Clone(t.Entries())
	segs := map[*routing.Entry][]apiv1.Segment{}
	for _, e := range entries {
		s, err := apiv1.ParsePath(e.Pattern)
		if err != nil {
			continue // the table holds only valid patterns
		}
		segs[e] = s
	}
	slices.SortStableFunc(entries, func(a, b *routing.Entry) int { return comparePrecedence(segs[a], segs[b]) })
	vh := &routev3.VirtualHost{Name: RouteConfigName, Domains: []string{"*"}}
	for _, e := range entries {
		s, ok := segs[e]
		if !ok {
			continue
		}
		action := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: RouteClusterName(e.Method, e.Pattern)}}
		if e.Rewrite != "" {
			action.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: ".*"}, Substitution: e.Rewrite}
		}
		vh.Routes = append(vh.Routes, &routev3.Route{
			Name: e.Method + " " + e.Pattern,
			Match: &routev3.RouteMatch{
				PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: PathRegex(s)}},
				Headers: []*routev3.HeaderMatcher{{Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
					StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: e.Method}}}}},
			},
			Action: &routev3.Route_Route{Route: action},
		})
	}
	return &routev3.RouteConfiguration{Name: RouteConfigName, VirtualHosts: []*routev3.VirtualHost{vh}}
}

// routeCluster is the cluster of one route and its endpoints (ok false for a pattern that
// does not parse, which a table never holds).
func routeCluster(e *routing.Entry) (string, types.Resource, types.Resource, bool) {
	if _, err := apiv1.ParsePath(e.Pattern); err != nil {
		return "", nil, nil, false
	}
	name := RouteClusterName(e.Method, e.Pattern)
	var eps []endpoint
	if e.Source != "dynamic" {
		if host, port, ok := apiv1.HostPort(e.Upstream); ok {
			eps = append(eps, endpoint{instance: "static", host: host, port: port, weight: 1, health: corev3.HealthStatus_HEALTHY})
		}
	}
	for _, u := range e.Upstreams {
		if host, port, ok := apiv1.HostPort(u.Endpoint); ok {
			eps = append(eps, endpoint{instance: u.Instance, host: host, port: port, weight: 1, health: corev3.HealthStatus_HEALTHY})
		}
	}
	return name, cluster(name), routeAssignment(name, eps), true
}

// PathRegex is the RE2 expression of a route pattern: a literal matches itself, a {param}
// one segment, a trailing {rest...} zero or more.
func PathRegex(segs []apiv1.Segment) string {
	if len(segs) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, s := range segs {
		switch s.Kind {
		case apiv1.Literal:
			b.WriteString("/" + regexp.QuoteMeta(s.Value))
		case apiv1.Param:
			b.WriteString("/[^/]+")
		case apiv1.Wildcard:
			b.WriteString("(/.*)?")
		}
	}
	return b.String()
}

// comparePrecedence orders patterns as the table's matcher prefers them: segment by segment a
// literal before a parameter before a wildcard (literals among themselves by text, which
// never decides between two patterns that both match), and a pattern before its extensions.
func comparePrecedence(a, b []apiv1.Segment) int {
	for i := range min(len(a), len(b)) {
		if c := cmp.Or(cmp.Compare(a[i].Kind, b[i].Kind), cmp.Compare(literal(a[i]), literal(b[i]))); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

func literal(s apiv1.Segment) string {
	if s.Kind == apiv1.Literal {
		return s.Value
	}
	return ""
}

// routeAssignment is the ClusterLoadAssignment of a route's cluster: one locality of its
// instances, equally weighted (the gateway picks among them by eligibility; the capability
// clusters carry the weights).
func routeAssignment(name string, eps []endpoint) *endpointv3.ClusterLoadAssignment {
	slices.SortFunc(eps, func(a, b endpoint) int { return cmp.Compare(a.instance, b.instance) })
	l := &endpointv3.LocalityLbEndpoints{LoadBalancingWeight: wrapperspb.UInt32(1)}
	for _, ep := range eps {
		l.LbEndpoints = append(l.LbEndpoints, &endpointv3.LbEndpoint{HealthStatus: ep.health, LoadBalancingWeight: wrapperspb.UInt32(1),
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Hostname: ep.instance, Address: socketAddress(ep.host, ep.port)}}})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{l}}
}
