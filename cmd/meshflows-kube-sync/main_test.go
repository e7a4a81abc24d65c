package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshflows/meshflows/internal/testtool"
)

// object is what the test reads of a Kubernetes object of deploy/k8s/kube-sync.yaml.
type object struct {
	Kind  string `yaml:"kind"`
	Rules []struct {
		APIGroups     []string `yaml:"apiGroups"`
		Resources     []string `yaml:"resources"`
		ResourceNames []string `yaml:"resourceNames"`
		Verbs         []string `yaml:"verbs"`
	} `yaml:"rules"`
	Spec struct {
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		Ingress  []any `yaml:"ingress"`
		Template struct {
			Spec struct {
				ServiceAccountName string `yaml:"serviceAccountName"`
				Containers         []struct {
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func manifest(t *testing.T) []object {
	t.Helper()
	return testtool.YAMLDocs[object](t, filepath.Join("..", "..", "deploy", "k8s", "kube-sync.yaml"))
}

// TestTheManifestGrantsExactlyWhatTheSyncerUses: the ClusterRole reads Services and
// EndpointSlices and records Events, nothing more; the Role reaches only its Lease; the
// Deployment runs the syncer with a command line that parses, its ServiceAccount and an
// identity; a NetworkPolicy admits only Prometheus.
func TestTheManifestGrantsExactlyWhatTheSyncerUses(t *testing.T) {
	grants := map[string][]string{}
	var deployments, policies int
	for _, o := range manifest(t) {
		switch o.Kind {
		case "ClusterRole", "Role":
			for _, r := range o.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						key := o.Kind + " " + g + "/" + res
						if len(r.ResourceNames) > 0 {
							key += "/" + strings.Join(r.ResourceNames, ",")
						}
						grants[key] = append(grants[key], r.Verbs...)
					}
				}
			}
		case "Deployment":
			deployments++
			spec := o.Spec.Template.Spec
			if spec.ServiceAccountName != "meshflows-kube-sync" {
				t.Errorf("the Deployment runs as %q", spec.ServiceAccountName)
			}
			for _, c := range spec.Containers {
				if !slices.Equal(c.Command, []string{"meshflows-kube-sync"}) {
					t.Errorf("command %q", c.Command)
				}
				cmd := newKubeSyncCmd()
				if err := cmd.ParseFlags(c.Args); err != nil {
					t.Errorf("the command line does not parse: %v", err)
				}
				joined := strings.Join(c.Args, " ")
				for _, want := range []string{"--registry=https://", "--registry-cert=", "--identity="} {
					if !strings.Contains(joined, want) {
						t.Errorf("args %q lack %s", joined, want)
					}
				}
			}
		case "NetworkPolicy":
			if o.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] == "meshflows-kube-sync" && len(o.Spec.Ingress) > 0 {
				policies++
			}
		}
	}
	for k := range grants {
		slices.Sort(grants[k])
	}
	want := map[string][]string{
		"ClusterRole /services":                               {"get", "list", "watch"},
		"ClusterRole discovery.k8s.io/endpointslices":         {"get", "list", "watch"},
		"ClusterRole /events":                                 {"create", "patch"},
		"Role coordination.k8s.io/leases":                     {"create"},
		"Role coordination.k8s.io/leases/meshflows-kube-sync": {"get", "update"},
	}
	if diff := cmp.Diff(want, grants); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
	if deployments != 1 || policies != 1 {
		t.Errorf("%d Deployments and %d NetworkPolicies selecting the syncer, want one of each", deployments, policies)
	}
}

func TestTheCommandSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(bad, []byte("not: [a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a kubeconfig that does not exist", []string{"--kubeconfig", filepath.Join(dir, "missing")}, "no usable kubeconfig"},
		{"a kubeconfig that does not parse", []string{"--kubeconfig", bad}, "no usable kubeconfig"},
		{"an unknown flag", []string{"--namespaces", "shop"}, "unknown flag"},
		{"a negative window", []string{"--kubeconfig", bad, "--coalesce", "-1s"}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newKubeSyncCmd()
			cmd.SetArgs(append(tt.args, "--listen", "127.0.0.1:0"))
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
