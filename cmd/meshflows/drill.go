package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshflows/meshflows/internal/drill"
)

// drillChildEnv is added to the environment of the processes a drill starts, and
// drillExecutable, when set, is the binary they run instead of this one: the tests give it a
// meshflows built without the race detector, whose 20 processes a loaded machine can carry.
var (
	drillChildEnv   []string
	drillExecutable string
)

// errDrillShort is the exit of a drill whose rows did not all keep their bounds.
var errDrillShort = errors.New("a class fell short of its bound")

func newDrillCmd() *cobra.Command {
	var (
		cfg         drill.Config
		output      string
		expectShort []int
	)
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Inject the twelve failure classes on a throwaway loopback stack and measure them from outside",
		Long: `Start a whole MeshFlows deployment on 127.0.0.1 — a registry with mTLS and an RBAC file,
two gateways, the DNS and xDS servers, an orchestrator and 15 example providers in three zones,
each behind a fault proxy — send a steady load through the gateways, and run the failure
classes one after another: inject the fault, watch every consumer (the gateways' routing
tables, DNS answers, an xDS stream) until it stopped using the instance, count the requests
that failed on the way, restore, repeat. With a Prometheus installed, it also watches which
alarm each class raises (the alerts' action labels).

  1 crash, port closed          7 zombie registration
  2 hang, blackhole             8 control-plane outage (registry killed)
  3 grey failure, one gateway   9 reconnect storm (bench herd)
  4 latency-only degradation   10 recovery overload (the way back of an evacuation)
  5 flapping health check      11 forged or out-of-scope signals
  6 correlated zone failure    12 operator error

Every process it starts is stopped when it ends, however it ends. Ports are --base-port and
the 49 after it. The exit status is 0 when every row kept its bound, 1 when one fell short
(rows listed in --expect-short may fall short: the mechanism they wait for does not exist yet).
docs/failure-classes.md explains each class, its bound and the alarm it raises.`,
		Example: `  meshflows drill --quick
  meshflows drill --class 1,2 --trials 5
  meshflows drill -o json > drill.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("drill: the meshflows executable: %w", err)
			}
			if drillExecutable != "" {
				exe = drillExecutable
			}
			cfg.Executable, cfg.Env = exe, drillChildEnv
			if output != "table" && output != "json" {
				return fmt.Errorf("--output %q: want table or json", output)
			}
			if cfg.Store == "etcd" {
				if err := loopbackURLs(cfg.EtcdEndpoints); err != nil {
					return err
				}
			}
			cfg.Progress = cmd.ErrOrStderr()
			rep, err := drill.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = rep.WriteTable(out)
			}
			if err != nil {
				return err
			}
			if !rep.Held(expectShort) {
				return errDrillShort
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Classes, "class", nil, "classes to run, e.g. 1,3,8 (default: all twelve)")
	f.IntVar(&cfg.Trials, "trials", 0, "trials per class (default 20 for most classes, 1 for the outage; --quick: 3, and 1 for the classes whose trial takes a minute)")
	f.BoolVar(&cfg.Quick, "quick", false, "a short pass for CI: fewer trials, a 2-minute outage, a 20 s lease TTL and 5 s heartbeats")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json (json has every trial)")
	f.IntVar(&cfg.BasePort, "base-port", 7700, "first port of the drill's plan (it takes 50 ports from here, on 127.0.0.1)")
	f.StringVar(&cfg.Store, "store", "memory", "the registry's store: memory or etcd")
	f.StringVar(&cfg.EtcdEndpoints, "etcd-endpoints", "http://127.0.0.1:2379", "etcd client URLs with --store etcd (loopback only)")
	f.DurationVar(&cfg.Outage, "outage", 0, "how long class 8 keeps the registry down (default 15m, --quick 2m)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 0, "the registry's lease TTL (default 90s, --quick 20s)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 0, "the registry's heartbeat interval (default 30s, --quick 5s)")
	f.IntVar(&cfg.Rate, "rate", 50, "requests a second sent through each gateway")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the stack's directory (certificates, RBAC file, audit log, every process's log) and say where")
	f.IntSliceVar(&expectShort, "expect-short", nil, "classes that may fall short without failing the run (the mechanism they need does not exist yet), e.g. 5,9")
	return cmd
}

// loopbackURLs refuses anything but loopback: a drill breaks what it runs against.
func loopbackURLs(list string) error {
	for _, raw := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("--etcd-endpoints %q: %w", raw, err)
		}
		if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
			return fmt.Errorf("--etcd-endpoints %s: a drill runs on loopback only (it kills what it runs against)", raw)
		}
	}
	return nil
}
