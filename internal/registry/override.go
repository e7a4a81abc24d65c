package registry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// Override withdraws one instance for a duration (it holds across re-registrations of the
// id), or releases it (ends a withdrawal, or a quarantine).
func (r *Registry) Override(ctx context.Context, req *apiv1.OverrideRequest) (*apiv1.Override, error) {
	var out *apiv1.Override
	err := r.operate(ctx, apiv1.EventOverride, req.InstanceID, func(now time.Time, by string) (string, error) {
		var id, action, dur *apiv1.Detail
		if strings.TrimSpace(req.InstanceID) == "" {
			id = &apiv1.Detail{Path: "instance_id", Message: "is required: the instance to withdraw or release"}
		}
		switch req.Action {
		case apiv1.OverrideWithdraw:
			_, dur = durationDetail("duration", req.Duration)
		case apiv1.OverrideRelease:
		case "":
			action = &apiv1.Detail{Path: "action", Message: "is required: withdraw or release"}
		default:
			action = &apiv1.Detail{Path: "action", Message: fmt.Sprintf("%q: want withdraw or release", req.Action)}
		}
		if ds := collect(nil, id, action, dur, reasonDetail(req.Reason)); len(ds) > 0 {
			return "", apiv1.InvalidRequest(ds) // every missing or wrong field at once
		}
		rec, ok := r.store.Get(req.InstanceID)
		if !ok {
			return "", apiv1.Errorf(http.StatusNotFound, apiv1.CodeInstanceNotFound, "no instance %q is registered", req.InstanceID)
		}
		if req.Action == apiv1.OverrideRelease && !r.releasable(req.InstanceID) {
			return "", apiv1.Errorf(http.StatusConflict, apiv1.CodeNothingToRelease,
				"instance %s has nothing to release: no active withdrawal, and it is not quarantined", req.InstanceID)
		}
		ov := &apiv1.Override{ID: newOperatorID("ov-"), InstanceID: req.InstanceID, Action: req.Action, CreatedBy: by, Reason: req.Reason, CreatedAt: now.UTC()}
		ev := health.Event{At: now, Kind: health.KindOverride, ID: req.InstanceID, Action: req.Action, By: by, Why: req.Reason}
		switch req.Action {
		case apiv1.OverrideWithdraw:
			d, err := parseOperatorDuration("duration", req.Duration)
			if err != nil {
				return "", err
			}
			// A withdrawal that leaves a pool with nothing in rotation would be undone by
			// the pool's panic: refused unless forced; forced, it holds even in panic.
			emptied := r.emptiedPools(rec)
			if len(emptied) > 0 && !req.Force {
				e := apiv1.Errorf(http.StatusConflict, apiv1.CodeOverrideUnsafe,
					"withdrawing %s would leave %d pool(s) with nothing in rotation; each would panic and send it traffic again (force: true to withdraw it anyway, and keep it out even in panic)",
					req.InstanceID, len(emptied))
				e.Details = emptied
				return "", e
			}
			until := now.Add(d).UTC()
			ev.Until, ov.ExpiresAt, ov.Active = until, &until, true
			ev.Force, ov.Force, ov.Emptied = req.Force, req.Force, emptied
		}
		if req.Action == apiv1.OverrideRelease {
			t := now.UTC()
			ov.EndedAt, ov.EndedBy = &t, by
		}
		r.ops.mu.Lock()
		defer r.ops.mu.Unlock()
		if err := r.shareLocked(ctx, func(st *OperatorState) {
			for i := range st.Overrides {
				if o := &st.Overrides[i]; o.InstanceID == req.InstanceID && o.Active {
					t := now.UTC()
					o.Active, o.EndedAt, o.EndedBy = false, &t, by
				}
			}
			st.Overrides = append(st.Overrides, *ov)
		}); err != nil {
			return "", err
		}
		if err := r.cfg.Eligibility.Operate(ev); err != nil {
			return "", err
		}
		for _, o := range r.ops.overrides { // a new decision about the instance ends the old
			if o.InstanceID == req.InstanceID && o.Active {
				t := now.UTC()
				o.Active, o.EndedAt, o.EndedBy = false, &t, by
			}
		}
		r.ops.overrides = append(r.ops.overrides, ov)
		r.ops.trim()
		c := *ov
		out = &c
		if req.Action == apiv1.OverrideRelease {
			return fmt.Sprintf("instance %s released by %s: %s", req.InstanceID, by, req.Reason), nil
		}
		if ov.Force {
			return fmt.Sprintf("instance %s withdrawn by %s until %s, forced: kept out even in panic; %d pool(s) left with nothing in rotation (%s): %s",
				req.InstanceID, by, ov.ExpiresAt.Format(time.RFC3339), len(ov.Emptied), poolNames(ov.Emptied), req.Reason), nil
		}
		return fmt.Sprintf("instance %s withdrawn by %s until %s: %s", req.InstanceID, by, ov.ExpiresAt.Format(time.RFC3339), req.Reason), nil
	})
	return out, err
}

// Overrides lists the overrides, newest first.
func (r *Registry) Overrides() *apiv1.OverrideList {
	now := r.cfg.Now()
	r.ops.mu.Lock()
	defer r.ops.mu.Unlock()
	out := &apiv1.OverrideList{Overrides: make([]apiv1.Override, 0, len(r.ops.overrides))}
	for i := len(r.ops.overrides) - 1; i >= 0; i-- {
		o := *r.ops.overrides[i]
		if o.Active && o.ExpiresAt != nil && !now.Before(*o.ExpiresAt) {
			o.Active, o.EndedAt = false, o.ExpiresAt
		}
		out.Overrides = append(out.Overrides, o)
	}
	return out
}

// EndOverride ends an active withdrawal before its time (a release of its instance).
func (r *Registry) EndOverride(ctx context.Context, id string) (*apiv1.Override, error) {
	var out *apiv1.Override
	err := r.operate(ctx, apiv1.EventOverride, "override/"+id, func(now time.Time, by string) (string, error) {
		r.ops.mu.Lock()
		defer r.ops.mu.Unlock()
		var ov *apiv1.Override
		for _, o := range r.ops.overrides {
			if o.ID == id {
				ov = o
			}
		}
		switch {
		case ov == nil:
			return "", apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no override %q", id)
		case !ov.Active || (ov.ExpiresAt != nil && !now.Before(*ov.ExpiresAt)):
			return "", apiv1.Errorf(http.StatusConflict, apiv1.CodeInvalidRequest, "override %s has ended already", id)
		}
		if err := r.shareLocked(ctx, func(st *OperatorState) {
			for i := range st.Overrides {
				if o := &st.Overrides[i]; o.ID == id {
					t := now.UTC()
					o.Active, o.EndedAt, o.EndedBy = false, &t, by
				}
			}
		}); err != nil {
			return "", err
		}
		if err := r.cfg.Eligibility.Operate(health.Event{At: now, Kind: health.KindOverride, ID: ov.InstanceID, Action: health.ActionRelease, By: by}); err != nil {
			return "", err
		}
		t := now.UTC()
		ov.Active, ov.EndedAt, ov.EndedBy = false, &t, by
		c := *ov
		out = &c
		return fmt.Sprintf("override %s of instance %s ended by %s", id, ov.InstanceID, by), nil
	})
	return out, err
}

// releasable reports whether a release of id ends something: an active withdrawal, or a
// quarantine (held, or just ended and waiting for its probes).
func (r *Registry) releasable(id string) bool {
	now := r.cfg.Now()
	r.ops.mu.Lock()
	for _, o := range r.ops.overrides {
		if o.InstanceID == id && o.Active && o.Action == apiv1.OverrideWithdraw && (o.ExpiresAt == nil || now.Before(*o.ExpiresAt)) {
			r.ops.mu.Unlock()
			return true
		}
	}
	r.ops.mu.Unlock()
	ex, ok := r.cfg.Eligibility.Explain(id, now)
	if !ok {
		return false
	}
	if ex.State == apiv1.EligibilityQuarantined {
		return true
	}
	for _, reason := range ex.Reasons {
		if reason.Code == health.ReasonQuarantineEnded || reason.Code == health.ReasonOperatorWithdrawn {
			return true
		}
	}
	return false
}
