package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

// Defaults and bounds.
const (
	// DefaultMax is how many events a journal keeps by default.
	DefaultMax = 50_000
	// DefaultLimit is how many events a query returns when it names no limit; MaxLimit is
	// the most it returns whatever it names.
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Journal is a bounded ring of events, safe for concurrent use. A nil *Journal records
// nothing, so components take one without checking.
//
// A journal numbers its own events 1, 2, 3…; a shared one (Share) hands them to a store that
// numbers them (etcd's revision: increasing, not consecutive) and gives them back to every
// replica through Insert, so that every replica answers the same sequence.
type Journal struct {
	now func() time.Time

	mu          sync.Mutex
	ring        [][]Stored // up to max events in blocks of ringBlock (see slot); the one at head is the oldest once full
	n           int        // events held
	head        int
	max         int
	last        int64         // the newest sequence number held or given
	lastDropped int64         // the newest sequence number the bound dropped
	dropped     int64         // how many the bound dropped
	changed     chan struct{} // made by a waiter, closed by the next append

	shared *sharing // set by Share
	unsent int64    // events a shared journal could not hand to its store (reported as a gap)
}

// New returns a journal that keeps the last max events (DefaultMax when max <= 0) and stamps
// them with now (time.Now when nil).
func New(max int, now func() time.Time) *Journal {
	if max <= 0 {
		max = DefaultMax
	}
	if now == nil {
		now = time.Now
	}
	return &Journal{now: now, max: max}
}

// ringBlock is how many events a block of the ring holds. The ring grows a block at a time up
// to its bound and never moves what it holds: grown as one slice, it copied every event held
// at each growth, and a journal filling to 20,000 events left 11.6 MB of discarded copies.
const ringBlock = 1024

// Stored is an event as the journal keeps it: apiv1.Event with its attributes as JSON,
// encoded once when the event is recorded. A map of four attributes costs some 400 bytes of
// heap, its JSON a quarter of that; with a registration and a transition recorded per
// instance, the maps were half the heap of a registry of 10,000 instances. It decodes from
// an encoded apiv1.Event as is, so a shared journal's store hands its documents over without
// turning the attributes into a map and back.
type Stored struct {
	apiv1.Event                 // its Attrs stay nil: the attributes are the JSON below, which hides them in JSON too
	Attrs       json.RawMessage `json:"attrs,omitempty"` // a JSON object; nil without attributes

	// deferred, when set, makes Message and Attrs when the event is read (RecordDeferred);
	// they are empty until then. Only events held by this journal have it: what a shared
	// journal's store keeps is made before it is handed over.
	deferred Deferred
}

// Deferred is an event's message and attributes, made when the event is read rather than
// when it is recorded. A registration's event says what its record says, in strings the
// record already holds: kept as those and a few numbers, it takes 80 bytes where its message
// and attributes took some 270 (the journal was a quarter of a registry's live heap at
// 10,000 instances, one registration event each). What its methods read must never change.
type Deferred interface {
	// Message returns the event's message.
	Message() string
	// Attrs returns the event's attributes: a JSON object, or nil for none.
	Attrs() json.RawMessage
}

// made returns h with its message and attributes made (h itself when they are).
func (h *Stored) made() Stored {
	out := *h
	if h.deferred != nil {
		out.Message, out.Attrs = h.deferred.Message(), h.deferred.Attrs()
		out.deferred = nil
	}
	return out
}

// message returns h's message, made when deferred.
func (h *Stored) message() string {
	if h.deferred != nil {
		return h.deferred.Message() // a search reads messages only: no attributes made for it
	}
	return h.Message
}

// encode returns e as the journal keeps it. Attributes that do not encode as JSON (a value
// of a type JSON has no form for) are replaced by an error attribute saying so.
func encode(e apiv1.Event) Stored {
	attrs := e.Attrs
	e.Attrs = nil
	h := Stored{Event: e}
	if len(attrs) > 0 {
		h.Attrs = encodeAttrs(attrs)
	}
	return h
}

// event returns h in its wire form, its attributes decoded (numbers as float64, as any
// reader of the JSON sees them).
func (h *Stored) event() apiv1.Event {
	if h.deferred != nil {
		m := h.made()
		h = &m
	}
	e := h.Event
	if h.Attrs != nil {
		if err := json.Unmarshal(h.Attrs, &e.Attrs); err != nil {
			e.Attrs = map[string]any{"attrs_error": err.Error()}
		}
	}
	return e
}

// events returns hs in wire form. Called without j.mu: decoding is the costly part of a read.
func events(dst []apiv1.Event, hs []Stored) []apiv1.Event {
	for i := range hs {
		dst = append(dst, hs[i].event())
	}
	return dst
}

// Max returns the journal's bound.
func (j *Journal) Max() int { return j.max }

// Append records an event (its Seq and, when zero, its Time and Severity are set) and returns
// its sequence number. A shared journal queues it for its store instead (and returns 0): it
// is held once the store gives it back.
func (j *Journal) Append(e apiv1.Event) int64 {
	if j == nil {
		return 0
	}
	return j.appendStored(encode(e)) // encoded before any lock; a shared journal's store writes this form too
}

// appendStored is Append of an event already in the form the journal keeps.
func (j *Journal) appendStored(h Stored) int64 {
	if h.Time.IsZero() {
		h.Time = j.now().UTC()
	}
	if h.Severity == "" {
		h.Severity = apiv1.SeverityInfo
	}
	if sh := j.shared; sh != nil {
		h = h.made()
		select {
		case sh.queue <- h:
		default:
			j.mu.Lock()
			j.unsent++
			j.mu.Unlock()
		}
		return 0
	}
	j.mu.Lock()
	j.last++
	h.Seq = j.last
	j.push(h)
	j.mu.Unlock()
	return h.Seq
}

// Insert holds an event numbered elsewhere (a shared journal's store), as the store keeps
// it. An event not newer than the newest held is a duplicate and is ignored.
func (j *Journal) Insert(h Stored) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if h.Seq <= j.last {
		return
	}
	j.last = h.Seq
	j.push(h)
}

// push adds e as the newest event, dropping the oldest past the bound, and wakes waiters.
// Called with j.mu held.
func (j *Journal) push(e Stored) {
	if j.n < j.max {
		if j.n%ringBlock == 0 {
			j.ring = append(j.ring, make([]Stored, min(ringBlock, j.max-j.n)))
		}
		*j.slot(j.n) = e
		j.n++
	} else {
		old := j.slot(j.head)
		j.lastDropped = old.Seq
		j.dropped++
		*old = e
		j.head = (j.head + 1) % j.max
	}
	if j.changed != nil {
		close(j.changed)
		j.changed = nil
	}
}

// at returns the i-th oldest event held. Called with j.mu held.
func (j *Journal) at(i int) *Stored { return j.slot((j.head + i) % j.n) }

// slot returns the event at position p of the ring. Called with j.mu held.
func (j *Journal) slot(p int) *Stored { return &j.ring[p/ringBlock][p%ringBlock] }

// segments returns the held events from position i on, oldest first, as contiguous runs of
// the ring's blocks. Called with j.mu held.
func (j *Journal) segments(i int) [][]Stored {
	var out [][]Stored
	for i < j.n {
		p := (j.head + i) % j.n
		run := j.ring[p/ringBlock][p%ringBlock:]
		run = run[:min(len(run), j.n-i)] // not past the newest (a block ends where the ring does)
		out = append(out, run)
		i += len(run)
	}
	return out
}

// after returns the position of the first event newer than seq. Called with j.mu held.
func (j *Journal) after(seq int64) int {
	return sort.Search(j.n, func(i int) bool { return j.at(i).Seq > seq })
}

// Record appends an event of type typ about subject.
func (j *Journal) Record(typ, severity, subject, message string, attrs map[string]any) {
	j.Append(apiv1.Event{Type: typ, Severity: severity, Subject: subject, Message: message, Attrs: attrs})
}

// RecordObject is Record with the attributes written as they were added (Object).
func (j *Journal) RecordObject(typ, severity, subject, message string, attrs Object) {
	if j == nil {
		return
	}
	j.appendStored(Stored{Event: apiv1.Event{Type: typ, Severity: severity, Subject: subject, Message: message}, Attrs: attrs.JSON()})
}

// RecordDeferred records an event whose message and attributes d makes when the event is
// read (see Deferred). A shared journal makes them at once, for its store.
func (j *Journal) RecordDeferred(typ, severity, subject string, d Deferred) {
	if j == nil {
		return
	}
	j.appendStored(Stored{Event: apiv1.Event{Type: typ, Severity: severity, Subject: subject}, deferred: d})
}

// Last returns the last sequence number given (0 before any).
func (j *Journal) Last() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

// Query selects events: after Since, of one of Types (any when empty), about Subject (exact,
// or a prefix ending in "*"), of Severity, containing Text (case-insensitive, literal: no
// pattern syntax), at or after From and before Until (either zero: unbounded), at most Limit
// (DefaultLimit when 0, MaxLimit at most; a gap event counts).
type Query struct {
	Since       int64
	Types       []string
	Subject     string
	Severity    string
	Text        string
	From, Until time.Time
	Limit       int
}

func (q *Query) matches(e *Stored) bool {
	switch {
	case len(q.Types) > 0 && !slices.Contains(q.Types, e.Type):
		return false
	case q.Severity != "" && e.Severity != q.Severity:
		return false
	case !q.From.IsZero() && e.Time.Before(q.From), !q.Until.IsZero() && !e.Time.Before(q.Until):
		return false
	case q.Subject != "" && !subjectMatches(q.Subject, e.Subject):
		return false
	case q.Text != "" && !containsFold(e.Subject, q.Text) && !containsFold(e.Type, q.Text) && !containsFold(e.message(), q.Text):
		return false
	}
	return true
}

func subjectMatches(pattern, subject string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(subject, p)
	}
	return subject == pattern
}

// containsFold is strings.Contains ignoring case (Unicode simple folding), without
// allocating. A query starting with an ASCII byte only compares the windows that start with
// that byte in either case.
func containsFold(s, sub string) bool {
	n := len(sub)
	if n == 0 {
		return true
	}
	c0 := sub[0]
	if c0 >= utf8.RuneSelf {
		for i := 0; i+n <= len(s); i++ {
			if strings.EqualFold(s[i:i+n], sub) {
				return true
			}
		}
		return false
	}
	lo, up := c0, c0
	if 'A' <= c0 && c0 <= 'Z' {
		lo += 'a' - 'A'
	} else if 'a' <= c0 && c0 <= 'z' {
		up -= 'a' - 'A'
	}
	for i := 0; i+n <= len(s); i++ {
		if c := s[i]; (c == lo || c == up) && strings.EqualFold(s[i:i+n], sub) {
			return true
		}
	}
	return false
}

// Find returns the events q selects, oldest first, and the sequence number to ask from next
// (every event up to it was looked at). When the bound dropped events after q.Since before
// they were read, a gap event (seq 0, type journal.gap, attrs from/to, and missed when the
// numbering is the journal's own) comes first, whatever the filter: a reader always learns
// it missed something. A Since past the last event (a journal that restarted) reads from the
// start of what is held.
func (j *Journal) Find(q Query) ([]apiv1.Event, int64) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	j.mu.Lock()
	out, found, next := j.find(q)
	j.mu.Unlock()
	return events(out, found), next
}

// find is Find under j.mu: the gap event, if any, and the held events selected, to be
// decoded once the lock is released.
func (j *Journal) find(q Query) ([]apiv1.Event, []Stored, int64) {
	if q.Since < 0 || q.Since > j.last {
		q.Since = 0
	}
	out := []apiv1.Event{}
	var found []Stored
	next := q.Since
	if q.Since > 0 && q.Since < j.lastDropped {
		gap := apiv1.Event{Time: j.now().UTC(), Type: apiv1.EventJournalGap, Severity: apiv1.SeverityWarning, Subject: "journal",
			Message: fmt.Sprintf("events %d to %d were dropped by the journal's bound (%d) before they were read", q.Since+1, j.lastDropped, j.max),
			Attrs:   map[string]any{"from": q.Since + 1, "to": j.lastDropped}}
		if j.shared == nil { // consecutive numbers: the count is exact
			missed := j.lastDropped - q.Since
			gap.Message = fmt.Sprintf("%d events were dropped by the journal's bound (%d) before they were read", missed, j.max)
			gap.Attrs["missed"] = missed
		}
		out = append(out, gap)
		next = j.lastDropped
	}
	// The held events in order, a block's run at a time: plain loops.
	for _, seg := range j.segments(j.after(q.Since)) {
		for k := range seg {
			e := &seg[k]
			next = e.Seq
			if q.matches(e) {
				found = append(found, *e)
				if len(out)+len(found) >= q.Limit {
					return out, found, next
				}
			}
		}
	}
	return out, found, max(next, j.last)
}

// Newest returns the last limit events q selects looking back from the newest, oldest
// first, and the sequence number to read on from: what a console's first page shows.
func (j *Journal) Newest(q Query) ([]apiv1.Event, int64) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	j.mu.Lock()
	var found []Stored
	for i := j.n - 1; i >= 0 && len(found) < q.Limit; i-- {
		if e := j.at(i); q.matches(e) {
			found = append(found, *e)
		}
	}
	last := j.last
	j.mu.Unlock()
	slices.Reverse(found)
	return events(make([]apiv1.Event, 0, len(found)), found), last
}

// Wait blocks until an event after since is appended, wait passes or ctx ends.
func (j *Journal) Wait(ctx context.Context, since int64, wait time.Duration) {
	j.mu.Lock()
	if j.last != since { // news, or a since from before a restart: Find answers at once
		j.mu.Unlock()
		return
	}
	if j.changed == nil {
		j.changed = make(chan struct{})
	}
	ch := j.changed
	j.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

// CSVHeader is the header row WriteCSV writes.
var CSVHeader = []string{"seq", "time", "type", "severity", "subject", "message", "attrs"}

// WriteCSV answers events as a CSV download (httpapi.WriteCSV: formulas quoted), attrs as JSON.
func WriteCSV(w http.ResponseWriter, events []apiv1.Event) error {
	var bad error
	err := httpapi.WriteCSV(w, "meshflows-events.csv", CSVHeader, func(emit func(...string)) {
		for _, e := range events {
			attrs := ""
			if len(e.Attrs) > 0 {
				b, err := json.Marshal(e.Attrs)
				if err != nil {
					bad = fmt.Errorf("event %d: %w", e.Seq, err)
					return
				}
				attrs = string(b)
			}
			emit(strconv.FormatInt(e.Seq, 10), e.Time.UTC().Format(time.RFC3339Nano), e.Type, e.Severity, e.Subject, e.Message, attrs)
		}
	})
	return errors.Join(bad, err)
}
