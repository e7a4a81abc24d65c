package health

import (
	"fmt"
	"math"
	"time"
)

// ReasonProbeScore withdraws an instance whose decaying failure score reached
// probe_score_out: it fails intermittently (every other probe, say), which the consecutive
// rule of unhealthy_after never sees, since each ok probe starts its count again.
const ReasonProbeScore = "PROBE_SCORE"

// The decaying failure score (docs/reference/eligibility.md, "The failure score"): every failed
// or timed-out probe adds 1, and so does a consumer's window with connect failures (passive
// evidence), while the instance is in rotation (or out by the score alone); the score halves
// every probe_score_half_life, and starts again from 0 when the instance re-enters rotation
// after a withdrawal for another cause. A failed probe that brings it to
// probe_score_out withdraws the instance (PROBE_SCORE) unless the consecutive rule did already;
// it comes back once its probes pass as for PROBE_FAILING and the score has decayed under
// probe_score_in — re-entry is slower than removal by construction. A consumer's report alone
// never withdraws by the score: it adds weight that a failed probe then confirms.

// scoreNow returns t's score decayed to now.
func (e *Engine) scoreNow(t *trouble, now time.Time) float64 {
	if t.score == 0 {
		return 0
	}
	age := now.Sub(t.scoreAt)
	if age <= 0 {
		return t.score
	}
	s := t.score * math.Exp2(-float64(age)/float64(e.cfg.ProbeScoreHalfLife))
	if s < 1e-6 {
		return 0
	}
	return s
}

// scoring reports whether evidence about in counts towards its score: while it is in
// rotation, or out by PROBE_SCORE alone. Out for another cause, its failures are that
// cause's evidence (a crash's connect failures, a hang's timeouts), not intermittent failure.
func scoring(in *instance) bool {
	if len(in.causes) == 0 {
		return true
	}
	_, scored := in.causes[ReasonProbeScore]
	return scored && len(in.causes) == 1
}

// addScore adds w to in's failure score at now, when the evidence counts (scoring), and
// returns the score.
func (e *Engine) addScore(in *instance, now time.Time, w float64) float64 {
	if !scoring(in) {
		return e.scoreNow(in.troubles(), now)
	}
	t := in.trouble()
	if e.scoreNow(t, now) == 0 {
		t.scoreSince = now.UnixNano()
	}
	t.score = e.scoreNow(t, now) + w
	t.scoreAt = now
	return t.score
}

// scoreOut is the score at which a failed probe withdraws in: probe_score_out, raised in
// proportion when its manifest asks for more consecutive failures than the engine's
// unhealthy_after (a service that says "three are not enough" is not withdrawn on fewer by the
// score either).
func (e *Engine) scoreOut(in *instance) float64 {
	out := e.cfg.ProbeScoreOut
	if n := e.unhealthyAfter(in); n > e.cfg.UnhealthyAfter {
		out *= float64(n) / float64(e.cfg.UnhealthyAfter)
	}
	return out
}

// scoreProbe records a failed or timed-out probe in the score and withdraws in when the score
// reached its threshold and the consecutive rule has not withdrawn it already.
func (e *Engine) scoreProbe(in *instance, now time.Time, result string) {
	s := e.addScore(in, now, 1)
	if _, failing := in.causes[ReasonProbeFailing]; failing || s < e.scoreOut(in) {
		return
	}
	e.addCause(in, now, ReasonProbeScore, fmt.Sprintf("failure score %.2f reached %.2f (the last probe %s; half-life %s): it fails intermittently",
		s, e.scoreOut(in), result, e.cfg.ProbeScoreHalfLife))
}

// scoreCleared clears PROBE_SCORE on an ok probe once the score fell under probe_score_in and
// the probes passed as long as PROBE_FAILING asks.
func (e *Engine) scoreCleared(in *instance, now time.Time) {
	t := in.troubles()
	if _, ok := in.causes[ReasonProbeScore]; ok && t.okRun >= e.unhealthyAfter(in)+2 && e.scoreNow(t, now) < e.cfg.ProbeScoreIn {
		e.clearCauses(in, now, ReasonProbeScore)
	}
}
