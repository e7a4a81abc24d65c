package reconnect

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A burst is admitted, the excess is told to wait longer the longer the backlog before it
// (ceil(backlog / rate) seconds, at least one), the bucket refills at its rate, and the
// backlog is forgotten once its slots have gone by.
func TestCapSpreadsTheBacklog(t *testing.T) {
	c := New(2, 3)
	now := time.Unix(1_000_000, 0)
	for i := range 3 {
		if ok, _ := c.Admit(now); !ok {
			t.Fatalf("arrival %d of the burst refused", i)
		}
	}
	var waits []time.Duration
	for range 10 {
		ok, wait := c.Admit(now)
		if ok {
			t.Fatal("an arrival past the burst was admitted")
		}
		waits = append(waits, wait)
	}
	s := time.Second
	if diff := cmp.Diff([]time.Duration{s, s, 2 * s, 2 * s, 3 * s, 3 * s, 4 * s, 4 * s, 5 * s, 5 * s}, waits); diff != "" {
		t.Fatalf("waits (-want +got):\n%s", diff)
	}
	now = now.Add(time.Second) // two tokens
	for i := range 2 {
		if ok, _ := c.Admit(now); !ok {
			t.Fatalf("after a second, arrival %d refused", i)
		}
	}
	if ok, wait := c.Admit(now); ok || wait != 6*time.Second {
		t.Fatalf("a third in the second: admitted %v, wait %s; want refused with 6s (11 refused lately)", ok, wait)
	}
	now = now.Add(slots * slot) // the refusals are forgotten
	for range 4 {
		c.Admit(now) // 4 tokens refilled over 2 s, 3 of them fit the burst
	}
	if _, wait := c.Admit(now); wait != time.Second {
		t.Fatalf("after the backlog went by, wait %s, want 1s", wait)
	}
}

func TestNilCapAdmitsAll(t *testing.T) {
	c := New(0, 10)
	if c != nil {
		t.Fatal("a zero rate made a cap")
	}
	if ok, _ := c.Admit(time.Now()); !ok {
		t.Fatal("a nil cap refused")
	}
}
