package main

import "testing"

// TestNever: a flag's 0 or less turns the server's feature off (-1), any other value is
// passed as it is (the server's own 0 would mean its default).
func TestNever(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, -1}, {-3, -1}, {0.5, 0.5}, {10, 10}} {
		if got := never(tc.in); got != tc.want {
			t.Errorf("never(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if got := never(int64(0)); got != -1 {
		t.Errorf("never(int64(0)) = %d, want -1", got)
	}
}
