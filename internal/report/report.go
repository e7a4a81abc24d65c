package report

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Defaults of Config.
const (
	DefaultInterval = time.Second
	DefaultMaxQueue = 1000
)

// Config configures a Reporter.
type Config struct {
	// Reporter is the name reports carry (a gateway's --id, an orchestrator's host).
	Reporter string
	// Send delivers one report (the discovery client's Report).
	Send func(context.Context, *apiv1.ReportRequest) error
	// Interval is how often Run sends what is queued (default 1 s).
	Interval time.Duration
	// MaxQueue bounds the events waiting to be sent (default 1000): past it the oldest go,
	// and the number dropped is logged with the next report that succeeds.
	MaxQueue int
	Logger   *slog.Logger
}

// Reporter queues events and conditions and sends them; a nil *Reporter drops everything,
// so components take one without checking.
type Reporter struct {
	cfg Config

	mu      sync.Mutex
	events  []apiv1.ReportedEvent
	conds   map[condKey]apiv1.Condition // the latest state of each condition not yet sent
	dropped int
	// holds lists what an orchestrator holds (SetWorkflows), sent with a raised trigger.
	holds func() []string
}

type condKey struct{ kind, subject string }

// New returns a Reporter.
func New(cfg Config) (*Reporter, error) {
	if cfg.Send == nil || cfg.Reporter == "" {
		return nil, errors.New("report: a reporter needs a name and a Send")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{cfg: cfg, conds: map[condKey]apiv1.Condition{}}, nil
}

// Event queues an event for the journal.
func (r *Reporter) Event(e apiv1.ReportedEvent) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) >= r.cfg.MaxQueue {
		r.events = r.events[1:]
		r.dropped++
	}
	r.events = append(r.events, e)
}

// Condition queues the state of a condition; a later state of the same one replaces it.
func (r *Reporter) Condition(c apiv1.Condition) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.conds[condKey{c.Kind, c.Subject}] = c
	r.mu.Unlock()
}

// SetWorkflows gives the reporter what lists the workflows its orchestrator holds: a
// report that raises a trigger condition carries them, as the registry requires.
func (r *Reporter) SetWorkflows(holds func() []string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.holds = holds
	r.mu.Unlock()
}

func raisesTrigger(c apiv1.Condition) bool { return c.Kind == apiv1.IncidentTrigger && c.Active }

// Flush sends what is queued, in reports of at most the API's bounds; what a failed send
// held is queued again (ahead of what came meanwhile).
func (r *Reporter) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	for {
		r.mu.Lock()
		n := min(len(r.events), apiv1.MaxReportEvents)
		req := &apiv1.ReportRequest{Reporter: r.cfg.Reporter, Events: append([]apiv1.ReportedEvent(nil), r.events[:n]...)}
		r.events = r.events[n:]
		for k, c := range r.conds {
			if len(req.Conditions) == apiv1.MaxReportConditions {
				break
			}
			req.Conditions = append(req.Conditions, c)
			delete(r.conds, k)
		}
		dropped, holds := r.dropped, r.holds
		r.mu.Unlock()
		if len(req.Events) == 0 && len(req.Conditions) == 0 {
			return nil
		}
		if holds != nil && slices.ContainsFunc(req.Conditions, raisesTrigger) {
			// A trigger raised for a workflow deleted since is stale: the registry would
			// refuse the whole report, and the report would be tried again for ever.
			req.Workflows = holds()
			req.Conditions = slices.DeleteFunc(req.Conditions, func(c apiv1.Condition) bool {
				return raisesTrigger(c) && !slices.Contains(req.Workflows, c.Subject)
			})
		}
		if err := r.cfg.Send(ctx, req); err != nil {
			r.mu.Lock()
			r.events = append(req.Events, r.events...)
			if over := len(r.events) - r.cfg.MaxQueue; over > 0 {
				r.events, r.dropped = r.events[over:], r.dropped+over
			}
			for _, c := range req.Conditions {
				if _, newer := r.conds[condKey{c.Kind, c.Subject}]; !newer {
					r.conds[condKey{c.Kind, c.Subject}] = c
				}
			}
			r.mu.Unlock()
			return err
		}
		if dropped > 0 {
			r.mu.Lock()
			r.dropped -= dropped
			r.mu.Unlock()
			r.cfg.Logger.Warn("reports to the registry dropped events: the queue was full while the registry was away",
				slog.Int("dropped", dropped), slog.Int("max_queue", r.cfg.MaxQueue))
		}
	}
}

// Run sends what is queued every Interval until ctx ends; a failed send is retried at the
// next tick (the registry away is logged once, and its return).
func (r *Reporter) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			err := r.Flush(ctx)
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				failing = true
				r.cfg.Logger.Warn("reporting to the registry failed; retrying", slog.Any("error", err))
			case err == nil && failing:
				failing = false
				r.cfg.Logger.Info("reporting to the registry works again")
			}
		}
	}
}
