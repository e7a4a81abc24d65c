package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// lowest is the lowest port handed out: above the well-known and registered ports that
// services on a developer's machine are likely to hold.
const lowest = 10000

var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a loopback port that was free a moment ago, below the ephemeral range and not
// given before in this process.
func Port(t testing.TB) int {
	t.Helper()
	return Block(t, 1)
}

// Block returns the first of n consecutive loopback ports that were all free a moment ago,
// below the ephemeral range and none given before in this process.
func Block(t testing.TB, n int) int {
	t.Helper()
	base, err := block(n, ephemeralLow())
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// Retry calls start, which binds ports it took from this package, up to three times while
// it fails with "address already in use": a port is free when handed out, but another
// process may bind it before start does. It returns start's last error.
func Retry(start func() error) error {
	var err error
	for range 3 {
		if err = start(); !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
	}
	return err
}

func block(n, high int) (int, error) {
	if n < 1 || high-n <= lowest {
		return 0, fmt.Errorf("freeport: no room for %d ports in [%d, %d)", n, lowest, high)
	}
	given.Lock()
	defer given.Unlock()
	const tries = 100
	for range tries {
		base := lowest + rand.IntN(high-n-lowest)
		if free(base, n) {
			for p := base; p < base+n; p++ {
				given.ports[p] = true
			}
			return base, nil
		}
	}
	return 0, fmt.Errorf("freeport: no %d free consecutive loopback ports in [%d, %d) after %d tries", n, lowest, high, tries)
}

// free says whether ports base..base+n-1 were neither given before nor held by anyone.
func free(base, n int) bool {
	for p := base; p < base+n; p++ {
		if given.ports[p] {
			return false
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range: Linux's setting where it
// can be read, and otherwise 32768, Linux's default, which is below the range of macOS and
// Windows (49152 and up) too.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < lowest+1000 {
		return fallback
	}
	return low
}
