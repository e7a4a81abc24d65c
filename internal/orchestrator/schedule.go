package orchestrator

import (
	"context"
	"log/slog"
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
		sched := e.published.wf.Sched
		if sched == nil {
			continue
		}
		if e.nextRun.IsZero() {
			e.nextRun = sched.Next(now)
			continue
		}
		if !now.Before(e.nextRun) {
			due = append(due, name)
			e.nextRun = sched.Next(now)
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
