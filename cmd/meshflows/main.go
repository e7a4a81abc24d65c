// Command meshflows is the MeshFlows control plane: one binary whose subcommands run the
// registry, the development stack and the load generators. It only parses flags into the
// components' Configs and wires them; the logic lives in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if ee == nil || !ee.quiet {
			fmt.Fprintln(os.Stderr, "meshflows:", err)
		}
		stop()
		os.Exit(code)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "meshflows",
		Short: "MeshFlows: a capability registry and the control plane around it",
		Long: `MeshFlows lets provider services register versioned capabilities, keeps their leases,
and answers discovery queries for gateways and workflow orchestrators.

Start everything on loopback with 'meshflows dev'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
		// Every command: unset flags that have an environment variable take its value.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) },
	}
	root.SetVersionTemplate(`{{printf "meshflows %s" .Version}}
`)
	root.AddCommand(newVersionCmd(), newRegistryCmd(), newDevCmd(), newExampleProviderCmd(), newGatewayCmd(), newOrchestratorCmd(), newDashboardCmd(), newCertsCmd(), newRoutesCmd(), newValidateCmd(), newBenchCmd(), newEligibilityCmd(), newGetCmd(), newDescribeCmd(), newStatusCmd(), newDNSCmd(), newXDSCmd(), newEvacuateCmd(), newOverrideCmd(), newDrillCmd(), newRegionCmd())
	// Usage errors — an unknown flag, a bad flag value, missing or extra arguments — exit 2.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	var usage func(*cobra.Command)
	usage = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					var ee *exitError
					if errors.As(err, &ee) {
						return err
					}
					return &exitError{code: 2, err: fmt.Errorf("%w (see meshflows %s --help)", err, cmd.CommandPath()[len("meshflows "):])}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			usage(sub)
		}
	}
	usage(root)
	return root
}
