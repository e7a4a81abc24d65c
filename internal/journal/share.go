package journal

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Store is what a shared journal needs of the registry's store (the etcd store): Publish
// stores an event for every replica (the store numbers it and gives it back to each through
// the callback it was given), Prune keeps the newest keep events stored.
type Store interface {
	PublishEvent(ctx context.Context, e apiv1.Event) error
	PruneEvents(ctx context.Context, keep int) error
}

// Sharing bounds.
const (
	shareQueue    = 4096
	pruneInterval = time.Minute
	publishRetry  = time.Second
)

// sharing is a shared journal's side of its store.
type sharing struct {
	store  Store
	queue  chan apiv1.Event
	logger *slog.Logger
}

// Share makes j a shared journal: from now on Append queues events for store, which Run
// publishes, and j holds what the store gives back (Insert). Call it before any Append, and
// have the store call Insert for every event, the replica's own included.
func (j *Journal) Share(store Store, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	j.shared = &sharing{store: store, queue: make(chan apiv1.Event, shareQueue), logger: logger}
}

// Run publishes a shared journal's events until ctx ends, and keeps the store to the
// journal's bound (every replica prunes; pruning what another already pruned is harmless).
// Events that could not be queued or published are counted and published as one
// journal.gap event once the store takes events again. A journal that is not shared returns
// at once.
func (j *Journal) Run(ctx context.Context) error {
	sh := j.shared
	if sh == nil {
		return nil
	}
	prune := time.NewTicker(pruneInterval)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-prune.C:
			if err := sh.store.PruneEvents(ctx, j.max); err != nil && ctx.Err() == nil {
				sh.logger.Warn("pruning the shared journal failed", slog.Any("error", err))
			}
		case e := <-sh.queue:
			j.publish(ctx, e)
		}
	}
}

// publish stores e, retrying while ctx lasts, first telling of the events lost meanwhile.
func (j *Journal) publish(ctx context.Context, e apiv1.Event) {
	sh := j.shared
	j.mu.Lock()
	lost := j.unsent
	j.unsent = 0
	j.mu.Unlock()
	if lost > 0 {
		gap := apiv1.Event{Time: j.now().UTC(), Type: apiv1.EventJournalGap, Severity: apiv1.SeverityWarning, Subject: "journal",
			Message: fmt.Sprintf("%d events were lost: the store was away and the queue of %d was full", lost, shareQueue),
			Attrs:   map[string]any{"missed": lost}}
		if err := sh.store.PublishEvent(ctx, gap); err != nil {
			j.mu.Lock()
			j.unsent += lost
			j.mu.Unlock()
		}
	}
	for ctx.Err() == nil {
		err := sh.store.PublishEvent(ctx, e)
		if err == nil {
			return
		}
		sh.logger.Warn("publishing an event to the shared journal failed; retrying", slog.String("type", e.Type), slog.Any("error", err))
		select {
		case <-ctx.Done():
		case <-time.After(publishRetry):
		}
	}
}
