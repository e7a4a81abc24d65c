package main

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// byteSize is a flag value holding a number of bytes, written as a plain number or with a
// unit: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000).
type byteSize int64

var byteUnits = []struct {
	suffix string
	scale  int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// Set parses s.
func (b *byteSize) Set(s string) error {
	num, scale := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, scale = strings.TrimSpace(rest), u.scale
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("%q: want a size such as 2800MiB, 3GiB or 3000000000", s)
	}
	if f*float64(scale) >= math.MaxInt64 {
		return fmt.Errorf("%q: too large", s)
	}
	*b = byteSize(f * float64(scale))
	return nil
}

// String formats the size in the largest binary unit that divides it.
func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.scale == 0 {
			return strconv.FormatInt(n/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Type names the flag's kind in --help.
func (b *byteSize) Type() string { return "size" }

// applyMemoryLimit sets the Go runtime's soft memory limit when one was given (0 leaves it
// as it is: unlimited, or GOMEMLIMIT from the environment).
func applyMemoryLimit(limit byteSize, logger *slog.Logger) {
	if limit <= 0 {
		return
	}
	prev := debug.SetMemoryLimit(int64(limit))
	logger.Info("memory limit set", "limit_bytes", int64(limit), "previous_bytes", prev)
}
