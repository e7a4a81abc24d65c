package kubesync

import (
	"context"
	"fmt"
	"net/http"
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// fakeRegistry is a registry of one owner's view: instances by id, generations, the writes
// it was sent in order.
type fakeRegistry struct {
	mu        sync.Mutex
	owner     string // recorded on what is registered
	instances map[string]*apiv1.Instance
	gen       int64
	writes    []string // "register id health", "heartbeat id health", "deregister id"
	journal   []string // "type subject: message" of the events reported
	down      bool     // the catalog does not answer
}

func newFakeRegistry(owner string) *fakeRegistry {
	return &fakeRegistry{owner: owner, instances: map[string]*apiv1.Instance{}}
}

func (f *fakeRegistry) Register(_ context.Context, req *apiv1.RegisterRequest) (*apiv1.RegisterResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	health := req.Health
	if health == "" {
		health = apiv1.HealthOK
	}
	caps := slices.Clone(req.Capabilities)
	for i := range caps {
		if len(caps[i].Metadata) == 0 {
			caps[i].Metadata = []byte("{}") // as the registry answers an absent metadata
		}
	}
	f.instances[req.InstanceID] = &apiv1.Instance{InstanceID: req.InstanceID, ServiceName: req.ServiceName, ServiceVersion: req.ServiceVersion,
		Endpoint: req.Endpoint, Zone: req.Zone, Generation: f.gen, Health: health, Capabilities: caps, Manifest: req.Manifest, Owner: f.owner}
	f.writes = append(f.writes, "register "+req.InstanceID+" "+health)
	return &apiv1.RegisterResponse{Accepted: true, Generation: f.gen, HeartbeatIntervalSeconds: 5, LeaseTTLSeconds: 15}, nil
}

func (f *fakeRegistry) Heartbeat(_ context.Context, id string, req *apiv1.HeartbeatRequest) (*apiv1.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, "heartbeat "+id+" "+req.Health)
	in, ok := f.instances[id]
	switch {
	case !ok:
		return nil, &apiv1.Error{Status: http.StatusNotFound, Code: "NOT_FOUND"}
	case in.Generation != req.Generation:
		return nil, &apiv1.Error{Status: http.StatusGone, Code: "GENERATION_MISMATCH"}
	}
	in.Health = req.Health
	return &apiv1.HeartbeatResponse{Generation: in.Generation}, nil
}

func (f *fakeRegistry) Deregister(_ context.Context, id string, generation int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, "deregister "+id)
	in, ok := f.instances[id]
	if !ok {
		return &apiv1.Error{Status: http.StatusNotFound, Code: "NOT_FOUND"}
	}
	if generation > 0 && in.Generation != generation {
		return &apiv1.Error{Status: http.StatusGone, Code: "GENERATION_MISMATCH"}
	}
	delete(f.instances, id)
	return nil
}

func (f *fakeRegistry) Services(context.Context, client.Page) (*apiv1.CatalogResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, fmt.Errorf("connection refused")
	}
	var out apiv1.CatalogResponse
	for _, in := range f.instances {
		out.Instances = append(out.Instances, *in)
	}
	return &out, nil
}

func (f *fakeRegistry) Report(_ context.Context, req *apiv1.ReportRequest) (*apiv1.ReportResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range req.Events {
		f.journal = append(f.journal, e.Type+" "+e.Subject+": "+e.Message)
	}
	return &apiv1.ReportResponse{Recorded: len(req.Events)}, nil
}

// takeWrites returns the writes since the last call, sorted (they run in parallel).
func (f *fakeRegistry) takeWrites() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.writes
	f.writes = nil
	sort.Strings(w)
	return w
}

// state is "id health" of every instance, sorted.
func (f *fakeRegistry) state() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []string{}
	for id, in := range f.instances {
		out = append(out, id+" "+in.Health)
	}
	sort.Strings(out)
	return out
}

// fakeKube records Events; the syncer's stores stand in for its informers.
type fakeKube struct {
	mu     sync.Mutex
	events []string // "namespace/name reason: message"
}

func (k *fakeKube) ListServices(context.Context, string, metav1.ListOptions) (*corev1.ServiceList, error) {
	return nil, fmt.Errorf("not in this test")
}
func (k *fakeKube) WatchServices(context.Context, string, metav1.ListOptions) (watch.Interface, error) {
	return nil, fmt.Errorf("not in this test")
}
func (k *fakeKube) ListEndpointSlices(context.Context, string, metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	return nil, fmt.Errorf("not in this test")
}
func (k *fakeKube) WatchEndpointSlices(context.Context, string, metav1.ListOptions) (watch.Interface, error) {
	return nil, fmt.Errorf("not in this test")
}
func (k *fakeKube) CreateEvent(_ context.Context, ev *corev1.Event) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events = append(k.events, ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name+" "+ev.Reason+": "+ev.Message)
	return nil
}

// harness is a Syncer over stores the test writes, as the informers would.
type harness struct {
	t        *testing.T
	s        *Syncer
	reg      *fakeRegistry
	kube     *fakeKube
	svcs, sl cache.Indexer
}

func newHarness(t *testing.T, reg *fakeRegistry, identity string) *harness {
	t.Helper()
	return newHarnessWithClock(t, reg, identity, nil)
}

func newHarnessWithClock(t *testing.T, reg *fakeRegistry, identity string, clock Clock) *harness {
	t.Helper()
	h := &harness{t: t, reg: reg, kube: &fakeKube{},
		svcs: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		sl:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{sliceService: sliceServiceKey})}
	s, err := New(Config{Kube: h.kube, Registry: reg, Identity: identity, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	s.services, s.slices = stores{h.svcs}, stores{h.sl}
	h.s = s
	return h
}

// put adds or replaces objects (Services, EndpointSlices) and marks them, as an informer's
// handler does.
func (h *harness) put(objs ...any) {
	for _, o := range objs {
		var err error
		switch v := o.(type) {
		case *corev1.Service:
			err = h.svcs.Update(v)
		case *discoveryv1.EndpointSlice:
			err = h.sl.Update(v)
		}
		if err != nil {
			h.t.Fatal(err)
		}
		h.s.markObj(o)
	}
}

func (h *harness) remove(objs ...any) {
	for _, o := range objs {
		var err error
		switch v := o.(type) {
		case *corev1.Service:
			err = h.svcs.Delete(v)
		case *discoveryv1.EndpointSlice:
			err = h.sl.Delete(v)
		}
		if err != nil {
			h.t.Fatal(err)
		}
		h.s.markObj(o)
	}
}

// start runs the syncer's start (first full list) with what the stores hold.
func (h *harness) start() {
	h.t.Helper()
	if err := h.s.start(context.Background(), time.Now()); err != nil {
		h.t.Fatal(err)
	}
}

// reconcile runs one coalesced batch, as Run does after the window.
func (h *harness) reconcile() { h.s.reconcileDirty(context.Background(), time.Now()) }

func (h *harness) expect(what string, writes, state []string) {
	h.t.Helper()
	if writes == nil {
		writes = []string{}
	}
	got := h.reg.takeWrites()
	if got == nil {
		got = []string{}
	}
	if diff := cmp.Diff(writes, got); diff != "" {
		h.t.Errorf("%s: writes (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(state, h.reg.state()); diff != "" {
		h.t.Errorf("%s: registry (-want +got):\n%s", what, diff)
	}
}

type cond struct{ ready, terminating bool }

func ordersSlice(name string, eps map[string]cond) *discoveryv1.EndpointSlice {
	var list []discoveryv1.Endpoint
	names := make([]string, 0, len(eps))
	for n := range eps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := eps[n]
		list = append(list, discoveryv1.Endpoint{Addresses: []string{podAddress(n)}, TargetRef: pod(n),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(c.ready), Serving: ptr(c.ready || c.terminating), Terminating: ptr(c.terminating)}})
	}
	return slice("shop", "orders", name, discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}}, list...)
}

// podAddress is a stable address per pod name.
func podAddress(name string) string {
	sum := 0
	for _, r := range name {
		sum = sum*31 + int(r)
	}
	return fmt.Sprintf("10.0.%d.%d", sum/250%250, sum%250+1)
}

func TestConditionsAreMappedNotCollapsed(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	h := newHarness(t, reg, "kube-sync")
	h.put(service("shop", "orders", nil), ordersSlice("orders-a", map[string]cond{"a": {ready: true}, "b": {}}))
	h.start()
	h.expect("first list", []string{"register shop.a ok", "register shop.b not_ready"}, []string{"shop.a ok", "shop.b not_ready"})

	h.put(ordersSlice("orders-a", map[string]cond{"a": {ready: true}, "b": {ready: true}}))
	h.reconcile()
	h.expect("b ready", []string{"heartbeat shop.b ok"}, []string{"shop.a ok", "shop.b ok"})

	h.put(ordersSlice("orders-a", map[string]cond{"a": {ready: false, terminating: true}, "b": {ready: true}}))
	h.reconcile()
	h.expect("a terminating (serving or not)", []string{"deregister shop.a"}, []string{"shop.b ok"})

	h.put(ordersSlice("orders-a", map[string]cond{"a": {ready: true, terminating: true}, "b": {ready: true}}))
	h.reconcile()
	h.expect("a still terminating, serving: nothing more", nil, []string{"shop.b ok"})

	h.put(ordersSlice("orders-a", map[string]cond{"b": {ready: true}}))
	h.reconcile()
	h.expect("a's endpoint gone after its drain: nothing more", nil, []string{"shop.b ok"})

	h.put(ordersSlice("orders-a", map[string]cond{}))
	h.reconcile()
	h.expect("b's endpoint gone without terminating first", []string{"deregister shop.b"}, []string{})
	if n := len(h.s.owned); n != 0 {
		t.Errorf("the syncer still owns %d instances whose endpoints are gone", n)
	}

	h.put(ordersSlice("orders-a", map[string]cond{"a": {ready: true}}))
	h.reconcile()
	h.expect("a pod of the same name again", []string{"register shop.a ok"}, []string{"shop.a ok"})

	h.remove(service("shop", "orders", nil))
	h.reconcile()
	h.expect("the Service deleted", []string{"deregister shop.a"}, []string{})
}

func TestADeletedSliceRemovesOnlyItsEndpoints(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	h := newHarness(t, reg, "kube-sync")
	a, b := ordersSlice("orders-a", map[string]cond{"a1": {ready: true}, "a2": {ready: true}}), ordersSlice("orders-b", map[string]cond{"b1": {ready: true}})
	h.put(service("shop", "orders", nil), a, b)
	h.start()
	h.expect("first list", []string{"register shop.a1 ok", "register shop.a2 ok", "register shop.b1 ok"}, []string{"shop.a1 ok", "shop.a2 ok", "shop.b1 ok"})
	h.remove(b)
	h.reconcile()
	h.expect("orders-b deleted", []string{"deregister shop.b1"}, []string{"shop.a1 ok", "shop.a2 ok"})
}

func TestARestartedSyncerAdoptsAndRemovesOnlyAfterTheFirstFullList(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	first := newHarness(t, reg, "kube-sync")
	first.put(service("shop", "orders", nil), ordersSlice("orders-a", map[string]cond{"a": {ready: true}, "b": {ready: true}, "c": {}}))
	first.start()
	reg.takeWrites()
	gens := map[string]int64{}
	for _, in := range reg.instances {
		gens[in.InstanceID] = in.Generation
	}
	// someone else's instance, registered by hand
	reg.owner = "ops"
	if _, err := reg.Register(context.Background(), &apiv1.RegisterRequest{InstanceID: "shop.manual", ServiceName: "orders", ServiceVersion: "1.2.0",
		Endpoint: "http://10.9.9.9:8080", Capabilities: first.s.owned["shop.a"].req.Capabilities}); err != nil {
		t.Fatal(err)
	}
	reg.owner = "kube-sync"
	reg.takeWrites()

	// while no syncer ran: b went, c became ready, a's version changed
	second := newHarness(t, reg, "kube-sync")
	svc := service("shop", "orders", nil)
	second.put(svc, ordersSlice("orders-a", map[string]cond{"a": {ready: true}, "c": {ready: true}}))
	second.start()
	second.expect("adopted, c renewed as ready, b removed, the manual one untouched",
		[]string{"deregister shop.b", "heartbeat shop.a ok", "heartbeat shop.c ok"}, []string{"shop.a ok", "shop.c ok", "shop.manual ok"})
	if g := reg.instances["shop.a"].Generation; g != gens["shop.a"] {
		t.Errorf("shop.a was registered again (generation %d, was %d): adoption keeps the generation", g, gens["shop.a"])
	}

	// a registration that differs from what the registry holds is registered again
	third := newHarness(t, reg, "kube-sync")
	third.put(service("shop", "orders", map[string]string{AnnotationVersion: "1.3.0"}), ordersSlice("orders-a", map[string]cond{"a": {ready: true}, "c": {ready: true}}))
	third.start()
	third.expect("a new version while away", []string{"register shop.a ok", "register shop.c ok"}, []string{"shop.a ok", "shop.c ok", "shop.manual ok"})
}

// TestNothingIsRemovedBeforeTheFirstFullList: a restarted syncer's batch that sees a Service
// before its slices (they are still listing) removes none of the instances it adopts; once
// the slice is in and the first full list applied, the instance is renewed, not removed.
func TestNothingIsRemovedBeforeTheFirstFullList(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	first := newHarness(t, reg, "kube-sync")
	first.put(service("shop", "orders", nil), ordersSlice("orders-a", map[string]cond{"a": {ready: true}}))
	first.start()
	reg.takeWrites()
	second := newHarness(t, reg, "kube-sync")
	if err := second.s.loadAdoptable(context.Background()); err != nil {
		t.Fatal(err)
	}
	second.put(service("shop", "orders", nil))
	second.reconcile()
	second.expect("the Service seen, its slice not yet", nil, []string{"shop.a ok"})
	second.put(ordersSlice("orders-a", map[string]cond{"a": {ready: true}}))
	second.reconcile()
	second.s.removeUnclaimed(context.Background())
	second.expect("the slice in, the first full list applied", []string{"heartbeat shop.a ok"}, []string{"shop.a ok"})
}

func TestAnInvalidAnnotationRegistersNothingKeepsWhatWasAndSaysWhy(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	h := newHarness(t, reg, "kube-sync")
	bad := service("shop", "payments", map[string]string{AnnotationCapabilities: `[{"capability_id":"payments.charge","capability_version":"one"}]`})
	h.put(service("shop", "orders", nil), ordersSlice("orders-a", map[string]cond{"a": {ready: true}}), bad,
		slice("shop", "payments", "payments-a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Port: ptr(int32(80))}}, discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, TargetRef: pod("pay")}))
	h.start()
	h.expect("first list", []string{"register shop.a ok"}, []string{"shop.a ok"})
	if len(h.kube.events) != 1 || !strings.HasPrefix(h.kube.events[0], "shop/payments InvalidMeshflowsAnnotations: ") || !strings.Contains(h.kube.events[0], "capability_version") {
		t.Errorf("events %q, want one on shop/payments naming capability_version", h.kube.events)
	}
	// the orders Service broken by an edit: what it registered stays, one Event
	h.put(service("shop", "orders", map[string]string{AnnotationScheme: "gopher"}))
	h.reconcile()
	h.put(service("shop", "orders", map[string]string{AnnotationScheme: "gopher"}))
	h.reconcile()
	h.expect("orders broken", nil, []string{"shop.a ok"})
	if len(h.kube.events) != 2 || !strings.Contains(h.kube.events[1], "gopher") {
		t.Errorf("events %q, want a second one naming gopher", h.kube.events)
	}
	if len(reg.journal) != 2 || !strings.HasPrefix(reg.journal[0], "runtime.rejected kubernetes/shop/payments: ") || !strings.Contains(reg.journal[1], "gopher") {
		t.Errorf("journal %q, want the two problems", reg.journal)
	}
	// fixed: synced again; the annotation removed: its instances go
	h.put(service("shop", "orders", map[string]string{AnnotationZoneTestVersion: ""}))
	h.reconcile()
	h.expect("orders fixed", nil, []string{"shop.a ok"})
	h.put(service("shop", "orders", map[string]string{AnnotationCapabilities: "-"}))
	h.reconcile()
	h.expect("annotation removed", []string{"deregister shop.a"}, []string{})
}

// AnnotationZoneTestVersion is an annotation kube-sync does not read.
const AnnotationZoneTestVersion = "example.com/unrelated"

func TestAGoneInstanceIsRegisteredAgainAtItsNextRenewal(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	h := newHarness(t, reg, "kube-sync")
	h.put(service("shop", "orders", nil), ordersSlice("orders-a", map[string]cond{"a": {ready: true}}))
	h.start()
	reg.takeWrites()
	// the registry restarted empty
	reg.mu.Lock()
	clear(reg.instances)
	reg.mu.Unlock()
	var ops []op
	for id, o := range h.s.snapshot() {
		ops = append(ops, op{kind: "heartbeat", id: id, o: o})
	}
	h.s.apply(context.Background(), ops)
	h.expect("renewal after a registry restart", []string{"heartbeat shop.a ok", "register shop.a ok"}, []string{"shop.a ok"})
	if got := h.s.heartbeatEvery(); got != 5*time.Second {
		t.Errorf("heartbeat interval %s, want the registry's 5s", got)
	}
}

func TestTheFirstReconcileWaitsForTheRegistry(t *testing.T) {
	reg := newFakeRegistry("kube-sync")
	reg.down = true
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	h := newHarnessWithClock(t, reg, "kube-sync", clock)
	h.put(service("shop", "orders", nil), ordersSlice("orders-a", map[string]cond{"a": {ready: true}}))
	done := make(chan error, 1)
	go func() { done <- h.s.start(context.Background(), clock.Now()) }()
	waitPending(t, clock)
	waitPending(t, clock) // still waiting after its first try
	h.expect("the registry away", nil, []string{})
	reg.mu.Lock()
	reg.down = false
	reg.mu.Unlock()
	clock.advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.expect("the registry back", []string{"register shop.a ok"}, []string{"shop.a ok"})
}
