package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/freeport"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/testtool"
)

// TestRealPrometheusScrapesTheStack starts Debian's Prometheus on loopback against
// 'meshflows dev', with the repository's alert rules loaded, and asks its HTTP API for a
// registry and a provider metric: the metrics reach a real backend in the shape it accepts.
func TestRealPrometheusScrapesTheStack(t *testing.T) {
	bin := testtool.Need(t, "apt-get install prometheus; .ci/run installs it", "prometheus")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := startDev(t, ctx)
	defer func() { cancel(); <-done }()

	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: meshflows-registry
    static_configs: [{targets: ["127.0.0.1:%d"]}]
  - job_name: meshflows-gateway
    static_configs: [{targets: ["127.0.0.1:%d"]}]
  - job_name: meshflows-provider
    static_configs: [{targets: ["127.0.0.1:%d", "127.0.0.1:%d"]}]
`, rules, base+devRegistryOffset, base+devGatewayOffset, base+devProviderOffsetJMS, base+devProviderOffsetRMQ)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr, "--log.level=warn")
	logs, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", out)
		}
	}()

	query := func(q string) (float64, bool) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data.Result) == 0 {
			return 0, false
		}
		s, _ := body.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		return v, err == nil
	}
	for _, tc := range []struct {
		query string
		want  float64
	}{
		{`meshflows_registry_active_instances{job="meshflows-registry"}`, 2},
		{`sum(meshflows_provider_registry_register_success_total{job="meshflows-provider"})`, 2},
		{`count(up{job=~"meshflows-.*"} == 1)`, 4},
	} {
		registrytest.Until(t, fmt.Sprintf("Prometheus answers %s == %v", tc.query, tc.want), func() bool { v, ok := query(tc.query); return ok && v == tc.want })
	}
	// every dashboard panel's query and every runbook's PromQL is accepted by Prometheus
	accepts := func(where, q string) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
			t.Errorf("%s: Prometheus refuses %q: %s %v", where, q, body.Error, err)
		}
	}
	for file, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				accepts(fmt.Sprintf("%s, panel %q", file, p.Title), q.Expr)
			}
		}
	}
	pages, _ := filepath.Glob(filepath.Join("..", "..", "docs", "runbooks", "*.md"))
	promql := regexp.MustCompile("(?s)```promql\n(.*?)```")
	n := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range promql.FindAllStringSubmatch(string(raw), -1) {
			for _, q := range strings.Split(strings.TrimSpace(block[1]), "\n") {
				accepts(filepath.Base(page), q)
				n++
			}
		}
	}
	if n == 0 {
		t.Error("no PromQL found in docs/runbooks")
	}
	// every alert rule loaded and evaluates without error against the real series
	registrytest.Until(t, "every alert rule evaluates healthy", func() bool {
		resp, err := http.Get("http://" + promAddr + "/api/v1/rules?type=alert")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name   string `json:"name"`
						Health string `json:"health"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false
		}
		n := 0
		for _, g := range body.Data.Groups {
			for _, r := range g.Rules {
				if r.Health != "ok" {
					return false
				}
				n++
			}
		}
		return n > 0
	})
}
