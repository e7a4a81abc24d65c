//go:build !linux

package server

// threadCPU has no thread clock to read here: builds are timed by the wall clock.
func threadCPU() (cpu int64, ok bool) { return 0, false }
