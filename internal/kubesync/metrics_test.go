package kubesync

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTheAlertsQueryWhatTheSyncerExports: every meshflows_kubesync_ series an alert rule
// queries is one the syncer registers.
func TestTheAlertsQueryWhatTheSyncerExports(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.instances.WithLabelValues("ready").Set(1)
	m.reconcile.Observe(0.1)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\bmeshflows_kubesync_[a-z_]+\b`).FindAllString(string(raw), -1)
	if len(names) == 0 {
		t.Fatal("no alert queries the syncer")
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("an alert queries %s, which the syncer does not export (it does: %v)", n, exported)
		}
	}
}
