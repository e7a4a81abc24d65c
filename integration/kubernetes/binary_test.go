package kubernetes_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshflows/meshflows/internal/freeport"
)

// writeKubeconfig writes a kubeconfig for cfg (the test API server's loopback identity).
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority-data: %s, tls-server-name: %q}
users:
- name: test
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), cfg.ServerName, cfg.BearerToken)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// replica is one meshflows-kube-sync process.
type replica struct {
	name    string
	cmd     *exec.Cmd
	metrics string
	exited  chan error
}

// metric returns the value of the series named exactly (name{labels}) on its /metrics, or -1.
func (r *replica) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get(r.metrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

// TestTheBinaryElectsOneLeaderAndHandsOver runs two meshflows-kube-sync processes, as the
// Deployment does, against the API server and a registry: one leads and registers the pods,
// the other stands by; stopped (SIGTERM), the leader releases the Lease and the other takes
// over, adopting the instances with their generations.
func TestTheBinaryElectsOneLeaderAndHandsOver(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "meshflows-kube-sync")
	build := exec.Command("go", "build", "-o", bin, "github.com/meshflows/meshflows/cmd/meshflows-kube-sync")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c := startCluster(t)
	m := startRegistry(t)
	ctx := context.Background()
	for _, ns := range []string{"shop", "meshflows"} {
		if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := writeKubeconfig(t, c.config)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("kube-sync\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(name string) *replica {
		port := freeport.Port(t)
		r := &replica{name: name, metrics: "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics", exited: make(chan error, 1)}
		r.cmd = exec.Command(bin, "--kubeconfig", kubeconfig, "--namespace", "shop", "--registry", m.url, "--registry-token-file", token,
			"--identity", "kube-sync", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--lease-namespace", "meshflows", "--replica-id", name,
			"--lease-duration", "5s", "--lease-retry", "200ms", "--log-format", "text")
		stderr, err := r.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			b, _ := io.ReadAll(stderr)
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				t.Logf("%s: %s", name, line)
			}
			r.exited <- r.cmd.Wait()
		}()
		t.Cleanup(func() {
			if r.cmd.ProcessState == nil {
				_ = r.cmd.Process.Kill()
			}
		})
		return r
	}
	eventually := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		begin := time.Now()
		for !cond() {
			if time.Since(begin) > within {
				t.Fatalf("not within %s: %s", within, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(begin)
	}

	a := start("replica-a")
	eventually("replica-a leads", 10*time.Second, func() bool { return a.metric(t, "meshflows_kubesync_leader") == 1 })
	b := start("replica-b")
	eventually("replica-b serves its metrics", 10*time.Second, func() bool { return b.metric(t, "meshflows_kubesync_leader") == 0 })

	k := kubeWrites{t: t, kube: c.kube}
	k.applyService(orders(nil))
	k.applySlice(slice("orders", "orders-a", ready("orders-a1"), notReady("orders-a2")))
	m.await(t, "the leader registers the pods", []string{"shop.orders-a1 ok kube-sync", "shop.orders-a2 not_ready kube-sync"})
	eventually("its metrics count them", 2*time.Second, func() bool {
		return a.metric(t, `meshflows_kubesync_instances{state="ready"}`) == 1 && a.metric(t, `meshflows_kubesync_instances{state="not_ready"}`) == 1
	})
	if b.metric(t, "meshflows_kubesync_leader") != 0 {
		t.Fatal("two leaders")
	}
	for _, r := range []*replica{a, b} {
		if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid)); err == nil {
			for _, line := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(line, "VmRSS:") {
					t.Logf("%s: %s", r.name, strings.Join(strings.Fields(line), " "))
				}
			}
		}
	}
	_, before := m.state()

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if err := <-a.exited; err != nil {
		t.Errorf("replica-a on SIGTERM: %v", err)
	}
	took := eventually("replica-b takes over", 5*time.Second, func() bool { return b.metric(t, "meshflows_kubesync_leader") == 1 })
	t.Logf("replica-b leads %d ms after replica-a was stopped (%d ms after it exited)", time.Since(stopped).Milliseconds(), took.Milliseconds())
	k.applySlice(slice("orders", "orders-a", ready("orders-a1"), ready("orders-a2")))
	m.await(t, "the new leader applies the next change", []string{"shop.orders-a1 ok kube-sync", "shop.orders-a2 ok kube-sync"})
	_, after := m.state()
	for id, g := range before {
		if after[id] != g {
			t.Errorf("%s: generation %d under the new leader, was %d: adopted, not registered again", id, after[id], g)
		}
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-b.exited; err != nil {
		t.Errorf("replica-b on SIGTERM: %v", err)
	}
	got, _ := m.state()
	if len(got) != 2 {
		t.Errorf("after both stopped the registry holds %q: a syncer that stops deregisters nothing", got)
	}
}
