package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Phase is the outcome of one phase of a load run.
type Phase struct {
	Name      string        `json:"name"`
	Ops       int           `json:"ops"`
	Errors    int           `json:"errors"`
	Duration  time.Duration `json:"duration_ns"`
	PerSecond float64       `json:"per_second"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	// FirstError is the first error seen, for the operator to read.
	FirstError string `json:"first_error,omitempty"`
}

// recorder collects latencies and errors of one phase from many goroutines.
type recorder struct {
	mu        sync.Mutex
	name      string
	start     time.Time
	latencies []time.Duration
	errors    int
	firstErr  string
}

func newRecorder(name string, capacity int) *recorder {
	return &recorder{name: name, start: time.Now(), latencies: make([]time.Duration, 0, capacity)}
}

func (r *recorder) record(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
		return
	}
	r.latencies = append(r.latencies, d)
}

func (r *recorder) phase() Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Phase{Name: r.name, Ops: len(r.latencies), Errors: r.errors, Duration: time.Since(r.start), FirstError: r.firstErr}
	if p.Duration > 0 {
		p.PerSecond = float64(p.Ops) / p.Duration.Seconds()
	}
	if n := len(r.latencies); n > 0 {
		slices.Sort(r.latencies)
		p.P50 = r.latencies[percentileIndex(n, 0.50)]
		p.P99 = r.latencies[percentileIndex(n, 0.99)]
		p.Max = r.latencies[n-1]
	}
	return p
}

// percentileIndex is the nearest-rank index of quantile q among n sorted values.
func percentileIndex(n int, q float64) int {
	i := int(float64(n)*q+0.999999) - 1
	return min(max(i, 0), n-1)
}

// WriteTable prints phases as an aligned table.
func WriteTable(w io.Writer, phases []Phase) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %8s %7s %10s %12s %10s %10s %10s\n", "phase", "ops", "errors", "seconds", "ops/s", "p50", "p99", "max")
	for _, p := range phases {
		fmt.Fprintf(&b, "%-12s %8d %7d %10.2f %12.0f %10s %10s %10s\n", p.Name, p.Ops, p.Errors, p.Duration.Seconds(), p.PerSecond,
			round(p.P50), round(p.P99), round(p.Max))
	}
	for _, p := range phases {
		if p.FirstError != "" {
			fmt.Fprintf(&b, "first error in %s: %s\n", p.Name, p.FirstError)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
