package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/spf13/cobra"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// exitError carries the exit status a command asks for.
type exitError struct {
	code int
	err  error
	// quiet: the command has said everything already (validate's diagnostics).
	quiet bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRoutesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "routes", Short: "Routing table tools",
		Long: `Tools for the routing rules the gateway applies: derive computes, offline, the routing table
that given manifests, static routes and a path policy produce — the same derivation the
gateway runs — and prints its canonical form.`,
		Example: "  meshflows routes derive --case conformance/cases/static-wins.json"}
	var caseFile, manifests, static, policy string
	var incremental bool
	var seed uint64
	var churn int
	var out outputFlag
	derive := &cobra.Command{
		Use:   "derive",
		Short: "Print the routing table derived from a conformance case or from loose files",
		Long: `Derive the routing table ρ(static routes, manifests, policy) and print its canonical form
(routes, rejected, conflicts) and the case's requests with their results, as
docs/reference/routing.md describes. Exit status 0 when the input could be read, whatever the
table holds; 2 when it could not.

--manifests takes a JSON file holding a list of {generation, endpoint, manifest} objects, or a
directory of such files (or of single objects); --static a YAML or JSON file
{routes: [{path, methods, upstream}]}; --policy a YAML or JSON file {path_prefixes: {service: [prefix, …]}}.

--incremental derives through the incremental deriver the gateway and the xDS server run:
starting from the static routes and the policy, it applies the manifests one at a time in an
order --seed shuffles, after --churn random add-and-withdraw pairs of them, and prints the
same table as a full derivation does when both are right.`,
		Example: "  meshflows routes derive --case conformance/cases/static-wins.json\n" +
			"  meshflows routes derive --case conformance/cases/static-wins.json --incremental --seed 7 --churn 20\n" +
			"  meshflows routes derive --manifests manifests/ --static static.yaml --policy policy.yaml",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("json", "yaml"); err != nil {
				return err
			}
			var c *routing.Case
			var err error
			if caseFile != "" {
				c, err = readCase(caseFile)
			} else {
				c, err = looseCase(manifests, static, policy)
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if !incremental {
				if cmd.Flags().Changed("seed") || cmd.Flags().Changed("churn") {
					return &exitError{code: 2, err: fmt.Errorf("--seed and --churn go with --incremental")}
				}
				return out.write(cmd.OutOrStdout(), c.Run())
			}
			if churn < 0 {
				return &exitError{code: 2, err: fmt.Errorf("--churn %d: want 0 or more", churn)}
			}
			o, err := c.RunIncremental(seed, churn)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			return out.write(cmd.OutOrStdout(), o)
		},
	}
	out.bind(derive, "json")
	f := derive.Flags()
	f.StringVar(&caseFile, "case", "", "a conformance case file")
	f.StringVar(&manifests, "manifests", "", "manifests: a JSON file or a directory of them")
	f.StringVar(&static, "static", "", "static routes file (YAML or JSON)")
	f.StringVar(&policy, "policy", "", "path policy file (YAML or JSON)")
	f.BoolVar(&incremental, "incremental", false, "derive through the incremental deriver, one manifest at a time")
	f.Uint64Var(&seed, "seed", 0, "with --incremental: the seed of the order the manifests are applied in")
	f.IntVar(&churn, "churn", 0, "with --incremental: this many random add-and-withdraw pairs of the manifests first")
	cmd.AddCommand(derive)
	return cmd
}

func readCase(path string) (*routing.Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return routing.ParseCase(data)
}

// StaticFile is the static routes file of the gateway and of routes derive.
type staticFile struct {
	Routes []routing.StaticRoute `yaml:"routes" json:"routes"`
}

// policyFile is the path policy file of the gateway and of routes derive.
type policyFile struct {
	PathPrefixes routing.Policy `yaml:"path_prefixes" json:"path_prefixes"`
	// MaxStale bounds, by path prefix, how old a last-known-good view the routes under the
	// prefix are served from while the registry is away ({"/api/tenants": "30s"}).
	MaxStale map[string]string `yaml:"max_stale" json:"max_stale"`
}

// readPolicyMaxStale reads the max_stale bounds of a policy file, by path prefix.
func readPolicyMaxStale(path string) (map[string]time.Duration, error) {
	var f policyFile
	if err := readYAML(path, &f); err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	for prefix, v := range f.MaxStale {
		d, err := apiv1.ParseMaxStale(v)
		if err != nil || d == 0 || !strings.HasPrefix(prefix, "/") {
			return nil, fmt.Errorf("%s: max_stale of %q: %v (want a path prefix and a positive duration, like \"/api/tenants\": 30s)", path, prefix, cmp.Or(err, errors.New("empty")))
		}
		out[prefix] = d
	}
	return out, nil
}

func readStatic(path string) ([]routing.StaticRoute, error) {
	if path == "" {
		return nil, nil
	}
	var f staticFile
	if err := readYAML(path, &f); err != nil {
		return nil, err
	}
	if err := routing.ValidateStatic(f.Routes); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f.Routes, nil
}

func readPolicy(path string) (routing.Policy, error) {
	if path == "" {
		return routing.Policy{}, nil
	}
	var f policyFile
	if err := readYAML(path, &f); err != nil {
		return nil, err
	}
	return f.PathPrefixes, nil
}

func readYAML(path string, v any) (err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	defer func() { // goccy/go-yaml#735: a panic on malformed input must be an error
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: malformed YAML: %v", path, r)
		}
	}()
	if err := yaml.UnmarshalWithOptions(data, v, yaml.Strict()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func looseCase(manifests, static, policy string) (*routing.Case, error) {
	if manifests == "" && static == "" {
		return nil, errors.New("give --case FILE, or --manifests and/or --static (with --policy)")
	}
	c := &routing.Case{Name: "loose"}
	var err error
	if c.Static, err = readStatic(static); err != nil {
		return nil, err
	}
	if c.Policy, err = readPolicy(policy); err != nil {
		return nil, err
	}
	if manifests == "" {
		return c, nil
	}
	files := []string{manifests}
	if st, err := os.Stat(manifests); err != nil {
		return nil, err
	} else if st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(manifests, "*.json"))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(strings.TrimSpace(string(data)), "[") {
			var ms []routing.ManifestInput
			if err := json.Unmarshal(data, &ms); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			c.Manifests = append(c.Manifests, ms...)
			continue
		}
		var m routing.ManifestInput
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		c.Manifests = append(c.Manifests, m)
	}
	return c, nil
}
