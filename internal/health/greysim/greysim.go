// Package greysim measures how outlier detectors catch grey failure: generated outcome
// streams — instances failing a small share of their requests, seen by several reporters that
// each report a 10-second window — run through the eligibility engine the registry runs (its
// relative-outlier rule) and, on the very same streams, through Envoy's two detectors as
// Envoy documents them (consecutive 5xx and success rate, with Envoy's defaults). 'meshflows
// bench outliers' prints the figures.
package greysim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// Window is how often each reporter reports, as the gateways and orchestrators do.
const Window = 10 * time.Second

// Fleet is one simulated cohort: Instances replicas of one capability in one zone, the first
// Bad of which fail BadRate of their requests and the others GoodRate; each receives RPS
// requests a second, spread evenly over Reporters.
type Fleet struct {
	Instances, Bad    int
	GoodRate, BadRate float64
	RPS               float64
	Reporters         int
	Seed              uint64
}

// Result is what one detector did over a run.
type Result struct {
	// FirstEjection is when the first bad instance was first ejected (0: never).
	FirstEjection time.Duration
	// Caught counts the bad instances ejected at least once; FalseEjections the ejections of
	// good instances; OutAtEnd the bad instances out of rotation when the run ends (for
	// Envoy, averaged over the proxies: each ejects for itself).
	Caught, FalseEjections int
	OutAtEnd               float64
}

// stream draws each window's (ok, errors) per (instance, reporter).
type stream struct {
	f   Fleet
	rnd *rand.Rand
	// carry spreads a fractional per-reporter volume over the windows
	carry []float64
}

func newStream(f Fleet) *stream {
	return &stream{f: f, rnd: rand.New(rand.NewPCG(f.Seed, 0x9e3779b97f4a7c15)), carry: make([]float64, f.Instances*f.Reporters)}
}

// next returns the requests and errors of instance i seen by reporter r in the next window.
func (s *stream) next(i, r int) (requests, errors int) {
	k := i*s.f.Reporters + r
	s.carry[k] += s.f.RPS * Window.Seconds() / float64(s.f.Reporters)
	requests = int(s.carry[k])
	s.carry[k] -= float64(requests)
	p := s.f.GoodRate
	if i < s.f.Bad {
		p = s.f.BadRate
	}
	return requests, s.binomial(requests, p)
}

// binomial draws Binomial(n, p) by geometric skips: O(errors), not O(n).
func (s *stream) binomial(n int, p float64) int {
	if p <= 0 || n == 0 {
		return 0
	}
	if p >= 1 {
		return n
	}
	lq := math.Log1p(-p)
	k, at := 0, 0
	for {
		at += int(math.Log(1-s.rnd.Float64())/lq) + 1
		if at > n {
			return k
		}
		k++
	}
}

// Run replays duration of f through the engine (relative outliers, the registry's defaults)
// and, on the same draws, Envoy's success-rate detector per reporter.
func Run(f Fleet, duration time.Duration) (ours, envoy Result, err error) {
	e, err := health.New(health.Config{})
	if err != nil {
		return Result{}, Result{}, err
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := make([]string, f.Instances)
	for i := range ids {
		ids[i] = fmt.Sprintf("i%02d", i)
		e.Declare(health.Instance{ID: ids[i], Zone: "z", Capabilities: []string{"c"}})
		if err := e.Apply(health.Event{At: t0, ID: ids[i], Kind: health.KindRegistered}); err != nil {
			return Result{}, Result{}, err
		}
	}
	reporters := make([]string, f.Reporters)
	proxies := make([]*successRate, f.Reporters)
	for r := range reporters {
		reporters[r] = fmt.Sprintf("gw-%d", r)
		proxies[r] = newSuccessRate(f.Instances)
	}
	s := newStream(f)
	caughtOurs, caughtEnvoy := map[int]bool{}, map[int]bool{}
	index := map[string]int{}
	for i, id := range ids {
		index[id] = i
	}
	end := t0
	for w := 1; time.Duration(w)*Window <= duration; w++ {
		now := t0.Add(time.Duration(w) * Window)
		end = now
		if w%3 == 0 { // heartbeats every 30 s keep every lease and nobody silent
			for _, id := range ids {
				if err := e.Apply(health.Event{At: now, ID: id, Kind: health.KindHeartbeat}); err != nil {
					return Result{}, Result{}, err
				}
			}
		}
		for r, rep := range reporters {
			volume := make([]int, f.Instances)
			errs := make([]int, f.Instances)
			for i, id := range ids {
				n, bad := s.next(i, r)
				if proxies[r].ejected(i, now) {
					n, bad = 0, 0 // Envoy's proxy sends nothing to a host it ejected (ours: the registry's view is shared)
				}
				volume[i], errs[i] = n, bad
				if err := e.Apply(health.Event{At: now, ID: id, Kind: health.KindOutcome, OK: n - bad, Errors: bad, Reporter: rep}); err != nil {
					return Result{}, Result{}, err
				}
			}
			for _, i := range proxies[r].interval(volume, errs, now) {
				note(&envoy, caughtEnvoy, i, f.Bad, now.Sub(t0))
			}
		}
		e.Tick(now)
		for _, id := range e.TakeEjected() {
			note(&ours, caughtOurs, index[id], f.Bad, now.Sub(t0))
		}
	}
	ours.Caught, envoy.Caught = len(caughtOurs), len(caughtEnvoy)
	for i := range f.Bad {
		if v := e.Verdict(ids[i], end); !apiv1.InRotation(v.State) {
			ours.OutAtEnd++
		}
		for _, p := range proxies {
			if p.ejected(i, end) {
				envoy.OutAtEnd += 1 / float64(len(proxies))
			}
		}
	}
	return ours, envoy, nil
}

// note records an ejection of instance i at after.
func note(res *Result, caught map[int]bool, i, bad int, after time.Duration) {
	if i >= bad {
		res.FalseEjections++
		return
	}
	if res.FirstEjection == 0 {
		res.FirstEjection = after
	}
	caught[i] = true
}

// successRate is one Envoy proxy's success-rate outlier detector with Envoy's defaults: every
// interval (10 s), the hosts with at least success_rate_request_volume (100) requests in it,
// when there are success_rate_minimum_hosts (5) of them, eject those whose success rate is
// under mean - success_rate_stdev_factor (1.9) × the standard deviation of those rates; an
// ejection lasts base_ejection_time (30 s) × its count, and at most max_ejection_percent (10 %)
// of the hosts are ejected at once (at least one, as Envoy rounds).
type successRate struct {
	until []time.Time
	count []int
}

func newSuccessRate(hosts int) *successRate {
	return &successRate{until: make([]time.Time, hosts), count: make([]int, hosts)}
}

func (p *successRate) ejected(i int, now time.Time) bool { return now.Before(p.until[i]) }

// interval judges one interval's counts and returns the hosts it ejects.
func (p *successRate) interval(volume, errs []int, now time.Time) []int {
	var rates []float64
	var hosts []int
	for i, n := range volume {
		if n >= 100 && !p.ejected(i, now) {
			rates = append(rates, float64(n-errs[i])/float64(n))
			hosts = append(hosts, i)
		}
	}
	if len(rates) < 5 {
		return nil
	}
	mean := 0.0
	for _, r := range rates {
		mean += r
	}
	mean /= float64(len(rates))
	v := 0.0
	for _, r := range rates {
		v += (r - mean) * (r - mean)
	}
	threshold := mean - 1.9*math.Sqrt(v/float64(len(rates)))
	ejectedNow := 0
	for i := range p.until {
		if p.ejected(i, now) {
			ejectedNow++
		}
	}
	maxEjected := max(1, len(p.until)*10/100)
	var out []int
	order := slices.Clone(hosts)
	slices.SortFunc(order, func(a, b int) int { return cmpRate(volume, errs, a, b) })
	for _, i := range order {
		r := float64(volume[i]-errs[i]) / float64(volume[i])
		if r >= threshold || ejectedNow >= maxEjected {
			continue
		}
		p.count[i]++
		p.until[i] = now.Add(time.Duration(p.count[i]) * 30 * time.Second)
		ejectedNow++
		out = append(out, i)
	}
	return out
}

// cmpRate orders hosts worst success rate first.
func cmpRate(volume, errs []int, a, b int) int {
	ra := float64(volume[a]-errs[a]) / float64(volume[a])
	rb := float64(volume[b]-errs[b]) / float64(volume[b])
	switch {
	case ra < rb:
		return -1
	case ra > rb:
		return 1
	}
	return 0
}

// Consecutive5xxSeconds is the expected time until Envoy's consecutive_5xx detector (default
// 5 in a row) trips on an instance failing p of its requests, seen by reporters proxies at
// rps requests a second in all: each proxy needs (1 - p^5) / ((1 - p) p^5) requests on
// average, and the first of the proxies to get there ejects (for a proxy only).
func Consecutive5xxSeconds(p, rps float64, reporters int) float64 {
	perProxy := (1 - math.Pow(p, 5)) / ((1 - p) * math.Pow(p, 5))
	return perProxy / (rps / float64(reporters)) / float64(reporters)
}
