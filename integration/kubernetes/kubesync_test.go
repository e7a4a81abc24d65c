// Package kubernetes_test runs meshflows-kube-sync's syncer against a real kube-apiserver
// (in process, with an embedded etcd) and a real MeshFlows registry: Services and
// EndpointSlices are written by hand, as no kubelet or controller runs here.
package kubernetes_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apptesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/integration/framework"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/kubesync"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// bound is how soon after a write to Kubernetes the registry must show it (the issue's
// promise; each step prints what it took).
const bound = time.Second

// cluster is a kube-apiserver on an embedded etcd.
type cluster struct {
	config *rest.Config
	kube   *kubernetes.Clientset // the test's hands: writes Services and EndpointSlices
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	etcd := etcdtest.Start(t)
	t.Setenv("KUBE_INTEGRATION_ETCD_URL", etcd.Endpoint)
	start := time.Now()
	srv := apptesting.StartTestServerOrDie(t, nil, framework.DefaultTestServerFlags(), framework.SharedEtcd())
	t.Cleanup(srv.TearDownFn)
	t.Logf("kube-apiserver up in %s", time.Since(start).Round(time.Millisecond))
	return &cluster{config: srv.ClientConfig, kube: kubernetes.NewForConfigOrDie(srv.ClientConfig)}
}

// bearerIdentity identifies a caller by its bearer token (the identity itself: a test's).
type bearerIdentity struct{}

func (bearerIdentity) Identify(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", fmt.Errorf("no token")
	}
	return tok, nil
}

// allowAll lets every identity do everything (ownership is still enforced).
type allowAll struct{}

func (allowAll) CanRegister(string, *apiv1.RegisterRequest) error { return nil }
func (allowAll) CanDiscover(string) bool                          { return true }
func (allowAll) IsAdmin(string) bool                              { return false }
func (allowAll) IsGateway(string) bool                            { return false }
func (allowAll) HasRoles(string) bool                             { return true }

// meshRegistry is a MeshFlows registry behind its HTTP API, identities by bearer token.
type meshRegistry struct {
	reg *registry.Registry
	url string
}

func startRegistry(t testing.TB) *meshRegistry {
	t.Helper()
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{LeaseTTL: 15 * time.Second, HeartbeatInterval: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	j := journal.New(1000, time.Now)
	reg, err := registry.New(memstore.New(nil), registry.Config{LeaseTTL: 15 * time.Second, HeartbeatInterval: 5 * time.Second, Eligibility: m, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = reg.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	srv, err := server.New(reg, server.Config{Authenticator: bearerIdentity{}, Policy: allowAll{}, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &meshRegistry{reg: reg, url: hs.URL}
}

func (m *meshRegistry) client(t testing.TB, identity string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Registries: []string{m.url}, BearerToken: identity})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// state is "id health generation" of the registry's instances of the shop namespace
// (manual ones too), sorted; gens is their generations.
func (m *meshRegistry) state() ([]string, map[string]int64) {
	cat := m.reg.Catalog()
	out := []string{}
	gens := map[string]int64{}
	for _, in := range cat.Instances {
		out = append(out, in.InstanceID+" "+in.Health+" "+in.Owner)
		gens[in.InstanceID] = in.Generation
	}
	sort.Strings(out)
	return out, gens
}

// await waits until the registry's state is want, failing after bound; it returns and
// prints how long it took.
func (m *meshRegistry) await(t *testing.T, step string, want []string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got, _ := m.state()
		if cmp.Equal(want, got) {
			took := time.Since(start)
			t.Logf("%-62s %4d ms", step, took.Milliseconds())
			return took
		}
		if time.Since(start) > bound {
			t.Fatalf("%s: not in the registry %s after the write (-want +got):\n%s", step, bound, cmp.Diff(want, got))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// syncer runs a kube-sync syncer (as the meshflows-kube-sync binary builds it) until stop.
type syncer struct {
	cancel context.CancelFunc
	done   chan error
}

func startSyncer(t *testing.T, c *cluster, m *meshRegistry, namespaces ...string) *syncer {
	t.Helper()
	kube, err := kubesync.NewClient(c.config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kubesync.New(kubesync.Config{Kube: kube, Namespaces: namespaces, Registry: m.client(t, "kube-sync"), Identity: "kube-sync"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sy := &syncer{cancel: cancel, done: make(chan error, 1)}
	go func() { sy.done <- s.Run(ctx) }()
	t.Cleanup(func() { sy.stop(t) })
	return sy
}

func (s *syncer) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	if err := <-s.done; err != nil {
		t.Errorf("syncer: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

const caps = `[{"capability_id":"orders.place","capability_version":"1.4.0","provider":"shop","contract_schema_version":"1.0"}]`

func orders(annotations map[string]string) *corev1.Service {
	a := map[string]string{kubesync.AnnotationCapabilities: caps, kubesync.AnnotationPort: "http"}
	for k, v := range annotations {
		a[k] = v
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Annotations: a,
		Labels: map[string]string{kubesync.LabelVersion: "1.4.0"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}
}

// endpoint is one pod's endpoint: its address from its name, its conditions.
type endpoint struct {
	pod                         string
	ready, serving, terminating bool
}

func slice(svc, name string, eps ...endpoint) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("metrics"), Port: ptr(int32(9090))}, {Name: ptr("http"), Port: ptr(int32(8080))}}}
	for _, e := range eps {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{address(e.pod)}, Zone: ptr("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: e.pod},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(e.ready), Serving: ptr(e.serving), Terminating: ptr(e.terminating)}})
	}
	return sl
}

func address(pod string) string {
	sum := 0
	for _, r := range pod {
		sum = sum*31 + int(r)
	}
	return fmt.Sprintf("10.%d.%d.%d", sum>>16&0xff, sum>>8&0xff, sum&0xff|1)
}

func ready(pod string) endpoint    { return endpoint{pod: pod, ready: true, serving: true} }
func notReady(pod string) endpoint { return endpoint{pod: pod} }

// kubeWrites are the test's writes to the API server.
type kubeWrites struct {
	t    *testing.T
	kube *kubernetes.Clientset
}

func (k kubeWrites) applySlice(sl *discoveryv1.EndpointSlice) {
	k.t.Helper()
	ctx := context.Background()
	cur, err := k.kube.DiscoveryV1().EndpointSlices(sl.Namespace).Get(ctx, sl.Name, metav1.GetOptions{})
	if err == nil {
		sl.ResourceVersion = cur.ResourceVersion
		_, err = k.kube.DiscoveryV1().EndpointSlices(sl.Namespace).Update(ctx, sl, metav1.UpdateOptions{})
	} else {
		_, err = k.kube.DiscoveryV1().EndpointSlices(sl.Namespace).Create(ctx, sl, metav1.CreateOptions{})
	}
	if err != nil {
		k.t.Fatal(err)
	}
}

func (k kubeWrites) applyService(svc *corev1.Service) {
	k.t.Helper()
	ctx := context.Background()
	cur, err := k.kube.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err == nil {
		svc.ResourceVersion = cur.ResourceVersion
		_, err = k.kube.CoreV1().Services(svc.Namespace).Update(ctx, svc, metav1.UpdateOptions{})
	} else {
		_, err = k.kube.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	}
	if err != nil {
		k.t.Fatal(err)
	}
}

func TestKubeSyncAgainstARealAPIServer(t *testing.T) {
	c := startCluster(t)
	m := startRegistry(t)
	k := kubeWrites{t: t, kube: c.kube}
	ctx := context.Background()
	for _, ns := range []string{"shop", "elsewhere"} {
		if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// a self-registered instance of the same service, by another identity: never touched
	if _, err := m.client(t, "orders-sdk").Register(ctx, &apiv1.RegisterRequest{InstanceID: "orders-vm-1", ServiceName: "orders", ServiceVersion: "1.4.0",
		Endpoint: "http://10.200.0.1:8080", Capabilities: []apiv1.Capability{{CapabilityID: "orders.place", CapabilityVersion: "1.4.0", Provider: "shop", ContractSchemaVersion: "1.0"}}}); err != nil {
		t.Fatal(err)
	}
	manual := "orders-vm-1 ok orders-sdk"
	var took []time.Duration
	step := func(name string, want ...string) {
		t.Helper()
		want = append(want, manual)
		sort.Strings(want)
		took = append(took, m.await(t, name, want))
	}

	sy := startSyncer(t, c, m, "shop")
	k.applyService(orders(nil))
	k.applySlice(slice("orders", "orders-a", ready("orders-a1"), notReady("orders-a2")))
	step("ready and not ready registered", "shop.orders-a1 ok kube-sync", "shop.orders-a2 not_ready kube-sync")
	ex, err := m.reg.Explain("shop.orders-a2")
	// not ready since its registration: never admitted, answered nowhere, until ready
	if err != nil || ex.State != "withdrawn" || len(ex.Reasons) < 2 || ex.Reasons[0].Code != "ADMITTING" || ex.Reasons[1].Code != "RUNTIME_NOT_READY" {
		t.Errorf("a not-ready endpoint's verdict: %+v %v, want withdrawn ADMITTING, RUNTIME_NOT_READY", ex, err)
	}
	in, err := m.client(t, "ops").Instance(ctx, "shop.orders-a1")
	if err != nil || in.Endpoint != "http://"+address("orders-a1")+":8080" || in.Zone != "zone-a" || in.ServiceVersion != "1.4.0" || in.Readiness != apiv1.ReadinessRuntime {
		t.Errorf("shop.orders-a1 = %+v, %v, want readiness runtime", in, err)
	}

	k.applySlice(slice("orders", "orders-a", ready("orders-a1"), ready("orders-a2")))
	step("not ready -> ready", "shop.orders-a1 ok kube-sync", "shop.orders-a2 ok kube-sync")

	k.applySlice(slice("orders", "orders-a", endpoint{pod: "orders-a1", serving: true, terminating: true}, ready("orders-a2")))
	step("terminating while serving -> drained", "shop.orders-a2 ok kube-sync")

	k.applySlice(slice("orders", "orders-a", ready("orders-a2"), endpoint{pod: "orders-a3", terminating: true}))
	step("a terminating endpoint seen first is not registered", "shop.orders-a2 ok kube-sync")

	k.applySlice(slice("orders", "orders-b", ready("orders-b1"), ready("orders-b2")))
	step("a second slice", "shop.orders-a2 ok kube-sync", "shop.orders-b1 ok kube-sync", "shop.orders-b2 ok kube-sync")

	// an invalid annotation: nothing registered for that Service, an Event on it
	pay := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "payments",
		Annotations: map[string]string{kubesync.AnnotationCapabilities: `[{"capability_id":"payments.charge","capability_version":"one"}]`, kubesync.AnnotationVersion: "2.0.0"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}
	k.applyService(pay)
	k.applySlice(slice("payments", "payments-a", ready("payments-a1")))
	eventDeadline := time.Now().Add(bound)
	for {
		evs, err := c.kube.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=payments"})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			if evs.Items[0].Reason != "InvalidMeshflowsAnnotations" || !strings.Contains(evs.Items[0].Message, "capability_version") {
				t.Errorf("event %s: %s", evs.Items[0].Reason, evs.Items[0].Message)
			}
			break
		}
		if time.Now().After(eventDeadline) {
			t.Fatal("no Event on the Service with an invalid annotation")
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs, err := m.client(t, "ops").Events(ctx, apiv1.EventsQuery{Types: []string{apiv1.EventRuntimeRejected}})
	if err != nil || len(evs.Events) != 1 || evs.Events[0].Subject != "kubernetes/shop/payments" || !strings.Contains(evs.Events[0].Message, "capability_version") {
		t.Errorf("the registry's journal: %+v %v, want the invalid annotation", evs, err)
	}
	step("an invalid annotation registers nothing", "shop.orders-a2 ok kube-sync", "shop.orders-b1 ok kube-sync", "shop.orders-b2 ok kube-sync")

	// a Service in a namespace not watched
	other := orders(nil)
	other.Namespace = "elsewhere"
	k.applyService(other)
	elsewhere := slice("orders", "orders-x", ready("orders-x1"))
	elsewhere.Namespace = "elsewhere"
	k.applySlice(elsewhere)

	// the syncer restarts; while it is away a pod goes and one comes
	_, before := m.state()
	sy.stop(t)
	k.applySlice(slice("orders", "orders-b", ready("orders-b1"), ready("orders-b3")))
	startSyncer(t, c, m, "shop")
	step("restarted: adopted, what went while away removed", "shop.orders-a2 ok kube-sync", "shop.orders-b1 ok kube-sync", "shop.orders-b3 ok kube-sync")
	_, after := m.state()
	for _, id := range []string{"shop.orders-a2", "shop.orders-b1"} {
		if after[id] != before[id] {
			t.Errorf("%s: generation %d after the restart, was %d: adopted instances keep theirs", id, after[id], before[id])
		}
	}

	if err := c.kube.DiscoveryV1().EndpointSlices("shop").Delete(ctx, "orders-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	step("one of two slices deleted: only its endpoints go", "shop.orders-a2 ok kube-sync")

	if err := c.kube.CoreV1().Services("shop").Delete(ctx, "orders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	step("the Service deleted")

	slices.Sort(took)
	t.Logf("registry state reached after a write: min %d ms, median %d ms, max %d ms over %d steps (bound %s)",
		took[0].Milliseconds(), took[len(took)/2].Milliseconds(), took[len(took)-1].Milliseconds(), len(took), bound)
}

func TestOneLeaderAmongReplicas(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "meshflows"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kube, err := kubesync.NewClient(c.config)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	leading := map[string]bool{}
	became := make(chan string, 4)
	run := func(id string) (context.CancelFunc, chan error) {
		el, err := kubesync.NewElector(kubesync.ElectorConfig{Leases: kube, Namespace: "meshflows", Name: "meshflows-kube-sync", Identity: id,
			LeaseDuration: 3 * time.Second, RetryPeriod: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- el.Run(ctx, func(lctx context.Context) error {
				mu.Lock()
				for other, on := range leading {
					if on {
						t.Errorf("%s leads while %s does", id, other)
					}
				}
				leading[id] = true
				mu.Unlock()
				became <- id
				<-lctx.Done()
				mu.Lock()
				leading[id] = false
				mu.Unlock()
				return nil
			})
		}()
		return cancel, done
	}
	stopA, doneA := run("replica-a")
	if got := <-became; got != "replica-a" {
		t.Fatalf("%s leads first", got)
	}
	stopB, doneB := run("replica-b")
	select {
	case id := <-became:
		t.Fatalf("%s leads while replica-a holds the lease", id)
	case <-time.After(500 * time.Millisecond): // five of its tries
	}
	start := time.Now()
	stopA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if got := <-became; got != "replica-b" {
		t.Fatalf("%s took over", got)
	}
	t.Logf("replica-b took over %d ms after replica-a stopped (it released the lease; lease duration 3 s)", time.Since(start).Milliseconds())
	l, err := c.kube.CoordinationV1().Leases("meshflows").Get(ctx, "meshflows-kube-sync", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "replica-b" {
		t.Errorf("lease %+v, %v", l, err)
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
}
