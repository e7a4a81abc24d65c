package journal

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func fixed() time.Time { return t0 }

func fill(j *Journal) {
	j.Record(apiv1.EventRegistered, "", "jms-1", "jms-1 (jms-publisher) registered generation 1", nil)
	j.Record(apiv1.EventRegistered, "", "rabbit-1", "rabbit-1 (rabbitmq-publisher) registered generation 1", nil)
	j.Record(apiv1.EventEligibility, apiv1.SeverityWarning, "jms-1", "jms-1 serving -> quarantined: 5xx rate 40% (a.b*c)", map[string]any{"from": "serving"})
	j.Record(apiv1.EventDeregistered, "", "rabbit-1", "rabbit-1 deregistered", nil)
	j.Record(apiv1.EventIncidentOpened, apiv1.SeverityError, "incident/1", "=HYPERLINK(\"x\") quarantine of jms-1", nil)
}

func seqs(es []apiv1.Event) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestFind(t *testing.T) {
	j := New(0, fixed)
	fill(j)
	tests := []struct {
		name     string
		q        Query
		want     []int64
		wantNext int64
	}{
		{"everything", Query{}, []int64{1, 2, 3, 4, 5}, 5},
		{"since", Query{Since: 3}, []int64{4, 5}, 5},
		{"since the last", Query{Since: 5}, []int64{}, 5},
		{"since in the future reads from the start", Query{Since: 99}, []int64{1, 2, 3, 4, 5}, 5},
		{"negative since reads from the start", Query{Since: -4}, []int64{1, 2, 3, 4, 5}, 5},
		{"types", Query{Types: []string{apiv1.EventDeregistered, apiv1.EventEligibility}}, []int64{3, 4}, 5},
		{"unknown type matches nothing", Query{Types: []string{"nope"}}, []int64{}, 5},
		{"subject", Query{Subject: "jms-1"}, []int64{1, 3}, 5},
		{"subject prefix", Query{Subject: "incident/*"}, []int64{5}, 5},
		{"severity", Query{Severity: apiv1.SeverityWarning}, []int64{3}, 5},
		{"text ignores case", Query{Text: "RABBITMQ"}, []int64{2}, 5},
		{"text in the type", Query{Text: "deregistered"}, []int64{4}, 5},
		{"text with regexp metacharacters is literal", Query{Text: "(a.b*c)"}, []int64{3}, 5},
		{"regexp does not match as a pattern", Query{Text: "a.*c"}, []int64{}, 5},
		{"limit stops early and says where", Query{Limit: 2}, []int64{1, 2}, 2},
		{"limit with a filter", Query{Subject: "rabbit-1", Limit: 1}, []int64{2}, 2},
		{"huge limit is capped", Query{Limit: 1 << 40}, []int64{1, 2, 3, 4, 5}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next := j.Find(tt.q)
			if diff := cmp.Diff(tt.want, seqs(got)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if next != tt.wantNext {
				t.Errorf("next = %d, want %d", next, tt.wantNext)
			}
		})
	}
}

func TestNewest(t *testing.T) {
	j := New(0, fixed)
	fill(j)
	got, next := j.Newest(Query{Limit: 2})
	if diff := cmp.Diff([]int64{4, 5}, seqs(got)); diff != "" || next != 5 {
		t.Errorf("newest two (-want +got):\n%s next %d", diff, next)
	}
	got, _ = j.Newest(Query{Subject: "jms-1"})
	if diff := cmp.Diff([]int64{1, 3}, seqs(got)); diff != "" {
		t.Errorf("newest of jms-1 (-want +got):\n%s", diff)
	}
}

// TestRingAcrossBlocks: the ring is kept in blocks of ringBlock events; whatever its bound and
// however far it has wrapped, it holds the newest events in order, Find reads them all from
// any point, and Newest reads them back from the end, across the blocks' edges.
func TestRingAcrossBlocks(t *testing.T) {
	for _, bound := range []int{1, 5, ringBlock, ringBlock + 1, 2*ringBlock + 300} {
		for _, n := range []int{0, 1, bound - 1, bound, bound + 1, 2*bound + 7, 3 * ringBlock} {
			if n < 0 {
				continue
			}
			t.Run(fmt.Sprintf("bound=%d/events=%d", bound, n), func(t *testing.T) {
				j := New(bound, fixed)
				for i := range n {
					j.Record(apiv1.EventRegistered, "", fmt.Sprint("i-", i%7), "registered", nil)
				}
				held := min(n, bound)
				want := []int64{}
				for s := n - held + 1; s <= n; s++ {
					want = append(want, int64(s))
				}
				for _, since := range []int64{int64(n - held), int64(n - held/2), int64(n)} {
					var got []int64
					next := since
					for {
						es, nx := j.Find(Query{Since: next, Limit: MaxLimit})
						got = append(got, seqs(es)...)
						if len(es) == 0 || nx == next {
							break
						}
						next = nx
					}
					if diff := cmp.Diff(want[since-int64(n-held):], append([]int64{}, got...)); diff != "" {
						t.Errorf("Find from %d (-want +got):\n%s", since, diff)
					}
				}
				for _, limit := range []int{1, 3, MaxLimit} {
					got, _ := j.Newest(Query{Limit: limit})
					if diff := cmp.Diff(want[max(0, held-min(limit, held)):], seqs(got)); diff != "" {
						t.Errorf("Newest %d (-want +got):\n%s", limit, diff)
					}
				}
			})
		}
	}
}

// A flapping fleet outruns the ring: the bound holds, and a reader left behind is told how
// many events it missed before it reads on.
func TestRingBoundAndGap(t *testing.T) {
	j := New(1000, fixed)
	for i := range 100_000 {
		j.Record(apiv1.EventEligibility, "", fmt.Sprintf("i-%d", i%50), "flap", nil)
	}
	if j.n != 1000 {
		t.Fatalf("ring holds %d, want its bound 1000", j.n)
	}
	got, next := j.Find(Query{Since: 10, Limit: 3})
	if len(got) != 3 || got[0].Type != apiv1.EventJournalGap {
		t.Fatalf("a reader left behind got %+v, want a gap event then 2 events (the gap counts in the limit)", got)
	}
	gap := got[0]
	if gap.Attrs["missed"] != int64(99_000-10) || gap.Severity != apiv1.SeverityWarning {
		t.Errorf("gap = %+v, want %d missed as a warning", gap, 99_000-10)
	}
	if diff := cmp.Diff([]int64{0, 99_001, 99_002}, seqs(got)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if next != 99_002 {
		t.Errorf("next = %d, want 99002", next)
	}
	// The gap is reported whatever the filter.
	got, _ = j.Find(Query{Since: 10, Types: []string{apiv1.EventRegistered}})
	if len(got) != 1 || got[0].Type != apiv1.EventJournalGap {
		t.Errorf("a filtered reader left behind got %+v, want the gap alone", got)
	}
	// A reader in step gets no gap.
	if got, _ := j.Find(Query{Since: 99_500, Limit: 1}); len(got) != 1 || got[0].Seq != 99_501 {
		t.Errorf("a reader in step got %+v", got)
	}
}

func TestWait(t *testing.T) {
	j := New(0, fixed)
	j.Record(apiv1.EventRegistered, "", "a", "a", nil)
	t.Run("returns at once when there is news", func(t *testing.T) {
		done := make(chan struct{})
		go func() { j.Wait(context.Background(), 0, time.Hour); close(done) }()
		<-done
	})
	t.Run("wakes on the next append", func(t *testing.T) {
		done := make(chan struct{})
		go func() { j.Wait(context.Background(), 1, time.Hour); close(done) }()
		for { // append only once the waiter waits, so this tests the wake-up
			j.mu.Lock()
			waiting := j.changed != nil
			j.mu.Unlock()
			if waiting {
				break
			}
			time.Sleep(time.Millisecond)
		}
		j.Record(apiv1.EventDeregistered, "", "a", "a", nil)
		<-done
	})
	t.Run("ends with the context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { j.Wait(ctx, j.Last(), time.Hour); close(done) }()
		cancel()
		<-done
	})
}

func TestConcurrentAppendsAreOrdered(t *testing.T) {
	j := New(500, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				j.Record(apiv1.EventRegistered, "", fmt.Sprintf("w%d-%d", w, i), "x", nil)
			}
		})
	}
	wg.Go(func() {
		var since int64
		for since < 4000 {
			es, next := j.Find(Query{Since: since, Limit: MaxLimit})
			for _, e := range es {
				if e.Type != apiv1.EventJournalGap && e.Seq <= since {
					t.Errorf("seq %d after %d: out of order", e.Seq, since)
					return
				}
			}
			since = next
		}
	})
	wg.Wait()
	if j.Last() != 4000 {
		t.Errorf("last = %d, want 4000", j.Last())
	}
}

func TestWriteCSV(t *testing.T) {
	j := New(0, fixed)
	fill(j)
	j.Record(apiv1.EventRegistered, "", "+cmd|' /C calc'!A0", "-2+3", map[string]any{"k": "@SUM(1)"})
	es, _ := j.Find(Query{})
	rec := httptest.NewRecorder()
	if err := WriteCSV(rec, es); err != nil {
		t.Fatal(err)
	}
	if ct, cd := rec.Header().Get("Content-Type"), rec.Header().Get("Content-Disposition"); ct != "text/csv; charset=utf-8" || !strings.Contains(cd, "meshflows-events.csv") {
		t.Errorf("headers %q, %q", ct, cd)
	}
	rows, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not read back: %v", err)
	}
	if diff := cmp.Diff(CSVHeader, rows[0]); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if len(rows) != 7 {
		t.Fatalf("%d rows, want the header and 6", len(rows))
	}
	for _, row := range rows[1:] {
		for _, cell := range row {
			if cell != "" && strings.ContainsRune("=+-@", rune(cell[0])) {
				t.Errorf("cell %q would run as a formula", cell)
			}
		}
	}
	want := []string{"6", "2026-11-30T10:00:00Z", "instance.registered", "info", "'+cmd|' /C calc'!A0", "'-2+3", `{"k":"@SUM(1)"}`}
	if diff := cmp.Diff(want, rows[6]); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}
}

func TestNilJournalRecordsNothing(t *testing.T) {
	var j *Journal
	if seq := j.Append(apiv1.Event{Type: apiv1.EventRegistered}); seq != 0 {
		t.Errorf("nil journal gave seq %d", seq)
	}
}

// BenchmarkAppend is the cost a component pays per event (budget: 2 µs).
func BenchmarkAppend(b *testing.B) {
	j := New(DefaultMax, nil)
	attrs := map[string]any{"generation": 3}
	b.ReportAllocs()
	for b.Loop() {
		j.Append(apiv1.Event{Type: apiv1.EventRegistered, Subject: "jms-publisher-1", Message: "jms-publisher-1 registered generation 3", Attrs: attrs})
	}
}

// BenchmarkFindText is a full-text query over a full journal of 50,000 events that matches
// a few (budget: 20 ms).
func BenchmarkFindText(b *testing.B) {
	j := New(DefaultMax, nil)
	for i := range DefaultMax {
		j.Record(apiv1.EventEligibility, "", fmt.Sprintf("instance-%05d", i), fmt.Sprintf("instance-%05d serving -> quarantined: 5xx rate over the threshold", i), nil)
	}
	b.ReportAllocs()
	for b.Loop() {
		if es, _ := j.Find(Query{Text: "INSTANCE-4999", Limit: MaxLimit}); len(es) != 10 {
			b.Fatalf("%d matches, want 10", len(es))
		}
	}
}

// fakeStore numbers events as etcd does (increasing, not consecutive) and hands them to
// every replica's journal. A write waits while gate is set and not closed.
type fakeStore struct {
	mu       sync.Mutex
	rev      int64
	down     bool
	replicas []*Journal
	pruned   int
	writes   []int // the number of events of each write
	gate     chan struct{}
	atGate   chan struct{} // told (buffer of one) when a write reaches the gate
}

func (s *fakeStore) PublishEvents(_ context.Context, es []Stored) error {
	if s.gate != nil {
		if s.atGate != nil {
			select {
			case s.atGate <- struct{}{}:
			default:
			}
		}
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return fmt.Errorf("store away")
	}
	s.writes = append(s.writes, len(es))
	for _, e := range es {
		s.rev += 7 // other keys move the revision too
		e.Seq = s.rev
		doc, err := json.Marshal(e) // as etcd keeps it, and gives it back
		if err != nil {
			return err
		}
		var st Stored
		if err := json.Unmarshal(doc, &st); err != nil {
			return err
		}
		for _, j := range s.replicas {
			j.Insert(st)
		}
	}
	return nil
}

func (s *fakeStore) PruneEvents(context.Context, int) error { s.pruned++; return nil }

// TestSharedJournalWritesInBatches: events queued while a write is under way go out
// together, up to publishBatch a write, in order, none lost.
func TestSharedJournalWritesInBatches(t *testing.T) {
	store := &fakeStore{gate: make(chan struct{}), atGate: make(chan struct{}, 1)}
	j := New(1000, fixed)
	store.replicas = []*Journal{j}
	j.Share(store, nil)
	runShared(t, j)
	j.Append(apiv1.Event{Type: apiv1.EventRegistered, Subject: "first"})
	<-store.atGate // the first write has taken it, alone, and waits at the gate
	const n = 250
	for i := range n {
		j.Append(apiv1.Event{Type: apiv1.EventRegistered, Subject: fmt.Sprint("i-", i)})
	}
	close(store.gate)
	for j.Last() < 7*(n+1) {
		time.Sleep(time.Millisecond)
	}
	store.mu.Lock()
	writes := store.writes
	store.mu.Unlock()
	if diff := cmp.Diff([]int{1, publishBatch, publishBatch, n - 2*publishBatch}, writes); diff != "" {
		t.Errorf("events per write (-want +got):\n%s", diff)
	}
	es, _ := j.Find(Query{Limit: MaxLimit})
	if len(es) != n+1 {
		t.Fatalf("%d events held, want %d", len(es), n+1)
	}
	for i, e := range es[1:] {
		if want := fmt.Sprint("i-", i); e.Subject != want {
			t.Fatalf("event %d is %q, want %q: out of order", i+1, e.Subject, want)
		}
	}
}

// TestSharedJournalWaitsToFillAWrite: a write waits publishLinger from its first event for
// more (the test's own timer says when that has passed), up to publishBatch, and a full
// write does not wait.
func TestSharedJournalWaitsToFillAWrite(t *testing.T) {
	store := &fakeStore{}
	j := New(1000, fixed)
	store.replicas = []*Journal{j}
	j.Share(store, nil)
	waits := make(chan chan time.Time, 4) // each wait the publisher starts, for the test to end
	j.shared.after = func(d time.Duration) <-chan time.Time {
		if d != publishLinger {
			t.Errorf("a write waits %s, want %s", d, publishLinger)
		}
		c := make(chan time.Time, 1)
		waits <- c
		return c
	}
	runShared(t, j)
	writes := func() []int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return slices.Clone(store.writes)
	}
	appendN := func(from, n int) {
		for i := range n {
			j.Append(apiv1.Event{Type: apiv1.EventRegistered, Subject: fmt.Sprint("i-", from+i)})
		}
	}

	// Events that trickle in while a write waits go in it.
	appendN(0, 1)
	var wait chan time.Time
	for wait == nil { // the publisher takes the first event and waits for more, or writes it
		select {
		case wait = <-waits:
		default:
			if got := writes(); len(got) > 0 {
				t.Fatalf("the publisher did not wait for more: writes %v", got)
			}
			time.Sleep(time.Millisecond)
		}
	}
	appendN(1, 9)
	for len(j.shared.queue) > 0 { // until the publisher has taken them; no time is asserted
		time.Sleep(time.Millisecond)
	}
	if got := writes(); len(got) != 0 {
		t.Fatalf("writes %v before the wait ended", got)
	}
	wait <- time.Time{}
	for j.Last() < 7*10 {
		time.Sleep(time.Millisecond)
	}
	if diff := cmp.Diff([]int{10}, writes()); diff != "" {
		t.Fatalf("events per write (-want +got):\n%s", diff)
	}

	// A write that fills does not wait (its wait, started with it, is never ended here);
	// what is left over waits for the next. The deadline only turns a hang into a failure.
	appendN(10, publishBatch+5)
	for hang := time.Now().Add(10 * time.Second); j.Last() < 7*(10+publishBatch); time.Sleep(time.Millisecond) {
		if time.Now().After(hang) {
			t.Fatalf("no full write without the wait's end: writes %v", writes())
		}
	}
	for j.Last() < 7*(10+publishBatch+5) { // end every wait started, the one that holds the 5 among them
		select {
		case w := <-waits:
			w <- time.Time{}
		default:
			time.Sleep(time.Millisecond)
		}
	}
	if diff := cmp.Diff([]int{10, publishBatch, 5}, writes()); diff != "" {
		t.Errorf("events per write (-want +got):\n%s", diff)
	}
	es, _ := j.Find(Query{Limit: MaxLimit})
	for i, e := range es {
		if want := fmt.Sprint("i-", i); e.Subject != want {
			t.Fatalf("event %d is %q, want %q: out of order", i, e.Subject, want)
		}
	}
}

// Two replicas sharing a journal answer the same sequence; a since from one works on the
// other; the bound and its gap hold with sparse numbers.
func TestSharedJournal(t *testing.T) {
	store := &fakeStore{}
	a, b := New(5, fixed), New(5, fixed)
	store.replicas = []*Journal{a, b}
	a.Share(store, nil)
	b.Share(store, nil)
	runShared(t, a)
	runShared(t, b)
	for i := range 4 {
		src := a
		if i%2 == 1 {
			src = b
		}
		e := apiv1.Event{Type: apiv1.EventRegistered, Subject: fmt.Sprint("i-", i), Attrs: map[string]any{"generation": i + 1}}
		if seq := src.Append(e); seq != 0 {
			t.Errorf("a shared journal numbered an event itself: %d", seq)
		}
	}
	for a.Last() < 28 || b.Last() < 28 { // the publisher runs beside; this waits for it, asserting no time
		time.Sleep(time.Millisecond)
	}
	ea, na := a.Find(Query{})
	eb, nb := b.Find(Query{})
	if diff := cmp.Diff(seqs(ea), seqs(eb)); diff != "" || na != nb {
		t.Errorf("replicas disagree (-a +b):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{7, 14, 21, 28}, seqs(ea)); diff != "" {
		t.Errorf("sequence (-want +got):\n%s", diff)
	}
	for _, e := range eb { // the attributes came through the store's JSON as they went in
		var i int
		fmt.Sscanf(e.Subject, "i-%d", &i)
		if e.Attrs["generation"] != float64(i+1) {
			t.Errorf("event %d about %s: attrs %v, want generation %d", e.Seq, e.Subject, e.Attrs, i+1)
		}
	}
	if got, _ := b.Find(Query{Since: 14}); len(got) != 2 || got[0].Seq != 21 {
		t.Errorf("since 14 on the other replica: %v", seqs(got))
	}
	// past the bound: a reader left behind learns where the gap is (no count: numbers skip)
	for i := range 4 {
		a.Append(apiv1.Event{Type: apiv1.EventRegistered, Subject: fmt.Sprint("j-", i)})
	}
	for a.Last() < 56 {
		time.Sleep(time.Millisecond)
	}
	got, _ := a.Find(Query{Since: 7})
	if len(got) == 0 || got[0].Type != apiv1.EventJournalGap || got[0].Attrs["to"] != int64(21) || got[0].Attrs["missed"] != nil {
		t.Errorf("gap in a shared journal: %+v", got)
	}
	if a.n != 5 {
		t.Errorf("ring holds %d, want its bound 5", a.n)
	}
	// a duplicate (the replica's own event coming back twice) is ignored
	b.Insert(Stored{Event: apiv1.Event{Seq: 28, Type: apiv1.EventRegistered}})
	if eb, _ := b.Find(Query{Since: 21, Limit: 1}); eb[0].Seq != 28 || len(eb) != 1 {
		t.Errorf("after a duplicate: %v", seqs(eb))
	}
}

// TestAttrsReadAsJSON: the ring keeps attributes as JSON, so a reader gets what a client of
// the HTTP API gets (numbers as float64), and an attribute JSON cannot encode is replaced by
// an error saying so, never dropped in silence.
func TestAttrsReadAsJSON(t *testing.T) {
	tests := []struct {
		name  string
		attrs map[string]any
		want  map[string]any
	}{
		{"none", nil, nil},
		{"empty", map[string]any{}, nil},
		{"scalars", map[string]any{"service_name": "billing", "generation": int64(1 << 40), "capabilities": 3, "warm_up": true},
			map[string]any{"service_name": "billing", "generation": float64(1 << 40), "capabilities": float64(3), "warm_up": true}},
		{"lists and objects", map[string]any{"reasons": []string{"probe_failing", "silent"}, "window": map[string]int{"ok": 1}},
			map[string]any{"reasons": []any{"probe_failing", "silent"}, "window": map[string]any{"ok": float64(1)}}},
		{"not JSON", map[string]any{"c": make(chan int)},
			map[string]any{"attrs_error": "json: unsupported type: chan int"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := New(0, fixed)
			j.Record(apiv1.EventRegistered, "", "a", "a registered", tc.attrs)
			for name, read := range map[string]func() []apiv1.Event{
				"Find":   func() []apiv1.Event { es, _ := j.Find(Query{}); return es },
				"Newest": func() []apiv1.Event { es, _ := j.Newest(Query{}); return es },
			} {
				es := read()
				if len(es) != 1 {
					t.Fatalf("%s: %d events, want 1", name, len(es))
				}
				if diff := cmp.Diff(tc.want, es[0].Attrs); diff != "" {
					t.Errorf("%s: attrs (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// BenchmarkJournalMemory reports the heap a full journal holds per event, for events like a
// registration's (four attributes).
func BenchmarkJournalMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		j := New(DefaultMax, nil)
		for i := range DefaultMax {
			id := fmt.Sprintf("instance-%d", i)
			j.Record(apiv1.EventRegistered, "", id, id+" (billing) registered at http://10.0.0.1:8080, generation 7",
				map[string]any{"service_name": "billing", "generation": int64(i), "endpoint": "http://10.0.0.1:8080", "capabilities": 3})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/DefaultMax, "heap-bytes/event")
		runtime.KeepAlive(j)
	}
}

// renderCount is a Deferred that counts how often its message and its attributes are made.
type renderCount struct {
	msg   string
	attrs string
	n     atomic.Int32 // messages and attributes made
	attrN atomic.Int32 // attributes made
}

func (r *renderCount) Message() string { r.n.Add(1); return r.msg }

func (r *renderCount) Attrs() json.RawMessage {
	r.n.Add(1)
	r.attrN.Add(1)
	return json.RawMessage(r.attrs)
}

// TestDeferredEvents: an event recorded with RecordDeferred reads as one recorded with its
// message and attributes (Find, Newest, a text search, the CSV), made only when read; a
// shared journal makes them before its store gets the event.
func TestDeferredEvents(t *testing.T) {
	d := &renderCount{msg: "i-1 (svc) registered at http://e:1, generation 3", attrs: `{"generation":3,"service_name":"svc"}`}
	j := New(10, fixed)
	j.RecordDeferred(apiv1.EventRegistered, apiv1.SeverityInfo, "i-1", d)
	j.Record(apiv1.EventDeregistered, apiv1.SeverityInfo, "i-2", "i-2 deregistered", nil)
	if n := d.n.Load(); n != 0 {
		t.Fatalf("made %d times before any read", n)
	}
	want := apiv1.Event{Seq: 1, Time: t0, Type: apiv1.EventRegistered, Severity: apiv1.SeverityInfo, Subject: "i-1", Message: d.msg,
		Attrs: map[string]any{"generation": float64(3), "service_name": "svc"}}
	found, _ := j.Find(Query{Text: "HTTP://E:1"}) // the search reads the message
	newest, _ := j.Newest(Query{Types: []string{apiv1.EventRegistered}})
	for name, got := range map[string][]apiv1.Event{"Find": found, "Newest": newest} {
		if len(got) != 1 {
			t.Fatalf("%s: %d events, want 1", name, len(got))
		}
		if diff := cmp.Diff(want, got[0]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	before := d.attrN.Load()
	if none, _ := j.Find(Query{Text: "rabbit"}); len(none) != 0 {
		t.Errorf("a search for what the message does not say found %v", seqs(none))
	}
	if d.attrN.Load() != before {
		t.Error("a search that found nothing made the event's attributes")
	}

	// shared: the store gets the made event, whose JSON says it all
	store := &fakeStore{}
	s := New(10, fixed)
	store.replicas = []*Journal{s}
	s.Share(store, nil)
	ctx := runShared(t, s)
	s.RecordDeferred(apiv1.EventRegistered, apiv1.SeverityInfo, "i-1", d)
	s.Wait(ctx, 0, time.Minute) // the publisher runs beside: until the store gives the event back
	got, _ := s.Find(Query{})
	want.Seq = 7
	if len(got) != 1 {
		t.Fatalf("shared: %d events", len(got))
	}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("shared (-want +got):\n%s", diff)
	}
}

// runShared runs j's publisher until the test ends, and returns the context it runs in.
func runShared(t *testing.T, j *Journal) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { j.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}
