package greysim

import (
	"testing"
	"time"
)

// TestAFourPercentReplicaIsCaught: at 50 requests a second an instance, five reporters, the
// engine ejects the 4 % replica among peers at 0.1 % within 30 s, and ejects no peer; Envoy's
// success-rate detector, each proxy seeing 100 requests a host an interval, catches it too.
// With one reporter (a single gateway) it does too: nobody else reported enough to
// contradict that reporter, so its pooled evidence stands alone.
func TestAFourPercentReplicaIsCaught(t *testing.T) {
	f := Fleet{Instances: 10, Bad: 1, GoodRate: 0.001, BadRate: 0.04, RPS: 50, Reporters: 5, Seed: 1}
	ours, envoy, err := Run(f, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ours.FirstEjection == 0 || ours.FirstEjection > 30*time.Second || ours.FalseEjections != 0 {
		t.Errorf("engine: %+v, want the bad one ejected within 30 s and no other", ours)
	}
	if envoy.FirstEjection == 0 {
		t.Errorf("envoy's success rate: %+v, want it caught (100 requests a host an interval per proxy)", envoy)
	}
	f.Reporters = 1
	if ours, _, _ := Run(f, 5*time.Minute); ours.FirstEjection == 0 || ours.FirstEjection > 30*time.Second || ours.FalseEjections != 0 {
		t.Errorf("one reporter: %+v, want the bad one ejected within 30 s and no other", ours)
	}
}

// TestRunsAreReproducible: one seed, one answer.
func TestRunsAreReproducible(t *testing.T) {
	f := Fleet{Instances: 10, Bad: 2, GoodRate: 0.001, BadRate: 0.04, RPS: 10, Reporters: 5, Seed: 7}
	a1, b1, _ := Run(f, 10*time.Minute)
	a2, b2, _ := Run(f, 10*time.Minute)
	if a1 != a2 || b1 != b2 {
		t.Errorf("two runs of one seed: %+v %+v, then %+v %+v", a1, b1, a2, b2)
	}
}

// TestBinomialMean: the draws have the binomial's mean.
func TestBinomialMean(t *testing.T) {
	s := newStream(Fleet{Instances: 1, Reporters: 1, Seed: 3})
	const n, p, draws = 500, 0.04, 20000
	sum := 0
	for range draws {
		sum += s.binomial(n, p)
	}
	if mean := float64(sum) / draws; mean < 19.6 || mean > 20.4 {
		t.Errorf("mean of Binomial(500, 0.04) draws = %v, want 20 ± 0.4", mean)
	}
}
