package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// herdRegistry is the registry a herd runs against: restarted with empty state by the
// bench, or by the operator (external).
type herdRegistry interface {
	url() string
	restart(ctx context.Context) error
	// pid is the process whose CPU is sampled (this one for an in-process registry).
	pid() int
	stop()
}

// spawnedRegistry is a registry in a child process started from RegistryCommand: its CPU
// is its own, apart from the agents', and a restart kills it (SIGKILL: a crash, its state
// gone) and starts it again on the same address.
type spawnedRegistry struct {
	argv []string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	p    atomic.Int64 // the pid of cmd, read by the CPU sampler
}

func startSpawned(ctx context.Context, cfg HerdConfig) (*spawnedRegistry, error) {
	addr := cfg.Listen
	if strings.HasSuffix(addr, ":0") {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("herd: pick a port: %w", err)
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	argv := append(slices.Clone(cfg.RegistryCommand), "--listen", addr,
		"--heartbeat-interval", cfg.HeartbeatInterval.String(), "--lease-ttl", cfg.LeaseTTL.String(),
		"--reconnect-rate", strconv.FormatFloat(max(cfg.ReconnectRate, 0), 'g', -1, 64),
		"--reconnect-burst", strconv.Itoa(max(cfg.ReconnectBurst, 1)))
	s := &spawnedRegistry{argv: argv, addr: addr}
	return s, s.start(ctx)
}

func (s *spawnedRegistry) start(ctx context.Context) error {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stderr = &tail{max: 4096}
	// the registry runs with its own defaults, whatever this process's GC settings
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "GODEBUG=")
	})
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("herd: start the registry: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	s.p.Store(int64(cmd.Process.Pid))
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("herd: the registry exited: %s", cmd.Stderr.(*tail).String())
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return errors.New("herd: the registry did not answer /healthz within 30s")
		}
	}
}

func (s *spawnedRegistry) url() string { return "http://" + s.addr }
func (s *spawnedRegistry) pid() int    { return int(s.p.Load()) }

func (s *spawnedRegistry) restart(ctx context.Context) error {
	s.stop()
	return s.start(ctx)
}

func (s *spawnedRegistry) stop() {
	s.cmd.Process.Kill()
	<-s.done
}

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string { t.mu.Lock(); defer t.mu.Unlock(); return string(t.b) }

// externalRegistry is restarted by the operator.
type externalRegistry struct {
	u      string
	notify func(string, ...any)
}

func (e externalRegistry) url() string { return e.u }
func (e externalRegistry) pid() int    { return 0 }
func (e externalRegistry) stop()       {}
func (e externalRegistry) restart(context.Context) error {
	e.notify("restart the registry at %s now; waiting for the providers to come back", e.u)
	return nil
}

// threadsCPU returns the CPU time process pid's threads have run, the sum of the first
// field of each /proc/PID/task/TID/schedstat (nanoseconds). /proc/PID/stat's utime and stime
// are scaled to stay monotonic and move in steps: read a second apart they show seconds of
// 0 % and 300 % on two cores.
func threadsCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err == nil {
			sum += ns
		}
	}
	return time.Duration(sum), nil
}

// cpuSampler records, once a second, the share of one core a process used in that second.
type cpuSampler struct {
	mu      sync.Mutex
	samples []cpuSample
}

// run samples pid() until ctx ends; a pid of 0 (an external registry) samples nothing. pid
// is asked every second: a restarted registry is a new process.
func (c *cpuSampler) run(ctx context.Context, pid func() int) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	p := pid()
	if p == 0 {
		return
	}
	last, _ := threadsCPU(p)
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if q := pid(); q != p { // restarted: the new process from 0
			p, last = q, 0
		}
		if now.Sub(lastAt) < 900*time.Millisecond {
			continue // a tick that came late and one right after: a thread's run time moves in scheduler ticks
		}
		used, err := threadsCPU(p)
		if err != nil {
			continue
		}
		c.mu.Lock()
		c.samples = append(c.samples, cpuSample{end: now, secs: now.Sub(lastAt).Seconds(), percent: 100 * float64(used-last) / float64(now.Sub(lastAt))})
		c.mu.Unlock()
		last, lastAt = used, now
	}
}

func (c *cpuSampler) since(start int) []cpuSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	if start >= len(c.samples) {
		return nil
	}
	return append([]cpuSample(nil), c.samples[start:]...)
}

func (c *cpuSampler) count() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.samples) }

// cpuSample is the CPU a process used over secs (about a second) ending at end, in percent
// of one core.
type cpuSample struct {
	end     time.Time
	secs    float64
	percent float64
}

// longestPinned is the longest run of time, in seconds, at or above 90% of every core of
// the machine.
func longestPinned(samples []cpuSample) float64 {
	limit := 90 * float64(runtime.NumCPU())
	var run, best float64
	for _, s := range samples {
		if s.percent >= limit {
			run += s.secs
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}
