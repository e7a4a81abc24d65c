package discovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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
	// carried: the instances a merged answer holds only from what the view knew before
	// (no answer of the warming-up registry names them yet); forget drops them.
	carried map[string]bool
}

// kind tells a view how to talk about its type T.
type kind[T any] struct {
	// merge folds an incomplete answer into the last-known-good body: what the answer holds,
	// plus what the view held of every other instance that the answer does not say removed.
	merge func(lkg, incomplete T, removed map[string]bool) T
	// size counts the entries of a body (for metrics and authoritative-empty).
	size func(T) int
	// instances lists the instance ids of a body, and drop removes an instance from one;
	// with both, a merged view knows what it carries and can forget it (nil: it cannot).
	instances func(T) []string
	drop      func(T, string) T
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
	// refused counts an answer apply refused, by reason (older_revision, older_epoch); nil
	// counts nothing.
	refused func(reason string)
	// watchers counts the Watch loops keeping it current: a watched view is never evicted.
	watchers atomic.Int32
}

type flight struct {
	done chan struct{}
	err  error
}

// apply orders a new answer against the current view by (epoch, revision) and reports
// whether the view changed. An answer older than the view — an older revision of its epoch,
// or an older epoch while the view's own registry still answers (after a failure, the next
// registry of the list may be one that started earlier) — is refused before anything is
// touched: a late answer renews nothing, not even the view's age. It must be called with
// v.mu held.
func (v *view[T]) apply(a answer[T], now time.Time) (bool, error) {
	cur := v.lkg
	if cur != nil {
		reason := ""
		switch {
		case a.epoch == cur.epoch && a.revision < cur.revision:
			reason = "older_revision"
		case a.epoch != cur.epoch && v.lastErr == nil && epochOrder(a.epoch, cur.epoch) < 0:
			reason = "older_epoch"
		}
		if reason != "" {
			if v.refused != nil {
				v.refused(reason)
			}
			return false, fmt.Errorf("%w (%s): epoch %s revision %d, the view holds epoch %s revision %d",
				ErrOlderAnswer, reason, a.epoch, a.revision, cur.epoch, cur.revision)
		}
	}
	v.lkgAt, v.checkedAt, v.lastErr, v.invalid = now, now, nil, false
	switch {
	case cur == nil:
		v.lkg = &a
		return true, nil
	case a.epoch == cur.epoch && a.revision == cur.revision && a.complete == cur.complete:
		return false, nil
	case a.complete:
		v.lkg = &a
		return true, nil
	default:
		// A registry that started empty is still warming up: keep what we knew, add what it says.
		merged := answer[T]{epoch: a.epoch, revision: a.revision, complete: false, body: v.kind.merge(cur.body, a.body, a.removed)}
		if v.kind.instances != nil {
			named := map[string]bool{}
			for _, id := range v.kind.instances(a.body) {
				named[id] = true
			}
			for _, id := range v.kind.instances(merged.body) {
				if !named[id] {
					if merged.carried == nil {
						merged.carried = map[string]bool{}
					}
					merged.carried[id] = true
				}
			}
		}
		v.lkg = &merged
		return true, nil
	}
}

// forget drops an instance the view holds only from before the registry's restart (carried
// by the warm-up merge), and says whether it did: one that the warming-up registry named, or
// a view whose answer is complete, is kept.
func (v *view[T]) forget(id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur := v.lkg
	if cur == nil || cur.complete || !cur.carried[id] || v.kind.drop == nil {
		return false
	}
	next := *cur
	next.body = v.kind.drop(cur.body, id)
	next.carried = make(map[string]bool, len(cur.carried))
	for k := range cur.carried {
		if k != id {
			next.carried[k] = true
		}
	}
	v.lkg = &next
	return true
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
	return v.apply(a, now())
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

// ErrOlderAnswer is what a refresh or a watch gets when the registry answered older than the
// view already held (a late answer, or a registry behind): the view is kept as it was.
var ErrOlderAnswer = errors.New("the answer is older than the view held")

// epochOrder compares two registry epochs by the instant each began (their ids are RFC 3339
// times; a "+restored" suffix is a later epoch of the same instant): -1, 0 or +1. Epochs it
// cannot read are not ordered (0).
func epochOrder(a, b string) int {
	ta, ra, oka := epochTime(a)
	tb, rb, okb := epochTime(b)
	switch {
	case !oka || !okb:
		return 0
	case ta.Before(tb):
		return -1
	case ta.After(tb):
		return 1
	case ra != rb && rb:
		return -1
	case ra != rb:
		return 1
	}
	return 0
}

func epochTime(e string) (time.Time, bool, bool) {
	base, restored := strings.CutSuffix(e, "+restored")
	t, err := time.Parse(time.RFC3339Nano, base)
	return t, restored, err == nil
}

// cause is the error of the view's last attempt.
func (v *view[T]) cause() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastErr
}
