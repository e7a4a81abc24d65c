package drill

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/google/go-cmp/cmp"

	promdeploy "github.com/meshflows/meshflows/deploy/prometheus"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    string // error substring; "" valid
		outage  time.Duration
		leaseTT time.Duration
	}{
		{"defaults", Config{Executable: "mf"}, "", 15 * time.Minute, 90 * time.Second},
		{"quick", Config{Executable: "mf", Quick: true}, "", 2 * time.Minute, 20 * time.Second},
		{"no executable", Config{}, "executable", 0, 0},
		{"unknown class", Config{Executable: "mf", Classes: []int{13}}, "no class 13", 0, 0},
		{"unknown store", Config{Executable: "mf", Store: "consul"}, "store", 0, 0},
		{"heartbeat not under the lease", Config{Executable: "mf", LeaseTTL: time.Second, HeartbeatInterval: time.Second}, "shorter", 0, 0},
		{"negative trials", Config{Executable: "mf", Trials: -1}, "trials", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err %v, want one saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.cfg.Outage != tt.outage || tt.cfg.LeaseTTL != tt.leaseTT || len(tt.cfg.Classes) != 12 || tt.cfg.Rate != 50 {
				t.Errorf("defaults: %+v", tt.cfg)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	held, missed := Trial{Held: true}, Trial{}
	tests := []struct {
		name    string
		row     Row
		watched bool
		verdict string
		why     string
	}{
		{"every trial held", Row{Trials: []Trial{held, held}}, false, "ok", ""},
		{"one missed", Row{Trials: []Trial{held, missed}}, false, "short", "1 of 2 trials kept the bound"},
		{"none run", Row{}, false, "short", "0 of 0 trials kept the bound"},
		{"the alarm it needs fired", Row{Trials: []Trial{held}, ExpectedAlarm: "page-capacity", Alarm: "page-capacity (MeshFlowsZoneOutlier)"}, true, "ok", ""},
		{"no alarm", Row{Trials: []Trial{held}, ExpectedAlarm: "ticket-owner"}, true, "short", "no alarm fired, want ticket-owner"},
		{"the wrong alarm", Row{Trials: []Trial{held}, ExpectedAlarm: "page-capacity", Alarm: "ticket-owner (MeshFlowsInstanceQuarantined)"}, true, "short",
			"alarm ticket-owner (MeshFlowsInstanceQuarantined), want page-capacity"},
		{"alarms not watched", Row{Trials: []Trial{held}, ExpectedAlarm: "ticket-owner"}, false, "ok", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.row.judge(tt.watched)
			if tt.row.Verdict != tt.verdict || tt.row.Why != tt.why {
				t.Errorf("verdict %q why %q, want %q %q", tt.row.Verdict, tt.row.Why, tt.verdict, tt.why)
			}
		})
	}
}

func TestHeldWithExpectedShortRows(t *testing.T) {
	r := Report{Rows: []Row{{Class: 1, Verdict: "ok"}, {Class: 7, Verdict: "short"}}}
	if r.Held(nil) {
		t.Error("a short row held the run")
	}
	if !r.Held([]int{7}) {
		t.Error("a short row listed in --expect-short failed the run")
	}
	if r.Held([]int{5}) {
		t.Error("a short row not listed held the run")
	}
}

// TestTable: the table of docs/failure-classes.md (golden; -update rewrites it).
func TestTable(t *testing.T) {
	rep := Report{Store: "memory", LeaseTTL: "20s", Rate: 50, Seconds: 512, Prometheus: true, Rows: []Row{
		{Class: 1, Name: "crash, port closed", Bound: "out ≤ 2 s", Verdict: "ok",
			Trials: []Trial{{Measured: 0.41, Unit: "s", Sent: 100, Held: true}, {Measured: 0.88, Unit: "s", Sent: 100, Held: true}, {Measured: 1.12, Unit: "s", Failed: 1, Sent: 100, Held: true}}},
		{Class: 7, Name: "zombie registration", Bound: "out ≤ 25s", Verdict: "short", Why: "0 of 1 trials kept the bound", Missing: "the probe checking the instance's identity",
			Trials: []Trial{{Measured: 16.2, Unit: "s", Sent: 1620}}},
		{Class: 8, Name: "control-plane outage", Bound: "0 failed", Verdict: "ok", Alarm: "page-authority (MeshFlowsRegistryDown)", AlarmSeconds: 62,
			Trials: []Trial{{Measured: 0, Unit: "failed", Sent: 12000, Held: true}}},
	}}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, b.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestEveryClassIsDefined: twelve classes, numbered in order, each with a bound and a run.
func TestEveryClassIsDefined(t *testing.T) {
	if len(Classes) != 12 {
		t.Fatalf("%d classes, want 12", len(Classes))
	}
	cfg := Config{Executable: "mf", Quick: true}
	cfg.Validate()
	for i, k := range Classes {
		if k.Number != i+1 || k.Name == "" || k.Run == nil || k.bound == nil || k.bound(cfg) == "" || k.Trials < 1 || k.QuickTrials < 1 {
			t.Errorf("class %d: %+v", i+1, k)
		}
		if k.Alarm != "" && !map[string]bool{"page-withdrawal": true, "page-capacity": true, "ticket-owner": true, "page-authority": true}[k.Alarm] {
			t.Errorf("class %d expects alarm %q, not one of the four actions", k.Number, k.Alarm)
		}
	}
}

// TestTheAlarmsTheClassesWaitForExist: each alert a class waits for is in alerts.yml with the
// action the class must raise.
func TestTheAlarmsTheClassesWaitForExist(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(promdeploy.Alerts, &rules); err != nil {
		t.Fatal(err)
	}
	actions := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			actions[r.Alert] = r.Labels["action"]
		}
	}
	for _, k := range Classes {
		if (k.Alarm == "") != (k.AlarmAlert == "") {
			t.Errorf("class %d: alarm %q, alert %q: both or neither", k.Number, k.Alarm, k.AlarmAlert)
		}
		if k.AlarmAlert != "" && actions[k.AlarmAlert] != k.Alarm {
			t.Errorf("class %d waits for %s, whose action is %q in alerts.yml, want %q", k.Number, k.AlarmAlert, actions[k.AlarmAlert], k.Alarm)
		}
	}
}
