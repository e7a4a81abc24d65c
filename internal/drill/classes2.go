package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// outage: the registry is killed (SIGKILL) for cfg.Outage, then started again, empty.
func outage(ctx context.Context, d *drill, _ int) (Trial, error) {
	reg := d.s.registryProc()
	t0 := time.Now()
	reg.kill()
	d.progress("class 8: registry killed; it stays down %s", d.cfg.Outage)
	if err := sleep(ctx, d.cfg.Outage); err != nil {
		return Trial{}, err
	}
	if err := d.s.restartRegistry(ctx); err != nil {
		return Trial{}, err
	}
	t1 := time.Now()
	// a provider that never registered before: how soon after the recovery is it served?
	port := d.s.cfg.BasePort + portProvider - 1
	id := "egress-rabbitmq-" + strconv.Itoa(port)
	p, err := d.s.spawnProvider(ctx, "newcomer", "rabbitmq", "a", port, "http://127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return Trial{}, err
	}
	defer p.stop()
	t2 := time.Now()
	in, err := d.waitNewcomer(ctx, id, uint16(port), 2*time.Minute)
	note := fmt.Sprintf("new instance in every gateway and DNS %.1f s after it registered (%.1f s after the registry came back)", in.Seconds(), time.Since(t1).Seconds())
	if err != nil {
		note = err.Error()
	}
	// the fleet registers again by itself (its agents back off while the registry is away):
	// the next class starts on the whole fleet
	note += "; the fleet: " + d.waitRegistered(ctx, 5*time.Minute) + "; " + d.waitAllIn(ctx, 2*time.Minute)
	tl := d.load.between(t0, time.Now())
	return Trial{Measured: float64(tl.failed), Unit: "failed", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: tl.failed == 0 && err == nil && in <= 5*time.Second && t2.After(t1)}, nil
}

// waitNewcomer waits until both gateways route to id and DNS answers port.
func (d *drill) waitNewcomer(ctx context.Context, id string, port uint16, limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for time.Since(t0) < limit {
		all := true
		for _, gw := range d.s.Gateways {
			v, err := d.obs.gatewayView(ctx, gw)
			if _, ok := v[id]; err != nil || !ok {
				all = false
			}
		}
		ports, _ := d.obs.srvWeights(ctx)
		_, found := ports[port]
		if all && found {
			return time.Since(t0), nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return limit, fmt.Errorf("the new instance %s was not in every gateway and DNS after %s", id, limit)
}

// herd: 'meshflows bench herd' restarts a registry of its own under simulated agents.
func herd(ctx context.Context, d *drill, _ int) (Trial, error) {
	n := 10000
	if d.cfg.Quick {
		n = 1000
	}
	// a cap that binds: the fleet comes back over N / cap = 5 s, not as fast as it can
	capRate := n / 5
	cmd := exec.CommandContext(ctx, d.cfg.Executable, "bench", "herd", "--providers", strconv.Itoa(n), "-o", "json",
		"--listen", "127.0.0.1:"+strconv.Itoa(d.s.cfg.BasePort+portPlanSize-1),
		"--reconnect-rate", strconv.Itoa(capRate), "--reconnect-burst", strconv.Itoa(capRate))
	cmd.Env = append(os.Environ(), d.cfg.Env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return Trial{}, fmt.Errorf("bench herd: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r struct {
		AllBack        time.Duration `json:"all_back_after_ns"`
		Peak           float64       `json:"peak_per_second"`
		Attempts       int           `json:"attempts"`
		FailedAttempts int           `json:"failed_attempts"`
		Shed           int           `json:"shed_attempts"`
		NotBack        int           `json:"not_back"`
	}
	raw := out.Bytes()
	if i := bytes.IndexByte(raw, '{'); i >= 0 {
		raw = raw[i:]
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return Trial{}, fmt.Errorf("bench herd output: %w", err)
	}
	bound := time.Duration(n/capRate)*time.Second + 10*time.Second
	note := fmt.Sprintf("%d agents back in %.1f s (bound %s), cap %d registrations/s, peak %.0f/s, %d attempts shed, %d failed otherwise; %d not back",
		n, r.AllBack.Seconds(), bound, capRate, r.Peak, r.Shed, r.FailedAttempts-r.Shed, r.NotBack)
	return Trial{Measured: r.AllBack.Seconds(), Unit: "s", Note: note, Held: r.AllBack <= bound && r.NotBack == 0}, nil
}

// recovery: zone c is evacuated, then let back: each step of the way back (10, 25, 50)
// must carry the share of the traffic its weight gives it.
func recovery(ctx context.Context, d *drill, _ int) (Trial, error) {
	ins := d.pick("jms", "c")
	id, err := d.evacuate(ctx, "c", false)
	if err != nil {
		return Trial{}, err
	}
	for _, in := range ins {
		d.waitOut(ctx, in, time.Now(), 30*time.Second)
	}
	if err := d.endEvacuation(ctx, id); err != nil {
		return Trial{}, err
	}
	type step struct {
		weight     int
		start, end time.Time
	}
	var steps []step
	t0 := time.Now()
	for time.Since(t0) < 10*time.Minute {
		var ev apiv1.Evacuation
		if err := d.call(ctx, http.MethodGet, d.s.Registry+apiv1.PathEvacuations+"/"+id, nil, &ev); err != nil {
			return Trial{}, err
		}
		if ev.Return == nil || ev.State != "returning" {
			if len(steps) > 0 {
				steps[len(steps)-1].end = time.Now()
			}
			if ev.Return != nil || len(steps) > 0 {
				break
			}
		} else if len(steps) == 0 || steps[len(steps)-1].weight != ev.Return.Weight {
			if len(steps) > 0 {
				steps[len(steps)-1].end = time.Now()
			}
			steps = append(steps, step{weight: ev.Return.Weight, start: time.Now()})
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return Trial{}, err
		}
	}
	worst, parts := 0.0, []string{}
	inZone := map[string]bool{}
	for _, in := range ins {
		inZone[in.ID] = true
	}
	jms := len(d.pick("jms", ""))
	for _, s := range steps {
		if s.end.IsZero() {
			continue
		}
		tl := d.load.between(s.start.Add(time.Second), s.end) // a second for the step to reach the gateways
		zoneC, all := 0, 0
		for inst, n := range tl.byInstance {
			if strings.HasPrefix(inst, "egress-jms-") {
				all += n
				if inZone[inst] {
					zoneC += n
				}
			}
		}
		if all == 0 {
			continue
		}
		want := float64(len(ins)*s.weight) / float64(len(ins)*s.weight+(jms-len(ins))*100)
		got := float64(zoneC) / float64(all)
		worst = max(worst, math.Abs(got-want)*100)
		parts = append(parts, fmt.Sprintf("weight %d: %.1f %% of %d (want %.1f %%)", s.weight, got*100, all, want*100))
	}
	tl := d.load.between(t0, time.Now())
	if len(parts) == 0 {
		return Trial{Note: "no step of the way back observed", Failed: tl.failed, Sent: tl.sent}, nil
	}
	return Trial{Measured: worst, Unit: "pp off", Failed: tl.failed, Sent: tl.sent, Note: strings.Join(parts, "; "),
		Held: worst <= 2}, nil
}

// forged: a provider's identity reports outcomes and health about an instance not its own,
// and an anonymous caller posts outcomes.
func forged(ctx context.Context, d *drill, trial int) (Trial, error) {
	target := d.steady(ctx, "jms", trial, "a", "b", "c")
	before, err := d.eligibility(ctx, target.ID)
	if err != nil {
		return Trial{}, err
	}
	tlsCfg, err := client.TLSConfig(d.s.cert("ca"), d.s.cert("egress-rabbitmq"), d.s.key("egress-rabbitmq"))
	if err != nil {
		return Trial{}, err
	}
	other := client.HTTPClient(tlsCfg)
	mark := d.auditSize()
	outcomes := apiv1.OutcomesRequest{GatewayID: "forged", Outcomes: []apiv1.Outcome{{InstanceID: target.ID, Errors: 1000, ConnectFailures: 50}}}
	attempts := []struct {
		who, method, path string
		c                 *http.Client
		body              any
	}{
		{"egress-rabbitmq", http.MethodPost, apiv1.PathOutcomes, other, outcomes},
		{"anonymous", http.MethodPost, apiv1.PathOutcomes, d.s.Anonymous, outcomes},
		{"egress-rabbitmq", http.MethodPut, apiv1.HeartbeatPath(target.ID), other, apiv1.HeartbeatRequest{Generation: 1, Health: "failing"}},
		{"anonymous", http.MethodPut, apiv1.HeartbeatPath(target.ID), d.s.Anonymous, apiv1.HeartbeatRequest{Generation: 1, Health: "failing"}},
	}
	refused, codes := 0, []string{}
	for _, a := range attempts {
		code, err := d.callStatus(ctx, a.c, a.method, d.s.Registry+a.path, a.body, nil)
		if err != nil {
			return Trial{}, err
		}
		if code == http.StatusUnauthorized || code == http.StatusForbidden {
			refused++
		}
		codes = append(codes, fmt.Sprintf("%s %s: %d", a.who, a.path, code))
	}
	sleep(ctx, 3*time.Second)
	after, err := d.eligibility(ctx, target.ID)
	if err != nil {
		return Trial{}, err
	}
	_, inAll, _ := d.obs.state(target.ID)
	changes := 0
	if apiv1.InRotation(before) && !apiv1.InRotation(after) || !inAll {
		changes = 1 // taken out of rotation (slow start ending, say, is no change of theirs)
	}
	audited := d.auditLinesSince(mark, func(line string) bool {
		return strings.Contains(line, `"path":"`+apiv1.PathOutcomes+`"`) && !strings.Contains(line, `"identity":"gateway"`) ||
			strings.Contains(line, `"path":"`+apiv1.HeartbeatPath(target.ID)+`"`) && !strings.Contains(line, `"identity":"egress-jms"`)
	})
	note := fmt.Sprintf("%s; %d of %d refused, %d audited; verdict %s → %s", strings.Join(codes, ", "), refused, len(attempts), audited, before, after)
	return Trial{Measured: float64(changes), Unit: "changes", Note: note,
		Held: changes == 0 && refused == len(attempts) && audited >= len(attempts)}, nil
}

// operatorError: an evacuation of every zone and a withdrawal of a whole pool, one
// request after another as fast as they go; none may empty a pool, every attempt is audited.
func operatorError(ctx context.Context, d *drill, _ int) (Trial, error) {
	mark := d.auditSize()
	t0 := time.Now()
	stop := make(chan struct{})
	emptied := make(chan int, 1)
	go func() { emptied <- d.watchPools(stop) }()
	attempts, refused := 0, 0
	codes := map[int]int{}
	var evacuations, overrides []string
	// try sends one operator action and keeps the id of an accepted one, to undo it
	try := func(path string, body any, ids *[]string) error {
		var created struct {
			ID string `json:"id"`
		}
		code, err := d.callStatus(ctx, d.s.Admin, http.MethodPost, d.s.Registry+path, body, &created)
		attempts++
		if err != nil {
			return err
		}
		codes[code]++
		if code/100 == 2 {
			*ids = append(*ids, created.ID)
		} else {
			refused++
		}
		return nil
	}
	for _, z := range []string{"a", "b", "c"} {
		if err := try(apiv1.PathEvacuations, apiv1.EvacuationRequest{Zone: z, CapabilityID: "messaging.publish", Duration: "10m",
			Reason: "drill: operator error"}, &evacuations); err != nil {
			close(stop)
			return Trial{}, err
		}
	}
	for _, in := range d.pick("rabbitmq", "") {
		if err := try(apiv1.PathOverrides, apiv1.OverrideRequest{InstanceID: in.ID, Action: apiv1.OverrideWithdraw, Duration: "10m",
			Reason: "drill: operator error"}, &overrides); err != nil {
			close(stop)
			return Trial{}, err
		}
	}
	sleep(ctx, 3*time.Second)
	close(stop)
	for _, id := range evacuations {
		d.undo(ctx, d.s.Registry+apiv1.PathEvacuations+"/"+id)
	}
	for _, id := range overrides {
		d.undo(ctx, d.s.Registry+apiv1.PathOverrides+"/"+id)
	}
	empty := <-emptied
	audited := d.auditLinesSince(mark, func(line string) bool {
		return strings.Contains(line, `"method":"POST"`) && (strings.Contains(line, apiv1.PathEvacuations) || strings.Contains(line, apiv1.PathOverrides))
	})
	back := d.waitAllIn(ctx, 2*time.Minute) // the evacuated zones come back by steps
	tl := d.load.between(t0, time.Now())
	note := fmt.Sprintf("%d attempts (answers %v), %d refused, %d audited; %d pool-emptyings seen; %s", attempts, codes, refused, audited, empty, back)
	return Trial{Measured: float64(empty), Unit: "emptied", Failed: tl.failed, Sent: tl.sent, Note: note,
		Held: empty == 0 && audited == attempts}, nil
}

// undo deletes an operator action, again while the registry answers 429 (operator actions
// are rate-limited), for at most 30 s.
func (d *drill) undo(ctx context.Context, url string) {
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		code, err := d.callStatus(ctx, d.s.Admin, http.MethodDelete, url, nil, nil)
		if err == nil && code != http.StatusTooManyRequests {
			return
		}
		if sleep(ctx, time.Second) != nil {
			return
		}
	}
}

// waitRegistered waits, at most limit, until the registry knows every instance of the fleet.
func (d *drill) waitRegistered(ctx context.Context, limit time.Duration) string {
	t0 := time.Now()
	for {
		var missing []string
		for _, in := range d.s.Instances {
			if _, err := d.eligibility(ctx, in.ID); err != nil {
				missing = append(missing, in.ID)
			}
		}
		if len(missing) == 0 {
			return fmt.Sprintf("every instance registered again %.1f s later", time.Since(t0).Seconds())
		}
		if time.Since(t0) > limit || sleep(ctx, 500*time.Millisecond) != nil {
			return fmt.Sprintf("not registered again after %s: %s", limit, strings.Join(missing, ", "))
		}
	}
}

// waitAllIn waits, at most limit in all, until every instance is in rotation everywhere,
// and says how it went.
func (d *drill) waitAllIn(ctx context.Context, limit time.Duration) string {
	t0 := time.Now()
	for {
		var out []string
		for _, in := range d.s.Instances {
			if _, all, _ := d.obs.state(in.ID); !all {
				out = append(out, in.ID)
			}
		}
		if len(out) == 0 {
			return fmt.Sprintf("every instance back in %.1f s", time.Since(t0).Seconds())
		}
		if time.Since(t0) > limit || sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Sprintf("not back after %s: %s", limit, strings.Join(out, ", "))
		}
	}
}

// watchPools counts the observations, until stop, of a pool with nothing in rotation at a
// consumer.
func (d *drill) watchPools(stop <-chan struct{}) int {
	empty := 0
	for {
		select {
		case <-stop:
			return empty
		case <-time.After(100 * time.Millisecond):
		}
		for _, kind := range []string{"jms", "rabbitmq"} {
			for _, c := range d.obs.Consumers() {
				n := 0
				d.obs.mu.Lock()
				for _, in := range d.pick(kind, "") {
					if v := d.obs.views[c][in.ID]; v != nil && v.present {
						n++
					}
				}
				d.obs.mu.Unlock()
				if n == 0 {
					empty++
				}
			}
		}
	}
}

func (d *drill) auditFile() string { return filepath.Join(d.s.Dir(), "audit.jsonl") }

func (d *drill) auditSize() int64 {
	fi, err := os.Stat(d.auditFile())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// auditLinesSince counts the audit lines written after offset that match.
func (d *drill) auditLinesSince(offset int64, match func(string) bool) int {
	time.Sleep(200 * time.Millisecond) // the line is written once the answer is
	b, err := os.ReadFile(d.auditFile())
	if err != nil || int64(len(b)) < offset {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b[offset:]), "\n") {
		if line != "" && match(line) {
			n++
		}
	}
	return n
}
