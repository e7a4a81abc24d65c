package main

import (
	"math"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
)

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   int64
		str    string
		refuse bool
	}{
		{in: "2800MiB", want: 2800 << 20, str: "2800MiB"},
		{in: "3GiB", want: 3 << 30, str: "3GiB"},
		{in: "1.5 GiB", want: 3 << 29, str: "1536MiB"},
		{in: "3GB", want: 3e9, str: "3000000000"},
		{in: "512KB", want: 512e3, str: "500KiB"},
		{in: "4096", want: 4096, str: "4KiB"},
		{in: "100B", want: 100, str: "100"},
		{in: "0", want: 0, str: "0"},
		{in: "", refuse: true},
		{in: "MiB", refuse: true},
		{in: "-1GiB", refuse: true},
		{in: "3 furlongs", refuse: true},
		{in: "NaN", refuse: true},
		{in: "9000000TiB", refuse: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var b byteSize
			err := b.Set(tc.in)
			if tc.refuse {
				if err == nil {
					t.Fatalf("Set(%q) = %d, want a refusal", tc.in, int64(b))
				}
				return
			}
			if err != nil || int64(b) != tc.want || b.String() != tc.str {
				t.Fatalf("Set(%q) = %d %q, %v; want %d %q", tc.in, int64(b), b.String(), err, tc.want, tc.str)
			}
		})
	}
}

// TestRegistryMemoryLimit starts the registry command with --memory-limit and reads the
// runtime's limit back; a bad size is refused before anything starts.
func TestRegistryMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	port := etcdtest.FreePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	startCommand(t, url+"/healthz", "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--memory-limit", "2800MiB")
	if got := debug.SetMemoryLimit(-1); got != 2800<<20 {
		t.Errorf("runtime memory limit = %d, want %d", got, 2800<<20)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if _, err := run(t.Context(), "registry", "--insecure", "--listen", "127.0.0.1:0", "--memory-limit", "lots"); err == nil {
		t.Error("--memory-limit lots was accepted")
	}
}
