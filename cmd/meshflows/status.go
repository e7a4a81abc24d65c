package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/routing"
)

// description is what 'meshflows describe instance' shows: the registration and why the
// instance is (not) in rotation.
type description struct {
	Instance    *apiv1.Instance    `json:"instance"`
	Eligibility *apiv1.Explanation `json:"eligibility,omitempty"`
	// EligibilityError says why the explanation is missing (a registry without the engine).
	EligibilityError string `json:"eligibility_error,omitempty"`
}

func newDescribeCmd() *cobra.Command {
	var (
		remote remoteFlags
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "describe instance ID",
		Short: "Show one instance: its registration, lease, eligibility with the evidence, outcomes beside its peers, last transitions",
		Long: `Show everything the registry knows about one instance in one screen: what it registered
(service, endpoint, zone, capabilities, manifest routes), its lease, and why it is or is not in
rotation — its eligibility state and weight, each reason with its evidence, what gateways and
orchestrators saw of it over the outlier window beside its peers' baseline, and its last
transitions.`,
		Example: "  meshflows describe instance egress-jms-7410\n  meshflows describe instance egress-jms-7410 -o json",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 || args[0] != "instance" {
				return &exitError{code: 2, err: errors.New("usage: meshflows describe instance ID")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			c, err := remote.client("registry")
			if err != nil {
				return err
			}
			in, err := c.Instance(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			d := description{Instance: in}
			if d.Eligibility, err = c.Eligibility(cmd.Context(), args[1]); err != nil {
				d.Eligibility, d.EligibilityError = nil, err.Error()
			}
			if out.value == "json" || out.value == "yaml" {
				return out.write(cmd.OutOrStdout(), d)
			}
			return d.text(cmd.OutOrStdout())
		},
	}
	remote.bind(cmd.Flags())
	out.bind(cmd, "text")
	return cmd
}

func (d description) text(w io.Writer) error {
	in := d.Instance
	var b strings.Builder
	fmt.Fprintf(&b, "Instance:     %s\nService:      %s %s\nEndpoint:     %s\n", in.InstanceID, in.ServiceName, in.ServiceVersion, in.Endpoint)
	fmt.Fprintf(&b, "Zone:         %s\nGeneration:   %d\nOwner:        %s\nRegistered:   %s\n", dash(in.Zone), in.Generation, dash(in.Owner), in.RegisteredAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Lease:        expires %s (in %s)\nHealth:       %s (self-reported)\n", in.LeaseExpiresAt.UTC().Format(time.RFC3339), until(in.LeaseExpiresAt), in.Health)
	fmt.Fprintf(&b, "Readiness:    %s\n", readinessSaid(in.Readiness))
	b.WriteString("Capabilities:\n")
	for _, c := range in.Capabilities {
		fmt.Fprintf(&b, "  %s %s (provider %s, contract schema %s)\n", c.CapabilityID, c.CapabilityVersion, c.Provider, c.ContractSchemaVersion)
	}
	if m := in.Manifest; m != nil && len(m.Routes) > 0 {
		b.WriteString("Routes:\n")
		for _, r := range m.Routes {
			fmt.Fprintf(&b, "  %s %s\n", strings.Join(r.Methods, ","), r.Path)
		}
	}
	if e := d.Eligibility; e != nil {
		fmt.Fprintf(&b, "Eligibility:  %s, weight %d, since %s\n", e.State, e.Weight, e.Since.UTC().Format(time.RFC3339))
		for _, r := range e.Reasons {
			fmt.Fprintf(&b, "  %s: %s (%s)\n", r.Code, r.Evidence.Detail, r.Evidence.At.UTC().Format(time.RFC3339))
		}
		if o := e.Outcomes; o != nil {
			fmt.Fprintf(&b, "Outcomes:     %d errors in %d requests (%.2f%%) over %ds from %d reporters", o.Errors, o.Requests, 100*o.ErrorShare, o.WindowSeconds, len(o.Reporters))
			if o.LatencyMsP99 > 0 {
				fmt.Fprintf(&b, ", p99 %.1f ms", o.LatencyMsP99)
			}
			b.WriteString("\n")
			for _, c := range o.Cohorts {
				if c.Baseline == nil {
					fmt.Fprintf(&b, "  peers in %s/%s: none comparable (each needs enough requests in the window)\n", c.CapabilityID, dash(c.Zone))
					continue
				}
				fmt.Fprintf(&b, "  peers in %s/%s: median %.2f%% of %d comparable\n", c.CapabilityID, dash(c.Zone), 100**c.Baseline, c.Comparable)
			}
			for _, r := range o.Reporters {
				fmt.Fprintf(&b, "  reporter %s: %d errors in %d requests\n", r.Reporter, r.Errors, r.Requests)
			}
		}
		if n := len(e.Transitions); n > 0 {
			b.WriteString("Transitions (newest last):\n")
			for _, t := range e.Transitions[max(0, n-10):] {
				fmt.Fprintf(&b, "  %s  %s -> %s  %s\n", t.At.UTC().Format(time.RFC3339), t.From, t.To, strings.Join(t.Reasons, ", "))
			}
		}
	} else {
		fmt.Fprintf(&b, "Eligibility:  %s (%s)\n", in.Eligibility, d.EligibilityError)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// statusReport is what 'meshflows status' shows.
type statusReport struct {
	Registry      string                `json:"registry"`
	Reachable     bool                  `json:"reachable"`
	Error         string                `json:"error,omitempty"`
	Health        *apiv1.HealthResponse `json:"health,omitempty"`
	Complete      bool                  `json:"complete"`
	OpenIncidents map[string]int        `json:"open_incidents,omitempty"` // by severity
	Gateway       *gatewayStatus        `json:"gateway,omitempty"`
	// Evacuations are the active and returning ones (read with an admin identity; nil
	// without one).
	Evacuations []apiv1.Evacuation `json:"evacuations,omitempty"`
	// ServerCertificate is the registry's server certificate a new handshake gets (https
	// registries only).
	ServerCertificate *certificateStatus `json:"server_certificate,omitempty"`
	// Verdict is healthy, degraded or unreachable (exit 0, 1, 2).
	Verdict string   `json:"verdict"`
	Why     []string `json:"why,omitempty"`
}

// certificateStatus is a certificate a server presented.
type certificateStatus struct {
	Subject     string    `json:"subject"`
	Serial      string    `json:"serial"`
	NotAfter    time.Time `json:"not_after"`
	LeftSeconds int64     `json:"left_seconds"`
}

// certificateWarning is how little life left makes status degraded, as the
// MeshFlowsCertificateExpiresSoon alert.
const certificateWarning = 7 * 24 * time.Hour

// serverCertificate returns the certificate a new TLS handshake with the https URL gets, or
// nil for another URL (or when the handshake fails: the status request said why).
func (r *remoteFlags) serverCertificate(rawURL string) *certificateStatus {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	cfg, err := client.TLSConfig(r.creds.ca, r.creds.cert, r.creds.key)
	if err != nil || cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	cfg.ServerName = u.Hostname()
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: r.timeout}, "tcp", host, cfg)
	if err != nil {
		return nil
	}
	defer c.Close()
	leaf := c.ConnectionState().PeerCertificates[0]
	return &certificateStatus{Subject: leaf.Subject.String(), Serial: leaf.SerialNumber.String(), NotAfter: leaf.NotAfter.UTC(),
		LeftSeconds: int64(time.Until(leaf.NotAfter) / time.Second)}
}

type gatewayStatus struct {
	URL        string `json:"url"`
	Source     string `json:"source,omitempty"`
	AgeSeconds int64  `json:"age_seconds"`
	Routes     int    `json:"routes"`
	// Refusing is how many routes refuse requests on staleness (past their max_stale).
	Refusing int    `json:"refusing_routes"`
	Error    string `json:"error,omitempty"`
}

func newStatusCmd() *cobra.Command {
	var (
		remote    remoteFlags
		out       outputFlag
		noGateway bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether the registry is healthy: epoch, revision, completeness, counts, incidents, the gateway's table age",
		Long: `Ask the registry (and the gateway, unless --no-gateway) how things stand: the registry's
status, epoch and revision, whether its answers are complete (not warming up), how many
instances and capabilities it holds, self-preservation, the open incidents by severity, and
the gateway's routing table source and age.

Exit status: 0 healthy, 1 degraded (store unreachable, warming up, self-preservation, a
critical incident open, the gateway on a stale table or unreachable), 2 the registry is
unreachable.`,
		Example: "  meshflows status\n  meshflows status --no-gateway -o json\n  MESHFLOWS_REGISTRY=https://10.0.0.5:7400 MESHFLOWS_CA=ca.pem meshflows status",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			r, err := remote.status(cmd.Context(), !noGateway)
			if err != nil {
				return err
			}
			if out.value == "json" || out.value == "yaml" {
				err = out.write(cmd.OutOrStdout(), r)
			} else {
				err = r.text(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			switch r.Verdict {
			case "degraded":
				return &exitError{code: 1, quiet: true, err: errors.New("degraded")}
			case "unreachable":
				return &exitError{code: 2, quiet: true, err: errors.New("unreachable")}
			}
			return nil
		},
	}
	remote.bind(cmd.Flags())
	out.bind(cmd, "text")
	cmd.Flags().BoolVar(&noGateway, "no-gateway", false, "do not ask the gateway")
	return cmd
}

func (r *remoteFlags) status(ctx context.Context, withGateway bool) (*statusReport, error) {
	c, err := r.client("registry")
	if err != nil {
		return nil, err
	}
	rep := &statusReport{Registry: strings.Join(r.registries, ","), Verdict: "healthy"}
	var h *apiv1.HealthResponse
	err = tries(len(r.registries), func() (err error) { h, err = c.DiscoveryHealth(ctx); return err })
	if err != nil {
		rep.Verdict, rep.Error = "unreachable", err.Error()
		if withGateway { // the registry away, what matters is whether the gateway still routes
			if err := r.gatewayStatus(ctx, rep, func(string) {}); err != nil {
				return nil, err
			}
		}
		return rep, nil
	}
	rep.Reachable, rep.Health = true, h
	if rep.ServerCertificate = r.serverCertificate(r.registries[0]); rep.ServerCertificate != nil {
		if left := time.Duration(rep.ServerCertificate.LeftSeconds) * time.Second; left < certificateWarning {
			rep.Verdict, rep.Why = "degraded", append(rep.Why, fmt.Sprintf("the registry's server certificate expires in %s (%s)", left.Round(time.Minute), rep.ServerCertificate.NotAfter.Format(time.RFC3339)))
		}
	}
	// a selection that matches nothing: the answer is small and says whether it is complete
	if caps, err := c.Capabilities(ctx, url.Values{"capability_id": {"none.none"}}, client.Poll{}); err == nil {
		rep.Complete = caps.Complete
	}
	degraded := func(why string) { rep.Verdict, rep.Why = "degraded", append(rep.Why, why) }
	if h.Status != "ok" {
		degraded("registry status " + h.Status)
	}
	if h.StoreError != "" {
		degraded("store: " + h.StoreError)
	}
	if !rep.Complete {
		degraded("warming up: answers are incomplete until every live provider is back")
	}
	if h.SelfPreservation {
		degraded("self-preservation: lease expiry does not evict")
	}
	for _, z := range h.ZoneOutliers {
		degraded(fmt.Sprintf("zone %s of %s is a zone outlier (%.2f%% errors against %.2f%% elsewhere): %s", z.Zone, z.CapabilityID,
			100*z.ErrorShare, 100*z.Baseline, incident.EvacuateCommand(z.CapabilityID, z.Zone)))
	}
	for _, over := range h.Budgets.Over() {
		degraded(over)
	}
	if in, err := c.Incidents(ctx, "unresolved"); err == nil {
		rep.OpenIncidents = map[string]int{}
		for _, i := range in.Incidents {
			if i.Status == apiv1.IncidentIgnored {
				continue
			}
			rep.OpenIncidents[i.Severity]++
		}
		if n := rep.OpenIncidents[apiv1.IncidentCritical]; n > 0 {
			degraded(fmt.Sprintf("%d critical incidents open", n))
		}
	}
	if evs, err := c.Evacuations(ctx); err == nil { // admin only: others are not told
		for _, ev := range evs.Evacuations {
			if ev.State != apiv1.EvacuationEnded {
				rep.Evacuations = append(rep.Evacuations, ev)
			}
		}
	}
	if withGateway {
		if err := r.gatewayStatus(ctx, rep, degraded); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// gatewayStatus asks the gateway where its table comes from, how old it is and how many
// routes refuse requests on staleness, and says what is wrong with degraded.
func (r *remoteFlags) gatewayStatus(ctx context.Context, rep *statusReport, degraded func(string)) error {
	g := &gatewayStatus{URL: r.gateway}
	rep.Gateway = g
	gc, err := r.client("gateway")
	if err != nil {
		return err
	}
	// the full table or, without gateway_admin, its summary: both say source, age and refusals
	var ans struct {
		routing.RoutesSummary
		Routes []json.RawMessage `json:"routes"`
	}
	if err := gc.GatewayRoutes(ctx, &ans); err != nil {
		g.Error = err.Error()
		degraded("gateway: " + err.Error())
		return nil
	}
	g.Source, g.AgeSeconds, g.Routes, g.Refusing = ans.Source, ans.AgeSeconds, ans.RouteCount, ans.RefusingCount
	if !ans.Summary {
		g.Routes = len(ans.Routes)
	}
	if g.Source != "fresh" {
		degraded(fmt.Sprintf("gateway routes on a %s table, %d s old", g.Source, g.AgeSeconds))
	}
	if g.Refusing > 0 {
		degraded(fmt.Sprintf("gateway: %d routes refuse requests (503 STALE_VIEW_EXPIRED): their view is past their max_stale", g.Refusing))
	}
	return nil
}

func (r *statusReport) text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Registry:     %s\n", r.Registry)
	if !r.Reachable {
		fmt.Fprintf(&b, "Status:       UNREACHABLE: %s\n", r.Error)
		r.Gateway.line(&b)
		_, err := io.WriteString(w, b.String())
		return err
	}
	h := r.Health
	complete := "complete"
	if !r.Complete {
		complete = "incomplete (warming up)"
	}
	fmt.Fprintf(&b, "Status:       %s, store %s, up %s\nEpoch:        %s, revision %d, answers %s\n", h.Status, h.Store,
		(time.Duration(h.UptimeSeconds) * time.Second).String(), h.RegistryEpoch, h.Revision, complete)
	if h.Region != "" {
		fmt.Fprintf(&b, "Region:       %s\n", h.Region)
	}
	fmt.Fprintf(&b, "Holds:        %d instances, %d capabilities\nSelf-preservation: %v\n", h.ActiveInstances, h.ActiveCapabilities, h.SelfPreservation)
	for _, z := range h.ZoneOutliers {
		fmt.Fprintf(&b, "Zone outlier: %s in %s: %d errors in %d requests (%.2f%%, lower bound %.2f%%) against the median %.2f%% of %d other zones\n",
			z.CapabilityID, z.Zone, z.Errors, z.Requests, 100*z.ErrorShare, 100*z.LowerBound, 100*z.Baseline, z.OtherZones)
	}
	if bu := h.Budgets; bu != nil {
		fmt.Fprintf(&b, "Budgets:      withdrawal p99 %.1f s of %.0f s (%d in %s), admission p99 %.1f s of %.0f s (%d)\n",
			bu.WithdrawalP99Seconds, bu.WithdrawalBudgetSeconds, bu.Withdrawals, time.Duration(bu.WindowSeconds)*time.Second,
			bu.AdmissionP99Seconds, bu.AdmissionBudgetSeconds, bu.Admissions)
	}
	if r.OpenIncidents != nil {
		fmt.Fprintf(&b, "Incidents:    %d critical, %d warning, %d info open\n", r.OpenIncidents["critical"], r.OpenIncidents["warning"], r.OpenIncidents["info"])
	}
	for _, ev := range r.Evacuations {
		scope := "every capability"
		if ev.CapabilityID != "" {
			scope = ev.CapabilityID
		}
		switch {
		case ev.Return != nil:
			fmt.Fprintf(&b, "Evacuation:   %s zone %s (%s) returning: step %d of %d, weight %d, next at %s\n", ev.ID, ev.Zone, scope,
				ev.Return.Step, len(ev.Return.Steps), ev.Return.Weight, ev.Return.NextStepAt.Format(time.RFC3339))
		default:
			fmt.Fprintf(&b, "Evacuation:   %s zone %s (%s) %s until %s by %s: %s\n", ev.ID, ev.Zone, scope, ev.State,
				ev.ExpiresAt.Format(time.RFC3339), ev.CreatedBy, ev.Reason)
		}
	}
	r.Gateway.line(&b)
	if c := r.ServerCertificate; c != nil {
		fmt.Fprintf(&b, "Certificate:  %s, serial %s, expires %s (in %s)\n", c.Subject, c.Serial, c.NotAfter.Format(time.RFC3339),
			(time.Duration(c.LeftSeconds) * time.Second).Round(time.Minute))
	}
	fmt.Fprintf(&b, "Verdict:      %s\n", strings.ToUpper(r.Verdict))
	for _, why := range r.Why {
		fmt.Fprintf(&b, "  - %s\n", why)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// readinessSaid says what tells the registry an instance is ready, for describe.
func readinessSaid(r string) string {
	switch r {
	case apiv1.ReadinessProbe:
		return "probe (the registry probes the health endpoint of its manifest)"
	case apiv1.ReadinessRuntime:
		return "runtime (the runtime that runs it reports readiness)"
	case apiv1.ReadinessNone:
		return "none (no health endpoint and no runtime: in rotation on its registration and heartbeats alone)"
	}
	return "-"
}

// line writes the gateway's line of status (nothing without one).
func (g *gatewayStatus) line(b *strings.Builder) {
	switch {
	case g == nil:
	case g.Error != "":
		fmt.Fprintf(b, "Gateway:      %s: %s\n", g.URL, g.Error)
	default:
		fmt.Fprintf(b, "Gateway:      %s: %d routes, table %s, %d s old", g.URL, g.Routes, g.Source, g.AgeSeconds)
		if g.Refusing > 0 {
			fmt.Fprintf(b, ", %d refusing (past their max_stale)", g.Refusing)
		}
		b.WriteString("\n")
	}
}
