package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/testtool"
)

// deployedComponents are the servers a deployment runs; each has a Kubernetes manifest and a
// systemd unit in deploy/.
var deployedComponents = []string{"registry", "gateway", "orchestrator", "dashboard", "xds"}

// checkArgs fails unless args are a meshflows command line that parses: the command exists
// and is the component, every flag is known and its value valid.
func checkArgs(t *testing.T, where, component string, args []string) {
	t.Helper()
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd.Name() != component {
		t.Errorf("%s: %q is not 'meshflows %s': %v", where, args, component, err)
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: the command line does not parse: %v", where, err)
	}
}

// TestDeployManifests: every component has a Kubernetes manifest and a systemd unit, and the
// command line each gives meshflows parses.
func TestDeployManifests(t *testing.T) {
	root := filepath.Join("..", "..", "deploy")
	for _, c := range deployedComponents {
		t.Run("k8s/"+c, func(t *testing.T) {
			found := false
			for _, doc := range manifestDocs(t, c) {
				for _, ct := range doc.Spec.Template.Spec.Containers {
					if strings.HasPrefix(ct.Image, "meshflows/meshflows") {
						found = true
						checkArgs(t, "deploy/k8s/"+c+".yaml", c, ct.Args)
					}
				}
			}
			if !found {
				t.Error("no meshflows container")
			}
		})
		t.Run("systemd/"+c, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, "systemd", "meshflows-"+c+".service"))
			if err != nil {
				t.Fatal(err)
			}
			unit := strings.ReplaceAll(string(raw), "\\\n", " ")
			for _, line := range strings.Split(unit, "\n") {
				if exec, ok := strings.CutPrefix(line, "ExecStart="); ok {
					f := strings.Fields(exec)
					if len(f) < 2 || filepath.Base(f[0]) != "meshflows" {
						t.Fatalf("ExecStart %q does not run meshflows", exec)
					}
					checkArgs(t, "deploy/systemd/meshflows-"+c+".service", c, f[1:])
					return
				}
			}
			t.Error("no ExecStart")
		})
	}
}

// TestEveryDeployedComponentHasANetworkPolicyAndAnIdentity: each Kubernetes manifest admits
// only its clients (a NetworkPolicy selecting its pods, with ingress rules) and runs with its
// own certificate, never --insecure.
func TestEveryDeployedComponentHasANetworkPolicyAndAnIdentity(t *testing.T) {
	for _, c := range deployedComponents {
		t.Run(c, func(t *testing.T) {
			var policy bool
			var args []string
			for _, doc := range manifestDocs(t, c) {
				switch doc.Kind {
				case "NetworkPolicy":
					policy = policy || (doc.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "meshflows-"+c && len(doc.Spec.Ingress) > 0)
				case "Deployment":
					for _, ct := range doc.Spec.Template.Spec.Containers {
						args = append(args, ct.Args...)
					}
				}
			}
			if !policy {
				t.Error("no NetworkPolicy with ingress rules selects the component's pods")
			}
			joined := strings.Join(args, " ")
			if strings.Contains(joined, "--insecure") || !strings.Contains(joined, "--tls-cert=") || !strings.Contains(joined, "--rbac=") {
				t.Errorf("the component does not run with its certificate and the RBAC file: %s", joined)
			}
		})
	}
}

// manifestDoc is what the tests read of a Kubernetes object.
type manifestDoc struct {
	Kind string `yaml:"kind"`
	Spec struct {
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		Ingress  []any `yaml:"ingress"`
		Template struct {
			Spec struct {
				Containers []struct {
					Image string   `yaml:"image"`
					Args  []string `yaml:"args"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// manifestDocs reads the objects of deploy/k8s/COMPONENT.yaml.
func manifestDocs(t *testing.T, component string) []manifestDoc {
	t.Helper()
	return testtool.YAMLDocs[manifestDoc](t, filepath.Join("..", "..", "deploy", "k8s", component+".yaml"))
}

// TestRegionalManifests: the regional gateway's manifest (one Kubernetes cluster per region)
// gives meshflows a command line that parses, with its region, peers and routing control.
func TestRegionalManifests(t *testing.T) {
	docs := testtool.YAMLDocs[manifestDoc](t, filepath.Join("..", "..", "deploy", "k8s", "regions", "gateway.yaml"))
	found := false
	for _, doc := range docs {
		for _, ct := range doc.Spec.Template.Spec.Containers {
			if !strings.HasPrefix(ct.Image, "meshflows/meshflows") {
				continue
			}
			found = true
			checkArgs(t, "deploy/k8s/regions/gateway.yaml", "gateway", ct.Args)
			for _, flag := range []string{"--region=", "--peer-registry=", "--routing-control=", "--routing-control-cert="} {
				if !strings.Contains(strings.Join(ct.Args, " "), flag) {
					t.Errorf("no %s", flag)
				}
			}
		}
	}
	if !found {
		t.Error("no meshflows container")
	}
	if rc := testtool.YAMLDocs[manifestDoc](t, filepath.Join("..", "..", "deploy", "k8s", "regions", "routing-control.yaml")); len(rc) != 2 {
		t.Errorf("routing-control.yaml: %d objects, want the StatefulSet and its Service", len(rc))
	}
}
