package workflow_test

import (
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/workflow"
)

func TestScheduleNext(t *testing.T) {
	at := time.Date(2026, 3, 2, 10, 17, 30, 0, time.UTC) // a Monday
	tests := []struct {
		schedule string
		want     time.Time
	}{
		{"@every 90s", at.Add(90 * time.Second)},
		{"@hourly", time.Date(2026, 3, 2, 11, 0, 0, 0, time.UTC)},
		{"@daily", time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)},
		{"*/15 * * * *", time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC)},
		{"5 9-17 * * 1-5", time.Date(2026, 3, 2, 11, 5, 0, 0, time.UTC)},
		{"0 8 * * 0", time.Date(2026, 3, 8, 8, 0, 0, 0, time.UTC)},
		{"30 10,22 1 * *", time.Date(2026, 4, 1, 10, 30, 0, 0, time.UTC)},
		{"*/2 * 2-31/2 * *", time.Date(2026, 3, 2, 10, 18, 0, 0, time.UTC)}, // even days from the 2nd
		{"0 0 */2 * *", time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)},        // every other day from the 1st
		{"0 0 31 2 *", time.Time{}},                                         // never
	}
	for _, tt := range tests {
		s, err := workflow.ParseSchedule(tt.schedule)
		if err != nil {
			t.Fatalf("ParseSchedule(%q): %v", tt.schedule, err)
		}
		if got := s.Next(at); !got.Equal(tt.want) {
			t.Errorf("Next(%q) = %v, want %v", tt.schedule, got, tt.want)
		}
	}
	for _, bad := range []string{"* * * *", "60 * * * *", "5-1 * * * *", "*/0 * * * *", "@weekly", "@every 10ms", "a * * * *"} {
		if _, err := workflow.ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q) accepted", bad)
		}
	}
}
