package main

import (
	"context"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/internal/freeport"
)

// TestServeDebug: --debug-listen serves Go's profiles on an address of its own; without it
// nothing is served and the heap profiler, which only that address could read, stops sampling.
func TestServeDebug(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	ctx, cancel := context.WithCancel(context.Background())
	g := &errgroup.Group{}
	t.Cleanup(func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Errorf("debug server: %v", err)
		}
	})
	if err := serveDebug(ctx, g, addr); err != nil {
		t.Fatalf("serveDebug(%s): %v", addr, err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatalf("GET /debug/pprof/heap: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap: %s", resp.Status)
	}

	if err := serveDebug(ctx, g, ""); err != nil {
		t.Fatalf(`serveDebug(""): %v`, err)
	}
	if strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
		t.Skip("GODEBUG sets memprofilerate, which the server leaves alone")
	}
	if runtime.MemProfileRate != 0 {
		t.Errorf("without --debug-listen MemProfileRate = %d, want 0", runtime.MemProfileRate)
	}
}
