package bench

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseWarning: a registration phase that lasted the registry's lease TTL or longer is
// reported, so that nobody reads its heartbeat figures as a healthy fleet's.
func TestLeaseWarning(t *testing.T) {
	register := func(d time.Duration) []Phase { return []Phase{{Name: "register", Duration: d}, {Name: "heartbeat"}} }
	for _, tc := range []struct {
		name   string
		phases []Phase
		ttl    time.Duration
		want   string // "" for no warning
	}{
		{"shorter than the TTL", register(89 * time.Second), 90 * time.Second, ""},
		{"as long as the TTL", register(90 * time.Second), 90 * time.Second, "registering took 1m30s, longer than the registry's lease TTL (1m30s)"},
		{"longer", register(171400 * time.Millisecond), 90 * time.Second, "registering took 2m51s, longer than the registry's lease TTL (1m30s)"},
		{"TTL not known", register(time.Hour), 0, ""},
		{"no phases", nil, 90 * time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := leaseWarning(tc.phases, tc.ttl)
			if ok != (tc.want != "") || !strings.HasPrefix(got, tc.want) {
				t.Errorf("leaseWarning = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}
