package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// alertRules is the part of a Prometheus rule file the checks below read.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

const runbookBase = "https://github.com/meshflows/meshflows/blob/main/"

// TestAlertRulesMatchTheStack: every metric an alert queries is exported by the running
// product, and every alert explains itself and links a runbook page that exists.
// (promtool checks the rules' syntax and behaviour; .ci/run runs it.)
func TestAlertRulesMatchTheStack(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}

	exported := devMetricNames(t)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			t.Run(r.Alert, func(t *testing.T) {
				for _, m := range metricName.FindAllString(r.Expr, -1) {
					if !exported[m] && !outlierOnly[m] {
						t.Errorf("queries %s, which no component of meshflows dev exports", m)
					}
				}
				if !alarmActions[r.Labels["action"]] {
					t.Errorf("action label %q: want one of the four alarms (page-withdrawal, page-capacity, ticket-owner, page-authority)", r.Labels["action"])
				}
				for _, a := range []string{"summary", "description", "runbook_url"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("no %s annotation", a)
					}
				}
				page, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
				if !ok {
					t.Fatalf("runbook_url %q is not under %s", r.Annotations["runbook_url"], runbookBase)
				}
				body, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
				if err != nil {
					t.Fatalf("runbook page: %v", err)
				}
				if !strings.Contains(string(body), r.Alert) {
					t.Errorf("%s does not mention the alert", page)
				}
			})
		}
	}
	if n == 0 {
		t.Fatal("alerts.yml holds no rules")
	}
}

// alarmActions are the four actions an alert's action label names: what the one it reaches
// does, and who that is (docs/failure-classes.md).
var alarmActions = map[string]bool{"page-withdrawal": true, "page-capacity": true, "ticket-owner": true, "page-authority": true}

// outlierOnly are the metrics a healthy dev stack does not export: the gauges that have
// series only while something is an outlier (the server tests
// TestAReplicaFailingFourPercentIsEjectedAndCounted and TestAZoneFailingAsAWholeIsReported
// gather them), and the certificates' (dev runs open; TestTheRegistryRotatesItsCertificate…
// reads them from a registry in mTLS), and kube-sync's, a binary of its own
// (TestTheAlertsQueryWhatTheSyncerExports in internal/kubesync checks them), and the
// routing control's, which only a regional consumer exports (internal/routingcontrol's
// TestWatcherKeepsTheLastSignalWithoutQuorum gathers it).
var outlierOnly = map[string]bool{"meshflows_routing_control_stale": true, "meshflows_outlier_instances": true, "meshflows_zone_outlier_error_share": true,
	"meshflows_certificate_expiry_timestamp_seconds": true, "meshflows_certificate_reload_failures_total": true,
	"meshflows_kubesync_last_reconcile_timestamp_seconds": true}

// metricName matches the MeshFlows metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\bmeshflows_[a-z_]+\b`)

// devMetricNames runs 'meshflows dev', waits until a request went through its gateway and its
// example workflow ran (so that every labelled series exists), and returns the names its
// registry, orchestrator, gateway and a provider expose.
func devMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base) // the gateway and the workflow have served once: their series exist
	// validated again now that both providers are registered, so that they are asked
	revalidate := "http://127.0.0.1:" + strconv.Itoa(base+devOrchestratorOffset) + "/v1/workflows/order-publish/validate"
	resp, err := http.Post(revalidate, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	exported := map[string]bool{}
	for _, off := range []int{devRegistryOffset, devOrchestratorOffset, devGatewayOffset, devDNSMetricsOffset, devProviderOffsetJMS} {
		for name := range scrapeNames(t, "http://127.0.0.1:"+strconv.Itoa(base+off)+"/metrics") {
			exported[name] = true
		}
	}
	return exported
}

// scrapeNames returns the metric and series names a /metrics endpoint exposes (a histogram
// by its name and by its _bucket, _sum and _count series).
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		} else if line != "" && !strings.HasPrefix(line, "#") {
			names[line[:strings.IndexAny(line+" ", "{ ")]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
