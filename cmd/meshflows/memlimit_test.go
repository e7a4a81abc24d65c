package main

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"testing"
	"testing/fstest"

	"github.com/meshflows/meshflows/internal/freeport"
)

// TestRegistryMemoryLimit starts the registry command with --memory-limit and reads the
// runtime's limit back; a bad size is refused before anything starts.
func TestRegistryMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	port := freeport.Port(t)
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

func TestMemoryLimitFlag(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   memoryLimit
		str    string
		refuse bool
	}{
		{in: "auto", want: memoryLimit{auto: true}, str: "auto"},
		{in: "AUTO", want: memoryLimit{auto: true}, str: "auto"},
		{in: "none", want: memoryLimit{}, str: "none"},
		{in: "0", want: memoryLimit{}, str: "none"},
		{in: "2800MiB", want: memoryLimit{size: 2800 << 20}, str: "2800MiB"},
		{in: "3GiB", want: memoryLimit{size: 3 << 30}, str: "3GiB"},
		{in: "1.5 GiB", want: memoryLimit{size: 3 << 29}, str: "1536MiB"},
		{in: "3GB", want: memoryLimit{size: 3e9}, str: "3000000000"},
		{in: "512KB", want: memoryLimit{size: 512e3}, str: "500KiB"},
		{in: "4096", want: memoryLimit{size: 4096}, str: "4KiB"},
		{in: "100B", want: memoryLimit{size: 100}, str: "100"},
		{in: "", refuse: true},
		{in: "MiB", refuse: true},
		{in: "automatic", refuse: true},
		{in: "-3GiB", refuse: true},
		{in: "3 furlongs", refuse: true},
		{in: "NaN", refuse: true},
		{in: "9000000TiB", refuse: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var m memoryLimit
			err := m.Set(tc.in)
			if tc.refuse {
				if err == nil {
					t.Fatalf("Set(%q) = %+v, want a refusal", tc.in, m)
				}
				return
			}
			if err != nil || m != tc.want || m.String() != tc.str {
				t.Fatalf("Set(%q) = %+v %q, %v; want %+v %q", tc.in, m, m.String(), err, tc.want, tc.str)
			}
		})
	}
}

func TestContainerMemoryLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  int64 // 0: none
	}{
		{"cgroup v2", fstest.MapFS{"proc/self/cgroup": file("0::/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": file("4294967296\n")}, 4 << 30},
		{"cgroup v2 without a limit", fstest.MapFS{"proc/self/cgroup": file("0::/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": file("max\n")}, 0},
		{"cgroup v2, its own namespace", fstest.MapFS{"proc/self/cgroup": file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("1073741824\n")}, 1 << 30},
		{"cgroup v2, the path not mounted", fstest.MapFS{"proc/self/cgroup": file("0::/elsewhere\n"),
			"sys/fs/cgroup/memory.max": file("1073741824\n")}, 1 << 30},
		{"cgroup v1", fstest.MapFS{"proc/self/cgroup": file("5:cpuacct,cpu:/x\n4:memory:/docker/abc\n0::/\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("2147483648\n")}, 2 << 30},
		{"cgroup v1 unlimited", fstest.MapFS{"proc/self/cgroup": file("4:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("9223372036854771712\n")}, 0},
		{"unreadable value", fstest.MapFS{"proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("lots\n")}, 0},
		{"no cgroup file", fstest.MapFS{}, 0},
		{"no limit file", fstest.MapFS{"proc/self/cgroup": file("0::/a\n")}, 0},
		{"a path climbing out", fstest.MapFS{"proc/self/cgroup": file("0::/../../etc\n"),
			"sys/fs/cgroup/etc/memory.max": file("1024\n")}, 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := containerMemoryLimit(tc.files)
			if ok != (tc.want != 0) || got != tc.want {
				t.Errorf("containerMemoryLimit = %d, %v; want %d", got, ok, tc.want)
			}
		})
	}
}

func TestApplyMemoryLimitAuto(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	container := fstest.MapFS{"proc/self/cgroup": {Data: []byte("0::/\n")}, "sys/fs/cgroup/memory.max": {Data: []byte("4294967296\n")}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	noEnv := func(string) string { return "" }
	share := autoMemoryShare // a variable: the product is not an integer constant
	auto := int64(float64(4<<30) * share)
	for _, tc := range []struct {
		name   string
		limit  memoryLimit
		root   fstest.MapFS
		getenv func(string) string
		want   int64
	}{
		{"auto in a container", memoryLimit{auto: true}, container, noEnv, auto},
		{"auto, GOMEMLIMIT set", memoryLimit{auto: true}, container, func(string) string { return "1GiB" }, math.MaxInt64},
		{"auto outside a container", memoryLimit{auto: true}, fstest.MapFS{}, noEnv, math.MaxInt64},
		{"a size wins over the container", memoryLimit{size: 1 << 30}, container, noEnv, 1 << 30},
		{"none", memoryLimit{}, container, noEnv, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			applyMemoryLimit(tc.limit, tc.root, tc.getenv, quiet)
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Errorf("runtime memory limit = %d, want %d", got, tc.want)
			}
		})
	}
}
