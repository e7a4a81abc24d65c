package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
)

// Operator actions are rate-limited per identity: OperatorBurst at once, then one every
// OperatorEvery (10 a minute).
const (
	OperatorBurst = 10
	OperatorEvery = 6 * time.Second
)

// keepEnded is how many ended evacuations and overrides the registry lists.
const keepEnded = 50

// operators is the registry's record of operator actions: what the eligibility engine
// applies, with who, why and the outcome.
type operators struct {
	mu          sync.Mutex
	evacuations []*apiv1.Evacuation // oldest first
	overrides   []*apiv1.Override
	limiters    map[string]*rate.Limiter
}

// allow takes one action from who's budget at now.
func (o *operators) allow(who string, now time.Time) (bool, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.limiters == nil {
		o.limiters = map[string]*rate.Limiter{}
	}
	l := o.limiters[who]
	if l == nil {
		l = rate.NewLimiter(rate.Every(OperatorEvery), OperatorBurst)
		o.limiters[who] = l
	}
	if l.AllowN(now, 1) {
		return true, 0
	}
	r := l.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	r.CancelAt(now)
	return false, int(wait/time.Second) + 1
}

func newOperatorID(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// actor is who acts: the caller's identity ("anonymous (open mode)" without one).
func actor(ctx context.Context) string {
	if id := CallerFrom(ctx).Identity; id != "" {
		return id
	}
	return "anonymous (open mode)"
}

// MaxReasonBytes bounds an operator action's reason: it goes into the journal, the audit log
// and every explanation of the instances it touches.
const MaxReasonBytes = 1024

// reasonDetail says what is wrong with an operator action's reason; nil when nothing is.
func reasonDetail(reason string) *apiv1.Detail {
	switch {
	case strings.TrimSpace(reason) == "":
		return &apiv1.Detail{Path: "reason", Message: "is required: say why, for the journal and whoever is on call next"}
	case len(reason) > MaxReasonBytes:
		return &apiv1.Detail{Path: "reason", Message: fmt.Sprintf("is %d bytes, at most %d allowed: link a ticket for the long story", len(reason), MaxReasonBytes)}
	}
	return nil
}

// durationDetail is parseOperatorDuration's complaint about a duration field, as a detail.
func durationDetail(field, s string) (time.Duration, *apiv1.Detail) {
	d, err := parseOperatorDuration(field, s)
	var ae *apiv1.Error
	if err != nil && errors.As(err, &ae) && len(ae.Details) > 0 {
		return 0, &ae.Details[0]
	}
	return d, nil
}

// collect appends the details that are not nil.
func collect(ds []apiv1.Detail, more ...*apiv1.Detail) []apiv1.Detail {
	for _, d := range more {
		if d != nil {
			ds = append(ds, *d)
		}
	}
	return ds
}

// parseOperatorDuration reads a duration field: positive, at most 72 h.
func parseOperatorDuration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case s == "":
		return 0, apiv1.InvalidRequest([]apiv1.Detail{{Path: field, Message: "is required: how long, like 2h"}})
	case err != nil:
		return 0, apiv1.InvalidRequest([]apiv1.Detail{{Path: field, Message: fmt.Sprintf("%q is not a duration like 2h", s)}})
	case d <= 0:
		return 0, apiv1.InvalidRequest([]apiv1.Detail{{Path: field, Message: fmt.Sprintf("%s must be positive", s)}})
	case d > apiv1.MaxOperatorDuration:
		return 0, apiv1.InvalidRequest([]apiv1.Detail{{Path: field, Message: fmt.Sprintf("%s is over the bound of %s", s, apiv1.MaxOperatorDuration)}})
	}
	return d, nil
}

// operate is the common path of every operator action: the engine is there, the caller has
// budget left, and the action — refused or not — is journaled and logged with its identity.
func (r *Registry) operate(ctx context.Context, typ, subject string, act func(now time.Time, by string) (string, error)) error {
	by, now := actor(ctx), r.cfg.Now()
	var err error
	var msg string
	switch ok, wait := r.ops.allow(by, now); {
	case r.cfg.Eligibility == nil:
		err = apiv1.Errorf(http.StatusConflict, apiv1.CodeNotConfigured, "the registry runs without the eligibility engine: there is nothing to override or evacuate")
	case !ok:
		e := apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
			"%s has used its %d operator actions (one more every %s)", by, OperatorBurst, OperatorEvery)
		e.RetryAfter = wait
		err = e
	default:
		msg, err = act(now, by)
	}
	sev := apiv1.SeverityWarning
	if err != nil {
		msg = fmt.Sprintf("refused: %s by %s: %v", typ, by, err)
		sev = apiv1.SeverityError
	}
	if r.cfg.Journal != nil {
		r.cfg.Journal.Record(typ, sev, subject, msg, map[string]any{"by": by, "refused": err != nil})
	}
	if r.cfg.Logger != nil {
		r.cfg.Logger.Warn("operator action", slog.String("type", typ), slog.String("subject", subject), slog.String("by", by),
			slog.String("message", msg), slog.Bool("refused", err != nil))
	}
	return err
}

// Evacuate evacuates a zone (of one capability, or of all) for a duration: its instances
// leave rotation and their groups at once, and come back in capped steps when it ends. It
// is refused when the zone is unknown, when an evacuation of the zone and scope holds
// already (a practice run is superseded instead), and when too little of a capability
// would remain, unless forced.
func (r *Registry) Evacuate(ctx context.Context, req *apiv1.EvacuationRequest) (*apiv1.Evacuation, error) {
	var out *apiv1.Evacuation
	err := r.operate(ctx, apiv1.EventEvacuation, "zone/"+req.Zone, func(now time.Time, by string) (string, error) {
		var zone *apiv1.Detail
		if strings.TrimSpace(req.Zone) == "" {
			zone = &apiv1.Detail{Path: "zone", Message: "is required: the zone to evacuate"}
		}
		d, dd := durationDetail("duration", req.Duration)
		if ds := collect(nil, zone, dd, reasonDetail(req.Reason)); len(ds) > 0 {
			return "", apiv1.InvalidRequest(ds) // every missing or wrong field at once
		}
		remaining, known := r.evacuationImpact(req.Zone, req.CapabilityID)
		if !known {
			return "", apiv1.Errorf(http.StatusNotFound, apiv1.CodeUnknownZone, "no instance is registered in zone %q%s", req.Zone, forCapability(req.CapabilityID))
		}
		r.ops.mu.Lock()
		defer r.ops.mu.Unlock()
		var practice *apiv1.Evacuation
		for _, ev := range r.ops.evacuations {
			if active(ev, now) && ev.Zone == req.Zone && ev.CapabilityID == req.CapabilityID {
				if ev.Practice && !req.Practice {
					practice = ev
					continue
				}
				return "", apiv1.Errorf(http.StatusConflict, apiv1.CodeEvacuationExists, "evacuation %s of zone %s%s holds until %s: extend it instead",
					ev.ID, ev.Zone, forCapability(ev.CapabilityID), ev.ExpiresAt.Format(time.RFC3339))
			}
		}
		if unsafe := unsafeRemaining(remaining, r.minRemaining()); len(unsafe) > 0 && !req.Force {
			e := apiv1.Errorf(http.StatusConflict, apiv1.CodeEvacuationUnsafe, "evacuating zone %s%s would leave too little in rotation (force: true to evacuate anyway)", req.Zone, forCapability(req.CapabilityID))
			for _, u := range unsafe {
				e.Details = append(e.Details, apiv1.Detail{Path: u.CapabilityID, Message: fmt.Sprintf("%d of %d in-rotation instances would remain", u.Remaining, u.InRotation)})
			}
			return "", e
		}
		ev := &apiv1.Evacuation{ID: newOperatorID("ev-"), Zone: req.Zone, CapabilityID: req.CapabilityID, CreatedBy: by, Reason: req.Reason,
			Force: req.Force, Practice: req.Practice, StartsAt: now.UTC(), ExpiresAt: now.Add(d).UTC(), Remaining: remaining}
		if err := r.shareLocked(ctx, func(st *OperatorState) {
			for i := range st.Evacuations {
				if practice != nil && st.Evacuations[i].ID == practice.ID {
					ended(&st.Evacuations[i], now, by, apiv1.OutcomeInterrupted)
				}
			}
			st.Evacuations = append(st.Evacuations, *ev)
		}); err != nil {
			return "", err
		}
		if practice != nil {
			if err := r.endEvacuationLocked(practice, now, by, apiv1.OutcomeInterrupted); err != nil {
				return "", err
			}
		}
		affected, err := r.cfg.Eligibility.OperateCount(health.Event{At: now, Kind: health.KindEvacuate, Evacuation: ev.ID, Zone: ev.Zone, Capability: ev.CapabilityID,
			Until: ev.ExpiresAt, By: by, Why: req.Reason})
		if err != nil {
			return "", err
		}
		ev.AffectedInstances = affected
		r.ops.evacuations = append(r.ops.evacuations, ev)
		r.ops.trim()
		out = r.viewEvacuationLocked(ev, now)
		kind := "evacuation"
		if ev.Practice {
			kind = "practice evacuation"
		}
		forced := ""
		if ev.Force {
			forced = " (forced past the safety check)"
		}
		return fmt.Sprintf("%s %s of zone %s%s by %s until %s%s: %s; %d instances out of rotation", kind, ev.ID, ev.Zone, forCapability(ev.CapabilityID), by,
			ev.ExpiresAt.Format(time.RFC3339), forced, ev.Reason, affected), nil
	})
	return out, err
}

func forCapability(c string) string {
	if c == "" {
		return ""
	}
	return " for " + c
}

// minRemaining is the share of a capability's in-rotation instances an evacuation must
// leave.
func (r *Registry) minRemaining() float64 {
	return r.engineConfig().EvacuationMinRemaining
}

// unsafeRemaining returns the capabilities an evacuation would leave with fewer than min of
// their in-rotation instances, or with none in rotation (even when none is now).
func unsafeRemaining(rem []apiv1.Remaining, min float64) []apiv1.Remaining {
	var out []apiv1.Remaining
	for _, x := range rem {
		if x.Remaining == 0 || float64(x.Remaining) < min*float64(x.InRotation) {
			out = append(out, x)
		}
	}
	return out
}

// evacuationImpact counts, for each capability an evacuation of zone (and capability)
// concerns, its in-rotation instances and those outside the zone, from the monitor's group
// counters (it costs the groups, not the fleet); known says the zone has instances of it.
func (r *Registry) evacuationImpact(zone, capability string) (remaining []apiv1.Remaining, known bool) {
	type count struct{ inRotation, outside int }
	counts := map[string]*count{}
	inZone := map[string]bool{}
	r.cfg.Eligibility.Read(func(rd health.Reader) {
		rd.Groups(func(c, z string, members, inRotation int) {
			if capability != "" && c != capability {
				return
			}
			if z == zone {
				inZone[c] = true
			}
			n := counts[c]
			if n == nil {
				n = &count{}
				counts[c] = n
			}
			n.inRotation += inRotation
			if z != zone {
				n.outside += inRotation
			}
		})
	})
	for c := range inZone {
		n := counts[c]
		remaining = append(remaining, apiv1.Remaining{CapabilityID: c, InRotation: n.inRotation, Remaining: n.outside})
	}
	sort.Slice(remaining, func(i, j int) bool { return remaining[i].CapabilityID < remaining[j].CapabilityID })
	return remaining, len(inZone) > 0
}

// active reports whether ev still holds at now: neither ended nor expired.
func active(ev *apiv1.Evacuation, now time.Time) bool {
	return ev.EndedAt == nil && now.Before(ev.ExpiresAt)
}

// viewEvacuationLocked is ev as answered at now: its state, its return's step, its outcome.
func (r *Registry) viewEvacuationLocked(ev *apiv1.Evacuation, now time.Time) *apiv1.Evacuation {
	return r.viewEvacuation(ev, now, r.cfg.Eligibility.Evacuations(now))
}

// viewEvacuation is viewEvacuationLocked with the engine's evacuations at now read once for
// many (held).
func (r *Registry) viewEvacuation(ev *apiv1.Evacuation, now time.Time, held []health.Evacuation) *apiv1.Evacuation {
	out := *ev
	out.State = apiv1.EvacuationEnded
	if active(ev, now) {
		out.State = apiv1.EvacuationActive
	}
	cfg := r.engineConfig()
	for _, x := range held {
		if x.ID != ev.ID || !x.Returning {
			continue
		}
		out.State = apiv1.EvacuationReturning
		if x.Held {
			out.State = apiv1.EvacuationHeld
		}
		out.Return = &apiv1.Return{Steps: cfg.ReturnSteps, DwellSeconds: int64(cfg.ReturnDwell / time.Second), Step: x.Step + 1, Weight: x.Weight,
			StepSince: x.StepSince.UTC(), NextStepAt: x.NextStep.UTC()}
	}
	if out.State != apiv1.EvacuationActive && ev.EndedAt == nil {
		end := ev.ExpiresAt
		out.EndedAt, out.Outcome = &end, apiv1.OutcomeExpired
	}
	if ev.Practice && out.State != apiv1.EvacuationActive && out.Alarmed == nil {
		alarmed := len(out.Alarms) > 0
		out.Alarmed = &alarmed
	}
	return &out
}

// engineConfig is the eligibility settings the operator actions answer with.
func (r *Registry) engineConfig() health.Config { return r.cfg.Eligibility.Settings() }

// endEvacuationLocked ends ev now with an outcome (under r.ops.mu).
func (r *Registry) endEvacuationLocked(ev *apiv1.Evacuation, now time.Time, by, outcome string) error {
	if err := r.cfg.Eligibility.Operate(health.Event{At: now, Kind: health.KindEvacuationEnded, Evacuation: ev.ID}); err != nil {
		return err
	}
	ended(ev, now, by, outcome)
	if ev.Practice {
		ev.Alarms = r.alarms(ev, now)
		alarmed := len(ev.Alarms) > 0
		ev.Alarmed = &alarmed
	}
	return nil
}

// alarms says what alarmed while a practice evacuation held: a group of a remaining zone of
// the capabilities it concerns in panic — at its end, or at any time since it began, as the
// journal recorded.
func (r *Registry) alarms(ev *apiv1.Evacuation, now time.Time) []string {
	var out []string
	caps := map[string]bool{}
	for _, x := range ev.Remaining {
		caps[x.CapabilityID] = true
	}
	seen := map[string]bool{}
	if r.cfg.Journal != nil {
		events, _ := r.cfg.Journal.Find(journal.Query{Types: []string{apiv1.EventPanic}, Limit: r.cfg.Journal.Max()})
		for _, e := range events {
			c, _ := e.Attrs["capability_id"].(string)
			z, _ := e.Attrs["zone"].(string)
			st, _ := e.Attrs["state"].(string)
			if e.Time.Before(ev.StartsAt) || e.Time.After(now) || !caps[c] || z == ev.Zone || st == health.TransitionPanicOver {
				continue
			}
			if msg := fmt.Sprintf("%s in zone %s entered panic at %s", c, z, e.Time.UTC().Format(time.RFC3339)); !seen[msg] {
				seen[msg] = true
				out = append(out, msg)
			}
		}
	}
	zones := map[[2]string]bool{}
	for _, rec := range r.store.Records() {
		if rec.Zone == ev.Zone {
			continue
		}
		for _, c := range rec.Capabilities {
			if caps[c.CapabilityID] {
				zones[[2]string{c.CapabilityID, rec.Zone}] = true
			}
		}
	}
	r.cfg.Eligibility.Read(func(rd health.Reader) {
		for k := range zones {
			if rd.Panic(k[0], k[1]) {
				out = append(out, fmt.Sprintf("%s in zone %s is in panic", k[0], k[1]))
			}
		}
	})
	for c := range caps {
		for _, z := range r.cfg.Eligibility.ZoneOutliers(c, now) {
			if z != ev.Zone {
				out = append(out, fmt.Sprintf("%s in zone %s is a zone outlier", c, z))
			}
		}
	}
	sort.Strings(out)
	return out
}

// trim keeps the last keepEnded ended evacuations and overrides (under mu).
func (o *operators) trim() {
	o.evacuations = keepLast(o.evacuations, func(ev *apiv1.Evacuation) bool { return ev.EndedAt != nil })
	o.overrides = keepLast(o.overrides, func(ov *apiv1.Override) bool { return ov.EndedAt != nil })
}

// evacuationByID finds an evacuation (under r.ops.mu).
func (r *Registry) evacuationByID(id string) (*apiv1.Evacuation, error) {
	for _, ev := range r.ops.evacuations {
		if ev.ID == id {
			return ev, nil
		}
	}
	return nil, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no evacuation %q", id)
}

// activeEvacuationLocked finds an evacuation that still holds at now (under r.ops.mu): 404
// for an unknown one, 409 for one that ended (what says what could not be done).
func (r *Registry) activeEvacuationLocked(id string, now time.Time, what string) (*apiv1.Evacuation, error) {
	ev, err := r.evacuationByID(id)
	if err != nil {
		return nil, err
	}
	if !active(ev, now) {
		return nil, apiv1.Errorf(http.StatusConflict, apiv1.CodeInvalidRequest, "evacuation %s has ended: %s", id, what)
	}
	return ev, nil
}

// shareEvacuationLocked shares a change of evacuation id (shareLocked).
func (r *Registry) shareEvacuationLocked(ctx context.Context, id string, change func(ev *apiv1.Evacuation)) error {
	return r.shareLocked(ctx, func(st *OperatorState) {
		for i := range st.Evacuations {
			if st.Evacuations[i].ID == id {
				change(&st.Evacuations[i])
			}
		}
	})
}

// ended marks ev ended at now by who with an outcome.
func ended(ev *apiv1.Evacuation, now time.Time, by, outcome string) {
	t := now.UTC()
	ev.EndedAt, ev.EndedBy, ev.Outcome = &t, by, outcome
}

// Evacuations lists the evacuations: active and returning ones, then ended ones, newest first.
func (r *Registry) Evacuations() (*apiv1.EvacuationList, error) {
	if r.cfg.Eligibility == nil {
		return &apiv1.EvacuationList{Evacuations: []apiv1.Evacuation{}}, nil
	}
	now := r.cfg.Now()
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	out := &apiv1.EvacuationList{Evacuations: make([]apiv1.Evacuation, 0, len(r.ops.evacuations))}
	held := r.cfg.Eligibility.Evacuations(now)
	for i := len(r.ops.evacuations) - 1; i >= 0; i-- {
		out.Evacuations = append(out.Evacuations, *r.viewEvacuation(r.ops.evacuations[i], now, held))
	}
	rank := func(s string) int {
		return map[string]int{apiv1.EvacuationActive: 0, apiv1.EvacuationHeld: 1, apiv1.EvacuationReturning: 1}[s] + 2*btoi(s == apiv1.EvacuationEnded)
	}
	sort.SliceStable(out.Evacuations, func(i, j int) bool { return rank(out.Evacuations[i].State) < rank(out.Evacuations[j].State) })
	return out, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Evacuation returns one evacuation.
func (r *Registry) Evacuation(id string) (*apiv1.Evacuation, error) {
	if r.cfg.Eligibility == nil {
		return nil, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no evacuation %q", id)
	}
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	ev, err := r.evacuationByID(id)
	if err != nil {
		return nil, err
	}
	return r.viewEvacuationLocked(ev, r.cfg.Now()), nil
}

// ExtendEvacuation makes an active evacuation hold for d from now.
func (r *Registry) ExtendEvacuation(ctx context.Context, id string, req *apiv1.ExtendRequest) (*apiv1.Evacuation, error) {
	var out *apiv1.Evacuation
	err := r.operate(ctx, apiv1.EventEvacuation, "evacuation/"+id, func(now time.Time, by string) (string, error) {
		d, err := parseOperatorDuration("duration", req.Duration)
		if err != nil {
			return "", err
		}
		r.ops.mu.Lock()
		defer r.ops.mu.Unlock()
		ev, err := r.activeEvacuationLocked(id, now, "start a new one")
		if err != nil {
			return "", err
		}
		until := now.Add(d).UTC()
		if err := r.shareEvacuationLocked(ctx, id, func(e *apiv1.Evacuation) { e.ExpiresAt = until }); err != nil {
			return "", err
		}
		if err := r.cfg.Eligibility.Operate(health.Event{At: now, Kind: health.KindEvacuate, Evacuation: ev.ID, Zone: ev.Zone, Capability: ev.CapabilityID, Until: until}); err != nil {
			return "", err
		}
		ev.ExpiresAt = until
		out = r.viewEvacuationLocked(ev, now)
		return fmt.Sprintf("evacuation %s of zone %s extended by %s until %s", id, ev.Zone, by, until.Format(time.RFC3339)), nil
	})
	return out, err
}

// EndEvacuation ends an active evacuation now: its zone starts the capped way back.
func (r *Registry) EndEvacuation(ctx context.Context, id string) (*apiv1.Evacuation, error) {
	var out *apiv1.Evacuation
	err := r.operate(ctx, apiv1.EventEvacuation, "evacuation/"+id, func(now time.Time, by string) (string, error) {
		r.ops.mu.Lock()
		defer r.ops.mu.Unlock()
		ev, err := r.activeEvacuationLocked(id, now, "it cannot end twice")
		if err != nil {
			return "", err
		}
		if err := r.shareEvacuationLocked(ctx, id, func(e *apiv1.Evacuation) { ended(e, now, by, apiv1.OutcomeCancelled) }); err != nil {
			return "", err
		}
		if err := r.endEvacuationLocked(ev, now, by, apiv1.OutcomeCancelled); err != nil {
			return "", err
		}
		out = r.viewEvacuationLocked(ev, now)
		return fmt.Sprintf("evacuation %s of zone %s cancelled by %s: its instances return in steps", id, ev.Zone, by), nil
	})
	return out, err
}

// operatorState copies the operator actions for a snapshot (nil when there is none).
func (r *Registry) operatorState() *OperatorState {
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	if len(r.ops.evacuations) == 0 && len(r.ops.overrides) == 0 {
		return nil
	}
	return r.operatorStateLocked()
}

// operatorStateLocked copies the operator actions (under r.ops.mu).
func (r *Registry) operatorStateLocked() *OperatorState {
	st := &OperatorState{Evacuations: make([]apiv1.Evacuation, len(r.ops.evacuations)), Overrides: make([]apiv1.Override, len(r.ops.overrides))}
	for i, ev := range r.ops.evacuations {
		st.Evacuations[i] = *ev
	}
	for i, ov := range r.ops.overrides {
		st.Overrides[i] = *ov
	}
	return st
}

// trim keeps, of a shared state, every evacuation and override still in force and the last
// keepEnded of those that ended.
func (st *OperatorState) trim() {
	st.Evacuations = keepLast(st.Evacuations, func(ev apiv1.Evacuation) bool { return ev.EndedAt != nil })
	st.Overrides = keepLast(st.Overrides, func(ov apiv1.Override) bool { return !ov.Active })
}

// keepLast drops the oldest of the ended elements of xs beyond keepEnded.
func keepLast[T any](xs []T, ended func(T) bool) []T {
	n := 0
	for _, x := range xs {
		if ended(x) {
			n++
		}
	}
	out := xs[:0]
	for _, x := range xs {
		if ended(x) && n > keepEnded {
			n--
			continue
		}
		out = append(out, x)
	}
	return out
}

// OperatorSharer is a store that shares the operator actions between replicas (etcd): the
// state is put under one key, and every replica applies what its watch brings.
type OperatorSharer interface {
	// UpdateOperators replaces the shared state with what update makes of the current one
	// (nil before any), atomically.
	UpdateOperators(ctx context.Context, update func(cur []byte) ([]byte, error)) error
	Operators() []byte
	OnOperators(fn func([]byte))
}

// shareLocked writes to a store that shares the operator state what mutate makes of the
// state it holds (every replica's actions), before the action applies here: a write that
// fails changes nothing. Under r.ops.mu.
func (r *Registry) shareLocked(ctx context.Context, mutate func(st *OperatorState)) error {
	sh, ok := r.store.(OperatorSharer)
	if !ok {
		return nil
	}
	err := sh.UpdateOperators(ctx, func(cur []byte) ([]byte, error) {
		st := &OperatorState{}
		if len(cur) > 0 {
			if err := json.Unmarshal(cur, st); err != nil {
				return nil, fmt.Errorf("the shared operator actions are unreadable: %w", err)
			}
		}
		mutate(st)
		st.trim()
		return json.Marshal(st)
	})
	if err != nil {
		return apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeStoreUnavailable, "the operator action could not be shared with the other replicas, so nothing changed: %v", err)
	}
	return nil
}

// releaseReplay bounds how old a release another replica recorded may be to apply here: a
// replica that joins (or resyncs) does not replay old releases, which could end a
// quarantine that began after them.
const releaseReplay = time.Minute

// operatorsShared applies the operator state another replica (or this one) put to the
// store: evacuations and withdrawals it does not hold yet, extensions and ends of those it
// does. live is false for the state read at start, whose releases are history.
func (r *Registry) operatorsShared(b []byte, live bool) {
	var st OperatorState
	if err := json.Unmarshal(b, &st); err != nil {
		r.cfg.Logger.Warn("unreadable operator actions in the store", slog.Any("error", err))
		return
	}
	now := r.cfg.Now()
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	evs := make(map[string]*apiv1.Evacuation, len(r.ops.evacuations))
	for _, ev := range r.ops.evacuations {
		evs[ev.ID] = ev
	}
	apply := func(ev health.Event) {
		if err := r.cfg.Eligibility.Operate(ev); err != nil {
			r.cfg.Logger.Debug("shared operator action not applied", slog.String("kind", ev.Kind), slog.Any("error", err))
		}
	}
	cfg := r.engineConfig()
	for i := range st.Evacuations {
		e := st.Evacuations[i]
		old := evs[e.ID]
		end := e.ExpiresAt
		if e.EndedAt != nil && e.EndedAt.Before(end) {
			end = *e.EndedAt
		}
		switch {
		case old == nil:
			c := e
			r.ops.evacuations = append(r.ops.evacuations, &c)
			if now.After(end.Add(time.Duration(len(cfg.ReturnSteps)) * cfg.ReturnDwell)) {
				continue // its way back is over
			}
			apply(health.Event{At: e.StartsAt, Kind: health.KindEvacuate, Evacuation: e.ID, Zone: e.Zone, Capability: e.CapabilityID,
				Until: e.ExpiresAt, By: e.CreatedBy, Why: e.Reason})
			if end.Before(e.ExpiresAt) {
				apply(health.Event{At: end, Kind: health.KindEvacuationEnded, Evacuation: e.ID})
			}
		default:
			if !old.ExpiresAt.Equal(e.ExpiresAt) && old.EndedAt == nil && e.EndedAt == nil && now.Before(e.ExpiresAt) {
				apply(health.Event{At: now, Kind: health.KindEvacuate, Evacuation: e.ID, Zone: e.Zone, Capability: e.CapabilityID, Until: e.ExpiresAt})
				old.ExpiresAt = e.ExpiresAt
			}
			if old.EndedAt == nil && e.EndedAt != nil {
				apply(health.Event{At: *e.EndedAt, Kind: health.KindEvacuationEnded, Evacuation: e.ID})
				old.EndedAt, old.EndedBy, old.Outcome, old.Alarmed, old.Alarms = e.EndedAt, e.EndedBy, e.Outcome, e.Alarmed, e.Alarms
			}
		}
	}
	ovs := make(map[string]*apiv1.Override, len(r.ops.overrides))
	for _, ov := range r.ops.overrides {
		ovs[ov.ID] = ov
	}
	for i := range st.Overrides {
		o := st.Overrides[i]
		old := ovs[o.ID]
		switch {
		case old == nil:
			c := o
			r.ops.overrides = append(r.ops.overrides, &c)
			switch {
			case o.Action == apiv1.OverrideWithdraw && o.Active && o.ExpiresAt != nil && now.Before(*o.ExpiresAt):
				apply(health.Event{At: now, Kind: health.KindOverride, ID: o.InstanceID, Action: health.ActionWithdraw, Until: *o.ExpiresAt, By: o.CreatedBy, Why: o.Reason, Force: o.Force})
			case o.Action == apiv1.OverrideRelease && live && now.Sub(o.CreatedAt) < releaseReplay:
				apply(health.Event{At: now, Kind: health.KindOverride, ID: o.InstanceID, Action: health.ActionRelease, By: o.CreatedBy, Why: o.Reason})
			}
		case old.Active && !o.Active:
			old.Active, old.EndedAt, old.EndedBy = false, o.EndedAt, o.EndedBy
			if o.Action == apiv1.OverrideWithdraw && o.EndedAt != nil && o.ExpiresAt != nil && o.EndedAt.Before(*o.ExpiresAt) {
				apply(health.Event{At: now, Kind: health.KindOverride, ID: o.InstanceID, Action: health.ActionRelease, By: o.EndedBy})
			}
		}
	}
}

// restoreOperators applies the operator actions of a snapshot again: the evacuations that
// hold or whose zone is on its way back, and the withdrawals that have not run out.
func (r *Registry) restoreOperators(st *OperatorState, now time.Time) error {
	if st == nil {
		return nil
	}
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	r.ops.evacuations, r.ops.overrides = nil, nil
	for i := range st.Evacuations {
		ev := st.Evacuations[i]
		r.ops.evacuations = append(r.ops.evacuations, &ev)
		if r.cfg.Eligibility == nil {
			continue
		}
		end := ev.ExpiresAt
		if ev.EndedAt != nil && ev.EndedAt.Before(end) {
			end = *ev.EndedAt
		}
		cfg := r.engineConfig()
		if now.After(end.Add(time.Duration(len(cfg.ReturnSteps)) * cfg.ReturnDwell)) {
			continue // its way back is over
		}
		if err := r.cfg.Eligibility.Operate(health.Event{At: ev.StartsAt, Kind: health.KindEvacuate, Evacuation: ev.ID, Zone: ev.Zone,
			Capability: ev.CapabilityID, Until: ev.ExpiresAt, By: ev.CreatedBy, Why: ev.Reason}); err != nil {
			return err
		}
		if end.Before(ev.ExpiresAt) {
			if err := r.cfg.Eligibility.Operate(health.Event{At: end, Kind: health.KindEvacuationEnded, Evacuation: ev.ID}); err != nil {
				return err
			}
		}
	}
	for i := range st.Overrides {
		ov := st.Overrides[i]
		r.ops.overrides = append(r.ops.overrides, &ov)
		if r.cfg.Eligibility == nil || !ov.Active || ov.ExpiresAt == nil || !now.Before(*ov.ExpiresAt) {
			continue
		}
		if err := r.cfg.Eligibility.Operate(health.Event{At: now, Kind: health.KindOverride, ID: ov.InstanceID, Action: health.ActionWithdraw,
			Until: *ov.ExpiresAt, By: ov.CreatedBy, Why: ov.Reason, Force: ov.Force}); err != nil {
			return err
		}
	}
	return nil
}
