package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// sizeUnits are the units a size may be written with: powers of 1024 (largest first, as
// formatSize tries them), then powers of 1000, then plain bytes.
var sizeUnits = []struct {
	suffix string
	scale  int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"B", 1},
}

// binaryUnits is how many of sizeUnits are powers of 1024.
const binaryUnits = 4

// parseSize reads a number of bytes, plain or with a unit (2800MiB, 1.5 GiB, 3GB).
func parseSize(s string) (int64, error) {
	num, scale := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, scale = strings.TrimSpace(rest), u.scale
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q: want a size such as 2800MiB, 3GiB or 3000000000", s)
	}
	if f*float64(scale) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return int64(f * float64(scale)), nil
}

// formatSize writes n in the largest power of 1024 that divides it, else in bytes.
func formatSize(n int64) string {
	for _, u := range sizeUnits[:binaryUnits] {
		if n != 0 && n%u.scale == 0 {
			return strconv.FormatInt(n/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// memoryLimit is --memory-limit: a size, "auto" (a share of the container's memory limit,
// when the process runs under one) or "none".
type memoryLimit struct {
	auto bool
	size int64 // bytes, when not auto; 0 is none
}

// autoMemoryShare is the share of the container's memory limit that "auto" gives the Go heap:
// the rest is for what the collector does not count (stacks, the binary's pages, buffers).
const autoMemoryShare = 0.9

// Set parses auto, none or a size.
func (m *memoryLimit) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		*m = memoryLimit{auto: true}
		return nil
	case "none", "0":
		*m = memoryLimit{}
		return nil
	}
	n, err := parseSize(s)
	if err != nil {
		return fmt.Errorf("%w (or auto, or none)", err)
	}
	*m = memoryLimit{size: n}
	return nil
}

// String formats the limit as Set reads it.
func (m *memoryLimit) String() string {
	switch {
	case m.auto:
		return "auto"
	case m.size == 0:
		return "none"
	}
	return formatSize(m.size)
}

// Type names the flag's kind in --help.
func (m *memoryLimit) Type() string { return "size|auto|none" }

// applyMemoryLimit sets the Go runtime's soft memory limit: the size given; with auto, 90 %
// of the container's memory limit when there is one (and GOMEMLIMIT is not set: the runtime
// has applied it); with none, nothing (Go's default, or GOMEMLIMIT).
func applyMemoryLimit(m memoryLimit, root fs.FS, getenv func(string) string, logger *slog.Logger) {
	limit, from := m.size, "--memory-limit"
	if m.auto {
		if env := getenv("GOMEMLIMIT"); env != "" {
			logger.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", env)
			return
		}
		container, ok := containerMemoryLimit(root)
		if !ok {
			return
		}
		limit, from = int64(float64(container)*autoMemoryShare), "90% of the container's "+formatSize(container)
	}
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
	logger.Info("memory limit set", "limit", formatSize(limit), "from", from)
}

// containerMemoryLimit reads the memory limit of the cgroup the process runs in, version 2
// (memory.max) or 1 (memory.limit_in_bytes), under root (the filesystem's "/"). It reports
// false when there is none: no cgroup, "max", or version 1's "unlimited" (a value near
// 2^63).
func containerMemoryLimit(root fs.FS) (int64, bool) {
	self, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := strings.TrimPrefix(path.Clean("/"+parts[2]), "/")
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = append(files, path.Join("sys/fs/cgroup", dir, "memory.max"), "sys/fs/cgroup/memory.max")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = append(files, path.Join("sys/fs/cgroup/memory", dir, "memory.limit_in_bytes"), "sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	for _, f := range files {
		b, err := fs.ReadFile(root, f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// rootFS is the machine's filesystem, where containerMemoryLimit looks.
var rootFS fs.FS = os.DirFS("/")
