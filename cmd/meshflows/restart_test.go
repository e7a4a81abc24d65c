package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/freeport"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestRestartWithTheSameFlags runs one supervisor command line three times: the first start
// has no snapshot (it starts empty and says so), takes one, and stops; the second restores it
// and is stopped inside its warm-up; the third must still restore the first run's state — the
// second may not have replaced the newest snapshot with one taken before every provider was
// back (it used to overwrite it with an empty one a second after start).
func TestRestartWithTheSameFlags(t *testing.T) {
	dir := t.TempDir()
	port := strconv.Itoa(freeport.Port(t))
	base := "http://127.0.0.1:" + port
	args := []string{"registry", "--insecure", "--listen", "127.0.0.1:" + port, "--lease-ttl", "3s", "--heartbeat-interval", "1s",
		"--snapshot-dir", dir, "--snapshot-interval", "50ms", "--restore-snapshot", "auto", "--no-eligibility"}
	start := func() (stop func() string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan string, 1)
		go func() {
			out, err := run(ctx, args...)
			if err != nil {
				out += "\nerror: " + err.Error()
			}
			done <- out
		}()
		registrytest.Until(t, "the registry serving", func() bool {
			resp, err := http.Get(base + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
		return func() string { cancel(); return <-done }
	}
	catalog := func() (c apiv1.CatalogResponse) {
		t.Helper()
		resp, err := http.Get(base + "/v1/services")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&c)
		return c
	}

	stop := start()
	body := `{"instance_id":"jms-1","service_name":"egress-jms","service_version":"1.0.0","endpoint":"http://127.0.0.1:1",
		"capabilities":[{"capability_id":"messaging.publish","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"jms"}]}`
	resp, err := http.Post(base+"/v1/services/register", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("register: %v %v", resp, err)
	}
	var registered apiv1.RegisterResponse
	json.NewDecoder(resp.Body).Decode(&registered)
	resp.Body.Close()
	beat := func() {
		t.Helper()
		hb, _ := http.NewRequest(http.MethodPut, base+"/v1/services/jms-1/heartbeat",
			strings.NewReader(`{"generation":`+strconv.FormatInt(registered.Generation, 10)+`}`))
		r, err := http.DefaultClient.Do(hb)
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("heartbeat: %v %v", r, err)
		}
		r.Body.Close()
	}
	registrytest.Until(t, "the warm-up over", func() bool {
		beat() // the provider stays alive meanwhile
		r, err := http.Get(base + "/v1/discovery/capabilities")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		var d apiv1.DiscoveryResponse
		json.NewDecoder(r.Body).Decode(&d)
		return d.Complete
	})
	// A heartbeat now, then a snapshot after it: the snapshot holds jms-1 with most of a
	// lease left (a restore gives it what it had left).
	newest := func() string {
		if fs := snapshotFiles(t, dir); len(fs) > 0 {
			return fs[len(fs)-1]
		}
		return ""
	}
	before := newest()
	beat()
	registrytest.Until(t, "a snapshot written after the heartbeat", func() bool { return newest() != before })
	if out := stop(); !strings.Contains(out, "no valid snapshot to restore: starting empty") {
		t.Errorf("first start did not say it started empty:\n%s", out)
	}
	files := snapshotFiles(t, dir)
	var first struct {
		Epoch string `json:"registry_epoch"`
	}
	readJSON(t, files[len(files)-1], &first)

	stop = start()
	c := catalog()
	if len(c.Instances) != 1 || !c.Instances[0].Restored || c.RegistryEpoch == first.Epoch {
		t.Fatalf("second start: %+v, want jms-1 restored in a new epoch (the snapshot's was %s)", c, first.Epoch)
	}
	if out := stop(); !strings.Contains(out, "snapshot restored") {
		t.Errorf("second start did not say it restored:\n%s", out)
	}

	stop = start()
	if c := catalog(); len(c.Instances) != 1 || c.Instances[0].InstanceID != "jms-1" {
		t.Fatalf("third start lost the state: %+v", c)
	}
	stop()
	for _, f := range snapshotFiles(t, dir) {
		var s struct {
			InstanceCount int `json:"instance_count"`
		}
		readJSON(t, f, &s)
		if s.InstanceCount != 1 {
			t.Errorf("snapshot %s holds %d instances: one was taken before the provider was back", f, s.InstanceCount)
		}
	}
}

// snapshotFiles returns the snapshot files in dir, oldest first.
func snapshotFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "meshflows-registry-snapshot-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
