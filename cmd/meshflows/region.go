package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/nameserver"
	"github.com/meshflows/meshflows/internal/region"
	"github.com/meshflows/meshflows/internal/routingcontrol"
	"github.com/meshflows/meshflows/internal/xds"
)

// routingControlFlags select the routing-control cluster and the credentials to reach it:
// the same flags on `meshflows region` and on every consumer that follows the signal.
type routingControlFlags struct {
	endpoints        []string
	ca, cert, key    string
	prefix           string
	insecure         bool
	dialTimeout      time.Duration
	check, staleness time.Duration
}

func (f *routingControlFlags) bind(fs *pflag.FlagSet, consumer bool) {
	fs.StringSliceVar(&f.endpoints, "routing-control", nil, "client URLs of the routing-control etcd cluster (comma-separated; one member per region), which holds each region's on/off switch")
	fs.StringVar(&f.ca, "routing-control-ca", "", "CA file that signed the routing-control cluster's certificates")
	fs.StringVar(&f.cert, "routing-control-cert", "", "client certificate for the routing-control cluster (its CN is who is recorded for a change)")
	fs.StringVar(&f.key, "routing-control-key", "", "key of --routing-control-cert")
	fs.StringVar(&f.prefix, "routing-control-prefix", routingcontrol.DefaultPrefix, "key prefix of the routing control in its cluster")
	fs.BoolVar(&f.insecure, "routing-control-insecure", false, "reach the routing-control cluster without a client certificate (tests and demos only: anyone who reaches the cluster can switch regions off)")
	fs.DurationVar(&f.dialTimeout, "routing-control-dial-timeout", 5*time.Second, "how long to wait for the routing-control cluster to answer a connection")
	if consumer {
		fs.DurationVar(&f.check, "routing-control-check", time.Second, "how often to read the routing control besides watching it (a read needs the cluster's quorum)")
		fs.DurationVar(&f.staleness, "routing-control-stale-after", 3*time.Second, "when no read has succeeded for this long, the signal is said stale (its last value is kept)")
	}
}

func (f *routingControlFlags) set() bool { return len(f.endpoints) > 0 }

// dial connects to the cluster and says who the credentials are: the client certificate's
// CN, or "insecure:USER" with --routing-control-insecure.
func (f *routingControlFlags) dial(logger *slog.Logger) (*clientv3.Client, string, error) {
	if !f.set() {
		return nil, "", errors.New("--routing-control is required: the client URLs of the routing-control etcd cluster")
	}
	cfg := clientv3.Config{Endpoints: f.endpoints, DialTimeout: f.dialTimeout, Logger: zap.NewNop()}
	var who string
	switch {
	case f.cert != "" || f.key != "" || f.ca != "":
		if f.cert == "" || f.key == "" || f.ca == "" {
			return nil, "", errors.New("--routing-control-ca, --routing-control-cert and --routing-control-key go together")
		}
		tlsCfg, err := client.TLSConfig(f.ca, f.cert, f.key)
		if err != nil {
			return nil, "", fmt.Errorf("routing control TLS: %w", err)
		}
		cfg.TLS = tlsCfg
		if who, err = certCN(f.cert); err != nil {
			return nil, "", err
		}
	case f.insecure:
		who = "insecure:" + osUser()
		if logger != nil {
			logger.Warn("INSECURE: the routing control is reached without a client certificate; anyone who reaches its cluster can switch regions off (--routing-control-insecure is for tests and demos)")
		}
	default:
		return nil, "", errors.New("the routing control needs a client certificate (--routing-control-ca, --routing-control-cert, --routing-control-key); --routing-control-insecure goes without one, for tests and demos only")
	}
	for _, e := range f.endpoints {
		if strings.HasPrefix(e, "http://") && cfg.TLS != nil {
			return nil, "", fmt.Errorf("--routing-control %s: an http:// URL with a client certificate; use https://", e)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("routing control at %v: %w", f.endpoints, err)
	}
	return cli, who, nil
}

// watcher returns a Watcher of the cluster for a consumer.
func (f *routingControlFlags) watcher(logger *slog.Logger, reg prometheus.Registerer) (*routingcontrol.Watcher, func(), error) {
	cli, _, err := f.dial(logger)
	if err != nil {
		return nil, nil, err
	}
	w, err := routingcontrol.NewWatcher(routingcontrol.WatcherConfig{Client: cli, Prefix: f.prefix, Check: f.check,
		StaleAfter: f.staleness, Logger: logger, Registerer: reg})
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return w, func() { cli.Close() }, nil
}

func certCN(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("routing control certificate: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("routing control certificate %s: no PEM block", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("routing control certificate %s: %w", file, err)
	}
	if c.Subject.CommonName == "" {
		return "", fmt.Errorf("routing control certificate %s has no CN: the CN is who a change is recorded as", file)
	}
	return c.Subject.CommonName, nil
}

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// newRegionCmd is 'meshflows region': the routing control's switches.
func newRegionCmd() *cobra.Command {
	var (
		rc      routingControlFlags
		out     outputFlag
		reason  string
		force   bool
		audit   int
		minOn   int
		spacing time.Duration
	)
	withControl := func(cmd *cobra.Command, do func(ctx context.Context, c *routingcontrol.Control, who string) error) error {
		cli, who, err := rc.dial(nil)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer cli.Close()
		c, err := routingcontrol.New(routingcontrol.Config{Client: cli, Prefix: rc.prefix})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
		defer cancel()
		return do(ctx, c, who)
	}
	set := func(on bool) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := out.check("table", "json", "yaml"); err != nil {
				return err
			}
			return withControl(cmd, func(ctx context.Context, c *routingcontrol.Control, who string) error {
				sw, err := c.Set(ctx, routingcontrol.Change{Region: args[0], On: on, Reason: reason, By: who, Force: force})
				if err != nil {
					return describeRefusal(err)
				}
				if out.value == "json" || out.value == "yaml" {
					return out.write(cmd.OutOrStdout(), map[string]any{"region": args[0], "switch": sw})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "region %s is %s (by %s at %s: %s)\n", args[0], sw.State, sw.By, sw.At.Format(time.RFC3339), sw.Reason)
				return nil
			})
		}
	}
	cmd := &cobra.Command{
		Use:   "region",
		Short: "Switch a region out of traffic and back (the routing control)",
		Long: `Each region routes on its own, from its own registry. What takes a whole region out of traffic
is a switch per region held in the routing-control cluster: a small etcd cluster with a member
in each of at least three regions, never any region's registry. Every consumer (gateways,
orchestrators, DNS and xDS servers) watches it directly and keeps the last value it read when
the cluster is unreachable or without quorum: unreachable never means off.

'region off' is refused (REGION_UNSAFE, naming what would remain) when it would leave fewer
regions on than min_regions_on (default 1); --force goes below that, never to no region at
all. A region changes at most once per change_min_interval (default 30 s; RATE_LIMITED).
Every action, refused ones too, is audited in the cluster with who (the CN of your
--routing-control-cert), why (--reason) and when. A region switched back on gets its traffic
back in steps at each consumer (1, 5, 25, 50 %, then all), not at once.`,
		Example: `  export RC="--routing-control https://rc1:2379,https://rc2:2379,https://rc3:2379 --routing-control-ca ca.pem --routing-control-cert op.pem --routing-control-key op-key.pem"
  meshflows region status $RC
  meshflows region off eu-west --reason "eu-west loses 30% of requests (INC-412)" $RC
  meshflows region on eu-west --reason "INC-412 mitigated" $RC`,
		Args: cobra.NoArgs,
	}
	rc.bind(cmd.PersistentFlags(), false)
	off := &cobra.Command{
		Use:   "off REGION",
		Short: "Take a region out of traffic (every consumer in every region stops sending to it)",
		Long: `Switch REGION off in the routing control, with --reason. Every regional gateway stops sending
to it within a second, and its own gateway sends its traffic to the next region of its
--region-priority that is on. Refused, changing nothing but the audit: a region never declared
(UNKNOWN_REGION), a second change within change_min_interval (RATE_LIMITED), and one that would
leave fewer regions on than min_regions_on (REGION_UNSAFE; --force goes below it, never to no
region at all).`,
		Example: `  meshflows region off eu-west --reason "eu-west loses 30% of requests (INC-412)" --routing-control https://rc1:2379 --routing-control-ca ca.pem --routing-control-cert op.pem --routing-control-key op-key.pem`,
		Args:    cobra.ExactArgs(1),
		RunE:    set(false),
	}
	off.Flags().BoolVar(&force, "force", false, "switch off below min_regions_on (never the last region on)")
	on := &cobra.Command{
		Use:   "on REGION",
		Short: "Put a region back in traffic (declares it on first use); its share ramps back at each consumer",
		Long: `Switch REGION on in the routing control, with --reason. The first 'region on' of a region
declares it (it was already counted on). A region that was off gets its traffic back at each
gateway in steps (--region-return-steps, 1 5 25 50 % by default, then all), each held for at
least --region-return-dwell and for as long as the region fails more than the others.`,
		Example: `  meshflows region on eu-west --reason "INC-412 mitigated" --routing-control https://rc1:2379 --routing-control-ca ca.pem --routing-control-cert op.pem --routing-control-key op-key.pem`,
		Args:    cobra.ExactArgs(1),
		RunE:    set(true),
	}
	for _, c := range []*cobra.Command{off, on} {
		c.Flags().StringVar(&reason, "reason", "", "why (required; kept with the change and in the audit)")
		out.bind(c, "table")
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each region's switch, with who changed it, why and when, and the recent actions",
		Long: `Read the routing control (a linearizable read: it fails when the cluster has lost quorum)
and print each region's state with who changed it last, why and when, the safety settings,
and the last --audit actions, refused ones included.`,
		Example: `  meshflows region status --routing-control https://rc1:2379 --routing-control-ca ca.pem --routing-control-cert op.pem --routing-control-key op-key.pem -o json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check("table", "json", "yaml"); err != nil {
				return err
			}
			return withControl(cmd, func(ctx context.Context, c *routingcontrol.Control, _ string) error {
				st, err := c.Status(ctx, audit)
				if err != nil {
					return err
				}
				if out.value == "json" || out.value == "yaml" {
					return out.write(cmd.OutOrStdout(), st)
				}
				return printRegionStatus(cmd, st)
			})
		},
	}
	status.Flags().IntVar(&audit, "audit", 10, "how many of the recent actions to show (0: none)")
	out.bind(status, "table")
	configure := &cobra.Command{
		Use:   "configure",
		Short: "Set the safety rules: min_regions_on and change_min_interval (audited)",
		Long: `Set how many regions must stay on (a 'region off' that would leave fewer is refused without
--force) and how often one region may change. Kept in the routing control with the signal,
so that every operator's command checks the same rules; audited with --reason.`,
		Example: `  meshflows region configure --min-regions-on 2 --change-min-interval 30s --reason "two regions carry the load" --routing-control https://rc1:2379 --routing-control-ca ca.pem --routing-control-cert op.pem --routing-control-key op-key.pem`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withControl(cmd, func(ctx context.Context, c *routingcontrol.Control, who string) error {
				if err := c.Configure(ctx, routingcontrol.Settings{MinRegionsOn: minOn, ChangeMinInterval: spacing, Reason: reason, By: who}); err != nil {
					return describeRefusal(err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "min_regions_on %d, change_min_interval %s\n", minOn, spacing)
				return nil
			})
		},
	}
	configure.Flags().IntVar(&minOn, "min-regions-on", routingcontrol.DefaultMinRegionsOn, "'region off' is refused when it would leave fewer regions on (without --force)")
	configure.Flags().DurationVar(&spacing, "change-min-interval", routingcontrol.DefaultChangeMinInterval, "at most one change per region per this interval (whole seconds)")
	configure.Flags().StringVar(&reason, "reason", "", "why (required)")
	cmd.AddCommand(off, on, status, configure)
	return cmd
}

func printRegionStatus(cmd *cobra.Command, st apiv1.RegionStatus) error {
	w := cmd.OutOrStdout()
	t := &table{header: []string{"REGION", "STATE", "SINCE", "BY", "REASON"}}
	for _, name := range append(append([]string{}, st.On...), st.Off...) {
		r := st.Regions[name]
		t.rows = append(t.rows, []string{name, r.State, r.At.Format(time.RFC3339), r.By, r.Reason})
	}
	if len(t.rows) == 0 {
		fmt.Fprintln(w, "no region declared yet: every region counts as on ('meshflows region on REGION --reason ...' declares one)")
	} else if err := t.write(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmin_regions_on %d, change_min_interval %ds, revision %d\n", st.MinOn, st.Interval, st.Revision)
	if len(st.Audit) > 0 {
		fmt.Fprintln(w, "\nRecent actions:")
		a := &table{header: []string{"AT", "BY", "ACTION", "REGION", "OUTCOME", "REASON", "WHY REFUSED"}}
		for _, r := range st.Audit {
			a.rows = append(a.rows, []string{r.At.Format(time.RFC3339), r.By, r.Action, r.Region, r.Outcome, r.Reason, r.Code})
		}
		return a.write(w)
	}
	return nil
}

// regionFlags make a consumer regional: its home region, its peers' registries, the order
// it spills in, the routing control it follows and the way back.
type regionFlags struct {
	home     string
	peers    []string // NAME=URL[,URL…]
	priority []string
	dwell    time.Duration
	steps    []int // percent
	rc       routingControlFlags
}

func (f *regionFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.home, "region", "", "this consumer's home region: --registry is its registry; requests go to it while it is on and its pool is ready, else to the next region of --region-priority that is")
	fs.StringArrayVar(&f.peers, "peer-registry", nil, "a peer region and its registry, NAME=URL[,URL…] (repeat per region): watched separately, with a last-known-good view of its own, never merged into another region's")
	fs.StringSliceVar(&f.priority, "region-priority", nil, "the order peer regions are tried in after home (default: the order of --peer-registry)")
	fs.DurationVar(&f.dwell, "region-return-dwell", time.Minute, "how long each step of a region's way back holds at least (its share comes back in --region-return-steps)")
	fs.IntSliceVar(&f.steps, "region-return-steps", []int{1, 5, 25, 50}, "the shares, in percent, a region switched back on gets in turn before all of its traffic")
	f.rc.bind(fs, true)
}

// peerRegistries parses --peer-registry in its order.
func (f *regionFlags) peerRegistries() ([]string, map[string][]string, error) {
	var names []string
	out := map[string][]string{}
	for _, p := range f.peers {
		name, urls, ok := strings.Cut(p, "=")
		if !ok || urls == "" {
			return nil, nil, fmt.Errorf("--peer-registry %q: want NAME=URL[,URL…]", p)
		}
		if err := routingcontrol.ValidRegion(name); err != nil {
			return nil, nil, fmt.Errorf("--peer-registry: %w", err)
		}
		if name == f.home {
			return nil, nil, fmt.Errorf("--peer-registry %s: that is the home region (--region); its registry is --registry", name)
		}
		if _, dup := out[name]; dup {
			return nil, nil, fmt.Errorf("--peer-registry %s given twice: give one flag per region, its URLs comma-separated", name)
		}
		names = append(names, name)
		out[name] = strings.Split(urls, ",")
	}
	return names, out, nil
}

func (f *regionFlags) validate() error {
	if f.home == "" {
		if len(f.peers) > 0 || f.rc.set() || len(f.priority) > 0 {
			return errors.New("--peer-registry, --region-priority and --routing-control need --region (this consumer's home region)")
		}
		return nil
	}
	if err := routingcontrol.ValidRegion(f.home); err != nil {
		return fmt.Errorf("--region: %w", err)
	}
	if _, _, err := f.peerRegistries(); err != nil {
		return err
	}
	for _, s := range f.steps {
		if s <= 0 || s >= 100 {
			return fmt.Errorf("--region-return-steps %d: want percentages between 1 and 99", s)
		}
	}
	return nil
}

// planConfig is the plan's configuration of the flags, with the routing control's watcher
// started in g when one is given, and the priority order of the peers.
func (f *regionFlags) planConfig(ctx context.Context, g *errgroup.Group, reg prometheus.Registerer, logger *slog.Logger) (region.PlanConfig, []string, error) {
	names, _, err := f.peerRegistries()
	if err != nil {
		return region.PlanConfig{}, nil, err
	}
	priority := f.priority
	if len(priority) == 0 {
		priority = names
	}
	for _, p := range priority {
		if p != f.home && !slices.Contains(names, p) {
			return region.PlanConfig{}, nil, fmt.Errorf("--region-priority names %q, which is neither --region nor a --peer-registry", p)
		}
	}
	steps := make([]float64, len(f.steps))
	for i, s := range f.steps {
		steps[i] = float64(s) / 100
	}
	pc := region.PlanConfig{Home: f.home, Others: region.Order(f.home, priority, names)[1:], Steps: steps, Dwell: f.dwell, Logger: logger, Registerer: reg}
	if f.rc.set() {
		w, closeClient, err := f.rc.watcher(logger, reg)
		if err != nil {
			return region.PlanConfig{}, nil, err
		}
		pc.Signal = w
		g.Go(func() error {
			defer closeClient()
			return w.Run(ctx)
		})
	} else {
		logger.Warn("no --routing-control: every region counts as on; a region cannot be switched out of traffic")
	}
	logger.Info("regional", slog.String("home", f.home), slog.Any("order", append([]string{f.home}, pc.Others...)),
		slog.Bool("routing_control", f.rc.set()))
	return pc, priority, nil
}

// router builds the regional router over home's gateway and one built per peer; it and the
// routing control's watcher run in g.
func (f *regionFlags) router(ctx context.Context, g *errgroup.Group, home *gateway.Gateway,
	build func(region string, registries []string) (*gateway.Gateway, error), reg prometheus.Registerer, logger *slog.Logger) (http.Handler, error) {
	gws, err := perRegion(f, home, build)
	if err != nil {
		return nil, err
	}
	pools := map[string]region.Pool{}
	for name, gw := range gws {
		pools[name] = gw
	}
	pc, priority, err := f.planConfig(ctx, g, reg, logger)
	if err != nil {
		return nil, err
	}
	r, err := region.New(region.Config{PlanConfig: pc, Regions: pools, Priority: priority, Admin: home})
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return r.Run(ctx) })
	return r, nil
}

// discovery builds a discovery client per peer region with newClient, and the regional
// reader over them and home's, following the plan (on, and the way back's shares); the plan
// and the routing control's watcher run in g.
func (f *regionFlags) discovery(ctx context.Context, g *errgroup.Group, home *discovery.Client, newClient func(region string, registries []string) (*discovery.Client, error),
	ready func([]apiv1.CapabilityEntry) bool, reg prometheus.Registerer, logger *slog.Logger) (*discovery.Regions, error) {
	clients, err := perRegion(f, home, newClient)
	if err != nil {
		return nil, err
	}
	plan, priority, err := f.plan(ctx, g, reg, logger)
	if err != nil {
		return nil, err
	}
	return discovery.NewRegions(discovery.RegionsConfig{Home: f.home, Clients: clients, Priority: priority,
		On: plan.OnNamed, Admit: plan.AdmitNamed, Ready: ready})
}

// nameservers builds a name server per peer region with build, and makes home's serve
// through a regional front over them; the peers' watches, the plan and the routing control's
// watcher run in g.
func (f *regionFlags) nameservers(ctx context.Context, g *errgroup.Group, home *nameserver.Server,
	build func(region string, registries []string) (*nameserver.Server, error), reg prometheus.Registerer, logger *slog.Logger) error {
	servers, err := perRegion(f, home, build)
	if err != nil {
		return err
	}
	for name, s := range servers {
		if name != f.home {
			g.Go(func() error { return s.Run(ctx, nil, nil) }) // its watch: home's front answers
		}
	}
	plan, _, err := f.plan(ctx, g, reg, logger)
	if err != nil {
		return err
	}
	home.ServeThrough(nameserver.NewRegional(plan, servers))
	return nil
}

// xds makes cfg regional: a discovery client per peer region (newClient), in the plan's
// order, and the plan's switches; the plan and the routing control's watcher run in g.
func (f *regionFlags) xds(ctx context.Context, g *errgroup.Group, cfg *xds.Config, newClient func(region string, registries []string) (*discovery.Client, error),
	reg prometheus.Registerer, logger *slog.Logger) error {
	_, peers, err := f.peerRegistries()
	if err != nil {
		return err
	}
	plan, _, err := f.plan(ctx, g, reg, logger)
	if err != nil {
		return err
	}
	cfg.Home, cfg.RegionOn = f.home, plan.OnNamed
	for _, name := range plan.Names()[1:] {
		c, err := newClient(name, peers[name])
		if err != nil {
			return fmt.Errorf("region %s: %w", name, err)
		}
		cfg.Peers = append(cfg.Peers, xds.Peer{Region: name, Discovery: c})
	}
	return nil
}

// perRegion is home's T and one built per peer region (--peer-registry) with build, by
// region.
func perRegion[T any](f *regionFlags, home T, build func(region string, registries []string) (T, error)) (map[string]T, error) {
	names, peers, err := f.peerRegistries()
	if err != nil {
		return nil, err
	}
	out := map[string]T{f.home: home}
	for _, name := range names {
		t, err := build(name, peers[name])
		if err != nil {
			return nil, fmt.Errorf("region %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// plan is the plan of the flags, running in g with the routing control's watcher, and the
// priority order of the peers.
func (f *regionFlags) plan(ctx context.Context, g *errgroup.Group, reg prometheus.Registerer, logger *slog.Logger) (*region.Plan, []string, error) {
	pc, priority, err := f.planConfig(ctx, g, reg, logger)
	if err != nil {
		return nil, nil, err
	}
	plan, err := region.NewPlan(pc)
	if err != nil {
		return nil, nil, err
	}
	g.Go(func() error { return plan.Run(ctx) })
	return plan, priority, nil
}

// scoped is what a component of region registers its series on and logs to: with --region,
// reg with the label region and logger with the attribute; without, both as they are.
func (f *regionFlags) scoped(region string, reg prometheus.Registerer, logger *slog.Logger) (prometheus.Registerer, *slog.Logger) {
	if f.home == "" {
		return reg, logger
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"region": region}, reg), logger.With(slog.String("region", region))
}
