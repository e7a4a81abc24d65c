package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestBlock: every block lies below the kernel's ephemeral range, where no outgoing
// connection can take it; each of its ports is bindable when returned; no port is given
// twice in the process.
func TestBlock(t *testing.T) {
	high := EphemeralLow()
	seen := map[int]bool{}
	for _, n := range []int{1, 1, 2, 6, 12, 1, 12} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for range 20 {
				base := Block(t, n)
				if base < Lowest || base+n > high {
					t.Fatalf("block %d+%d is outside [%d, %d)", base, n, Lowest, high)
				}
				for p := base; p < base+n; p++ {
					if seen[p] {
						t.Fatalf("port %d given twice", p)
					}
					seen[p] = true
					l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
					if err != nil {
						t.Fatalf("port %d: %v", p, err)
					}
					l.Close()
				}
			}
		})
	}
}

// TestBlockRefuses: a block that cannot fit below the range is an error, not a port inside
// the range.
func TestBlockRefuses(t *testing.T) {
	for _, c := range []struct {
		name    string
		n, high int
	}{
		{"no ports", 0, 32768},
		{"too many", 32768, 32768},
		{"range too low", 1, Lowest},
	} {
		t.Run(c.name, func(t *testing.T) {
			if base, err := block(c.n, c.high); err == nil {
				t.Errorf("block(%d, %d) = %d, want an error", c.n, c.high, base)
			}
		})
	}
}
