package journal

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Store is what a shared journal needs of the registry's store (the etcd store):
// PublishEvents stores at most publishBatch events for every replica, in the order given and
// all or none, without keeping es past the call (the store numbers them and gives them back
// to each through the callback it was given), each as the JSON of its Stored form;
// PruneEvents keeps the newest keep events stored.
type Store interface {
	PublishEvents(ctx context.Context, es []Stored) error
	PruneEvents(ctx context.Context, keep int) error
}

// Sharing bounds.
const (
	shareQueue   = 4096
	publishBatch = 100 // events stored in one write at most
	// publishLinger is how long a write waits, from its first event, for more to fill it.
	// Without the wait a write took what came during the one before (a store's round trip):
	// about ten events each at 3,000 registrations a second, a thousand writes of etcd's
	// for ten thousand registrations.
	publishLinger = 20 * time.Millisecond
	pruneInterval = time.Minute
	publishRetry  = time.Second
)

// sharing is a shared journal's side of its store.
type sharing struct {
	store  Store
	queue  chan Stored // encoded as the ring keeps them: the attributes once, as JSON
	logger *slog.Logger
	// after starts a write's wait (publishLinger): time.After; a test's own channel.
	after func(time.Duration) <-chan time.Time
}

// Share makes j a shared journal: from now on Append queues events for store, which Run
// publishes, and j holds what the store gives back (Insert). Call it before any Append, and
// have the store call Insert for every event, the replica's own included.
func (j *Journal) Share(store Store, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	j.shared = &sharing{store: store, queue: make(chan Stored, shareQueue), logger: logger, after: time.After}
}

// Run publishes a shared journal's events until ctx ends — those that come within
// publishLinger of a write's first event together, up to publishBatch in one write, so
// that registrations cost the store a few writes rather than one each and the queue keeps
// up — and keeps the store to the journal's bound (every replica prunes; pruning what
// another already pruned is harmless).
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
	batch := make([]Stored, 0, publishBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-prune.C:
			if err := sh.store.PruneEvents(ctx, j.max); err != nil && ctx.Err() == nil {
				sh.logger.Warn("pruning the shared journal failed", slog.Any("error", err))
			}
		case e := <-sh.queue:
			j.publish(ctx, sh.gather(ctx, append(batch[:0], e)))
		}
	}
}

// gather adds to batch, up to publishBatch, what comes until publishLinger after it was
// called and what is queued then (or until ctx ends); a batch that fills goes at once.
func (sh *sharing) gather(ctx context.Context, batch []Stored) []Stored {
	linger := sh.after(publishLinger)
	for len(batch) < publishBatch {
		select {
		case e := <-sh.queue:
			batch = append(batch, e)
		case <-linger:
			// what is queued already goes too: when the queue and the linger's end are both
			// ready, select picks either, and an event queued before the end would wait for
			// the next write
			for len(batch) < publishBatch {
				select {
				case e := <-sh.queue:
					batch = append(batch, e)
				default:
					return batch
				}
			}
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// publish stores es, retrying while ctx lasts, first telling of the events lost meanwhile.
func (j *Journal) publish(ctx context.Context, es []Stored) {
	sh := j.shared
	j.mu.Lock()
	lost := j.unsent
	j.unsent = 0
	j.mu.Unlock()
	if lost > 0 {
		gap := apiv1.Event{Time: j.now().UTC(), Type: apiv1.EventJournalGap, Severity: apiv1.SeverityWarning, Subject: "journal",
			Message: fmt.Sprintf("%d events were lost: the queue of %d events waiting for the store was full (the store was away, or slower than the events came)", lost, shareQueue),
			Attrs:   map[string]any{"missed": lost}}
		if err := sh.store.PublishEvents(ctx, []Stored{encode(gap)}); err != nil {
			j.mu.Lock()
			j.unsent += lost
			j.mu.Unlock()
		}
	}
	for ctx.Err() == nil {
		err := sh.store.PublishEvents(ctx, es)
		if err == nil {
			return
		}
		sh.logger.Warn("publishing events to the shared journal failed; retrying", slog.Int("events", len(es)), slog.String("first_type", es[0].Type), slog.Any("error", err))
		select {
		case <-ctx.Done():
		case <-time.After(publishRetry):
		}
	}
}
