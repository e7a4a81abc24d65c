package orchestrator

import (
	"testing"
	"time"
)

func TestNext(t *testing.T) {
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
	}
	for _, tt := range tests {
		if got := next(tt.schedule, at); !got.Equal(tt.want) {
			t.Errorf("next(%q) = %v, want %v", tt.schedule, got, tt.want)
		}
	}
}
