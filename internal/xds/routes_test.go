package xds_test

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gocmp "github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/xds"
	"github.com/meshflows/meshflows/routing"
)

// servedRoute is one route of the served RDS, read back: its method, pattern (from its
// cluster's name), path expression and the instances of its cluster.
type servedRoute struct {
	Method, Pattern string
	Instances       []string
	re              *regexp.Regexp
}

// readRDS reads the served resources back into routes, in the served order.
func readRDS(t *testing.T, res map[resourcev3.Type]map[string]any) []servedRoute {
	t.Helper()
	rc, ok := res[resourcev3.RouteType][xds.RouteConfigName].(*routev3.RouteConfiguration)
	if !ok {
		t.Fatalf("no RouteConfiguration %q", xds.RouteConfigName)
	}
	var out []servedRoute
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		cl := r.GetRoute().GetCluster()
		var sr servedRoute
		for _, h := range r.GetMatch().GetHeaders() {
			if h.GetName() == ":method" {
				sr.Method = h.GetStringMatch().GetExact()
			}
		}
		sr.Pattern = cl[len("route:"+sr.Method+":"):]
		if cl != xds.RouteClusterName(sr.Method, sr.Pattern) {
			t.Fatalf("route %q sends to %q", r.GetName(), cl)
		}
		sr.re = regexp.MustCompile("^" + r.GetMatch().GetSafeRegex().GetRegex() + "$") // Envoy's safe_regex matches the whole path
		cla, ok := res[resourcev3.EndpointType][cl].(*endpointv3.ClusterLoadAssignment)
		if !ok {
			t.Fatalf("no endpoints for cluster %q", cl)
		}
		for _, l := range cla.GetEndpoints() {
			for _, ep := range l.GetLbEndpoints() {
				if h := ep.GetEndpoint().GetHostname(); h != "static" {
					sr.Instances = append(sr.Instances, h)
				}
			}
		}
		if _, ok := res[resourcev3.ClusterType][cl]; !ok {
			t.Fatalf("no cluster %q", cl)
		}
		out = append(out, sr)
	}
	return out
}

// TestRDSIsTheDerivedTable: for every conformance case, the routes served over RDS are the
// table `meshflows routes derive` prints (pattern, method, instances), and Envoy's first
// match over them in the served order picks, for every request of the case, the pattern
// the table's own matcher picks.
func TestRDSIsTheDerivedTable(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "conformance", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no conformance cases: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := routing.ParseCase(raw)
			if err != nil {
				t.Fatal(err)
			}
			table := routing.Derive(routing.Input{Static: c.Static, Manifests: c.Manifests, Policy: c.Policy})
			res := map[resourcev3.Type]map[string]any{}
			for typ, rs := range xds.RouteResources(table) {
				res[typ] = map[string]any{}
				for n, r := range rs {
					res[typ][n] = r
				}
			}
			served := readRDS(t, res)
			type row struct {
				Method, Pattern string
				Instances       []string
			}
			var got, want []row
			for _, s := range served {
				got = append(got, row{s.Method, s.Pattern, s.Instances})
			}
			for _, r := range table.Canonical().Routes {
				want = append(want, row{r.Method, r.Pattern, r.Instances})
			}
			key := func(a, b row) int {
				return cmp.Or(strings.Compare(a.Pattern, b.Pattern), strings.Compare(a.Method, b.Method))
			}
			slices.SortFunc(got, key)
			slices.SortFunc(want, key)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("served routes (-derived +served):\n%s", diff)
			}
			for _, r := range c.Requests {
				m := table.Match(r.Method, r.Path)
				first := ""
				for _, s := range served {
					if s.Method == r.Method && s.re.MatchString(m.Path) {
						first = s.Pattern
						break
					}
				}
				wantPattern := ""
				if m.Entry != nil {
					wantPattern = m.Entry.Pattern
				}
				if first != wantPattern {
					t.Errorf("%s %s: Envoy's first match is %q, the table's %q", r.Method, r.Path, first, wantPattern)
				}
			}
		})
	}
}

// TestServedRDSFollowsTheRegistry: an instance registered with a manifest has its routes
// served over ADS (RouteConfiguration and route clusters) as the gateway derives them with
// the server's path policy, most specific first.
func TestServedRDSFollowsTheRegistry(t *testing.T) {
	e := newEnv(t, time.Nanosecond, func(c *xds.Config) { c.Policy = routing.Policy{"egress-jms": {"/api/messaging/jms"}} })
	b := startBackend(t)
	req := apiv1.RegisterRequest{InstanceID: "jms-1", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://" + b.addr, Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}},
		Manifest: &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-jms", Instance: "jms-1", Version: "1.0.0"},
			Routes: []apiv1.ManifestRoute{{Path: "/api/messaging/jms/publish", Methods: []string{"POST"}},
				{Path: "/api/messaging/jms/{queue}", Methods: []string{"GET"}}}}}
	if _, err := e.reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
	c := e.ads(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := adsStream(t, ctx, c, "envoy", resourcev3.RouteType, xds.RouteConfigName)
	var rc routev3.RouteConfiguration
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("no route configuration with the manifest's routes: %v", err)
		}
		if len(resp.GetResources()) == 1 {
			if err := resp.GetResources()[0].UnmarshalTo(&rc); err != nil {
				t.Fatal(err)
			}
			if len(rc.GetVirtualHosts()[0].GetRoutes()) > 0 {
				break
			}
		}
		if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.RouteType, ResourceNames: []string{xds.RouteConfigName},
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		got = append(got, r.GetName()+" -> "+r.GetRoute().GetCluster())
	}
	want := []string{"POST /api/messaging/jms/publish -> route:POST:/api/messaging/jms/publish",
		"GET /api/messaging/jms/{queue} -> route:GET:/api/messaging/jms/{queue}"}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("served routes (-want +got):\n%s", diff)
	}
	eps := adsStream(t, ctx, c, "envoy", resourcev3.EndpointType, xds.RouteClusterName("POST", "/api/messaging/jms/publish"))
	resp, err := eps.Recv()
	if err != nil || len(resp.GetResources()) != 1 {
		t.Fatalf("route cluster endpoints: %v %v", resp, err)
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := resp.GetResources()[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	if ep := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint(); ep.GetHostname() != "jms-1" ||
		"127.0.0.1:"+strconv.Itoa(int(ep.GetAddress().GetSocketAddress().GetPortValue())) != b.addr {
		t.Errorf("route cluster endpoint %v, want jms-1 at %s", ep, b.addr)
	}
}
