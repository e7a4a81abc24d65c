package server_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// spacingFixture is a registry (registrytest) whose server's clock (and build clock) moves
// step at every reading, so that every answer it builds took step, and whose Sleep records
// the holds instead of waiting them out.
type spacingFixture struct {
	url string
	reg *registry.Registry

	mu    sync.Mutex
	now   time.Time
	step  time.Duration
	holds []time.Duration
}

func newSpacingFixture(t *testing.T, step time.Duration, spacing float64) *spacingFixture {
	t.Helper()
	f := &spacingFixture{now: registrytest.Epoch0, step: step}
	s := registrytest.NewServerWith(t, registry.Config{}, server.Config{PollSpacing: spacing, Now: f.clock, Sleep: f.sleep,
		BuildClock: func() time.Duration { return f.clock().Sub(registrytest.Epoch0) }}, registrytest.Epoch0)
	f.url, f.reg = s.URL, s.Registry
	return f
}

func (f *spacingFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(f.step)
	return f.now
}

func (f *spacingFixture) sleep(_ context.Context, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, d)
}

func (f *spacingFixture) held() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.holds...)
}

// TestLongPollSpacing: a long poll that would have a costly answer built anew within
// PollSpacing times its last build is held until then, never past its own wait; a plain
// request, an answer already built for the revision, a cheap answer, a page of a listing,
// and a server that does not space are never held. The clock is the fixture's: nothing here waits.
func TestLongPollSpacing(t *testing.T) {
	const step = 2 * time.Millisecond // every build takes one step
	tests := []struct {
		name    string
		step    time.Duration
		spacing float64
		path    string
		poll    bool   // a long poll (index given), else a plain request
		paged   bool   // the long poll asks for a page (limit) of what was built unpaged
		delta   bool   // the long poll is a delta watch
		wait    string // the long poll's wait
		cached  bool   // the answer at the new revision is built before the request
		wantMin time.Duration
		wantMax time.Duration // 0: not held
	}{
		{name: "long poll after a change", step: step, spacing: 10, path: "/v1/discovery/capabilities?include=all", poll: true, wait: "30s",
			wantMin: step, wantMax: 10 * step},
		{name: "routes long poll after a change", step: step, spacing: 10, path: "/v1/discovery/routes?", poll: true, wait: "30s",
			wantMin: step, wantMax: 10 * step},
		{name: "spacing scales the hold", step: step, spacing: 100, path: "/v1/discovery/capabilities?include=all", poll: true, wait: "30s",
			wantMin: 10 * step, wantMax: 100 * step},
		{name: "never past the poll's wait", step: step, spacing: 100, path: "/v1/discovery/capabilities?include=all", poll: true, wait: "5ms",
			wantMin: time.Nanosecond, wantMax: 5 * time.Millisecond},
		{name: "plain request", step: step, spacing: 10, path: "/v1/discovery/capabilities?include=all"},
		{name: "answer already built", step: step, spacing: 10, path: "/v1/discovery/capabilities?include=all", poll: true, wait: "30s", cached: true},
		{name: "answer built in under a millisecond", step: 500 * time.Microsecond, spacing: 10, path: "/v1/discovery/capabilities?include=all", poll: true, wait: "30s"},
		{name: "spacing off", step: step, spacing: -1, path: "/v1/discovery/capabilities?include=all", poll: true, wait: "30s"},
		// a listing read a page at a time is never held: each page is a request of its own
		{name: "paged long poll", step: step, spacing: 10, path: "/v1/discovery/capabilities?include=all", poll: true, paged: true, wait: "30s"},
		// a delta costs the instances that changed, not the whole answer's build
		{name: "delta watch", step: step, spacing: 10, path: "/v1/discovery/capabilities?include=all", poll: true, delta: true, wait: "30s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newSpacingFixture(t, tt.step, tt.spacing)
			regOne := func(id string) {
				r := do(t, "POST", f.url+"/v1/services/register", strings.ReplaceAll(jmsBody, "egress-jms-7c9f5d8c4f-9x2kq", id), "Content-Type", "application/json")
				if r.status != 200 {
					t.Fatalf("register %s = %d %s", id, r.status, r.body)
				}
			}
			regOne("jms-1")
			if r := do(t, "GET", f.url+tt.path, ""); r.status != 200 { // the first build: timed
				t.Fatalf("first answer = %d %s", r.status, r.body)
			}
			before := f.reg.State().Revision
			regOne("jms-2")
			if tt.cached {
				do(t, "GET", f.url+tt.path, "")
			}
			url := f.url + tt.path
			if tt.poll {
				url += "&index=" + itoa(before) + "&wait=" + tt.wait
			}
			if tt.paged {
				url += "&limit=10"
			}
			if tt.delta {
				url += "&delta=true"
			}
			r := do(t, "GET", url, "")
			if r.status != 200 || !strings.Contains(string(r.body), "jms-2") {
				t.Fatalf("answer = %d %s, want 200 with jms-2", r.status, r.body)
			}
			holds := f.held()
			if tt.wantMax == 0 {
				if len(holds) != 0 {
					t.Fatalf("held %v, want no hold", holds)
				}
				return
			}
			if len(holds) != 1 || holds[0] < tt.wantMin || holds[0] > tt.wantMax {
				t.Fatalf("held %v, want one hold in [%v, %v]", holds, tt.wantMin, tt.wantMax)
			}
		})
	}
}

// TestPollSpacingValidate: a spacing that is not a number is refused, not run with.
func TestPollSpacingValidate(t *testing.T) {
	reg, err := registry.New(memstore.New(nil), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spacing float64
		ok      bool
	}{{0, true}, {-1, true}, {2.5, true}, {math.NaN(), false}, {math.Inf(1), false}} {
		t.Run(fmt.Sprint(tt.spacing), func(t *testing.T) {
			_, err := server.New(reg, server.Config{PollSpacing: tt.spacing})
			if (err == nil) != tt.ok {
				t.Fatalf("New(PollSpacing %v) error = %v, want ok %v", tt.spacing, err, tt.ok)
			}
		})
	}
}
