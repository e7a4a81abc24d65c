package xds

import (
	"cmp"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// ClusterName names the cluster of a capability, or of one provider of it: "messaging.publish"
// (every provider) and "messaging.publish/jms".
func ClusterName(capability, provider string) string {
	if provider == "" {
		return capability
	}
	return capability + "/" + provider
}

// HealthStatus maps an eligibility verdict to an xDS endpoint health status: in rotation is
// HEALTHY (DEGRADED when degraded), draining is DRAINING, anything else UNHEALTHY. In panic
// every endpoint is HEALTHY: the registry says to use them all.
func HealthStatus(eligibility string, panic bool) corev3.HealthStatus {
	switch {
	case panic:
		return corev3.HealthStatus_HEALTHY
	case eligibility == apiv1.EligibilityDegraded:
		return corev3.HealthStatus_DEGRADED
	case apiv1.InRotation(eligibility):
		return corev3.HealthStatus_HEALTHY
	case eligibility == apiv1.EligibilityDraining:
		return corev3.HealthStatus_DRAINING
	}
	return corev3.HealthStatus_UNHEALTHY
}

// endpoint is one instance in one cluster.
type endpoint struct {
	// region and its rank in the server's order (home 0), in a regional server; "" and 0
	// otherwise
	region   string
	rank     int
	instance string
	host     string
	port     uint16
	zone     string
	priority int64 // metadata.priority: higher first
	weight   uint32
	health   corev3.HealthStatus
}

// Resources builds the resources of a view, by type and name: for each cluster an EDS
// cluster, its ClusterLoadAssignment, and an API listener of the same name whose inline route
// sends every call to it (what gRPC's xDS resolver asks for an xds:///NAME target).
func Resources(entries []apiv1.CapabilityEntry) (map[resourcev3.Type]map[string]types.Resource, error) {
	clusters := map[string][]endpoint{}
	for _, e := range entries {
		ep, ok := endpointOf(e)
		if !ok {
			continue
		}
		for _, name := range clustersOf(keyOf(&e)) {
			clusters[name] = append(clusters[name], ep)
		}
	}
	res := map[resourcev3.Type]map[string]types.Resource{resourcev3.ClusterType: {}, resourcev3.EndpointType: {},
		resourcev3.ListenerType: {}, resourcev3.RouteType: {}}
	for n, eps := range clusters {
		if err := putCluster(res, n, eps); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// endpointOf is the endpoint of an entry (false: its endpoint has no host and port, or it
// is an incarnation never admitted outside a panic answer). A never-admitted endpoint is
// sent to no client: sent as UNHEALTHY, it would count among a cluster's hosts, and Envoy's
// own panic routes to every host, a surge of new ones included, before their first probe.
// The registry's panic answer of a brand-new service marks them, and they go out so.
func endpointOf(e apiv1.CapabilityEntry) (endpoint, bool) {
	if (e.Eligibility == apiv1.EligibilityUnknown || e.Eligibility == apiv1.EligibilityEvacuated) && !e.Panic || e.Excluded {
		// never admitted, evacuated, or forced out by an operator: no endpoint Envoy's own
		// panic could pick
		return endpoint{}, false
	}
	host, port, ok := apiv1.HostPort(e.Endpoint)
	if !ok {
		return endpoint{}, false
	}
	p, _ := apiv1.Priority(e.Metadata)
	return endpoint{instance: e.InstanceID, host: host, port: port, zone: e.Zone, priority: p,
		weight: uint32(min(max(e.Weight, 1), 1<<16)), health: HealthStatus(e.Eligibility, e.Panic)}, true
}

// putCluster sets the resources of cluster n with endpoints eps in res.
func putCluster(res map[resourcev3.Type]map[string]types.Resource, n string, eps []endpoint) error {
	if err := putClusterOnly(res, n); err != nil {
		return err
	}
	res[resourcev3.EndpointType][n] = loadAssignment(n, eps)
	return nil
}

// putClusterOnly sets the cluster n and its listener in res, not its assignment.
func putClusterOnly(res map[resourcev3.Type]map[string]types.Resource, n string) error {
	l, err := apiListener(n)
	if err != nil {
		return err
	}
	res[resourcev3.ClusterType][n] = cluster(n)
	res[resourcev3.ListenerType][n] = l
	return nil
}

// ads is the config source of resources that come over the same ADS stream.
var ads = &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3,
	ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}

func cluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: name}, LbPolicy: clusterv3.Cluster_ROUND_ROBIN}
}

// loadAssignment groups the endpoints by priority (highest metadata.priority first: xDS
// priority 0) and, within one, by locality. Each instance is a locality of its own inside
// its zone (sub_zone = instance id) with its weight as the locality's weight too: gRPC's
// round robin weighs localities, Envoy's endpoints, and both see the eligibility weight.
func loadAssignment(name string, eps []endpoint) *endpointv3.ClusterLoadAssignment {
	sortEndpoints(eps)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: make([]*endpointv3.LocalityLbEndpoints, 0, len(eps))}
	var prio uint32
	for i, ep := range eps {
		if i > 0 && (ep.priority != eps[i-1].priority || ep.rank != eps[i-1].rank) {
			prio++
		}
		cla.Endpoints = append(cla.Endpoints, localityOf(ep, prio))
	}
	return cla
}

// localityOf is the locality of one endpoint, at xDS priority prio.
func localityOf(ep endpoint, prio uint32) *endpointv3.LocalityLbEndpoints {
	return &endpointv3.LocalityLbEndpoints{
		Locality:            &corev3.Locality{Region: ep.region, Zone: ep.zone, SubZone: ep.instance},
		LoadBalancingWeight: wrapperspb.UInt32(ep.weight),
		Priority:            prio,
		LbEndpoints: []*endpointv3.LbEndpoint{{
			HealthStatus:        ep.health,
			LoadBalancingWeight: wrapperspb.UInt32(ep.weight),
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Hostname: ep.instance,
				Address:  socketAddress(ep.host, ep.port),
			}},
		}},
	}
}

// sortEndpoints puts endpoints in an assignment's order: priority (higher first), zone,
// instance, then the rest of what they say, so that the order is the same whatever order
// they came in.
func sortEndpoints(eps []endpoint) { slices.SortFunc(eps, compareEndpoints) }

func compareEndpoints(a, b endpoint) int {
	return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(b.priority, a.priority), cmp.Compare(a.region, b.region), cmp.Compare(a.zone, b.zone), cmp.Compare(a.instance, b.instance),
		cmp.Compare(a.host, b.host), cmp.Compare(a.port, b.port), cmp.Compare(a.weight, b.weight), cmp.Compare(a.health, b.health))
}

func socketAddress(host string, port uint16) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol: corev3.SocketAddress_TCP, Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}
}

// apiListener is the listener gRPC asks for an xds:///name target: an HTTP connection manager
// with an inline route sending everything to the cluster of that name, and the terminal
// router filter gRPC requires.
func apiListener(name string) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{Name: name, Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name}}},
				}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}, nil
}
