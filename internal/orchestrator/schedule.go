package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/workflow"
)

// schedulerIdle is how long the scheduler sleeps when no schedule is due sooner; a publish
// or a deletion wakes it at once.
const schedulerIdle = time.Minute

// MaxScheduleLateness is the latest a scheduled fire may start after its time: a fire later
// than that (or than the schedule's period, when it is shorter) was missed — the
// orchestrator was busy or stopped — and is recorded as missed, not run late.
const MaxScheduleLateness = time.Minute

// Run fires scheduled workflows until ctx ends. Each published workflow with a schedule
// trigger has its own next fire, computed from its schedule (an @every schedule from its
// previous fire, so it does not drift), and Run sleeps until the earliest one. Of the fires
// due at one wake-up only the latest runs, when it is late by less than the schedule's
// lateness bound; the others are recorded in the history as one missed run. A fire while a
// scheduled run is still in progress is recorded as skipped. It owns the scheduled runs:
// when ctx ends they are cancelled, and Run returns once they have ended. It also reports
// the outcomes of the service_call steps every OutcomeWindow.
func (o *Orchestrator) Run(ctx context.Context) error {
	var runs sync.WaitGroup
	defer runs.Wait()
	if o.cfg.OutcomeWindow > 0 {
		runs.Go(func() { o.reportOutcomes(ctx) })
	}
	if o.cfg.RevalidateEvery > 0 {
		runs.Go(func() { o.revalidateEvery(ctx) })
	}
	for {
		now := o.cfg.Now()
		wait := schedulerIdle
		if next := o.fireDue(ctx, now, &runs); !next.IsZero() {
			wait = max(next.Sub(now), 0)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.cfg.After(wait):
		case <-o.wake:
		}
	}
}

// wakeScheduler makes Run look at the schedules again (one was published or deleted).
func (o *Orchestrator) wakeScheduler() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// firing is what a wake-up does for one workflow: run its latest due fire or not, and the
// fires it missed.
type firing struct {
	name         string
	run          bool
	missed       int
	missedFrom   time.Time
	missedUntil  time.Time
	scheduledFor time.Time
}

// fireDue starts the runs that are due at now in runs and records the missed fires; it
// returns the earliest next fire of any schedule (zero when there is none). Each run has its
// own goroutine, which ends with the run (bounded by MaxRunDuration, or ctx).
func (o *Orchestrator) fireDue(ctx context.Context, now time.Time, runs *sync.WaitGroup) time.Time {
	var earliest time.Time
	var due []firing
	o.mu.Lock()
	for name, e := range o.workflows {
		if e.published == nil || e.published.wf.Sched == nil || !containsStr(e.published.wf.Triggers, TriggerSchedule) {
			continue
		}
		sched := e.published.wf.Sched
		if e.nextRun.IsZero() {
			e.nextRun = sched.Next(now)
		}
		if !now.Before(e.nextRun) {
			f := dueFires(sched, e.nextRun, now)
			f.name = name
			due = append(due, f)
			e.nextRun = sched.Next(f.scheduledFor)
		}
		if !e.nextRun.IsZero() && (earliest.IsZero() || e.nextRun.Before(earliest)) {
			earliest = e.nextRun
		}
	}
	o.mu.Unlock()
	for _, f := range due {
		if f.missed > 0 {
			o.recordFire(f.name, apiv1.RunMissed, f.missedFrom, fmt.Sprintf("%d scheduled fire(s) missed, from %s to %s: the orchestrator was busy or stopped",
				f.missed, f.missedFrom.UTC().Format(time.RFC3339), f.missedUntil.UTC().Format(time.RFC3339)))
			o.metrics.fired(f.name, apiv1.RunMissed, f.missed)
		}
		if !f.run {
			continue
		}
		runs.Go(func() {
			_, skipped, err := o.runNow(ctx, f.name, TriggerSchedule, nil)
			switch {
			case skipped:
				o.recordFire(f.name, apiv1.RunSkipped, f.scheduledFor, fmt.Sprintf("the fire of %s was skipped: a scheduled run was still in progress",
					f.scheduledFor.UTC().Format(time.RFC3339)))
				o.metrics.fired(f.name, apiv1.RunSkipped, 1)
			case err != nil:
				o.cfg.Logger.Warn("scheduled run not started", slog.String("workflow", f.name), slog.Any("error", err))
				o.metrics.fired(f.name, apiv1.RunSkipped, 1)
			default:
				o.metrics.fired(f.name, "ran", 1)
			}
		})
	}
	for _, f := range due {
		if f.missed == 0 {
			o.persistRuns(f.name, historyWrite{}) // the next fire, so that a restart knows what it missed
		}
	}
	return earliest
}

// maxMissedCount bounds the fires dueFires counts one by one (an @every 1s schedule stopped
// for a year); past it the rest are counted as one.
const maxMissedCount = 1_000_000

// dueFires looks at the fires of sched from first (due) to now: the latest runs when it is
// late by less than its lateness bound, the others are missed.
func dueFires(sched *workflow.Schedule, first, now time.Time) firing {
	f := firing{scheduledFor: first}
	for n := 0; ; n++ {
		next := sched.Next(f.scheduledFor)
		if next.IsZero() || next.After(now) {
			break
		}
		if n == maxMissedCount {
			next = now
		}
		if f.missed == 0 {
			f.missedFrom = f.scheduledFor
		}
		f.missed++
		f.missedUntil = f.scheduledFor
		f.scheduledFor = next
		if n == maxMissedCount {
			break
		}
	}
	lateness := MaxScheduleLateness
	if next := sched.Next(f.scheduledFor); !next.IsZero() {
		lateness = min(lateness, next.Sub(f.scheduledFor))
	}
	f.run = now.Sub(f.scheduledFor) < lateness
	if !f.run {
		if f.missed == 0 {
			f.missedFrom = f.scheduledFor
		}
		f.missed++
		f.missedUntil = f.scheduledFor
	}
	return f
}

// recordFire records a scheduled fire that did not run (skipped or missed) in the history:
// it is no run, so it does not count in the success rate.
func (o *Orchestrator) recordFire(name, status string, at time.Time, note string) {
	o.mu.Lock()
	e := o.workflows[name]
	var hw historyWrite
	if e != nil {
		hw = o.record(e, &apiv1.Run{RunID: newRunID(), Workflow: name, Trigger: TriggerSchedule, Status: status, StartedAt: at.UTC(),
			Steps: []apiv1.StepRun{}, Output: []byte("null"), Context: map[string]any{}, Note: note})
	}
	o.mu.Unlock()
	if e != nil {
		o.persistRuns(name, hw)
	}
	o.cfg.Logger.Info("scheduled fire not run", slog.String("workflow", name), slog.String("status", status), slog.String("note", note))
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// revalidateEvery validates every published workflow again each RevalidateEvery until ctx
// ends (RevalidatePublished).
func (o *Orchestrator) revalidateEvery(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.cfg.After(o.cfg.RevalidateEvery):
		}
		o.RevalidatePublished(ctx)
	}
}

// RevalidatePublished validates every published workflow again against its providers and
// stores each result (the validation console and the journal show it). A workflow whose
// verdict went from passed to failed raises its validation incident; one that passes
// again clears it. It returns the workflows whose verdict changed.
func (o *Orchestrator) RevalidatePublished(ctx context.Context) []string {
	o.mu.Lock()
	type was struct{ name, contract, providers string }
	var names []was
	for name, e := range o.workflows {
		if e.published != nil && e.latest != nil && e.latest.result != nil {
			names = append(names, was{name, e.latest.result.ContractStatus, e.latest.result.ProviderStatus})
		}
	}
	o.mu.Unlock()
	slices.SortFunc(names, func(a, b was) int { return strings.Compare(a.name, b.name) })
	var changed []string
	for _, w := range names {
		if ctx.Err() != nil {
			break
		}
		res, err := o.Revalidate(ctx, w.name)
		if err != nil || res == nil {
			continue
		}
		failed := res.ContractStatus == apiv1.StatusFailed || res.ProviderStatus == apiv1.StatusFailed
		if res.ContractStatus == w.contract && res.ProviderStatus == w.providers {
			continue
		}
		changed = append(changed, w.name)
		if o.cfg.Reporter != nil {
			o.cfg.Reporter.Condition(apiv1.Condition{Kind: apiv1.IncidentValidation, Subject: w.name, Active: failed,
				Summary: fmt.Sprintf("workflow %s re-validated: contract %s (was %s), providers %s (was %s)", w.name,
					res.ContractStatus, w.contract, res.ProviderStatus, w.providers)})
		}
	}
	return changed
}
