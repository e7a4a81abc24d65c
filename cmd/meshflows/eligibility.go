package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshflows/meshflows/internal/health/scenario"
)

func newEligibilityCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "eligibility", Short: "Eligibility tools: replay evidence through the state machine",
		Long: `Tools for the eligibility engine, which judges which instances are in rotation: simulate
replays a scenario file (instances and timestamped evidence) through the same state machine the
registry runs, and prints the verdicts and discovery answers it asks for.`,
		Example: "  meshflows eligibility simulate --scenario internal/health/scenario/testdata/scenarios/panic-below-half.json"}
	var file string
	var out outputFlag
	simulate := &cobra.Command{
		Use:   "simulate",
		Short: "Answer an eligibility scenario file: verdicts and panic answers at given instants",
		Long: `Replay a scenario's instances and timestamped evidence through the eligibility engine and
print {"answers": [...]}: one object per expectation, in order — state, weight and reasons for
an instance; panic and instances for a (capability, zone).

Exit status 0 when the file could be read; 2 when it could not (unreadable, not JSON, unknown
settings, instances or event kinds, instants beyond 6h).`,
		Example: "  meshflows eligibility simulate --scenario internal/health/scenario/testdata/scenarios/panic-below-half.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("json", "yaml"); err != nil {
				return err
			}
			if file == "" {
				return &exitError{code: 2, err: fmt.Errorf("--scenario FILE is required")}
			}
			raw, err := os.ReadFile(file)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			s, err := scenario.Parse(raw)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("%s: %w", file, err)}
			}
			answers, err := s.Answers()
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("%s: %w", file, err)}
			}
			return out.write(cmd.OutOrStdout(), map[string]any{"answers": answers})
		},
	}
	out.bind(simulate, "json")
	simulate.Flags().StringVar(&file, "scenario", "", "a scenario file (JSON)")
	cmd.AddCommand(simulate)
	return cmd
}
