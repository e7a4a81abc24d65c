package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// serveDebug serves Go's profiles (/debug/pprof/) on addr until ctx ends; an empty addr
// serves nothing, and stops the heap profiler's sampling (stopHeapProfile). It is bound on its
// own listener so that the API port never exposes them.
func serveDebug(ctx context.Context, g *errgroup.Group, addr string) error {
	if addr == "" {
		stopHeapProfile()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	g.Go(func() error {
		return serveUntil(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln)
	})
	return nil
}

var heapProfileOff sync.Once

// stopHeapProfile turns Go's heap profiler off (runtime.MemProfileRate) in a server whose
// profiles nothing can read: its table of sampled call stacks keeps 1.6–2.1 MiB resident in
// a registry holding 10,000 instances. GODEBUG=memprofilerate, when set, is left to rule.
func stopHeapProfile() {
	heapProfileOff.Do(func() {
		if !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
			runtime.MemProfileRate = 0
		}
	})
}
