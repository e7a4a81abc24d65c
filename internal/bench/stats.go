package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Phase is the outcome of one phase of a load run.
type Phase struct {
	Name      string        `json:"name"`
	Ops       int           `json:"ops"`
	Errors    int           `json:"errors"`
	Duration  time.Duration `json:"duration_ns"`
	PerSecond float64       `json:"per_second"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	// FirstError is the first error seen, for the operator to read.
	FirstError string `json:"first_error,omitempty"`
	// ServerCPU is the CPU time the server process used during the phase, and
	// ServerCPUPerOp that divided by the operations (when the server's pid is known).
	ServerCPU      time.Duration `json:"server_cpu_ns,omitempty"`
	ServerCPUPerOp time.Duration `json:"server_cpu_per_op_ns,omitempty"`
	// ServerRSS is the server's resident memory at the end of the phase, and ServerPeakRSS
	// the most it has held since it started (VmRSS and VmHWM), in bytes (when the server's
	// pid is known).
	ServerRSS     int64 `json:"server_rss_bytes,omitempty"`
	ServerPeakRSS int64 `json:"server_peak_rss_bytes,omitempty"`
}

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// procCPU returns the CPU time (user + system) process pid has used, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("server cpu: %w", err)
	}
	s := string(b)
	// the command name is in parentheses and may hold spaces: fields count from after it
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("server cpu: /proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("server cpu: /proc/%d/stat: unreadable times", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// procMemory returns process pid's resident memory now and the most it has held since it
// started, in bytes, from /proc/PID/status.
func procMemory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("server memory: %w", err)
	}
	return statusMemory(string(b))
}

// statusMemory reads VmRSS and VmHWM (in kB) from the text of /proc/PID/status.
func statusMemory(status string) (rss, peak int64, err error) {
	rss, peak = -1, -1
	for line := range strings.Lines(status) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "VmRSS" && k != "VmHWM" {
			continue
		}
		bad := fmt.Errorf("server memory: unreadable %s %q", k, strings.TrimSpace(v))
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, bad
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return 0, 0, bad
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	if rss < 0 || peak < 0 {
		return 0, 0, errors.New("server memory: no VmRSS and VmHWM (a kernel thread, or not Linux)")
	}
	return rss, peak, nil
}

// checkPID refuses a process id whose CPU time cannot be read (0: none asked for), so that a
// mistyped --server-pid is said at once rather than leaving the report without its figure.
func checkPID(flag string, pid int) error {
	if pid == 0 {
		return nil
	}
	if pid < 0 {
		return fmt.Errorf("%s %d: not a process id", flag, pid)
	}
	if _, err := procCPU(pid); err != nil {
		return fmt.Errorf("%s %d: %w", flag, pid, err)
	}
	return nil
}

// serverMeter measures a server process over a phase: the CPU it used, and its memory at the
// end (pid 0: nothing).
type serverMeter struct {
	pid   int
	start time.Duration
}

func startMeter(pid int) serverMeter {
	if pid <= 0 {
		return serverMeter{}
	}
	c, err := procCPU(pid)
	if err != nil {
		return serverMeter{}
	}
	return serverMeter{pid: pid, start: c}
}

// stop fills p's server CPU and memory figures.
func (m serverMeter) stop(p *Phase) {
	if m.pid <= 0 {
		return
	}
	if rss, peak, err := procMemory(m.pid); err == nil {
		p.ServerRSS, p.ServerPeakRSS = rss, peak
	}
	c, err := procCPU(m.pid)
	if err != nil {
		return
	}
	p.ServerCPU = c - m.start
	if p.Ops > 0 {
		p.ServerCPUPerOp = p.ServerCPU / time.Duration(p.Ops)
	}
}

// recorder collects latencies and errors of one phase from many goroutines.
type recorder struct {
	mu        sync.Mutex
	name      string
	start     time.Time
	latencies []time.Duration
	errors    int
	firstErr  string
}

func newRecorder(name string, capacity int) *recorder {
	return &recorder{name: name, start: time.Now(), latencies: make([]time.Duration, 0, capacity)}
}

func (r *recorder) record(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
		return
	}
	r.latencies = append(r.latencies, d)
}

func (r *recorder) phase() Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Phase{Name: r.name, Ops: len(r.latencies), Errors: r.errors, Duration: time.Since(r.start), FirstError: r.firstErr}
	if p.Duration > 0 {
		p.PerSecond = float64(p.Ops) / p.Duration.Seconds()
	}
	if n := len(r.latencies); n > 0 {
		slices.Sort(r.latencies)
		p.P50 = r.latencies[percentileIndex(n, 0.50)]
		p.P99 = r.latencies[percentileIndex(n, 0.99)]
		p.Max = r.latencies[n-1]
	}
	return p
}

// percentileIndex is the nearest-rank index of quantile q among n sorted values.
func percentileIndex(n int, q float64) int {
	i := int(float64(n)*q+0.999999) - 1
	return min(max(i, 0), n-1)
}

// WriteTable prints phases as an aligned table.
func WriteTable(w io.Writer, phases []Phase) error {
	var b strings.Builder
	cpu := slices.ContainsFunc(phases, func(p Phase) bool { return p.ServerCPU > 0 })
	mem := slices.ContainsFunc(phases, func(p Phase) bool { return p.ServerRSS > 0 })
	fmt.Fprintf(&b, "%-12s %8s %7s %10s %12s %10s %10s %10s", "phase", "ops", "errors", "seconds", "ops/s", "p50", "p99", "max")
	if cpu {
		fmt.Fprintf(&b, " %14s", "server cpu/op")
	}
	if mem {
		fmt.Fprintf(&b, " %12s %12s", "server rss", "peak rss")
	}
	b.WriteString("\n")
	for _, p := range phases {
		fmt.Fprintf(&b, "%-12s %8d %7d %10.2f %12.0f %10s %10s %10s", p.Name, p.Ops, p.Errors, p.Duration.Seconds(), p.PerSecond,
			round(p.P50), round(p.P99), round(p.Max))
		if cpu {
			fmt.Fprintf(&b, " %14s", p.ServerCPUPerOp.Round(100*time.Nanosecond))
		}
		if mem {
			fmt.Fprintf(&b, " %12s %12s", mebibytes(p.ServerRSS), mebibytes(p.ServerPeakRSS))
		}
		b.WriteString("\n")
	}
	for _, p := range phases {
		if p.FirstError != "" {
			fmt.Fprintf(&b, "first error in %s: %s\n", p.Name, p.FirstError)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mebibytes formats n bytes in MiB ("-" for none).
func mebibytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// WriteComparison prints, phase by phase, the registry against etcd from one run: throughput
// and its ratio, p99 latencies, and the servers' CPU per operation when their pids were
// given ("etcd cpu ÷ registry cpu" says how many times less CPU the registry spent).
func WriteComparison(w io.Writer, rep *RegistryReport) error {
	if rep.Etcd == nil {
		return errors.New("no etcd run in the report")
	}
	etcd := map[string]Phase{}
	for _, p := range rep.Etcd.Phases {
		etcd[p.Name] = p
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %12s %12s %14s %10s %10s %14s %14s %10s\n", "phase", "registry/s", "etcd/s", "registry/etcd",
		"p99 reg", "p99 etcd", "cpu/op reg", "cpu/op etcd", "cpu ratio")
	for _, r := range rep.Phases {
		e, ok := etcd[r.Name]
		if !ok {
			continue
		}
		rs, es, rr := strconv.FormatFloat(r.PerSecond, 'f', 0, 64), strconv.FormatFloat(e.PerSecond, 'f', 0, 64), ratio(r.PerSecond, e.PerSecond)
		if r.Name == "propagation" { // sequential, with pauses to arm the watcher: no throughput
			rs, es, rr = "-", "-", "-"
		}
		fmt.Fprintf(&b, "%-12s %12s %12s %14s %10s %10s %14s %14s %10s\n", r.Name, rs, es, rr,
			round(r.P99), round(e.P99), cpuPerOp(r), cpuPerOp(e), ratio(float64(e.ServerCPUPerOp), float64(r.ServerCPUPerOp)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

func cpuPerOp(p Phase) string {
	if p.ServerCPUPerOp <= 0 {
		return "-"
	}
	return p.ServerCPUPerOp.Round(100 * time.Nanosecond).String()
}
