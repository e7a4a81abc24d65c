package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/workflow"
)

// strictEnv is the environment variable with the default provider strictness.
const strictEnv = "WORKFLOW_VALIDATE_PROVIDER_STRICT"

// scopeEnv is the environment variable with the default scope mode of workflows that name
// none; --scope-mode wins over it.
const scopeEnv = "WORKFLOW_SCOPE_MODE"

// scopeMode is the scope mode --scope-mode (when given) or $WORKFLOW_SCOPE_MODE names,
// else legacy.
func scopeMode(flag string, given bool) (workflow.Mode, error) {
	if !given {
		flag = os.Getenv(scopeEnv)
	}
	m, err := workflow.ParseMode(flag)
	if err != nil {
		if !given {
			return "", fmt.Errorf("$%s: %w", scopeEnv, err)
		}
		return "", fmt.Errorf("--scope-mode: %w", err)
	}
	return m, nil
}

func newValidateCmd() *cobra.Command {
	var (
		registries       []string
		strict, noStrict bool
		format           string // the old spelling of -o
		out              outputFlag
		requireRegistry  bool
		timeout          time.Duration
		maxStepTimeout   time.Duration
		scope            string
		creds            clientCreds
	)
	cmd := &cobra.Command{
		Use:   "validate [flags] FILE...",
		Short: "Validate workflow files (contract, and with --registry resolution and providers)",
		Long: `Validate workflow YAML files as docs/reference/workflows.md says. The contract layer always runs and needs no
network. With --registry, each service_call step is resolved against discovery and, where the
provider supports it, validated by the provider itself (concurrently, --provider-timeout each).

Provider failures are errors in strict mode and warnings otherwise. Strictness comes from the
workflow's validation.provider_strict, else --strict/--no-strict, else $` + strictEnv + `,
else strict. The scope mode of a workflow that names none (scope: legacy|strict) comes from
--scope-mode, else $` + scopeEnv + `, else legacy.

With --registry given but unreachable, it says so once and validates the contract layer
only; --require-registry makes that exit 2 instead.

Exit status: 0 no errors (warnings allowed), 1 at least one error, 2 a usage or I/O problem.
Text output is one line a diagnostic: FILE:LINE:COLUMN: SEVERITY CODE: MESSAGE.`,
		Example: "  meshflows validate workflows/*.yaml\n  meshflows validate --registry http://127.0.0.1:7400 --no-strict -o json order.yaml",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if strict && noStrict {
				return &exitError{code: 2, err: errors.New("--strict and --no-strict contradict each other")}
			}
			if format != "" {
				out.value = format
			}
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			format = out.value
			opts := workflow.Options{Strict: true, ProviderTimeout: timeout, MaxStepTimeout: maxStepTimeout}
			mode, err := scopeMode(scope, cmd.Flags().Changed("scope-mode"))
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			opts.ScopeMode = mode
			if v, ok := os.LookupEnv(strictEnv); ok {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("$%s=%q: want true or false", strictEnv, v)}
				}
				opts.Strict = b
			}
			if strict || noStrict {
				opts.Strict = strict
			}
			if len(registries) > 0 {
				httpClient, err := creds.httpClient()
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				disc, err := discovery.New(discovery.Config{Registries: registries, Client: httpClient, BearerToken: creds.token, Consumer: "validate"})
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				opts.Resolver, opts.Client = disc, httpClient
				if err := pingRegistry(cmd.Context(), registries, httpClient, creds.token); err != nil {
					if requireRegistry {
						return &exitError{code: 2, err: fmt.Errorf("the registry is unreachable (--require-registry): %w", err)}
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "meshflows: the registry is unreachable (%v): validating the contract layer only\n", err)
					opts.Resolver, opts.Client = nil, nil
				}
			} else if requireRegistry {
				return &exitError{code: 2, err: errors.New("--require-registry needs --registry (or $MESHFLOWS_REGISTRY)")}
			}
			var results []*apiv1.ValidationResult
			failed := false
			for _, f := range files {
				src, err := os.ReadFile(f)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				_, res := workflow.Validate(cmd.Context(), src, opts)
				res.File = f
				results = append(results, res)
				ds := workflow.Diagnostics(res)
				failed = failed || workflow.HasErrors(ds)
				if format == "text" {
					if err := workflow.WriteText(cmd.OutOrStdout(), f, ds); err != nil {
						return &exitError{code: 2, err: err}
					}
				}
			}
			if format != "text" {
				if err := out.write(cmd.OutOrStdout(), results); err != nil {
					return &exitError{code: 2, err: err}
				}
			}
			if failed {
				return &exitError{code: 1, err: errors.New("validation found errors"), quiet: true}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&registries, "registry", nil, "registry base URL for resolution and provider validation (default: contract layer only)")
	bindEnv(f, "registry", "MESHFLOWS_REGISTRY")
	f.BoolVar(&strict, "strict", false, "provider failures are errors")
	f.BoolVar(&noStrict, "no-strict", false, "provider failures are warnings")
	f.StringVar(&format, "format", "", "output: text or json")
	f.MarkDeprecated("format", "use -o/--output")
	out.bind(cmd, "text")
	f.BoolVar(&requireRegistry, "require-registry", false, "exit 2 when the --registry cannot be reached (default: say so once and validate the contract layer)")
	f.DurationVar(&timeout, "provider-timeout", workflow.DefaultProviderTimeout, "timeout of each provider's validation")
	f.DurationVar(&maxStepTimeout, "max-step-timeout", workflow.DefaultMaxStepTimeout, "the longest step timeout allowed (the orchestrator's --max-step-timeout)")
	f.StringVar(&scope, "scope-mode", "legacy", "scope mode of workflows that name none: legacy or strict (default: $WORKFLOW_SCOPE_MODE, else legacy)")
	creds.bind(f)
	return cmd
}

// pingRegistry asks the registries' health, each in turn, until one answers.
func pingRegistry(ctx context.Context, registries []string, hc *http.Client, token string) error {
	c, err := client.New(client.Config{Registries: registries, HTTPClient: hc, BearerToken: token, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	return tries(len(registries), func() error { _, err := c.DiscoveryHealth(ctx); return err })
}
