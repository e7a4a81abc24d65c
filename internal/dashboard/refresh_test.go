package dashboard

import (
	"testing"
	"time"
)

// TestRefreshAfter: the live table waits ten times what counting the catalog took, from one
// second to thirty.
func TestRefreshAfter(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, time.Second},
		{50 * time.Millisecond, time.Second},
		{300 * time.Millisecond, 3 * time.Second},
		{535 * time.Millisecond, 5350 * time.Millisecond},
		{10 * time.Second, 30 * time.Second},
	} {
		if got := refreshAfter(tc.took); got != tc.want {
			t.Errorf("refreshAfter(%s) = %s, want %s", tc.took, got, tc.want)
		}
	}
}
