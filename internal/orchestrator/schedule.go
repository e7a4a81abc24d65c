package orchestrator

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Run fires scheduled workflows until ctx ends: every published workflow with a schedule
// trigger runs when its schedule is due, one run at a time (a run still going when the next
// is due is skipped). It owns the scheduled runs: when ctx ends they are cancelled, and Run
// returns once they have ended.
func (o *Orchestrator) Run(ctx context.Context) error {
	var runs sync.WaitGroup
	defer runs.Wait()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			o.fireDue(ctx, o.cfg.Now(), &runs)
		}
	}
}

// fireDue starts the runs that are due at now in runs; each run has its own goroutine,
// which ends with the run (bounded by its steps' timeouts, or ctx).
func (o *Orchestrator) fireDue(ctx context.Context, now time.Time, runs *sync.WaitGroup) {
	o.mu.Lock()
	var due []string
	for name, e := range o.workflows {
		if e.published == nil || e.published.wf.Schedule == "" || !containsStr(e.published.wf.Triggers, "schedule") {
			continue
		}
		sched := e.published.wf.Schedule
		if e.nextRun.IsZero() {
			e.nextRun = next(sched, now)
			continue
		}
		if !now.Before(e.nextRun) {
			due = append(due, name)
			e.nextRun = next(sched, now)
		}
	}
	o.mu.Unlock()
	for _, name := range due {
		runs.Go(func() {
			if _, err := o.RunNow(ctx, name, "schedule", nil); err != nil {
				o.cfg.Logger.Warn("scheduled run not started", slog.String("workflow", name), slog.Any("error", err))
			}
		})
	}
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// next returns the first time after now that schedule fires (zero when it never does).
// The schedule has passed workflow.CheckSchedule.
func next(schedule string, now time.Time) time.Time {
	switch {
	case strings.HasPrefix(schedule, "@every "):
		d, _ := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(schedule, "@every ")))
		return now.Add(d)
	case schedule == "@hourly":
		schedule = "0 * * * *"
	case schedule == "@daily":
		schedule = "0 0 * * *"
	}
	f := strings.Fields(schedule)
	if len(f) != 5 {
		return time.Time{}
	}
	t := now.Truncate(time.Minute).Add(time.Minute)
	for range 366 * 24 * 60 { // a year of minutes at most
		if cronMatch(f[0], t.Minute()) && cronMatch(f[1], t.Hour()) && cronMatch(f[2], t.Day()) &&
			cronMatch(f[3], int(t.Month())) && cronMatch(f[4], int(t.Weekday())) {
			return t
		}
		t = t.Add(time.Minute)
	}
	return time.Time{}
}

// cronMatch reports whether v matches a cron field (lists, ranges, steps, *).
func cronMatch(field string, v int) bool {
	for _, part := range strings.Split(field, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			step, _ = strconv.Atoi(stepS)
		}
		lo, hi := 0, 59
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			lo, _ = strconv.Atoi(a)
			hi, _ = strconv.Atoi(b)
		default:
			lo, _ = strconv.Atoi(rng)
			hi = lo
			if hasStep {
				hi = 59
			}
		}
		if v >= lo && v <= hi && step > 0 && (v-lo)%step == 0 {
			return true
		}
	}
	return false
}
