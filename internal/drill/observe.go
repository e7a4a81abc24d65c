package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// seen is one consumer's view of one instance.
type seen struct {
	present bool
	weight  int       // -1: the consumer does not say
	since   time.Time // when present last changed
	at      time.Time // when last observed
}

// Observer keeps what each consumer (gateway-1, gateway-2, dns, xds) routes to now, as seen
// from outside: the gateways' routes answers, SRV answers, an xDS stream.
type Observer struct {
	s   *Stack
	now func() time.Time
	dns *dns.Client

	mu    sync.Mutex
	views map[string]map[string]*seen // consumer → instance → view
	last  map[string]time.Time        // consumer → last observation
	errs  map[string]string
}

// Consumers are the names of what the observer watches.
func (o *Observer) Consumers() []string {
	c := []string{}
	for i := range o.s.Gateways {
		c = append(c, fmt.Sprintf("gateway-%d", i+1))
	}
	return append(c, "dns", "xds")
}

func newObserver(s *Stack) *Observer {
	return &Observer{s: s, now: time.Now, dns: &dns.Client{Net: "tcp", Timeout: time.Second}, views: map[string]map[string]*seen{}, last: map[string]time.Time{}, errs: map[string]string{}}
}

// update records that consumer routes to exactly the instances of present (with weights).
func (o *Observer) update(consumer string, present map[string]int) {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.views[consumer]
	if v == nil {
		v = map[string]*seen{}
		o.views[consumer] = v
	}
	for _, in := range o.s.Instances {
		w, ok := present[in.ID]
		cur := v[in.ID]
		if cur == nil {
			cur = &seen{present: !ok, since: now} // flipped below
			v[in.ID] = cur
		}
		if cur.present != ok {
			cur.present, cur.since = ok, now
		}
		if ok {
			cur.weight = w
		}
		cur.at = now
	}
	o.last[consumer] = now
	delete(o.errs, consumer)
}

func (o *Observer) failed(consumer string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errs[consumer] = err.Error()
}

// state says, for instance id, whether every consumer has it out (absent from its view) and
// since when the last of them does; or whether every consumer has it in, and since when.
func (o *Observer) state(id string) (allOut, allIn bool, since time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	allOut, allIn = true, true
	for _, c := range o.Consumers() {
		v := o.views[c][id]
		if v == nil {
			return false, false, time.Time{}
		}
		allOut = allOut && !v.present
		allIn = allIn && v.present
		if v.since.After(since) {
			since = v.since
		}
	}
	return allOut, allIn, since
}

// holders are the consumers that have instance id in rotation now.
func (o *Observer) holders(id string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var h []string
	for _, c := range o.Consumers() {
		if v := o.views[c][id]; v == nil || v.present {
			h = append(h, c)
		}
	}
	return h
}

// weights are the weights consumers that tell them (DNS, xDS) give instance id now.
func (o *Observer) weights(id string) map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := map[string]int{}
	for c, v := range o.views {
		if s := v[id]; s != nil && s.present && s.weight >= 0 {
			w[c] = s.weight
		}
	}
	return w
}

// Run watches every consumer until ctx ends.
func (o *Observer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i, gw := range o.s.Gateways {
		wg.Go(func() {
			o.poll(ctx, fmt.Sprintf("gateway-%d", i+1), func(ctx context.Context) (map[string]int, error) { return o.gatewayView(ctx, gw) })
		})
	}
	wg.Go(func() { o.poll(ctx, "dns", o.dnsView()) })
	wg.Go(func() { o.watchXDS(ctx) })
	wg.Wait()
	return nil
}

const observeEvery = 100 * time.Millisecond

// poll asks view every observeEvery until ctx ends and records what consumer routes to.
func (o *Observer) poll(ctx context.Context, consumer string, view func(context.Context) (map[string]int, error)) {
	tick := time.NewTicker(observeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		present, err := view(ctx)
		if err != nil {
			o.failed(consumer, err)
			continue
		}
		o.update(consumer, present)
	}
}

func (o *Observer) gatewayView(ctx context.Context, base string) (map[string]int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/gateway/routes", nil)
	resp, err := o.s.Admin.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("routes: %s", resp.Status)
	}
	var ans struct {
		Serving map[string]map[string]int `json:"serving"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, err
	}
	present := map[string]int{}
	for route, ups := range ans.Serving { // what the gateway sends to now, at which weight
		if !strings.HasPrefix(route, "POST ") || !strings.HasSuffix(route, "/publish") {
			continue
		}
		for id, w := range ups {
			present[id] = w
		}
	}
	return present, nil
}

// srvName is the DNS name of messaging.publish (every provider).
const srvName = "messaging.publish.cap.meshflows."

// srvWeights asks the DNS server the SRV question of messaging.publish: the weight of each
// port answered.
func (o *Observer) srvWeights(ctx context.Context) (map[uint16]int, error) {
	m := new(dns.Msg)
	m.SetQuestion(srvName, dns.TypeSRV)
	ans, _, err := o.dns.ExchangeContext(ctx, m, o.s.DNS)
	if err != nil {
		return nil, err
	}
	if ans.Rcode != dns.RcodeSuccess && ans.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("rcode %s", dns.RcodeToString[ans.Rcode])
	}
	ports := map[uint16]int{}
	for _, rr := range ans.Answer {
		if srv, ok := rr.(*dns.SRV); ok {
			ports[srv.Port] = int(srv.Weight)
		}
	}
	return ports, nil
}

// dnsView returns what answers the SRV question of messaging.publish: the instances, by
// the port of their endpoint, with their SRV weights.
func (o *Observer) dnsView() func(context.Context) (map[string]int, error) {
	byPort := map[uint16]string{}
	for _, in := range o.s.Instances {
		_, port, _ := net.SplitHostPort(in.Proxy.Addr())
		p, _ := strconv.Atoi(port)
		byPort[uint16(p)] = in.ID
	}
	return func(ctx context.Context) (map[string]int, error) {
		ports, err := o.srvWeights(ctx)
		if err != nil {
			return nil, err
		}
		present := map[string]int{}
		for port, w := range ports {
			if id, ok := byPort[port]; ok {
				present[id] = w
			}
		}
		return present, nil
	}
}

// xdsClusters are the EDS resources the drill subscribes to: each pool of messaging.publish.
var xdsClusters = []string{"messaging.publish/jms", "messaging.publish/rabbitmq"}

func (o *Observer) watchXDS(ctx context.Context) {
	for ctx.Err() == nil {
		if err := o.streamXDS(ctx); err != nil && ctx.Err() == nil {
			o.failed("xds", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

func (o *Observer) streamXDS(ctx context.Context) error {
	cc, err := grpc.NewClient(o.s.XDS, grpc.WithTransportCredentials(credentials.NewTLS(o.s.TLS.Clone())))
	if err != nil {
		return err
	}
	defer cc.Close()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &corev3.Node{Id: "meshflows-drill"}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: xdsClusters}); err != nil {
		return err
	}
	pools := map[string]map[string]int{}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		for _, r := range resp.Resources {
			var cla endpointv3.ClusterLoadAssignment
			if err := r.UnmarshalTo(&cla); err != nil {
				return err
			}
			pool := map[string]int{}
			for _, loc := range cla.Endpoints {
				for _, ep := range loc.LbEndpoints {
					switch ep.HealthStatus {
					case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_DEGRADED, corev3.HealthStatus_UNKNOWN:
						w := -1
						if ep.LoadBalancingWeight != nil {
							w = int(ep.LoadBalancingWeight.Value)
						}
						pool[ep.GetEndpoint().GetHostname()] = w
					}
				}
			}
			pools[cla.ClusterName] = pool
		}
		present := map[string]int{}
		for _, pool := range pools {
			for id, w := range pool {
				present[id] = w
			}
		}
		o.update("xds", present)
		if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: xdsClusters,
			VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
			return err
		}
	}
}
