package discovery

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestViewOrdersAnswers: answers are ordered by (epoch, revision), checked before anything of
// the view is touched: an older revision, or an older epoch while the view's registry still
// answers, is refused and counted, and renews nothing; after a failure, an older epoch (the
// next registry of the list, started earlier) is taken; a newer epoch always is.
func TestViewOrdersAnswers(t *testing.T) {
	const e0, e1, e2 = "2026-12-02T10:00:00Z", "2026-12-02T11:00:00.5Z", "2026-12-02T11:00:00.5Z+restored"
	var refused []string
	v := &view[[]int]{kind: kind[[]int]{size: func(b []int) int { return len(b) }}, refused: func(r string) { refused = append(refused, r) }}
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		epoch    string
		revision int64
		at       time.Time
		fail     bool // the view's last refresh failed before this answer
		changed  bool
		refused  bool
		lkgAt    time.Time
	}{
		{e1, 5, at(0), false, true, false, at(0)},
		{e1, 3, at(10), false, false, true, at(0)},    // late: refused, the age not renewed
		{e1, 5, at(20), false, false, false, at(20)},  // the same revision confirms the view
		{e0, 900, at(30), false, false, true, at(20)}, // an older epoch while e1 answers
		{e0, 900, at(40), true, true, false, at(40)},  // after a failure: the next registry
		{e2, 1, at(50), false, true, false, at(50)},   // a newer epoch (restored at the same instant)
		{e1, 99, at(60), false, false, true, at(50)},
	}
	for i, s := range steps {
		if s.fail {
			v.lastErr = errors.New("connection refused")
		}
		n := len(refused)
		changed, err := v.apply(answer[[]int]{epoch: s.epoch, revision: s.revision, complete: true, body: []int{1}}, s.at)
		if changed != s.changed || (err != nil) != s.refused || (len(refused) > n) != s.refused || !v.lkgAt.Equal(s.lkgAt) {
			t.Errorf("step %d (%s rev %d): changed %v err %v refused %v lkgAt %s; want changed %v refused %v lkgAt %s",
				i, s.epoch, s.revision, changed, err, refused[n:], v.lkgAt, s.changed, s.refused, s.lkgAt)
		}
		if err != nil && !errors.Is(err, ErrOlderAnswer) {
			t.Errorf("step %d: %v does not wrap ErrOlderAnswer", i, err)
		}
	}
	if got := epochOrder("not a time", e1); got != 0 {
		t.Errorf("an unreadable epoch is ordered: %d", got)
	}
}

// TestViewsAreBounded: past MaxViews the least recently read view goes, never a watched one,
// and each eviction is counted.
func TestViewsAreBounded(t *testing.T) {
	c, err := New(Config{Registries: []string{"http://127.0.0.1:1"}, MaxViews: 3})
	if err != nil {
		t.Fatal(err)
	}
	watched := c.capsView("w")
	watched.watchers.Add(1)
	// c evicts b (a was read again since), d evicts a; w, watched, stays
	for _, k := range []string{"a", "b", "a", "c", "d"} {
		c.capsView(k)
	}
	c.mu.Lock()
	var held []string
	for k := range c.caps {
		held = append(held, k)
	}
	c.mu.Unlock()
	slices.Sort(held)
	if want := []string{"c", "d", "w"}; !slices.Equal(held, want) {
		t.Errorf("views held %v, want %v", held, want)
	}
	if got := testutil.ToFloat64(c.metrics.evicted); got != 2 {
		t.Errorf("evictions counted %v, want 2", got)
	}
}
