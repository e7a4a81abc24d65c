package orchestrator

import (
	"sync/atomic"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// DefaultMaxRunRecordBytes bounds one run's record; DefaultMaxRunHistoryBytes a workflow's
// run history.
const (
	DefaultMaxRunRecordBytes  = 1 << 20
	DefaultMaxRunHistoryBytes = 32 << 20
)

// keepLastIterations is how many of a loop's last iterations a record past its bound keeps.
const keepLastIterations = 10

// budget is what is left of a run's record bound, in (approximate) encoded bytes; the
// parallel branches of a run share it.
type budget struct {
	left      atomic.Int64
	truncated atomic.Bool
	maxOutput int // an output larger than this is left out of the record
}

func newBudget(bytes int) *budget {
	b := &budget{maxOutput: max(bytes/16, 1024)}
	b.left.Store(int64(bytes))
	return b
}

func (b *budget) spend(n int)  { b.left.Add(-int64(n)) }
func (b *budget) refund(n int) { b.left.Add(int64(n)) }
func (b *budget) over() bool   { return b.left.Load() <= 0 }

// stepCost is a step record's own encoded size, about: its fields, not its iterations' and
// branches'.
func stepCost(sr *apiv1.StepRun) int {
	n := 96 + len(sr.StepID) + len(sr.Status) + len(sr.InstanceID) + len(sr.Output)
	if sr.Error != nil {
		n += 48 + len(sr.Error.Code) + len(sr.Error.Message)
	}
	return n
}

// treeCost is a step record's encoded size with everything under it, about.
func treeCost(sr *apiv1.StepRun) int {
	n := stepCost(sr)
	for i := range sr.Iterations {
		n += iterationCost(&sr.Iterations[i])
	}
	for _, b := range sr.Branches {
		n += 48 + len(b.BranchID)
		for i := range b.Steps {
			n += treeCost(&b.Steps[i])
		}
	}
	return n
}

func iterationCost(it *apiv1.IterationRun) int {
	n := 48
	for i := range it.Steps {
		n += treeCost(&it.Steps[i])
	}
	return n
}

// iterations collects a loop's iteration records under the budget: all of them while it
// lasts, then the last keepLastIterations in a ring, the ones between left out.
type iterations struct {
	b       *budget
	head    []apiv1.IterationRun
	ring    []apiv1.IterationRun
	next    int // where the ring's next record goes
	total   int
	omitted int
}

func (it *iterations) add(rec apiv1.IterationRun) {
	it.total++
	if !it.b.over() {
		it.head = append(it.head, rec) // its steps were spent as they were recorded
		return
	}
	it.b.truncated.Store(true)
	if len(it.ring) < keepLastIterations {
		it.ring = append(it.ring, rec)
		return
	}
	it.b.refund(iterationCost(&it.ring[it.next]))
	it.ring[it.next] = rec
	it.next = (it.next + 1) % keepLastIterations
	it.omitted++
}

// done writes the kept iterations, in order, and the counts on sr.
func (it *iterations) done(sr *apiv1.StepRun) {
	out := it.head
	out = append(out, it.ring[it.next:]...)
	out = append(out, it.ring[:it.next]...)
	sr.Iterations = out
	if it.omitted > 0 || it.total > 0 {
		sr.IterationsTotal = it.total
	}
	sr.IterationsOmitted = it.omitted
}
