package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshflows/meshflows/internal/bench"
	"github.com/meshflows/meshflows/internal/health/greysim"
	"github.com/meshflows/meshflows/internal/registry"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load generators against a running component",
		Long: `Load generators that drive a running MeshFlows component through its public HTTP API,
for operators sizing a deployment. Every run is bounded by its counts and --timeout.`,
		Example: "  meshflows bench registry --registry http://127.0.0.1:7400 --instances 1000\n  meshflows bench herd --providers 1000",
	}
	cmd.AddCommand(newBenchRegistryCmd(), newBenchHerdCmd(), newBenchDNSCmd(), newBenchFloorServerCmd(), newBenchOutliersCmd(), newBenchRoutesCmd())
	return cmd
}

func newBenchRegistryCmd() *cobra.Command {
	var cfg bench.RegistryConfig
	var (
		asJSON  bool // the old spelling of -o json
		out     outputFlag
		timeout time.Duration
		floor   bool
	)
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Measure register, heartbeat, discovery and watch propagation against a registry",
		Long: `Register --instances instances (three capabilities each, 100 per service), heartbeat each
once, run --queries discovery queries for one 100-instance service, time --changes
deregistrations until a long-polling watcher sees each, then deregister the rest. Prints
throughput and p50/p99/max per phase. It leaves nothing registered behind.

With --etcd, the same workload then runs against a raw etcd, as a registry built on etcd
would drive it (a lease and a put per registration, one keep-alive per heartbeat, a range
over the service's prefix per discovery, a watch for propagation, a revoke per
deregistration), and a comparison table follows. Give --server-pid and --etcd-pid to compare
the servers' CPU per operation: on a machine where the load driver shares the cores with the
servers, that is the figure to judge them by, not wall-clock throughput. The same flags add
each server's memory: resident at the end of each phase, and the most it has held since it
started (VmRSS and VmHWM).

With --floor, the registration, heartbeat and discovery phases then run against two servers
that do no work and answer with the registry's own answers from this run: a net/http
server whose handler only reads the request and writes the answer, and a minimal HTTP/1.1
responder on raw TCP. Each runs in a process of its own on loopback, started by this
command, and its CPU per operation is measured as the registry's is (give --server-pid for
the registry's): what the connection alone costs on this machine, so that the registry's
figure can be read against it.`,
		Example: "  meshflows bench registry --registry http://127.0.0.1:7400 --instances 10000 --concurrency 32\n" +
			"  meshflows bench registry --registry http://127.0.0.1:7400 --server-pid 4242\n" +
			"  meshflows bench registry --registry http://127.0.0.1:7400 -o json > bench.json\n" +
			"  meshflows bench registry --instances 10000 --server-pid 4242 --etcd http://127.0.0.1:2379 --etcd-pid 4343\n" +
			"  meshflows bench registry --instances 10000 --server-pid 4242 --floor",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := legacyJSON(&out, asJSON); err != nil {
				return err
			}
			if floor {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--floor starts this program again: %w", err)
				}
				cfg.FloorCommand = []string{exe, "bench", "floor-server", "--kind"}
			}
			rep, err := bench.RunRegistry(ctx, cfg)
			if rep != nil {
				if out.value != "text" {
					if err := out.write(cmd.OutOrStdout(), rep); err != nil {
						return err
					}
				} else {
					w := cmd.OutOrStdout()
					fmt.Fprintf(w, "registry %s, %d instances, concurrency %d\n\n", rep.URL, rep.Instances, rep.Concurrency)
					if err := bench.WriteTable(w, rep.Phases); err != nil {
						return err
					}
					for _, warn := range rep.Warnings {
						fmt.Fprintf(w, "warning: %s\n", warn)
					}
					if rep.Etcd != nil {
						fmt.Fprintf(w, "\netcd %s, the same workload\n\n", strings.Join(rep.Etcd.Endpoints, ","))
						if err := bench.WriteTable(w, rep.Etcd.Phases); err != nil {
							return err
						}
						fmt.Fprintln(w)
						if err := bench.WriteComparison(w, rep); err != nil {
							return err
						}
					}
					for _, f := range rep.Floor {
						fmt.Fprintf(w, "\nfloor: %s, the same exchanges\n\n", bench.FloorTitle(f.Server))
						if err := bench.WriteTable(w, f.Phases); err != nil {
							return err
						}
					}
					if len(rep.Floor) > 0 {
						fmt.Fprintln(w)
						if err := bench.WriteFloor(w, rep); err != nil {
							return err
						}
					}
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "registry", "http://127.0.0.1:7400", "base URL of the registry")
	f.IntVar(&cfg.Instances, "instances", 1000, "instances to register")
	f.IntVar(&cfg.Concurrency, "concurrency", 32, "concurrent requests in the register, heartbeat and discovery phases")
	f.IntVar(&cfg.Queries, "queries", 2000, "discovery queries")
	f.IntVar(&cfg.QueryConcurrency, "query-concurrency", 0, "concurrent discovery queries (default --concurrency; 1 for unloaded latency)")
	f.IntVar(&cfg.Changes, "changes", 200, "deregistrations timed until a watcher sees them")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", 10*time.Second, "timeout of one request")
	f.IntVar(&cfg.ServerPID, "server-pid", 0, "the registry's process id on this machine: report its CPU time per operation and its memory (read from /proc)")
	f.StringSliceVar(&cfg.EtcdEndpoints, "etcd", nil, "etcd client URLs: run the same workload against this etcd after the registry and compare")
	f.IntVar(&cfg.EtcdPID, "etcd-pid", 0, "etcd's process id on this machine: report its CPU time per operation and its memory")
	f.StringVar(&cfg.EtcdPrefix, "etcd-prefix", "/bench/", "key prefix the etcd run writes under (it removes what it writes)")
	f.BoolVar(&floor, "floor", false, "then run the same exchanges against a net/http server and a raw TCP responder that do no work, and compare CPU per operation")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "deadline of the whole run")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.MarkDeprecated("json", "use -o json")
	out.bind(cmd, "text")
	return cmd
}

// newBenchFloorServerCmd is the floor server 'bench registry --floor' starts: hidden, it is
// not for operators.
func newBenchFloorServerCmd() *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:    "floor-server",
		Short:  "Serve canned answers as 'bench registry --floor' measures them (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunFloorServer(cmd.Context(), kind, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&kind, "kind", bench.FloorHTTP, "the server: "+strings.Join(bench.FloorKinds, " or "))
	return cmd
}

func newBenchHerdCmd() *cobra.Command {
	var cfg bench.HerdConfig
	var (
		inProcess bool
		asJSON    bool // the old spelling of -o json
		out       outputFlag
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "herd",
		Short: "Restart a registry under N provider agents and measure the re-registration wave",
		Long: `Start --providers provider SDK agents in this process, and --watchers consumers that
each keep a delta watch on a few canary instances; wait until all are registered, restart the
registry with empty state, and report how long until every agent is back (and how many were
not when --timeout ended the run), the peak and mean registrations per second, the
registration latency, how many attempts the registry's reconnection cap shed
(--reconnect-rate; 0 compares with none), the registry's CPU a second at a time, and the
withdrawals timed in the middle of the wave: a canary deregistered every --withdraw-every,
timed until no watcher's view holds it.

By default the registry runs as a child process of this binary ('meshflows registry
--insecure' on loopback), so that its CPU is its own; a restart kills it (its state is in
memory: gone) and starts it again on the same address. --in-process runs it in this process
instead (the CPU figures then include the agents'); with --registry URL the command waits for
you to restart that registry.`,
		Example: "  meshflows bench herd --providers 1000\n  meshflows bench herd --providers 50000 --watchers 1000 --heartbeat-interval 30s\n  meshflows bench herd --providers 10000 --reconnect-rate 0   # no cap, to compare",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := legacyJSON(&out, asJSON); err != nil {
				return err
			}
			cfg.Notify = func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			if cfg.Registry == "" && !inProcess {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("herd: find this binary to run the registry: %w (or use --in-process)", err)
				}
				cfg.RegistryCommand = []string{exe, "registry", "--insecure", "--store", "memory", "--log-level", "warn"}
			}
			rep, err := bench.RunHerd(ctx, cfg)
			if err != nil {
				return err
			}
			if out.value != "text" {
				return out.write(cmd.OutOrStdout(), rep)
			}
			return bench.WriteHerd(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Providers, "providers", 1000, "provider agents to run")
	f.StringVar(&cfg.Registry, "registry", "", "external registry URL, restarted by you when told (default: run one and restart it)")
	f.BoolVar(&inProcess, "in-process", false, "run the registry in this process rather than as a child process (its CPU is then not told apart from the agents')")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "address of the registry the command runs")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 5*time.Second, "heartbeat interval of the registry the command runs (whole seconds)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 0, "lease TTL of the registry the command runs (default 3 heartbeat intervals)")
	f.Float64Var(&cfg.ReconnectRate, "reconnect-rate", registry.DefaultReconnectRate, "the reconnection cap of the registry the command runs: registrations (and new watches) a second, past which it sheds with 429 and a Retry-After (0: none, to compare)")
	f.IntVar(&cfg.ReconnectBurst, "reconnect-burst", registry.DefaultReconnectBurst, "registrations the registry the command runs accepts at once above --reconnect-rate")
	f.IntVar(&cfg.Watchers, "watchers", 0, "consumers keeping a delta watch on the canaries through the wave (0: none, and no withdrawals timed)")
	f.IntVar(&cfg.Canaries, "canaries", 0, "canary instances the watchers watch and the bench withdraws (default 20 with --watchers)")
	f.DurationVar(&cfg.WithdrawEvery, "withdraw-every", 500*time.Millisecond, "how often a canary is withdrawn (deregistered) during the wave")
	f.IntVar(&cfg.MaxConns, "max-conns", 4096, "connections the agents share to the registry (the loopback's ephemeral ports and the open-file limit are far below one per agent at 50,000)")
	f.IntVar(&cfg.StartRate, "start-rate", 5000, "agents started a second before the restart (the wave after it is the agents' own timing)")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "deadline of the whole run")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.MarkDeprecated("json", "use -o json")
	out.bind(cmd, "text")
	return cmd
}

// legacyJSON folds the old --json into -o and checks -o.
func legacyJSON(out *outputFlag, asJSON bool) error {
	if asJSON {
		out.value = "json"
	}
	return out.check("text", "json", "yaml")
}

func newBenchDNSCmd() *cobra.Command {
	var (
		cfg bench.DNSConfig
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Load a DNS server with one query over UDP and report queries per second and latency",
		Long: `Send --name/--qtype to --server from --concurrency workers, each on its own socket and
sending its next query when the answer arrives (dnsperf's model), for --duration; report
queries per second and p50/p99/max. Any DNS server can be measured, so 'meshflows dns' can be
compared with another serving the same records. A response that is not NOERROR with answers
counts as an error.`,
		Example: "  meshflows bench dns --server 127.0.0.1:7405 --name messaging.publish.cap.meshflows. --concurrency 32 --duration 10s",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			rep, err := bench.RunDNS(cmd.Context(), cfg)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if out.value != "text" {
				return out.write(cmd.OutOrStdout(), rep)
			}
			return bench.WriteDNS(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "127.0.0.1:7405", "host:port of the DNS server")
	f.StringVar(&cfg.Name, "name", "messaging.publish.cap.meshflows.", "the name to query")
	f.StringVar(&cfg.Qtype, "qtype", "SRV", "the query type")
	f.IntVar(&cfg.Concurrency, "concurrency", 32, "queries in flight")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long the load runs")
	f.DurationVar(&cfg.Timeout, "timeout", time.Second, "timeout of one query")
	f.IntVar(&cfg.ServerPID, "server-pid", 0, "the server's process id on this machine: report its CPU time per query and its memory (read from /proc)")
	out.bind(cmd, "text")
	return cmd
}

func newBenchOutliersCmd() *cobra.Command {
	var (
		seeds int
		hours float64
		out   outputFlag
	)
	cmd := &cobra.Command{
		Use:   "outliers",
		Short: "Simulate grey failure: how fast the relative-outlier rule ejects a 4 % replica, and Envoy's detectors beside it",
		Long: `Generate outcome streams — ten instances of one capability in one zone, some failing 4 % of
their requests and the others 0.1 %, seen by 1, 5 or 50 reporters that each report every 10 s,
at 10, 50 or 500 requests a second an instance — and run them through the eligibility engine
the registry runs (its default settings), and, on the same draws, through Envoy's success-rate
detector (Envoy's defaults: 100 requests a host an interval, 5 hosts, mean - 1.9 sd, at most
10 % ejected) and its consecutive-5xx detector (expected time from its formula). Prints the
time to eject, the false ejections per instance-hour over --hours, and the share of bad
instances caught when 1 to 5 of the 10 are bad. No server is needed; runs are reproducible
(seeds 1..--seeds).`,
		Example: "  meshflows bench outliers\n  meshflows bench outliers --seeds 20 --hours 24 -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			if seeds < 1 || hours <= 0 {
				return fmt.Errorf("--seeds must be at least 1 and --hours positive")
			}
			f, err := greysim.Compute(seeds, hours)
			if err != nil {
				return err
			}
			if out.value != "text" {
				return out.write(cmd.OutOrStdout(), f)
			}
			return f.Write(cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&seeds, "seeds", 10, "runs per configuration of the time-to-eject and shares figures")
	cmd.Flags().Float64Var(&hours, "hours", 24, "simulated hours of each false-ejection run")
	out.bind(cmd, "text")
	return cmd
}

func newBenchRoutesCmd() *cobra.Command {
	var (
		cfg bench.RoutesConfig
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Time route derivation per change: the full derivation against the incremental one",
		Long: `Build a fleet of --services services (1 to 3 routes each) of --instances instances, then
apply --changes changes (an instance withdrawn, then back with a new generation) through the
incremental deriver the gateway and the xDS server run, and as many of them as take about ten
seconds (at least three) through a full derivation of the whole input; print the time per
change of each and whether the two tables agree at the end. No server is needed.`,
		Example: "  meshflows bench routes --services 10000 --changes 10000\n  meshflows bench routes --services 100000 --instances 10 -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			rep, err := bench.RunRoutes(cfg)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if out.value != "text" {
				return out.write(cmd.OutOrStdout(), rep)
			}
			return bench.WriteRoutes(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().IntVar(&cfg.Services, "services", 10000, "services in the fleet")
	cmd.Flags().IntVar(&cfg.Instances, "instances", 10, "instances per service, each publishing its service's manifest")
	cmd.Flags().IntVar(&cfg.Changes, "changes", 10000, "changes applied through the incremental deriver")
	out.bind(cmd, "text")
	return cmd
}
