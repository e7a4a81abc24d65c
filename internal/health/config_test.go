package health

import (
	"strings"
	"testing"
	"time"
)

func TestConfigLatencyWindow(t *testing.T) {
	tests := []struct {
		name    string
		in      Config
		want    time.Duration // after WithDefaults
		wantErr string
	}{
		{name: "default", in: Config{}, want: 20 * time.Second},
		{name: "a short outlier window bounds the default", in: Config{OutlierWindow: 10 * time.Second}, want: 10 * time.Second},
		{name: "set", in: Config{LatencyWindow: time.Minute}, want: time.Minute},
		{name: "longer than the outlier window", in: Config{LatencyWindow: 2 * time.Minute}, wantErr: "latency_window 2m0s"},
		{name: "negative", in: Config{LatencyWindow: -time.Second}, wantErr: "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in.WithDefaults()
			err := c.Validate()
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error saying %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("Validate() = %v", err)
			case c.LatencyWindow != tt.want:
				t.Errorf("LatencyWindow = %s, want %s", c.LatencyWindow, tt.want)
			}
		})
	}
}
