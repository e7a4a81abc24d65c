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
