package deadline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/internal/deadline"
)

// TestQueueOrdersAndWalks pushes and pops at random and checks every pop against a sorted
// list of what is in the queue, and every Walk against a filter of it.
func TestQueueOrdersAndWalks(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 9))
		var q deadline.Queue[int]
		var held []int64
		for step := range 5000 {
			switch {
			case rng.IntN(3) > 0 || q.Len() == 0:
				at := int64(rng.IntN(1000))
				q.Push(at, int(at)*10)
				held = append(held, at)
			default:
				slices.Sort(held)
				at, v := q.Pop()
				if at != held[0] || v != int(at)*10 {
					t.Fatalf("seed %d step %d: Pop = %d, %d; want %d", seed, step, at, v, held[0])
				}
				held = held[1:]
			}
			if q.Len() != len(held) {
				t.Fatalf("Len = %d, want %d", q.Len(), len(held))
			}
			if step%100 == 0 {
				limit := int64(rng.IntN(1000))
				var walked, want []int64
				q.Walk(limit, func(at int64, _ int) { walked = append(walked, at) })
				for _, at := range held {
					if at <= limit {
						want = append(want, at)
					}
				}
				slices.Sort(walked)
				slices.Sort(want)
				if diff := cmp.Diff(want, walked); diff != "" {
					t.Fatalf("Walk(%d) (-want +got):\n%s", limit, diff)
				}
				if due := len(want) > 0; q.Due(limit) != due {
					t.Fatalf("Due(%d) = %v, want %v", limit, !due, due)
				}
			}
		}
		q.Reset()
		if q.Len() != 0 || q.Due(1<<62) {
			t.Fatal("Reset left entries")
		}
	}
}

// TestQueueTidy models an owner whose items are replaced over and over: slots entries, each
// pushed again and again, the one before going stale, with pops at random. It tidies after
// every push and checks that Tidy removes exactly the entries keep rejects and no entry that
// holds, that the heap stays in order, that the queue stays within its bound, that Tidy looks
// at a few entries per push at most, and at none while the queue is within its owner's count.
func TestQueueTidy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slots      int  // how many entries hold at most
		live       int  // what the owner tells Tidy (0: slots)
		sequential bool // push the slots in turn, not at random
		pushes     int
		popPct     int // the share of steps that pop instead of pushing
	}{
		{name: "a storm of re-registrations, few slots", slots: 10, pushes: 50_000},
		{name: "a storm, more slots than the minimum", slots: 3000, pushes: 50_000},
		{name: "a storm, many slots", slots: 20_000, pushes: 200_000},
		{name: "re-registrations and lease ends", slots: 300, pushes: 50_000, popPct: 30},
		{name: "every slot once, nothing stale", slots: 5000, sequential: true, pushes: 5000},
		// an owner that counts fewer than hold (a lease moved earlier is queued twice): Tidy
		// finds nothing to remove, and looks at no more than a few entries per push
		{name: "more hold than the owner counts", slots: 20_000, live: 10, sequential: true, pushes: 20_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.slots), uint64(tc.popPct)))
			live := tc.live
			if live == 0 {
				live = tc.slots
			}
			type item struct{ slot, n int }
			var q deadline.Queue[item]
			current := make([]int, tc.slots) // the latest push of each slot; earlier ones are stale
			held := map[item]int64{}         // what the queue should hold, by instant
			looked, removed := 0, 0
			keep := func(_ int64, it item) bool {
				looked++
				if current[it.slot] == it.n {
					return true
				}
				delete(held, it) // Tidy removes what keep rejects
				removed++
				return false
			}
			most := 0
			for n := 1; n <= tc.pushes; {
				if rng.IntN(100) < tc.popPct && q.Len() > 0 {
					at, it := q.Pop()
					want, ok := held[it]
					if !ok || want != at {
						t.Fatalf("Pop = %d, %+v: the queue does not hold it (held at %d, %v)", at, it, want, ok)
					}
					for o, oat := range held {
						if oat < at {
							t.Fatalf("Pop = %d, %+v, but %+v at %d is earlier", at, it, o, oat)
						}
					}
					delete(held, it)
					continue
				}
				it := item{rng.IntN(tc.slots), n}
				if tc.sequential {
					it.slot = (n - 1) % tc.slots
				}
				at := int64(rng.IntN(1_000_000))
				current[it.slot] = n
				q.Push(at, it)
				held[it] = at
				n++
				before := removed
				if got := q.Tidy(live, keep); got != removed-before {
					t.Fatalf("Tidy reports %d removed; keep rejected %d", got, removed-before)
				}
				if q.Len() != len(held) {
					t.Fatalf("Len = %d after Tidy, want %d", q.Len(), len(held))
				}
				most = max(most, q.Len())
			}
			stale := tc.pushes > tc.slots
			switch {
			case stale && removed == 0:
				t.Fatal("Tidy never removed anything")
			case !stale && tc.live == 0 && looked != 0:
				t.Fatalf("Tidy looked at %d entries with none stale and the queue within its owner's count", looked)
			case looked > 4*tc.pushes:
				t.Errorf("Tidy looked at %d entries for %d pushes: more than a few per push", looked, tc.pushes)
			}
			if bound := 2*live + 1024; tc.popPct == 0 && tc.live == 0 && most > bound {
				t.Errorf("the queue held up to %d entries for %d slots (bound %d)", most, tc.slots, bound)
			}
			t.Logf("most %d entries for %d slots; looked at %d, removed %d", most, tc.slots, looked, removed)
			for q.Len() > 0 { // what is left comes out in order, every entry that holds among it
				at, it := q.Pop()
				if want, ok := held[it]; !ok || want != at {
					t.Fatalf("Pop = %d, %+v: not held (%d, %v)", at, it, want, ok)
				}
				delete(held, it)
			}
			if len(held) != 0 {
				t.Fatalf("%d entries never came out", len(held))
			}
		})
	}
}

// TestSleep: Sleep waits its duration, or returns the context's error as soon as the
// context ends (a canceled one before any wait: nothing here waits its minute).
func TestSleep(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"elapses", context.Background(), time.Microsecond, nil},
		{"context ended", canceled, time.Minute, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := deadline.Sleep(tc.ctx, tc.d); !errors.Is(err, tc.want) {
				t.Fatalf("Sleep = %v, want %v", err, tc.want)
			}
		})
	}
}
