package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/bench"
)

// TestRunHerd runs a small herd through a real restart (about four seconds: the wave takes
// up to two 1-second heartbeat intervals after two intervals of drift).
func TestRunHerd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := bench.RunHerd(ctx, bench.HerdConfig{Providers: 30, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatalf("RunHerd: %v", err)
	}
	// Every agent came back, each with one successful re-registration.
	if rep.Attempts-rep.Failures != 30 || rep.PeakPerSecond < 1 || rep.AllBackAfter <= 0 {
		t.Errorf("report = %+v", rep)
	}
	var out bytes.Buffer
	if err := bench.WriteHerd(&out, rep); err != nil || !strings.Contains(out.String(), "all back after") {
		t.Errorf("WriteHerd = %q, %v", out.String(), err)
	}
}
