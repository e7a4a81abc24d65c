package discovery

import (
	"context"
	"sync"
	"time"
)

// Source says where a Result came from.
type Source string

// Sources of a Result.
const (
	// SourceFresh: fetched from the registry for this call.
	SourceFresh Source = "fresh"
	// SourceCache: served from a view refreshed within the TTL (or kept current by a watch).
	SourceCache Source = "cache"
	// SourceSnapshot: the registry could not be reached; this is the last-known-good view.
	SourceSnapshot Source = "snapshot"
)

// State is the state of one cached view.
type State string

// States of a view.
const (
	StateUninitialized      State = "uninitialized"
	StateFresh              State = "fresh"
	StateAuthoritativeEmpty State = "authoritative-empty"
	StateStale              State = "stale"
	StateExpired            State = "expired"
)

// answer is one registry answer, or the merge of several.
type answer[T any] struct {
	epoch    string
	revision int64
	complete bool
	body     T
	// removed: the instances an incomplete answer says the registry removed in its epoch
	removed map[string]bool
}

// kind tells a view how to talk about its type T.
type kind[T any] struct {
	// merge folds an incomplete answer into the last-known-good body: what the answer holds,
	// plus what the view held of every other instance that the answer does not say removed.
	merge func(lkg, incomplete T, removed map[string]bool) T
	// size counts the entries of a body (for metrics and authoritative-empty).
	size func(T) int
}

// view is the cached state of one query. All fields are guarded by mu.
type view[T any] struct {
	kind kind[T]

	mu        sync.Mutex
	lkg       *answer[T]
	lkgAt     time.Time // last successful refresh: the age of the view is counted from it
	checkedAt time.Time // last refresh attempt, successful or not
	lastErr   error     // of the last attempt
	invalid   bool      // Invalidate was called: refetch on the next read
	inflight  *flight   // the refresh in progress, shared by concurrent readers
}

type flight struct {
	done chan struct{}
	err  error
}

// apply orders a new answer against the current view and reports whether the view changed.
// It must be called with v.mu held.
func (v *view[T]) apply(a answer[T], now time.Time) bool {
	v.lkgAt, v.checkedAt, v.lastErr, v.invalid = now, now, nil, false
	cur := v.lkg
	switch {
	case cur == nil:
		v.lkg = &a
		return true
	case a.epoch == cur.epoch && a.revision < cur.revision:
		return false // out of order: an older answer never replaces a newer view
	case a.epoch == cur.epoch && a.revision == cur.revision && a.complete == cur.complete:
		return false
	case a.complete:
		v.lkg = &a
		return true
	default:
		// A registry that started empty is still warming up: keep what we knew, add what it says.
		merged := answer[T]{epoch: a.epoch, revision: a.revision, complete: false, body: v.kind.merge(cur.body, a.body, a.removed)}
		v.lkg = &merged
		return true
	}
}

// refresh runs fetch once for all concurrent callers and applies its answer.
func (v *view[T]) refresh(ctx context.Context, now func() time.Time, fetch func(ctx context.Context) (answer[T], error)) (changed bool, err error) {
	v.mu.Lock()
	if f := v.inflight; f != nil {
		v.mu.Unlock()
		select {
		case <-f.done:
			return false, f.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	v.inflight = f
	v.mu.Unlock()

	changed, err = v.fetchAndApply(ctx, now, fetch)

	v.mu.Lock()
	v.inflight = nil
	v.mu.Unlock()
	f.err = err
	close(f.done)
	return changed, err
}

// fetchAndApply runs fetch and applies its answer, or records its failure.
func (v *view[T]) fetchAndApply(ctx context.Context, now func() time.Time, fetch func(ctx context.Context) (answer[T], error)) (changed bool, err error) {
	a, err := fetch(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.checkedAt, v.lastErr = now(), err
		return false, err
	}
	return v.apply(a, now()), nil
}

// snapshot describes the view at now; it must be called with v.mu held.
func (v *view[T]) snapshotLocked(now time.Time, stale time.Duration) (st State, age time.Duration) {
	if v.lkg == nil {
		return StateUninitialized, 0
	}
	age = now.Sub(v.lkgAt)
	switch {
	case v.lastErr != nil && age > stale:
		return StateExpired, age
	case v.lastErr != nil:
		return StateStale, age
	case v.lkg.complete && v.kind.size(v.lkg.body) == 0:
		return StateAuthoritativeEmpty, age
	default:
		return StateFresh, age
	}
}
