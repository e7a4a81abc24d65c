package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// newEvacuateCmd is 'meshflows evacuate': zone evacuations, their extension and their end.
func newEvacuateCmd() *cobra.Command {
	var (
		remote           remoteFlags
		out              outputFlag
		capability       string
		duration, reason string
		force, practice  bool
	)
	// act runs one evacuation call against the registry and prints its answer.
	act := func(cmd *cobra.Command, call func(ctx context.Context, c *client.Client) (*apiv1.Evacuation, error)) error {
		if err := out.check("table", "json", "yaml"); err != nil {
			return err
		}
		c, err := remote.client("registry")
		if err != nil {
			return err
		}
		ev, err := call(cmd.Context(), c)
		if err != nil {
			return describeRefusal(err)
		}
		return printEvacuations(cmd.OutOrStdout(), &out, ev, []apiv1.Evacuation{*ev})
	}
	cmd := &cobra.Command{
		Use:   "evacuate",
		Short: "Evacuate a zone, extend an evacuation or end it (admin)",
		Long: `Move traffic away from a zone as one reversible, expiring step. While an evacuation holds,
the zone's instances (of every capability, or of --capability) are out of rotation and out of
their groups' panic arithmetic, still registered, heartbeating and probed; every consumer
(gateways, orchestrators, DNS, xDS) follows within one long poll. When it ends — at its expiry
or by 'evacuate cancel' — the zone comes back in capped steps (weights 10, 25, 50 for a minute
each, then serving), not all at once.

An evacuation that would leave a capability with fewer than half of its in-rotation
instances, or none, is refused (EVACUATION_UNSAFE, saying what would remain) unless --force.
--practice marks a drill: it ends by itself, a real evacuation of the zone supersedes it, and
its record says whether anything alarmed meanwhile. Every action, refused ones too, is in the
audit log and the event journal with your identity; 10 actions a minute per identity.`,
		Example: `  meshflows evacuate zone eu-west-1a --for 2h --reason "eu-west-1a drops 4% of publishes (INC-231)"
  meshflows evacuate zone eu-west-1a --capability messaging.publish --for 30m --reason "drill" --practice
  meshflows evacuate extend ev-0a1b2c3d4e5f --for 4h
  meshflows evacuate cancel ev-0a1b2c3d4e5f
  meshflows get evacuations`,
		Args: cobra.NoArgs,
	}
	zone := &cobra.Command{
		Use:   "zone ZONE",
		Short: "Evacuate a zone for a duration",
		Long: `Evacuate ZONE (every capability, or --capability) for --for, with --reason. Refused, changing
nothing: an unknown zone (UNKNOWN_ZONE), a second evacuation of the same zone and scope
(EVACUATION_EXISTS: extend it instead), one that would leave a capability with fewer than half
of its in-rotation instances or none (EVACUATION_UNSAFE, naming what would remain; --force
evacuates anyway, audited).`,
		Example: `  meshflows evacuate zone eu-west-1a --for 2h --reason "eu-west-1a drops 4% of publishes (INC-231)"
  meshflows evacuate zone eu-west-1a --capability messaging.publish --for 30m --reason drill --practice -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return act(cmd, func(ctx context.Context, c *client.Client) (*apiv1.Evacuation, error) {
				return c.Evacuate(ctx, &apiv1.EvacuationRequest{Zone: args[0], CapabilityID: capability, Duration: duration, Reason: reason, Force: force, Practice: practice})
			})
		},
	}
	zone.Flags().StringVar(&capability, "capability", "", "evacuate this capability of the zone only (default: every capability)")
	zone.Flags().StringVar(&duration, "for", "", "how long it holds, at most 72h (required), like 2h")
	zone.Flags().StringVar(&reason, "reason", "", "why (required): the journal and whoever is on call next read it")
	zone.Flags().BoolVar(&force, "force", false, "evacuate even when less than half of a capability's in-rotation instances would remain (audited)")
	zone.Flags().BoolVar(&practice, "practice", false, "a drill: ends by itself, superseded by a real evacuation, records whether anything alarmed")
	extend := &cobra.Command{
		Use:   "extend ID",
		Short: "Make an active evacuation hold for --for from now",
		Long: `Set an active evacuation's expiry to --for from now (at most 72h). An evacuation that ended
cannot be extended (409): start a new one.`,
		Example: `  meshflows evacuate extend ev-0a1b2c3d4e5f --for 4h`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return act(cmd, func(ctx context.Context, c *client.Client) (*apiv1.Evacuation, error) {
				return c.ExtendEvacuation(ctx, args[0], duration)
			})
		},
	}
	extend.Flags().StringVar(&duration, "for", "", "the new duration from now, at most 72h (required)")
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "End an active evacuation now: the zone starts its capped way back",
		Long: `End an active evacuation now. Its instances come back in steps (weights 10, 25, 50, a minute
each, then serving); 'meshflows get evacuations' shows the step and when the next one comes.
An evacuation that ended already is 409.`,
		Example: `  meshflows evacuate cancel ev-0a1b2c3d4e5f`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return act(cmd, func(ctx context.Context, c *client.Client) (*apiv1.Evacuation, error) {
				return c.EndEvacuation(ctx, args[0])
			})
		},
	}
	for _, sub := range []*cobra.Command{zone, extend, cancel} {
		remote.bind(sub.Flags())
		out.bind(sub, "table")
		cmd.AddCommand(sub)
	}
	return cmd
}

// newOverrideCmd is 'meshflows override': take one instance out of rotation, or release it.
func newOverrideCmd() *cobra.Command {
	var (
		remote           remoteFlags
		out              outputFlag
		duration, reason string
		force            bool
	)
	cmd := &cobra.Command{
		Use:   "override",
		Short: "Withdraw one instance until a time, or release it (admin)",
		Long: `Take one misbehaving instance out of rotation for a while (cause OPERATOR_WITHDRAWN, with who,
why and until when): the withdrawal holds across the instance's re-registrations until it
expires or is released. 'override release' ends a withdrawal — or a quarantine — at once: the
instance enters slow start. Audited and journaled like every operator action.`,
		Example: `  meshflows override withdraw jms-7f3a --for 30m --reason "slow disk, see INC-231"
  meshflows override release jms-7f3a --reason "disk replaced"
  meshflows get overrides`,
		Args: cobra.NoArgs,
	}
	action := func(verb string) *cobra.Command {
		c := &cobra.Command{
			Use:  verb + " INSTANCE",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := out.check("table", "json", "yaml"); err != nil {
					return err
				}
				c, err := remote.client("registry")
				if err != nil {
					return err
				}
				why := reason
				if why == "" && verb == apiv1.OverrideRelease {
					why = "released from the command line"
				}
				ov, err := c.Override(cmd.Context(), &apiv1.OverrideRequest{InstanceID: args[0], Action: verb, Duration: duration, Reason: why, Force: force})
				if err != nil {
					return describeRefusal(err)
				}
				if err := printOverrides(cmd.OutOrStdout(), &out, ov, []apiv1.Override{*ov}); err != nil {
					return err
				}
				if ov.Force && out.value == "table" {
					fmt.Fprintf(cmd.ErrOrStderr(), "forced: %s stays out even when its pools panic\n", ov.InstanceID)
					for _, d := range ov.Emptied {
						fmt.Fprintf(cmd.ErrOrStderr(), "  left with nothing in rotation: %s: %s\n", d.Path, d.Message)
					}
				}
				return nil
			},
		}
		remote.bind(c.Flags())
		out.bind(c, "table")
		c.Flags().StringVar(&reason, "reason", "", "why (required for withdraw)")
		if verb == apiv1.OverrideWithdraw {
			c.Short = "Take an instance out of rotation for --for"
			c.Long = `Withdraw INSTANCE (cause OPERATOR_WITHDRAWN) for --for, with --reason. It holds across the
instance's re-registrations until it expires or is released. An unknown instance is 404.

A withdrawal that would leave a pool with nothing in rotation — the instance's group of a
capability in its zone, the candidates of a workflow step calling its capability from its
provider, a route of its manifest — would be undone by that pool's panic, which serves every
member again. It is refused (409 OVERRIDE_UNSAFE, naming each pool) unless --force: forced,
the instance stays out even in panic (reason OPERATOR_FORCED; the pool's requests fail with
503 instead), and the answer names the pools it emptied. Refused or not, it is audited.`
			c.Example = `  meshflows override withdraw jms-7f3a --for 30m --reason "slow disk, see INC-231"
  meshflows override withdraw jms-7f3a --for 10m --reason "corrupts messages, INC-232" --force`
			c.Flags().StringVar(&duration, "for", "", "how long, at most 72h (required), like 30m")
			c.Flags().BoolVar(&force, "force", false, "withdraw even when a pool would be left with nothing in rotation, and keep it out even in panic (audited)")
		} else {
			c.Short = "End an instance's withdrawal or quarantine now"
			c.Long = `Release INSTANCE: its operator withdrawal ends, and so does a quarantine; it enters slow start
at once.`
			c.Example = `  meshflows override release jms-7f3a --reason "disk replaced"`
		}
		return c
	}
	cmd.AddCommand(action(apiv1.OverrideWithdraw), action(apiv1.OverrideRelease))
	return cmd
}

// describeRefusal adds what the registry said about each field or capability to an error.
func describeRefusal(err error) error {
	var ae *apiv1.Error
	if !errors.As(err, &ae) {
		return err
	}
	var b strings.Builder
	msg := err.Error()
	if ae.Code == apiv1.CodeEvacuationUnsafe || ae.Code == apiv1.CodeOverrideUnsafe {
		msg = strings.ReplaceAll(msg, "force: true", "--force") // said through the command line
	}
	b.WriteString(msg)
	for _, d := range ae.Details {
		fmt.Fprintf(&b, "\n  %s: %s", d.Path, d.Message)
	}
	return errors.New(b.String())
}

func printEvacuations(w io.Writer, out *outputFlag, v any, evs []apiv1.Evacuation) error {
	if out.value == "json" || out.value == "yaml" {
		return out.write(w, v)
	}
	return evacuationsTable(evs).write(w)
}

func evacuationsTable(evs []apiv1.Evacuation) *table {
	t := &table{header: []string{"ID", "ZONE", "CAPABILITY", "STATE", "STEP", "EXPIRES", "BY", "REASON"}}
	for _, e := range evs {
		step := "-"
		if e.Return != nil {
			step = fmt.Sprintf("%d/%d weight %d, next %s", e.Return.Step, len(e.Return.Steps), e.Return.Weight, e.Return.NextStepAt.Format(time.RFC3339))
		}
		state := e.State
		if e.Outcome != "" {
			state += " (" + e.Outcome + ")"
		}
		if e.Practice {
			state += " practice"
		}
		t.rows = append(t.rows, []string{e.ID, e.Zone, dash(e.CapabilityID), state, step, e.ExpiresAt.Format(time.RFC3339), e.CreatedBy, e.Reason})
	}
	return t
}

func printOverrides(w io.Writer, out *outputFlag, v any, ovs []apiv1.Override) error {
	if out.value == "json" || out.value == "yaml" {
		return out.write(w, v)
	}
	return overridesTable(ovs).write(w)
}

func overridesTable(ovs []apiv1.Override) *table {
	t := &table{header: []string{"ID", "INSTANCE", "ACTION", "ACTIVE", "EXPIRES", "BY", "REASON"}}
	for _, o := range ovs {
		exp := "-"
		if o.ExpiresAt != nil {
			exp = o.ExpiresAt.Format(time.RFC3339)
		}
		action := o.Action
		if o.Force {
			action += " (forced)"
		}
		t.rows = append(t.rows, []string{o.ID, o.InstanceID, action, strconv.FormatBool(o.Active), exp, o.CreatedBy, o.Reason})
	}
	return t
}
