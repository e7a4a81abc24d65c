package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/testtool"
)

// runnableDocs are the documents whose every shell example (a ```sh block) this test runs
// against meshflows dev, as written; a block whose info string says "norun" is shown, not
// run. The norun blocks are: the two commands themselves (README) and go install
// (docs/getting-started.md), which CI runs and which need the network; Prometheus itself
// (docs/operate.md) and the benchmarks (docs/performance.md and docs/performance-log.md: minutes of load each); a drill that runs
// meshflows dev and a faulty provider until stopped (chase-errors-from-one-replica.md); an etcd cluster
// (docs/deploy-etcd.md); a Kubernetes cluster (docs/kubernetes.md: the integration module
// runs the syncer against a real API server); Jaeger (docs/observability.md:
// TestTracesFollowARequestAndARunIntoTheProviders checks the traces against an OTLP
// receiver); the provider tutorial's commands, which ExampleAgent and TestTutorialPython run
// end to end; releasing a quarantine (ticket-owner.md), which needs one; and several regions
// with a routing-control cluster (docs/regions.md: integration/regions runs them).
// TestEveryDocIsRun keeps new documents from escaping this list.
//
// They run in this order on one stack: the README's tour, then the pages its longer sections
// moved to, in the order they had in it; the API reference last, as its examples end by
// deleting the example workflow the others use.
var runnableDocs = []string{"README.md", "docs/getting-started.md", "docs/registry.md", "docs/api-tour.md", "docs/gateway.md",
	"docs/workflows.md", "docs/credentials.md", "docs/console.md", "docs/operate.md",
	"docs/runbooks/certificate-rotation.md", "docs/runbooks/chase-errors-from-one-replica.md", "docs/runbooks/discovery-staleness.md", "docs/runbooks/eligibility.md", "docs/runbooks/evacuate-a-zone.md", "docs/runbooks/incident-spike.md",
	"docs/runbooks/provider-reregistering.md", "docs/runbooks/registry-restart.md", "docs/runbooks/route-conflicts.md",
	"docs/runbooks/route-unavailable.md", "docs/runbooks/validation-timeouts.md", "docs/runbooks/workflow-failing.md", "docs/runbooks/ticket-owner.md",
	"docs/provider-tutorial.md", "docs/performance.md", "docs/performance-log.md", "docs/deploy-etcd.md", "docs/reference/dns.md", "docs/reference/routing.md", "docs/reference/api.md", "docs/reference/xds.md", "docs/security.md", "docs/kubernetes.md", "docs/observability.md", "docs/regions.md"}

// exampleFiles are the repository's files the examples name by relative path; they are
// copied into the examples' working directory (the repository itself is never written to).
var exampleFiles = []string{"examples/workflows", "internal/health/scenario/testdata/scenarios", "conformance/cases"}

// shellBlock is one ```sh block of a document.
type shellBlock struct {
	file string
	line int
	text string
}

func shellBlocks(t *testing.T, file string) []shellBlock {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out  []shellBlock
		cur  *shellBlock
		line int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(l, "```sh") && !strings.Contains(l, "norun"):
			cur = &shellBlock{file: file, line: line}
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	return out
}

// devPort matches the ports of meshflows dev's default plan as the documents write them.
var devPort = regexp.MustCompile(`\b74(0[0-356]|1[01])\b`)

// TestDocExamplesRun runs every shell example of runnableDocs against meshflows dev: the
// ports of the default plan are this run's, `meshflows` is the binary of this tree, and each
// block must exit 0 under `set -euo pipefail`.
func TestDocExamplesRun(t *testing.T) {
	testtool.Need(t, "the examples are bash", "bash")
	testtool.Need(t, "apt-get install curl", "curl")
	testtool.Need(t, "apt-get install jq (Debian's 1.6, which the examples are written for)", "jq")
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "meshflows"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	port := func(p string) string {
		n, _ := strconv.Atoi(p)
		return strconv.Itoa(base + n - 7400)
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"MESHFLOWS_REGISTRY=http://127.0.0.1:"+port("7400"), "MESHFLOWS_ORCHESTRATOR=http://127.0.0.1:"+port("7401"),
		"MESHFLOWS_GATEWAY=http://127.0.0.1:"+port("7402"))
	work := t.TempDir()
	for _, dir := range exampleFiles {
		if err := os.CopyFS(filepath.Join(work, dir), os.DirFS(filepath.Join("..", "..", dir))); err != nil {
			t.Fatal(err)
		}
	}
	// The README's blocks run twice: a newcomer runs a block again (a typo fixed, a shell
	// closed), and it must work the second time as the first (certs init on its directory).
	docs := append(slices.Clone(runnableDocs[:1]), runnableDocs...)
	for i, file := range docs {
		for _, b := range shellBlocks(t, file) {
			name := file + ":" + strconv.Itoa(b.line)
			if i == 0 {
				name += "/first"
			}
			t.Run(name, func(t *testing.T) {
				if strings.Contains(b.text, "dig ") { // a tool only some examples use (.ci/run installs it)
					testtool.Need(t, "apt-get install bind9-dnsutils", "dig")
				}
				script := devPort.ReplaceAllStringFunc(b.text, port)
				bctx, cancel := context.WithTimeout(ctx, 90*time.Second)
				defer cancel()
				cmd := exec.CommandContext(bctx, "bash", "-euo", "pipefail", "-c", script)
				cmd.Env, cmd.Dir = env, work
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("the example at %s:%d fails: %v\n--- script\n%s--- output\n%s", b.file, b.line, err, script, out)
				}
			})
		}
	}
}

// TestEveryDocIsRun: every Markdown file with a shell example is in runnableDocs.
func TestEveryDocIsRun(t *testing.T) {
	root := filepath.Join("..", "..")
	var missing []string
	for _, pattern := range []string{"*.md", "docs/*.md", "docs/*/*.md"} {
		files, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range files {
			rel, _ := filepath.Rel(root, f)
			rel = filepath.ToSlash(rel)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "```sh") && !slices.Contains(runnableDocs, rel) {
				missing = append(missing, rel)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("documents with shell examples no test runs: %v (add them to runnableDocs)", missing)
	}
}
