// Package drill runs the failure classes on a throwaway loopback stack and measures, from
// outside, how long each took to catch and what it cost: the stack it starts (Start), the
// fault proxies in front of its providers, a load generator through its gateways, observers
// of every consumer's view (the gateways' routes, DNS answers, an xDS stream), and the
// classes themselves (Classes). 'meshflows drill' is its command.
package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshflows/meshflows/internal/deadline"
)

// Config configures a drill.
type Config struct {
	// Executable is the meshflows binary every process of the stack runs; Env is added to
	// the environment of each.
	Executable string
	Env        []string
	// BasePort is the first port of the stack's plan (50 ports on 127.0.0.1).
	BasePort int
	// Store is memory (default) or etcd, with EtcdEndpoints.
	Store, EtcdEndpoints string
	// Classes to run (default all, in order); Trials per class (0: the class's default,
	// which Quick lowers).
	Classes []int
	Trials  int
	Quick   bool
	// Outage is how long class 8 keeps the registry down (default 15 min, 2 min quick).
	Outage time.Duration
	// LeaseTTL and HeartbeatInterval of the registry (defaults 90 s and 30 s; quick 20 s and 5 s).
	LeaseTTL, HeartbeatInterval time.Duration
	// Rate is requests a second per gateway (default 50).
	Rate int
	// Keep leaves the stack's directory (certificates, logs, audit log) in place.
	Keep bool
	// Progress gets a line per trial (nil: none).
	Progress io.Writer
	Logger   *slog.Logger
}

// Validate checks c and fills its defaults.
func (c *Config) Validate() error {
	if c.Executable == "" {
		return errors.New("drill: no meshflows executable")
	}
	if c.BasePort == 0 {
		c.BasePort = 7700
	}
	if c.Store == "" {
		c.Store = "memory"
	}
	if c.Store != "memory" && c.Store != "etcd" {
		return fmt.Errorf("drill: store %q: want memory or etcd", c.Store)
	}
	if len(c.Classes) == 0 {
		for _, k := range Classes {
			c.Classes = append(c.Classes, k.Number)
		}
	}
	for _, n := range c.Classes {
		if classByNumber(n) == nil {
			return fmt.Errorf("drill: no class %d (1..%d)", n, len(Classes))
		}
	}
	if c.Trials < 0 {
		return fmt.Errorf("drill: %d trials", c.Trials)
	}
	if c.Outage == 0 {
		c.Outage = 15 * time.Minute
		if c.Quick {
			c.Outage = 2 * time.Minute
		}
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL, c.HeartbeatInterval = 90*time.Second, 30*time.Second
		if c.Quick {
			c.LeaseTTL, c.HeartbeatInterval = 20*time.Second, 5*time.Second
		}
	}
	if c.HeartbeatInterval == 0 || c.HeartbeatInterval >= c.LeaseTTL {
		return fmt.Errorf("drill: heartbeat interval %s must be set and shorter than the lease TTL %s", c.HeartbeatInterval, c.LeaseTTL)
	}
	if c.Rate == 0 {
		c.Rate = 50
	}
	if c.Rate < 0 {
		return fmt.Errorf("drill: rate %d", c.Rate)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Trial is one injection of a class and what was measured.
type Trial struct {
	// Measured is the figure the bound is about (seconds, or a count), Value its text.
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	// Failed counts the load's requests that failed during the trial (5xx or no answer).
	Failed int `json:"failed_requests"`
	Sent   int `json:"sent_requests"`
	// Held says the trial kept the bound; Note says what else was seen.
	Held bool   `json:"held"`
	Note string `json:"note,omitempty"`
}

// Row is one class's result.
type Row struct {
	Class  int     `json:"class"`
	Name   string  `json:"name"`
	Bound  string  `json:"bound"`
	Trials []Trial `json:"trials"`
	// Alarm is the alarm that fired first during the class (action and alert, seconds after
	// the first fault), Expected the action the class should raise ("" none).
	Alarm         string  `json:"alarm,omitempty"`
	AlarmSeconds  float64 `json:"alarm_seconds,omitempty"`
	ExpectedAlarm string  `json:"expected_alarm,omitempty"`
	// Verdict is ok (every trial held its bound) or short; Why says what fell short.
	Verdict string `json:"verdict"`
	Why     string `json:"why,omitempty"`
	// Missing names the mechanism that does not exist yet, when the class waits for one.
	Missing string  `json:"missing,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Report is a whole drill.
type Report struct {
	Started  time.Time `json:"started"`
	Quick    bool      `json:"quick"`
	Store    string    `json:"store"`
	Rate     int       `json:"rate_per_gateway"`
	LeaseTTL string    `json:"lease_ttl"`
	// Prometheus says whether alarms were watched (a Prometheus was installed).
	Prometheus bool    `json:"prometheus"`
	Rows       []Row   `json:"rows"`
	Seconds    float64 `json:"seconds"`
}

// Held reports whether every row kept its bound, ignoring the classes in short.
func (r Report) Held(expectShort []int) bool {
	for _, row := range r.Rows {
		if row.Verdict != "ok" && !slices.Contains(expectShort, row.Class) {
			return false
		}
	}
	return true
}

// drill is one run: the stack, its observers and load, and the settings.
type drill struct {
	cfg    Config
	s      *Stack
	obs    *Observer
	load   *Load
	alarms *alarms
	// classTrials is how many trials the class running runs
	classTrials int
}

// Run starts the stack, runs the classes of cfg in order and stops everything it started,
// on any exit. It refuses to run when cfg is invalid.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	rep := Report{Started: time.Now().UTC(), Quick: cfg.Quick, Store: cfg.Store, Rate: cfg.Rate, LeaseTTL: cfg.LeaseTTL.String()}
	d := &drill{cfg: cfg}
	d.progress("starting the stack: registry (mTLS, RBAC), 2 gateways, dns, xds, orchestrator, 15 providers behind fault proxies")
	s, err := Start(ctx, cfg)
	if err != nil {
		return rep, err
	}
	d.s = s
	defer s.Close()
	rep.Prometheus = s.Prometheus != ""
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	d.obs = newObserver(s)
	d.load = newLoad(s, cfg.Rate)
	d.alarms = newAlarms(s)
	wg.Go(func() { d.obs.Run(runCtx) })
	wg.Go(func() { d.load.Run(runCtx) })
	wg.Go(func() { d.alarms.Run(runCtx) })
	if err := d.waitSteady(ctx); err != nil {
		return rep, err
	}
	d.progress("stack ready: every instance in rotation at both gateways, DNS and xDS")
	for _, n := range cfg.Classes {
		k := classByNumber(n)
		start := time.Now()
		row := Row{Class: k.Number, Name: k.Name, Bound: k.bound(cfg), ExpectedAlarm: k.Alarm, Missing: k.Missing}
		trials := cfg.Trials
		if trials == 0 {
			trials = k.Trials
			if cfg.Quick {
				trials = min(trials, k.QuickTrials)
			}
		}
		d.classTrials = trials
		for i := range trials {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			t, err := k.Run(ctx, d, i)
			if err != nil {
				t = Trial{Note: "could not run: " + err.Error()}
			}
			row.Trials = append(row.Trials, t)
			d.progress("class %d %s, trial %d/%d: %s", k.Number, k.Name, i+1, trials, t.line())
		}
		row.Alarm, row.AlarmSeconds = d.alarms.first(start, k.Alarm, k.AlarmAlert)
		row.Seconds = time.Since(start).Seconds()
		row.judge(rep.Prometheus)
		rep.Rows = append(rep.Rows, row)
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// judge sets the row's verdict from its trials and its alarm.
func (r *Row) judge(watched bool) {
	r.Verdict = "ok"
	held := 0
	for _, t := range r.Trials {
		if t.Held {
			held++
		}
	}
	if held < len(r.Trials) || len(r.Trials) == 0 {
		r.Verdict = "short"
		r.Why = fmt.Sprintf("%d of %d trials kept the bound", held, len(r.Trials))
	}
	if !watched {
		return
	}
	switch {
	case r.ExpectedAlarm != "" && r.Alarm == "":
		r.Verdict, r.Why = "short", joinWhy(r.Why, "no alarm fired, want "+r.ExpectedAlarm)
	case r.ExpectedAlarm != "" && !strings.HasPrefix(r.Alarm, r.ExpectedAlarm):
		r.Verdict, r.Why = "short", joinWhy(r.Why, "alarm "+r.Alarm+", want "+r.ExpectedAlarm)
	}
}

func joinWhy(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func (t Trial) line() string {
	s := fmt.Sprintf("%.2f %s, %d of %d requests failed", t.Measured, t.Unit, t.Failed, t.Sent)
	if !t.Held {
		s += " — bound missed"
	}
	if t.Note != "" {
		s += " (" + t.Note + ")"
	}
	return s
}

func (d *drill) progress(format string, args ...any) {
	if d.cfg.Progress != nil {
		fmt.Fprintf(d.cfg.Progress, time.Now().Format("15:04:05")+" "+format+"\n", args...)
	}
}

// waitSteady waits until every instance is in rotation at every consumer.
func (d *drill) waitSteady(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		all := true
		for _, in := range d.s.Instances {
			if _, in, _ := d.obs.state(in.ID); !in {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			d.obs.mu.Lock()
			errs := fmt.Sprint(d.obs.errs)
			d.obs.mu.Unlock()
			return fmt.Errorf("the stack did not put every instance in rotation at every consumer within 3 minutes (observer errors: %s; logs in %s)", errs, d.s.Dir())
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// sleep waits d or until ctx ends (then its error).
var sleep = deadline.Sleep
