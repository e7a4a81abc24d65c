package server

import "syscall"

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's resource usage.
const rusageThread = 1

// threadCPU returns the CPU time the calling thread has used (user and system), and true;
// the caller keeps its goroutine locked to the thread between two readings.
func threadCPU() (cpu int64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
