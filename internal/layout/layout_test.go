package layout_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPublicPackagesStandAlone: api/v1, provider, discovery, routing, client and httpapi (and what they import) never
// depend on internal/ or etcd, so they can become a module of their own.
func TestPublicPackagesStandAlone(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	for _, pkg := range []string{"api/v1", "provider", "discovery", "routing", "client", "httpapi"} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/meshflows/meshflows/"+pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if strings.Contains(dep, "/internal/") && strings.HasPrefix(dep, "github.com/meshflows/") || strings.HasPrefix(dep, "go.etcd.io/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		})
	}
}
