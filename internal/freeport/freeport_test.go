package freeport

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// TestBlock: every block lies below the kernel's ephemeral range, where no outgoing
// connection can take it; each of its ports is bindable when returned; no port is given
// twice in the process.
func TestBlock(t *testing.T) {
	high := ephemeralLow()
	seen := map[int]bool{}
	for _, n := range []int{1, 1, 2, 6, 12, 1, 12} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for range 20 {
				base := Block(t, n)
				if base < lowest || base+n > high {
					t.Fatalf("block %d+%d is outside [%d, %d)", base, n, lowest, high)
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
		{"range too low", 1, lowest},
	} {
		t.Run(c.name, func(t *testing.T) {
			if base, err := block(c.n, c.high); err == nil {
				t.Errorf("block(%d, %d) = %d, want an error", c.n, c.high, base)
			}
		})
	}
}

// TestRetry: start is called again while, and only while, it fails with "address already in
// use", three times at most, and its last error is returned.
func TestRetry(t *testing.T) {
	busy := fmt.Errorf("listen tcp 127.0.0.1:12345: %w", syscall.EADDRINUSE)
	other := errors.New("bad config")
	for _, c := range []struct {
		name      string
		errs      []error // what each call returns
		wantCalls int
		want      error
	}{
		{"at once", []error{nil}, 1, nil},
		{"after a busy port", []error{busy, nil}, 2, nil},
		{"busy three times", []error{busy, busy, busy, nil}, 3, syscall.EADDRINUSE},
		{"another error", []error{other, nil}, 1, other},
		{"busy, then another error", []error{busy, other, nil}, 2, other},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := Retry(func() error {
				calls++
				return c.errs[calls-1]
			})
			if calls != c.wantCalls || !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Errorf("Retry: %d calls, %v; want %d calls, %v", calls, err, c.wantCalls, c.want)
			}
		})
	}
}
