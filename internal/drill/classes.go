package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/faultproxy"
	"github.com/meshflows/meshflows/internal/health"
)

// class is one failure class: its injection and measurement (Run, once per trial).
type class struct {
	Number int
	Name   string
	// Alarm is the action the class must raise ("" none), AlarmAlert the alert that raises it
	// (an alert grouped by component may be firing already, for an earlier instance).
	Alarm, AlarmAlert string
	// Missing names the mechanism the class waits for, when it does not exist yet.
	Missing             string
	Trials, QuickTrials int
	bound               func(Config) string
	Run                 func(ctx context.Context, d *drill, trial int) (Trial, error)
}

// Classes are the twelve failure classes, in order.
var Classes = []*class{
	{Number: 1, Name: "crash, port closed", Trials: 20, QuickTrials: 3, Run: crash,
		bound: func(c Config) string {
			return fmt.Sprintf("out ≤ 2 s; failed ≤ %d (rate × 0.1 s)", failedInFlight(c))
		}},
	{Number: 2, Name: "hang, blackhole", Trials: 20, QuickTrials: 3, Run: hang,
		bound: func(Config) string { return "out ≤ 5 s with traffic" }},
	{Number: 3, Name: "grey failure (1 gateway)", Alarm: "ticket-owner", AlarmAlert: "MeshFlowsReplicaOutlier", Trials: 20, QuickTrials: 1, Run: grey,
		bound: func(Config) string { return "out ≤ 30 s; 0 healthy withdrawn" }},
	{Number: 4, Name: "latency-only degradation", Trials: 20, QuickTrials: 1, Run: latency,
		bound: func(Config) string { return "weight ≤ 50 ≤ 30 s, never out; back ≤ 60 s" }},
	{Number: 5, Name: "flapping health check", Alarm: "ticket-owner", AlarmAlert: "MeshFlowsInstanceQuarantined", Trials: 20, QuickTrials: 1, Run: flapping,
		bound: func(Config) string {
			return "quarantined ≤ flap window; owner told ≤ 30 s; 0 quarantines in the cohort case"
		}},
	{Number: 6, Name: "correlated zone failure", Alarm: "page-capacity", AlarmAlert: "MeshFlowsZoneOutlier", Trials: 20, QuickTrials: 1, Run: zone,
		bound: func(Config) string { return "incident ≤ 60 s; evacuated out ≤ 2 s" }},
	{Number: 7, Name: "zombie registration", Trials: 20, QuickTrials: 3, Run: zombie,
		bound: func(c Config) string {
			return fmt.Sprintf("out ≤ %s (lease TTL + 5 s); 0 answered by the impostor", (c.LeaseTTL + 5*time.Second).String())
		}},
	{Number: 8, Name: "control-plane outage", Alarm: "page-authority", AlarmAlert: "MeshFlowsRegistryDown", Trials: 1, QuickTrials: 1, Run: outage,
		bound: func(c Config) string { return "0 failed over " + c.Outage.String() + "; new instance in ≤ 5 s" }},
	{Number: 9, Name: "reconnect storm", Trials: 3, QuickTrials: 1, Run: herd,
		bound: func(Config) string { return "all back ≤ N / cap + 10 s; 0 give up" }},
	{Number: 10, Name: "recovery overload", Trials: 3, QuickTrials: 1, Run: recovery,
		bound: func(Config) string { return "each step's share ± 2 pp of its weight" }},
	{Number: 11, Name: "forged or out-of-scope signal", Trials: 20, QuickTrials: 3, Run: forged,
		bound: func(Config) string { return "0 verdict changes; every refusal audited" }},
	{Number: 12, Name: "operator error", Trials: 20, QuickTrials: 1, Run: operatorError,
		bound: func(Config) string { return "0 pools emptied; every attempt audited" }},
}

func classByNumber(n int) *class {
	for _, k := range Classes {
		if k.Number == n {
			return k
		}
	}
	return nil
}

// failedInFlight is the bound on failed requests of a crash: those in flight, rate × 0.1 s.
func failedInFlight(c Config) int { return max(1, c.Rate*2/10) }

// pick returns the instances of kind in zone.
func (d *drill) pick(kind, zone string) []*instance {
	var out []*instance
	for _, in := range d.s.Instances {
		if in.Kind == kind && (zone == "" || in.Zone == zone) {
			out = append(out, in)
		}
	}
	return out
}

// rotate returns the trial-th of the instances of kind in zones, round robin, passing over
// those not in rotation everywhere now (a class before may have left one ejected).
func (d *drill) rotate(kind string, trial int, zones ...string) *instance {
	if in := d.first(kind, trial, zones, func(*instance) bool { return true }); in != nil {
		return in
	}
	all := d.inZones(kind, zones)
	return all[trial%len(all)]
}

// inZones returns the instances of kind in zones, zone after zone.
func (d *drill) inZones(kind string, zones []string) []*instance {
	var all []*instance
	for _, z := range zones {
		all = append(all, d.pick(kind, z)...)
	}
	return all
}

// first returns the first instance of kind in zones, round robin from the trial-th, that is
// in rotation everywhere now and keeps ok; nil when none does.
func (d *drill) first(kind string, trial int, zones []string, ok func(*instance) bool) *instance {
	all := d.inZones(kind, zones)
	for i := range all {
		in := all[(trial+i)%len(all)]
		if _, everywhere, _ := d.obs.state(in.ID); everywhere && ok(in) {
			return in
		}
	}
	return nil
}

// steady returns an instance of kind in zones as rotate does, but one that is serving (past
// slow start) and in every consumer's view: a class that must see no verdict change takes
// none that an earlier class just brought back, whose late evidence (the gateways' outcome
// window about its fault) may still arrive. It waits up to a minute for one, then falls back
// to rotate's choice.
func (d *drill) steady(ctx context.Context, kind string, trial int, zones ...string) *instance {
	serving := func(in *instance) bool {
		e, err := d.eligibility(ctx, in.ID)
		return err == nil && e == apiv1.EligibilityServing
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if in := d.first(kind, trial, zones, serving); in != nil {
			return in
		}
		if sleep(ctx, 250*time.Millisecond) != nil {
			break
		}
	}
	return d.rotate(kind, trial, zones...)
}

// waitOut waits until every consumer has in out of rotation and returns how long after t0
// the last of them took it out (the last request the proxy saw counts too).
func (d *drill) waitOut(ctx context.Context, in *instance, t0 time.Time, limit time.Duration) (time.Duration, bool) {
	for {
		if out, _, since := d.obs.state(in.ID); out {
			for _, t := range in.Proxy.Stats().LastTraffic {
				if t.After(since) && t.After(t0) {
					since = t
				}
			}
			return max(0, since.Sub(t0)), true
		}
		if time.Since(t0) > limit || sleep(ctx, 25*time.Millisecond) != nil {
			return time.Since(t0), false
		}
	}
}

// waitIn waits until every consumer has in back in rotation, returning how long after t0.
func (d *drill) waitIn(ctx context.Context, in *instance, t0 time.Time, limit time.Duration) (time.Duration, bool) {
	for {
		if _, all, since := d.obs.state(in.ID); all {
			return max(0, since.Sub(t0)), true
		}
		if time.Since(t0) > limit || sleep(ctx, 50*time.Millisecond) != nil {
			return time.Since(t0), false
		}
	}
}

// stillIn names the consumers that kept in after waitOut gave up ("" when it did not).
func (d *drill) stillIn(in *instance, out bool) string {
	if out {
		return ""
	}
	return fmt.Sprintf("still in at %v; ", d.obs.holders(in.ID))
}

func set(in *instance, f faultproxy.Fault) {
	if err := in.Proxy.Set(f); err != nil {
		panic(err) // the classes only inject valid faults
	}
}

// restore ends the fault on in and waits for it to be back (at most limit), for the note.
func (d *drill) restore(ctx context.Context, in *instance, limit time.Duration) string {
	set(in, faultproxy.Fault{})
	t := time.Now()
	if back, ok := d.waitIn(ctx, in, t, limit); ok {
		return fmt.Sprintf("back in %.1f s", back.Seconds())
	}
	return fmt.Sprintf("not back after %s", limit)
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// crash: the proxy refuses connections, as a crashed process's port does.
func crash(ctx context.Context, d *drill, trial int) (Trial, error) {
	in := d.rotate("jms", trial, "a", "b")
	t0 := time.Now()
	set(in, faultproxy.Fault{Mode: faultproxy.Refuse})
	out, ok := d.waitOut(ctx, in, t0, 60*time.Second)
	note := d.stillIn(in, ok)
	sleep(ctx, time.Second)
	tl := d.load.between(t0, t0.Add(out+time.Second))
	note += d.restore(ctx, in, 60*time.Second)
	return Trial{Measured: seconds(out), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: ok && out <= 2*time.Second && tl.failed <= failedInFlight(d.cfg)}, nil
}

// hang: the proxy accepts and never answers.
func hang(ctx context.Context, d *drill, trial int) (Trial, error) {
	in := d.rotate("jms", trial+1, "a", "b")
	t0 := time.Now()
	set(in, faultproxy.Fault{Mode: faultproxy.Blackhole})
	out, ok := d.waitOut(ctx, in, t0, 60*time.Second)
	note := d.stillIn(in, ok) + d.restore(ctx, in, 60*time.Second)
	d.load.settle(ctx)
	tl := d.load.between(t0, t0.Add(out+time.Second))
	note = fmt.Sprintf("%d requests held over 150 ms; ", tl.slow) + note
	return Trial{Measured: seconds(out), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: ok && out <= 5*time.Second}, nil
}

// grey: one instance answers 4 % of its requests 500, its peers 0.1 %; the load goes
// through one gateway alone, at 50 requests a second per instance of the pool.
func grey(ctx context.Context, d *drill, trial int) (Trial, error) {
	in := d.rotate("jms", trial, "b")
	peers := d.pick("jms", "")
	for _, p := range peers {
		if p != in {
			set(p, faultproxy.Fault{ErrorShare: 0.001})
		}
	}
	d.load.Only(1)
	perGateway := 50 * len(peers) * 5 / 4 // a fifth of the load goes to the other pool
	d.load.SetRate(perGateway)
	defer func() { d.load.SetRate(d.cfg.Rate); d.load.Only(0) }()
	sleep(ctx, 10*time.Second)       // a baseline for the peers
	inBefore := map[*instance]bool{} // a peer a class before left out (an ejection running out) is not this class's doing
	for _, p := range peers {
		_, everywhere, _ := d.obs.state(p.ID)
		inBefore[p] = everywhere
	}
	t0 := time.Now()
	set(in, faultproxy.Fault{ErrorShare: 0.04})
	out, ok := d.waitOut(ctx, in, t0, 90*time.Second)
	tl := d.load.between(t0, t0.Add(out))
	alarm := d.alarms.await(ctx, "ticket-owner", "MeshFlowsReplicaOutlier", t0, 30*time.Second) // before the fault ends
	healthyOut := 0
	for _, p := range peers {
		if p != in {
			if o, _, _ := d.obs.state(p.ID); o && inBefore[p] {
				healthyOut++
			}
			set(p, faultproxy.Fault{})
		}
	}
	d.load.SetRate(d.cfg.Rate)
	d.load.Only(0)
	back := "its ejection runs out by itself (not waited for in a quick run)"
	if !d.cfg.Quick { // the next trial starts on a fleet at rest
		back = d.restore(ctx, in, 3*time.Minute)
	} else {
		set(in, faultproxy.Fault{})
	}
	note := fmt.Sprintf("%d req/s per instance through gateway-1; %d healthy withdrawn; %s", perGateway*4/5/len(peers), healthyOut, back)
	if alarm != "" {
		note += "; alarm " + alarm
	}
	return Trial{Measured: seconds(out), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: ok && out <= 30*time.Second && healthyOut == 0}, nil
}

// latency: every request of one instance takes 200 ms more; its probes stay fast.
func latency(ctx context.Context, d *drill, trial int) (Trial, error) {
	in := d.rotate("jms", trial, "a")
	// at full weight first: an instance still in slow start (a drill of this class alone
	// starts right after the stack) is under 50 already, and would read as degraded at once
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if w := d.obs.weights(in.ID); len(w) > 0 && minWeight(w) >= 100 {
			break
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			return Trial{}, ctx.Err()
		}
	}
	t0 := time.Now()
	set(in, faultproxy.Fault{Delay: 200 * time.Millisecond})
	var degraded time.Duration
	withdrawn := false
	for degraded == 0 && time.Since(t0) < 90*time.Second {
		w := d.obs.weights(in.ID)
		if o, _, _ := d.obs.state(in.ID); o {
			withdrawn = true
		}
		if len(w) > 0 && maxWeight(w) <= 50 {
			degraded = time.Since(t0)
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	tl := d.load.between(t0, time.Now())
	set(in, faultproxy.Fault{})
	t1 := time.Now()
	var back time.Duration
	for back == 0 && time.Since(t1) < 3*time.Minute {
		if w := d.obs.weights(in.ID); len(w) > 0 && minWeight(w) >= 100 {
			back = time.Since(t1)
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			break
		}
	}
	note := fmt.Sprintf("weight restored %.1f s after the fault ended", back.Seconds())
	if withdrawn {
		note += "; WITHDRAWN"
	}
	return Trial{Measured: seconds(degraded), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: degraded > 0 && degraded <= 30*time.Second && !withdrawn && back > 0 && back <= 60*time.Second}, nil
}

func maxWeight(w map[string]int) int {
	m := 0
	for _, v := range w {
		m = max(m, v)
	}
	return m
}

func minWeight(w map[string]int) int {
	m := 1 << 30
	for _, v := range w {
		m = min(m, v)
	}
	return m
}

// flapping: the health endpoint alternates ok and failing (20 s each; 6 s in a quick run).
func flapping(ctx context.Context, d *drill, trial int) (Trial, error) {
	// zone c: the zone the crash, hang and grey classes leave alone, so that no other
	// member of the cohort flaps meanwhile (which would make this a cohort event)
	in := d.rotate("rabbitmq", trial, "c")
	phase := 20 * time.Second
	if d.cfg.Quick {
		phase = 6 * time.Second
	}
	t0 := time.Now()
	quarantined := d.flap(ctx, phase, 6, func() bool {
		e, _ := d.eligibility(ctx, in.ID)
		return e == apiv1.EligibilityQuarantined
	}, in)
	var note string
	told, toldOK := time.Duration(0), false
	if quarantined > 0 {
		at := t0.Add(quarantined)
		for deadline := at.Add(45 * time.Second); time.Now().Before(deadline) && len(d.s.hook.since(t0, in.ID, health.ReasonFlapping)) == 0; {
			sleep(ctx, 250*time.Millisecond)
		}
		switch got := d.s.hook.since(t0, in.ID, health.ReasonFlapping); {
		case len(got) == 0:
			note = "owner not told within 45 s"
		default:
			told = max(got[0].At.Sub(at), 0)
			toldOK = told <= 30*time.Second && got[0].Signed && len(got) == 1
			note = fmt.Sprintf("owner %s told %.1f s after (%d notification(s), signed %t)", got[0].Notice.Owner, seconds(told), len(got), got[0].Signed)
		}
		if a := d.alarms.await(ctx, "ticket-owner", "MeshFlowsInstanceQuarantined", t0, 45*time.Second); a != "" {
			note += "; alarm " + a
		}
	}
	tl := d.load.between(t0, time.Now())
	if quarantined > 0 {
		d.override(ctx, apiv1.OverrideRequest{InstanceID: in.ID, Action: apiv1.OverrideRelease, Reason: "drill: end of the flapping class"})
		note += "; released: " + d.restore(ctx, in, time.Minute)
	}
	held := quarantined > 0 && quarantined <= 10*time.Minute && toldOK
	if trial == d.classTrials-1 { // the cohort case last: its members' flaps count for a flap window
		quarantines, incident := d.cohortFlap(ctx, phase)
		note += fmt.Sprintf("; cohort case: %d quarantined, cohort incident %t", quarantines, incident)
		held = held && quarantines == 0 && incident
	}
	return Trial{Measured: seconds(quarantined), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note, Held: held}, nil
}

// flap alternates the health endpoints of ins between failing and passing, phase each, for at
// most cycles cycles or until done says so, and returns how long it took (0: never).
func (d *drill) flap(ctx context.Context, phase time.Duration, cycles int, done func() bool, ins ...*instance) time.Duration {
	t0 := time.Now()
	defer func() {
		for _, in := range ins {
			set(in, faultproxy.Fault{})
		}
	}()
	for cycle := 0; cycle < cycles && ctx.Err() == nil; cycle++ {
		for _, failing := range []bool{true, false} {
			for _, in := range ins {
				set(in, faultproxy.Fault{HealthFailing: failing})
			}
			for end := time.Now().Add(phase); time.Now().Before(end); sleep(ctx, 250*time.Millisecond) {
				if done() {
					return time.Since(t0)
				}
			}
		}
	}
	return 0
}

// cohortFlap flaps the whole rabbitmq cohort of zone c together for three cycles: none of its
// instances may be quarantined (one cohort event, not N defects), and a cohort_flapping
// incident must open. It returns the quarantines seen and whether the incident opened.
func (d *drill) cohortFlap(ctx context.Context, phase time.Duration) (int, bool) {
	cohort := d.pick("rabbitmq", "c")
	t0 := time.Now()
	seen := map[string]bool{}
	d.flap(ctx, phase, 3, func() bool {
		for _, in := range cohort {
			if e, _ := d.eligibility(ctx, in.ID); e == apiv1.EligibilityQuarantined {
				seen[in.ID] = true
			}
		}
		return false
	}, cohort...)
	incident := d.openIncident(ctx, apiv1.IncidentCohortFlapping, t0)
	for _, in := range cohort {
		if seen[in.ID] {
			d.override(ctx, apiv1.OverrideRequest{InstanceID: in.ID, Action: apiv1.OverrideRelease, Reason: "drill: end of the cohort case"})
		}
		d.restore(ctx, in, time.Minute)
	}
	return len(seen), incident
}

// zone: every jms instance of zone c answers 5 % of its requests 500.
func zone(ctx context.Context, d *drill, trial int) (Trial, error) {
	ins := d.pick("jms", "c")
	t0 := time.Now()
	for _, in := range ins {
		set(in, faultproxy.Fault{ErrorShare: 0.05})
	}
	defer func() {
		for _, in := range ins {
			set(in, faultproxy.Fault{})
		}
	}()
	var incident time.Duration
	for incident == 0 && time.Since(t0) < 2*time.Minute {
		if d.openIncident(ctx, apiv1.IncidentZoneOutlier, t0) {
			incident = time.Since(t0)
		}
		if sleep(ctx, 250*time.Millisecond) != nil {
			break
		}
	}
	if incident == 0 {
		tl := d.load.between(t0, time.Now())
		return Trial{Measured: seconds(time.Since(t0)), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: "no zone-outlier incident"}, nil
	}
	alarm := d.alarms.await(ctx, "page-capacity", "MeshFlowsZoneOutlier", t0, 60*time.Second) // an operator acts on the page
	t1 := time.Now()
	id, err := d.evacuate(ctx, "c", false)
	if err != nil {
		return Trial{}, err
	}
	var out time.Duration
	allOut := true
	for _, in := range ins {
		o, ok := d.waitOut(ctx, in, t1, 30*time.Second)
		allOut = allOut && ok
		out = max(out, o)
	}
	tl := d.load.between(t0, time.Now())
	for _, in := range ins {
		set(in, faultproxy.Fault{})
	}
	d.endEvacuation(ctx, id)
	note := fmt.Sprintf("incident after %.1f s; evacuated zone c out at every consumer %.2f s after the command", incident.Seconds(), out.Seconds())
	if alarm != "" {
		note += "; alarm " + alarm
	}
	for _, in := range ins { // the way back is class 10's
		d.waitIn(ctx, in, time.Now(), 5*time.Minute)
	}
	return Trial{Measured: seconds(incident), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: incident <= 60*time.Second && allOut && out <= 2*time.Second}, nil
}

// zombie: a provider is killed and another process takes its place behind its address —
// an example provider of the other kind, so that its answers to the victim's requests are
// told apart (they name it in X-Instance): the gateways must never pass one on as the
// victim's answer.
func zombie(ctx context.Context, d *drill, trial int) (Trial, error) {
	in := d.rotate("jms", trial, "b", "c")
	t0 := time.Now()
	in.proc.kill()
	port := d.s.cfg.BasePort + portImpostor
	impostorID := fmt.Sprintf("egress-rabbitmq-%d", port)
	imp, err := d.s.spawnProvider(ctx, "impostor", "rabbitmq", in.Zone, port, fmt.Sprintf("http://127.0.0.1:%d", port))
	if err != nil {
		return Trial{}, err
	}
	in.Proxy.SetUpstream(fmt.Sprintf("127.0.0.1:%d", port))
	before := in.Proxy.Stats().Traffic
	out, ok := d.waitOut(ctx, in, t0, d.cfg.LeaseTTL+time.Minute)
	reached := in.Proxy.Stats().Traffic - before
	sleep(ctx, time.Second)
	passed := d.load.answeredBy(impostorID, "/api/messaging/jms/publish", t0, t0.Add(out+time.Second))
	tl := d.load.between(t0, t0.Add(out+time.Second))
	imp.stop()
	in.Proxy.SetUpstream(fmt.Sprintf("127.0.0.1:%d", in.port))
	in.proc, err = d.s.spawnProvider(ctx, in.ID, in.Kind, in.Zone, in.port, "http://"+in.Proxy.Addr())
	note := fmt.Sprintf("%d requests reached the impostor, %d of its answers passed on as %s's", reached, passed, in.ID)
	if err == nil {
		back, _ := d.waitIn(ctx, in, time.Now(), 2*time.Minute)
		note += fmt.Sprintf("; the real one back in %.1f s", back.Seconds())
	}
	return Trial{Measured: seconds(out), Unit: "s", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: ok && out <= d.cfg.LeaseTTL+5*time.Second && passed == 0}, err
}

// eligibility is the registry's verdict on instance id.
func (d *drill) eligibility(ctx context.Context, id string) (string, error) {
	var inst struct {
		Eligibility string `json:"eligibility"`
	}
	err := d.call(ctx, http.MethodGet, d.s.Registry+apiv1.InstancePath(id), nil, &inst)
	return inst.Eligibility, err
}

// openIncident says whether an incident of kind opened after t0.
func (d *drill) openIncident(ctx context.Context, kind string, t0 time.Time) bool {
	var list apiv1.IncidentsResponse
	if err := d.call(ctx, http.MethodGet, d.s.Registry+apiv1.PathIncidents, nil, &list); err != nil {
		return false
	}
	for _, in := range list.Incidents {
		if in.Kind == kind && in.Status != apiv1.IncidentResolved && !in.OpenedAt.Before(t0.Add(-time.Second)) {
			return true
		}
	}
	return false
}

func (d *drill) evacuate(ctx context.Context, zone string, force bool) (string, error) {
	var ev apiv1.Evacuation
	err := d.call(ctx, http.MethodPost, d.s.Registry+apiv1.PathEvacuations, apiv1.EvacuationRequest{Zone: zone,
		CapabilityID: "messaging.publish", Duration: "1h", Reason: "drill", Force: force}, &ev)
	return ev.ID, err
}

func (d *drill) endEvacuation(ctx context.Context, id string) error {
	return d.call(ctx, http.MethodDelete, d.s.Registry+apiv1.PathEvacuations+"/"+id, nil, nil)
}

func (d *drill) override(ctx context.Context, req apiv1.OverrideRequest) (int, error) {
	return d.callStatus(ctx, d.s.Admin, http.MethodPost, d.s.Registry+apiv1.PathOverrides, req, nil)
}

// call sends body as JSON with the drill's identity and decodes a 2xx answer into out.
func (d *drill) call(ctx context.Context, method, url string, body, out any) error {
	code, err := d.callStatus(ctx, d.s.Admin, method, url, body, out)
	if err == nil && code/100 != 2 {
		err = fmt.Errorf("%s %s: %d", method, url, code)
	}
	return err
}

func (d *drill) callStatus(ctx context.Context, c *http.Client, method, url string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode/100 == 2 {
		return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
