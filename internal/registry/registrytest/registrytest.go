// Package registrytest runs a real registry — core, memory store and HTTP handlers — on an
// httptest server with a fake clock, for the tests of every package that talks to one.
package registrytest

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// Clock is a fake clock that moves only when told to. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Server is a registry served by an httptest server.
type Server struct {
	*httptest.Server
	Registry *registry.Registry
	Store    *memstore.Store
	Clock    *Clock
}

// Epoch0 is the time every fake clock of NewServer starts at.
var Epoch0 = time.Date(2026, 4, 27, 8, 15, 0, 0, time.UTC)

// NewServer starts a registry with cfg (its Now replaced by a fake clock) on an httptest
// server that is closed when the test ends.
func NewServer(t testing.TB, cfg registry.Config) *Server {
	t.Helper()
	return NewServerAt(t, cfg, Epoch0)
}

// NewServerAt is NewServer with the fake clock started at start: two servers started at
// different times have different epochs, as a registry restarted with empty state has.
func NewServerAt(t testing.TB, cfg registry.Config, start time.Time) *Server {
	t.Helper()
	return NewServerWith(t, cfg, server.Config{}, start)
}

// NewServerWith is NewServerAt with the server's settings too (its Now is the fake clock,
// unless scfg has a clock of its own).
func NewServerWith(t testing.TB, cfg registry.Config, scfg server.Config, start time.Time) *Server {
	t.Helper()
	clock := NewClock(start)
	cfg.Now = clock.Now
	store := memstore.New(clock.Now)
	reg, err := registry.New(store, cfg)
	if err != nil {
		t.Fatalf("registry.New: %v", err)
	}
	if scfg.Now == nil {
		scfg.Now = clock.Now
	}
	srv, err := server.New(reg, scfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &Server{Server: hs, Registry: reg, Store: store, Clock: clock}
}

// Until polls cond every 10 ms until it holds, failing the test with what after 60 s. It
// asserts no timing: the bound only ends a broken test on a slow machine.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within a minute: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
