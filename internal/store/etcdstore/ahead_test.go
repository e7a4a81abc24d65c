package etcdstore

import "testing"

// TestAheadShowsOwnWritesOnceReached: an own write shows once the watch has reached its
// revision; one the watch reached before it was noted is not held back; the last write is
// remembered throughout.
func TestAheadShowsOwnWritesOnceReached(t *testing.T) {
	var a ahead
	a.reached(10) // the view read
	steps := []struct {
		name    string
		wrote   []int64
		reached int64
		want    int64
	}{
		{"nothing of ours", nil, 11, 0},
		{"ours, not reached yet", []int64{13, 12}, 11, 0},
		{"the lower one reached", nil, 12, 12},
		{"both reached, one at a time", nil, 14, 13},
		{"noted after the watch passed it", []int64{14}, 15, 0},
		{"a resync's read past several", []int64{16, 18, 17}, 20, 18},
	}
	for _, st := range steps {
		for _, rev := range st.wrote {
			a.wrote(rev)
		}
		if got := a.reached(st.reached); got != st.want {
			t.Errorf("%s: reached(%d) = %d, want %d", st.name, st.reached, got, st.want)
		}
	}
	if got := a.lastWrite(); got != 18 {
		t.Errorf("lastWrite() = %d, want 18", got)
	}
}
