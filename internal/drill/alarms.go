package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	promdeploy "github.com/meshflows/meshflows/deploy/prometheus"
)

// startPrometheus starts a Prometheus, when one is installed, scraping every process of the
// stack every 2 s with the alert rules of deploy/prometheus, so the drill sees which
// alarm each class raises.
func (s *Stack) startPrometheus(ctx context.Context) error {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil // no alarms watched; the report says so
	}
	dir := filepath.Join(s.dir, "prometheus")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), promdeploy.Alerts, 0o600); err != nil {
		return err
	}
	tlsCfg := fmt.Sprintf("    scheme: https\n    tls_config: {ca_file: %q, cert_file: %q, key_file: %q}\n", s.cert("ca"), s.cert("prometheus"), s.key("prometheus"))
	var providers []string
	for _, in := range s.Instances {
		providers = append(providers, fmt.Sprintf("%q", fmt.Sprintf("127.0.0.1:%d", in.port)))
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 1s}
rule_files: [alerts.yml]
scrape_configs:
  - job_name: meshflows-registry
    static_configs: [{targets: [%q]}]
%s  - job_name: meshflows-gateway
    static_configs: [{targets: [%q, %q]}]
%s  - job_name: meshflows-orchestrator
    static_configs: [{targets: [%q]}]
%s  - job_name: meshflows-dns
    static_configs: [{targets: [%q]}]
  - job_name: meshflows-xds
    static_configs: [{targets: [%q]}]
  - job_name: meshflows-provider
    static_configs: [{targets: [%s]}]
`, s.addr(portRegistry), tlsCfg, s.addr(portGateway), s.addr(portGateway+1), tlsCfg, s.addr(portOrchestrator), tlsCfg,
		s.addr(portDNSMetrics), s.addr(portXDSMetrics), strings.Join(providers, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(s.dir, "prometheus.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+s.addr(portPrometheus), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start prometheus: %w", err)
	}
	p := &process{name: "prometheus", cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.Prometheus = "http://" + s.addr(portPrometheus)
	return s.waitReady(ctx, p, s.Prometheus+"/-/ready")
}

// firing is an alert the drill saw fire.
type firing struct {
	at     time.Time
	name   string
	action string
}

// alarms polls the stack's Prometheus for firing alerts.
type alarms struct {
	s    *Stack
	mu   sync.Mutex
	seen map[string]bool   // alert name + labels, firing now or before
	now  map[string]firing // firing now, by the same key (since when, first seen)
	log  []firing
}

func newAlarms(s *Stack) *alarms {
	return &alarms{s: s, seen: map[string]bool{}, now: map[string]firing{}}
}

// Run polls every second until ctx ends (at once when no Prometheus runs).
func (a *alarms) Run(ctx context.Context) error {
	if a.s.Prometheus == "" {
		return nil
	}
	for sleep(ctx, time.Second) == nil {
		a.poll(ctx)
	}
	return nil
}

func (a *alarms) poll(ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.s.Prometheus+"/api/v1/alerts", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var ans struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&ans) != nil {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	firingNow := map[string]bool{}
	for _, al := range ans.Data.Alerts {
		if al.State != "firing" {
			continue
		}
		keys := make([]string, 0, len(al.Labels))
		for k, v := range al.Labels {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		key := strings.Join(keys, ",")
		firingNow[key] = true
		if !a.seen[key] {
			a.seen[key] = true
			f := firing{at: now, name: al.Labels["alertname"], action: al.Labels["action"]}
			a.log = append(a.log, f)
			a.now[key] = f
		}
	}
	for k := range a.seen { // resolved: a later firing counts again
		if !firingNow[k] {
			delete(a.seen, k)
			delete(a.now, k)
		}
	}
}

// first is the first alarm of action want that fired after start, or alert firing since
// before, or else the first of any action: "action (alert)", and seconds after start.
func (a *alarms) first(start time.Time, want, alert string) (string, float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var any *firing
	for i, f := range a.log {
		if !f.at.After(start) {
			continue
		}
		if want != "" && f.action == want {
			return f.action + " (" + f.name + ")", f.at.Sub(start).Seconds()
		}
		if any == nil {
			any = &a.log[i]
		}
	}
	if want != "" {
		for _, f := range a.now {
			if f.action == want && f.name == alert { // firing since before the class, and still
				return f.action + " (" + f.name + ", firing since before)", 0
			}
		}
	}
	if any == nil {
		return "", 0
	}
	return any.action + " (" + any.name + ")", any.at.Sub(start).Seconds()
}

// await waits, at most limit, until an alarm of action fires after since, or alert (of that
// action) is firing, from before (at once when no Prometheus runs), and says after how long
// ("" when none did).
func (a *alarms) await(ctx context.Context, action, alert string, since time.Time, limit time.Duration) string {
	if a.s.Prometheus == "" {
		return ""
	}
	for end := time.Now().Add(limit); time.Now().Before(end); {
		a.mu.Lock()
		for _, f := range a.log {
			if f.at.After(since) && f.action == action {
				a.mu.Unlock()
				return fmt.Sprintf("%s (%s) after %.0f s", f.action, f.name, f.at.Sub(since).Seconds())
			}
		}
		// an alert grouped by component (quarantines, outliers) may already fire for an
		// earlier instance: it covers this one too
		for _, f := range a.now {
			if f.action == action && f.name == alert {
				a.mu.Unlock()
				return fmt.Sprintf("%s (%s, firing since before)", f.action, f.name)
			}
		}
		a.mu.Unlock()
		if sleep(ctx, 500*time.Millisecond) != nil {
			break
		}
	}
	return ""
}
