package prober

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshflows/meshflows/internal/health"
)

// script answers a target's probes in turn: "ok", "fail" (500) or "hang" (no answer before
// the probe's deadline); past its end it repeats its last answer.
type script struct {
	mu    sync.Mutex
	steps []string
	n     int
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	step := s.steps[min(s.n, len(s.steps)-1)]
	s.n++
	s.mu.Unlock()
	switch step {
	case "fail":
		w.WriteHeader(http.StatusInternalServerError)
	case "hang":
		<-r.Context().Done()
	}
}

func TestProberConfirmsLostProbes(t *testing.T) {
	const confirm = 4
	tests := []struct {
		name    string
		steps   []string
		suspect bool // a consumer reports the target first
		want    []string
		lost    float64
	}{
		{name: "an unanswered probe that the re-probe answers was lost: nothing is reported",
			steps: []string{"hang", "ok"}, want: nil, lost: 1},
		{name: "three lost in a row, then an answer: still nothing",
			steps: []string{"hang", "hang", "hang", "ok"}, want: nil, lost: 3},
		{name: "no answer to the probe and its re-probes: confirmed, every one reported",
			steps: []string{"hang"}, want: []string{"timeout", "timeout", "timeout", "timeout"}},
		{name: "a 500 is evidence even when the re-probe passes: reported at once; the ok re-probe is not (re-entry keeps the interval)",
			steps: []string{"fail", "ok"}, want: []string{"fail"}},
		{name: "a 500 after lost probes: the lost ones are reported with it",
			steps: []string{"hang", "fail", "fail", "ok"}, want: []string{"timeout", "fail", "fail"}},
		{name: "a consumer's report re-probes at once: a hang is confirmed without waiting for the interval",
			steps: []string{"ok", "hang"}, suspect: true, want: []string{"ok", "timeout", "timeout", "timeout", "timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(&script{steps: tt.steps})
			defer srv.Close()
			targets := []Target{{ID: "a", Generation: 1, URL: srv.URL, Interval: 30 * time.Second}}
			p, res := newTestProber(t, func() []Target { return targets },
				Config{ConfirmLost: confirm, Timeout: 100 * time.Millisecond, ReprobeTimeout: 100 * time.Millisecond})
			ctx := context.Background()
			now := t0
			step := func() {
				p.Step(ctx, now)
				p.Wait()
				now = now.Add(DefaultReprobeEvery)
			}
			step() // schedules the first probe (jitter 0: due at once)
			step() // the first probe
			if tt.suspect {
				p.Suspect("a")
			}
			// 20 steps of 100 ms: 2 s, far less than the 30 s interval — every probe after
			// the first is a re-probe
			for range 20 {
				step()
			}
			if diff := cmp.Diff(tt.want, res.got["a"]); diff != "" {
				t.Errorf("reported (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(p.lost); got != tt.lost {
				t.Errorf("meshflows_probes_lost_total = %v, want %v", got, tt.lost)
			}
		})
	}
}

// lossRun is how long (simulated) TestProberRandomLossWithdrawsNothing probes its targets; a
// long run measures the false-withdrawal rate: go test ./internal/prober -run RandomLoss -lossrun 2h
var (
	lossRun     = flag.Duration("lossrun", time.Minute, "simulated time of the random-loss test")
	lossTargets = flag.Int("losstargets", 40, "targets of the random-loss test")
)

// TestProberRandomLossWithdrawsNothing probes 40 targets at a 1 s interval whose health
// endpoint leaves a random 25 % (and 5 %) of probes unanswered: no probe may be reported as
// failing — each lost probe is answered by a re-probe before ConfirmLost (12) in a row go
// unanswered. The clock is the test's (Step's now); the probes are real HTTP requests, a lost
// one waiting out a 20 ms deadline.
func TestProberRandomLossWithdrawsNothing(t *testing.T) {
	for _, loss := range []float64{0.25, 0.05} {
		var answered, dropped atomic.Int64
		var mu sync.Mutex
		run := map[string]int{} // each target's current run of unanswered probes
		runs := map[int]int{}   // completed runs by length
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lost := rand.Float64() < loss
			mu.Lock()
			if lost {
				run[r.URL.Path]++
			} else if n := run[r.URL.Path]; n > 0 {
				runs[n]++
				run[r.URL.Path] = 0
			}
			mu.Unlock()
			if lost {
				dropped.Add(1)
				<-r.Context().Done()
				return
			}
			answered.Add(1)
		}))
		var targets []Target
		for i := range *lossTargets {
			id := "t" + strconv.Itoa(i)
			targets = append(targets, Target{ID: id, Generation: 1, URL: srv.URL + "/" + id, Interval: time.Second})
		}
		p, res := newTestProber(t, func() []Target { return targets },
			Config{Timeout: 20 * time.Millisecond, ReprobeTimeout: 20 * time.Millisecond})
		p.cfg.Jitter = func(d time.Duration) time.Duration { // spread the targets as the real jitter does
			if d <= 0 {
				return 0
			}
			return rand.N(d)
		}
		ctx := context.Background()
		for now := t0; now.Before(t0.Add(*lossRun)); now = now.Add(DefaultTick) {
			p.Step(ctx, now)
			p.Wait()
		}
		srv.Close()
		failed := 0
		for _, rs := range res.got {
			for _, r := range rs {
				if r != health.ProbeOK {
					failed++
				}
			}
		}
		hours := float64(len(targets)) * lossRun.Hours()
		share := float64(dropped.Load()) / float64(dropped.Load()+answered.Load())
		// a false withdrawal needs ConfirmLost unanswered probes in a row; a suspicion starts
		// at every lost probe of the interval's 3,600 an hour
		model := 3600 * math.Pow(share, DefaultConfirmLost)
		longest := 0
		var hist []string
		for n := 1; n <= DefaultConfirmLost; n++ {
			if runs[n] > 0 {
				longest = n
				hist = append(hist, fmt.Sprintf("%d:%d", n, runs[n]))
			}
		}
		t.Logf("loss %.0f%%: %d probes (%d dropped, %.1f%%), %v lost and not counted, %d reported failing over %.1f instance-hours; runs of unanswered probes by length %s (longest %d of the %d that confirm); model: %.2g false withdrawals per instance-hour",
			100*loss, dropped.Load()+answered.Load(), dropped.Load(), 100*share, testutil.ToFloat64(p.lost), failed, hours, strings.Join(hist, " "), longest, DefaultConfirmLost, model)
		if failed > 0 {
			t.Errorf("loss %.0f%%: %d probes reported failing, want none (a lost probe is not a failure)", 100*loss, failed)
		}
	}
}
