package kubesync

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeLeases holds Leases with the API server's optimistic concurrency: an update must name
// the resourceVersion it read.
type fakeLeases struct {
	mu     sync.Mutex
	leases map[string]coordinationv1.Lease
	rv     int
	fail   bool // every call fails (the API server unreachable)
}

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (f *fakeLeases) GetLease(_ context.Context, ns, name string) (*coordinationv1.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, apierrors.NewServiceUnavailable("down")
	}
	l, ok := f.leases[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(leaseResource, name)
	}
	return l.DeepCopy(), nil
}

func (f *fakeLeases) CreateLease(_ context.Context, l *coordinationv1.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return apierrors.NewServiceUnavailable("down")
	}
	key := l.Namespace + "/" + l.Name
	if _, ok := f.leases[key]; ok {
		return apierrors.NewAlreadyExists(leaseResource, l.Name)
	}
	f.rv++
	c := *l.DeepCopy()
	c.ResourceVersion = strconv.Itoa(f.rv)
	f.leases[key] = c
	return nil
}

func (f *fakeLeases) UpdateLease(_ context.Context, l *coordinationv1.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return apierrors.NewServiceUnavailable("down")
	}
	key := l.Namespace + "/" + l.Name
	if cur, ok := f.leases[key]; !ok || cur.ResourceVersion != l.ResourceVersion {
		return apierrors.NewConflict(leaseResource, l.Name, nil)
	}
	f.rv++
	c := *l.DeepCopy()
	c.ResourceVersion = strconv.Itoa(f.rv)
	f.leases[key] = c
	return nil
}

func (f *fakeLeases) holder() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases["meshflows/kube-sync"]
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// manualClock moves only when told; After fires once Now reaches its deadline.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	return ch
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

func (c *manualClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func elector(t *testing.T, leases LeaseAPI, clock Clock, id string) *Elector {
	t.Helper()
	e, err := NewElector(ElectorConfig{Leases: leases, Namespace: "meshflows", Name: "kube-sync", Identity: id,
		LeaseDuration: 15 * time.Second, RetryPeriod: 2 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestOneLeaderAndATakeoverOnlyAfterALeaseDurationOnTheCandidatesClock(t *testing.T) {
	leases := &fakeLeases{leases: map[string]coordinationv1.Lease{}}
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	a, b := elector(t, leases, clock, "a"), elector(t, leases, clock, "b")
	ctx := context.Background()
	steps := []struct {
		who      *Elector
		advance  time.Duration
		wantHeld bool
		holder   string
	}{
		{who: a, wantHeld: true, holder: "a"},                // created
		{who: b, wantHeld: false, holder: "a"},               // seen, held
		{who: a, advance: 2 * time.Second, wantHeld: true},   // renewed
		{who: b, advance: 14 * time.Second, wantHeld: false}, // a renewed 14 s ago by b's clock: b saw the change
		{who: b, advance: 14 * time.Second, wantHeld: false}, // 14 s since b last saw it change
		{who: b, advance: 1 * time.Second, wantHeld: true},   // 15 s unchanged: taken
		{who: a, advance: 0, wantHeld: false, holder: "b"},   // a finds b holding it
	}
	for i, st := range steps {
		clock.advance(st.advance)
		held, holder, err := st.who.try(ctx)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if held != st.wantHeld || (st.holder != "" && holder != st.holder) {
			t.Fatalf("step %d (%s): held %v by %q, want %v by %q", i, st.who.cfg.Identity, held, holder, st.wantHeld, st.holder)
		}
	}
	if tr := leases.leases["meshflows/kube-sync"].Spec.LeaseTransitions; tr == nil || *tr != 1 {
		t.Errorf("lease transitions %v, want 1", tr)
	}
}

func TestALeaderThatStopsReleasesAndOneThatCannotRenewStepsDown(t *testing.T) {
	leases := &fakeLeases{leases: map[string]coordinationv1.Lease{}}
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	a := elector(t, leases, clock, "a")
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	stopped := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, func(lctx context.Context) error {
			leading <- struct{}{}
			<-lctx.Done()
			stopped <- struct{}{}
			return nil
		})
	}()
	<-leading
	// the API server goes away: renewals fail until a lease duration less a retry has passed
	leases.mu.Lock()
	leases.fail = true
	leases.mu.Unlock()
	for range 6 {
		waitPending(t, clock)
		clock.advance(2 * time.Second)
	}
	waitPending(t, clock)
	select {
	case <-stopped:
		t.Fatal("stepped down before a lease duration")
	default:
	}
	clock.advance(2 * time.Second) // 14 s without a renewal: another may take it at 15
	<-stopped
	// it stands by; the API server returns and the Lease (still its own) is taken again
	leases.mu.Lock()
	leases.fail = false
	leases.mu.Unlock()
	waitPending(t, clock)
	clock.advance(2 * time.Second)
	<-leading
	cancel()
	<-stopped
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h := leases.holder(); h != "" {
		t.Errorf("holder %q after a's end, want it released", h)
	}
}

// waitPending waits until a goroutine waits on the clock (what it does between tries).
func waitPending(t *testing.T, c *manualClock) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.pending() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}
