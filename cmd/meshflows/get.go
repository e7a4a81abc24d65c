package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/deadline"
	"github.com/meshflows/meshflows/routing"
)

// remoteFlags are how the CLI's read commands (get, describe, status) reach the components.
type remoteFlags struct {
	registries            []string
	orchestrator, gateway string
	creds                 clientCreds
	timeout               time.Duration
	clients               map[string]*client.Client // made once per component: failover state lives in them
}

func (r *remoteFlags) bind(fs *pflag.FlagSet) {
	fs.StringSliceVar(&r.registries, "registry", []string{"http://127.0.0.1:7400"}, "registry base URL; repeat or comma-separate for failover")
	bindEnv(fs, "registry", "MESHFLOWS_REGISTRY")
	fs.StringVar(&r.orchestrator, "orchestrator", "http://127.0.0.1:7401", "orchestrator base URL (workflows, runs)")
	bindEnv(fs, "orchestrator", "MESHFLOWS_ORCHESTRATOR")
	fs.StringVar(&r.gateway, "gateway", "http://127.0.0.1:7402", "gateway base URL (routes)")
	bindEnv(fs, "gateway", "MESHFLOWS_GATEWAY")
	fs.DurationVar(&r.timeout, "timeout", 10*time.Second, "bound of each request")
	r.creds.bind(fs)
}

// client returns a client of one component: the registry (the URL list), the orchestrator
// or the gateway. A bad URL is a usage error (exit 2) that names it.
func (r *remoteFlags) client(which string) (*client.Client, error) {
	if c := r.clients[which]; c != nil {
		return c, nil
	}
	hc, err := r.creds.httpClient()
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	urls := r.registries
	switch which {
	case "orchestrator":
		urls = []string{r.orchestrator}
	case "gateway":
		urls = []string{r.gateway}
	}
	c, err := client.New(client.Config{Registries: urls, HTTPClient: hc, BearerToken: r.creds.token, Timeout: r.timeout})
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--%s: %w", which, err)}
	}
	if r.clients == nil {
		r.clients = map[string]*client.Client{}
	}
	r.clients[which] = c
	return c, nil
}

// getKinds are what 'meshflows get' lists, with the component each is read from.
var getKinds = []string{"services", "instances", "capabilities", "routes", "workflows", "runs", "incidents", "events", "evacuations", "overrides"}

// kindOf accepts a kind in its plural or singular form.
func kindOf(arg string) (string, error) {
	for _, k := range getKinds {
		if arg == k || arg+"s" == k {
			return k, nil
		}
	}
	return "", &exitError{code: 2, err: fmt.Errorf("unknown kind %q: want one of %s", arg, strings.Join(getKinds, ", "))}
}

// getFlags are the filters and options of 'meshflows get'.
type getFlags struct {
	remote                                    remoteFlags
	out                                       outputFlag
	capability, provider, constraint, service string
	workflow                                  string
	status                                    string
	eventType, severity, subject, text        string
	limit                                     int
	watch                                     bool
}

func newGetCmd() *cobra.Command {
	var f getFlags
	cmd := &cobra.Command{
		Use:   "get KIND",
		Short: "List services, instances, capabilities, routes, workflows, runs, incidents or events",
		Long: `List what the registry, the gateway or the orchestrator holds, as a table (-o table,
the default), a wider one (-o wide) or the API's own answer (-o json, -o yaml).

Kinds: services and instances (the registry's catalog; with --service or --provider the
registry selects them, so one service of a large fleet is cheap to list), capabilities
(discovery, with the filters --capability, --provider, --constraint, --service), routes (the
gateway's table),
workflows and runs (the orchestrator; runs need --workflow), incidents (--status) and events
(the registry's journal: --type, --severity, --subject, --q, --limit), evacuations and
overrides (the operator actions; admin).

--watch redraws whenever the answer changes: the registry's kinds follow its long poll, events
are tailed, the others are asked again every two seconds. A registry that goes away or
restarts is said so on stderr, and the watch goes on.`,
		Example: `  meshflows get instances
  meshflows get instances --service egress-jms
  meshflows get capabilities --capability messaging.publish --constraint '>=1.0 <2.0' -o wide
  meshflows get routes -o json
  meshflows get runs --workflow order-publish
  meshflows get events --severity warning --watch
  MESHFLOWS_REGISTRY=https://registry:7400 MESHFLOWS_TOKEN_FILE=token meshflows get incidents --status unresolved`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := kindOf(args[0])
			if err != nil {
				return err
			}
			if err := f.out.check("table", "wide", "json", "yaml"); err != nil {
				return err
			}
			if kind == "runs" && f.workflow == "" {
				return &exitError{code: 2, err: errors.New("get runs needs --workflow NAME")}
			}
			if !f.watch {
				return f.once(cmd.Context(), cmd.OutOrStdout(), kind)
			}
			return f.watchKind(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), kind)
		},
	}
	fs := cmd.Flags()
	f.remote.bind(fs)
	f.out.bind(cmd, "table")
	fs.StringVar(&f.capability, "capability", "", "capabilities: only this capability id")
	fs.StringVar(&f.provider, "provider", "", "capabilities, instances: only this provider")
	fs.StringVar(&f.constraint, "constraint", "", "capabilities: a semver constraint on the capability version, e.g. '>=1.0 <2.0'")
	fs.StringVar(&f.service, "service", "", "capabilities, instances, services: only this service name")
	fs.StringVar(&f.workflow, "workflow", "", "runs: the workflow whose runs to list")
	fs.StringVar(&f.status, "status", "", "incidents: open, acknowledged, resolved, ignored or unresolved")
	fs.StringVar(&f.eventType, "type", "", "events: comma-separated event types")
	fs.StringVar(&f.severity, "severity", "", "events: info, warning or error")
	fs.StringVar(&f.subject, "subject", "", "events: a subject, or a prefix ending in *")
	fs.StringVar(&f.text, "q", "", "events: text to search for (literal, case-insensitive)")
	fs.IntVar(&f.limit, "limit", 0, "events: how many (default 100)")
	fs.BoolVarP(&f.watch, "watch", "w", false, "redraw whenever the answer changes")
	return cmd
}

// fetch reads kind, trying each registry of the list in turn while they fail.
func (f *getFlags) fetch(ctx context.Context, kind string, poll client.Poll) (v any, t *table, idx int64, epoch string, err error) {
	err = tries(len(f.remote.registries), func() error {
		v, t, idx, epoch, err = f.fetchOnce(ctx, kind, poll)
		return err
	})
	return v, t, idx, epoch, err
}

// tries calls fn up to n times while it fails with a transport error or a 5xx (the client
// moves to the next registry of its list after each such failure).
func tries(n int, fn func() error) error {
	var err error
	for range max(n, 1) {
		if err = fn(); err == nil {
			return nil
		}
		var ae *apiv1.Error
		var ee *exitError
		if errors.As(err, &ee) || errors.As(err, &ae) && ae.Status < 500 {
			return err
		}
	}
	return err
}

// catalog reads the instances get services and get instances list. With --service or
// --provider the registry selects them (GET /v1/catalog/summary, up to its 10,000): a look
// at one service of a large fleet does not carry the fleet's catalog (700 MB at a million
// instances). Without a filter, when more match, or from a registry without the summary,
// it reads the whole catalog and filters it here.
func (f *getFlags) catalog(ctx context.Context, c *client.Client) (*apiv1.CatalogResponse, error) {
	if f.service != "" || f.provider != "" {
		sum, err := c.CatalogSummary(ctx, client.SummaryQuery{ServiceName: f.service, Provider: f.provider, Limit: apiv1.MaxLimit})
		var ae *apiv1.Error
		switch {
		case err == nil && len(sum.Instances) == sum.Matching:
			return &apiv1.CatalogResponse{RegistryEpoch: sum.RegistryEpoch, Region: sum.Region, Revision: sum.Revision, Instances: sum.Instances}, nil
		case err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound):
			return nil, err
		}
	}
	cat, err := c.Services(ctx, client.Page{})
	if err != nil {
		return nil, err
	}
	cat.Instances = slices.DeleteFunc(cat.Instances, func(in apiv1.Instance) bool {
		return f.service != "" && in.ServiceName != f.service ||
			f.provider != "" && !slices.ContainsFunc(in.Capabilities, func(c apiv1.Capability) bool { return c.Provider == f.provider })
	})
	return cat, nil
}

// fetchOnce reads kind once; it returns what -o json/yaml print and the table.
func (f *getFlags) fetchOnce(ctx context.Context, kind string, poll client.Poll) (any, *table, int64, string, error) {
	which := "registry"
	switch kind {
	case "routes":
		which = "gateway"
	case "workflows", "runs":
		which = "orchestrator"
	}
	c, err := f.remote.client(which)
	if err != nil {
		return nil, nil, 0, "", err
	}
	wide := f.out.value == "wide"
	switch kind {
	case "services", "instances":
		cat, err := f.catalog(ctx, c)
		if err != nil {
			return nil, nil, 0, "", err
		}
		insts := cat.Instances
		if kind == "instances" {
			return cat, instancesTable(insts, wide, cat.Region), cat.Revision, cat.RegistryEpoch, nil
		}
		return cat, servicesTable(insts, wide), cat.Revision, cat.RegistryEpoch, nil
	case "capabilities":
		q := url.Values{}
		for k, v := range map[string]string{"capability_id": f.capability, "provider": f.provider, "version": f.constraint, "service_name": f.service} {
			if v != "" {
				q.Set(k, v)
			}
		}
		ans, err := c.Capabilities(ctx, q, poll)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return ans, capabilitiesTable(ans, wide), ans.Revision, ans.RegistryEpoch, nil
	case "routes":
		var gr routing.RoutesAnswer
		if err := c.GatewayRoutes(ctx, &gr); err != nil {
			return nil, nil, 0, "", err
		}
		return gr, routesTable(&gr, wide), 0, "", nil
	case "workflows":
		wl, err := c.Workflows(ctx)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return wl, workflowsTable(wl, wide), 0, "", nil
	case "runs":
		h, err := c.Runs(ctx, f.workflow)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return h, runsTable(h, wide), 0, "", nil
	case "evacuations":
		evs, err := c.Evacuations(ctx)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return evs, evacuationsTable(evs.Evacuations), 0, "", nil
	case "overrides":
		ovs, err := c.Overrides(ctx)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return ovs, overridesTable(ovs.Overrides), 0, "", nil
	case "incidents":
		in, err := c.Incidents(ctx, f.status)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return in, incidentsTable(in, wide), 0, "", nil
	default: // events
		q := f.eventsQuery()
		if poll.Wait > 0 {
			q.Since, q.HasSince, q.Wait = poll.Index, true, poll.Wait
		}
		ev, err := c.Events(ctx, q)
		if err != nil {
			return nil, nil, 0, "", err
		}
		return ev, eventsTable(ev.Events, wide), ev.Next, "", nil
	}
}

func (f *getFlags) eventsQuery() apiv1.EventsQuery {
	q := apiv1.EventsQuery{Subject: f.subject, Severity: f.severity, Text: f.text, Limit: f.limit}
	if f.eventType != "" {
		q.Types = strings.Split(f.eventType, ",")
	}
	return q
}

func (f *getFlags) once(ctx context.Context, w io.Writer, kind string) error {
	v, t, _, _, err := f.fetch(ctx, kind, client.Poll{})
	if err != nil {
		return err
	}
	return f.print(w, v, t)
}

func (f *getFlags) print(w io.Writer, v any, t *table) error {
	switch f.out.value {
	case "json", "yaml":
		return f.out.write(w, v)
	}
	return t.write(w)
}

// watchKind redraws kind whenever its answer changes, until ctx ends.
func (f *getFlags) watchKind(ctx context.Context, w, errw io.Writer, kind string) error {
	var (
		index    int64
		epoch    string
		last     string
		failing  bool
		started  bool
		longPoll = kind == "capabilities" || kind == "events"
	)
	for ctx.Err() == nil {
		poll := client.Poll{}
		if longPoll && started {
			poll = client.Poll{Index: index, Epoch: epoch, Wait: 30 * time.Second}
		}
		v, t, idx, ep, err := f.fetch(ctx, kind, poll)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !failing {
				fmt.Fprintf(errw, "meshflows: %v; still watching\n", err)
				failing = true
			}
			deadline.Sleep(ctx, time.Second)
			continue
		}
		if failing {
			fmt.Fprintln(errw, "meshflows: answering again")
			failing = false
		}
		if epoch != "" && ep != "" && ep != epoch {
			fmt.Fprintf(errw, "meshflows: the registry restarted (epoch %s); still watching\n", ep)
		}
		index, epoch = idx, ep
		var b strings.Builder
		if kind == "events" { // a tail: the newest first, then what comes after
			switch {
			case f.out.value == "json" || f.out.value == "yaml":
				if !started || len(t.rows) > 0 {
					if err := f.print(w, v, t); err != nil {
						return err
					}
				}
			case !started:
				if err := t.write(w); err != nil {
					return err
				}
			case len(t.rows) > 0:
				t.header = nil
				if err := t.write(w); err != nil {
					return err
				}
			}
			started = true
			continue
		}
		started = true
		if err := f.print(&b, v, t); err != nil {
			return err
		}
		if b.String() != last {
			if last != "" {
				fmt.Fprintf(w, "\n--- %s\n", time.Now().Format(time.TimeOnly))
			}
			io.WriteString(w, b.String())
			last = b.String()
		}
		if !longPoll {
			deadline.Sleep(ctx, 2*time.Second)
		}
	}
	return nil
}

// table is rows of cells under a header.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if t.header != nil {
		fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	}
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func until(t time.Time) string {
	d := time.Until(t).Round(time.Second)
	if d < 0 {
		return "expired"
	}
	return d.String()
}

// instancesTable lists insts; wide adds their region (the registry's, when it has one),
// zone, readiness, generation, health, owner and capabilities.
func instancesTable(insts []apiv1.Instance, wide bool, region string) *table {
	t := &table{header: []string{"INSTANCE", "SERVICE", "VERSION", "ENDPOINT", "ELIGIBILITY", "WEIGHT", "LEASE"}}
	if wide {
		t.header = append(t.header, "REGION", "ZONE", "READINESS", "GENERATION", "HEALTH", "OWNER", "CAPABILITIES")
	}
	for _, in := range insts {
		r := []string{in.InstanceID, in.ServiceName, in.ServiceVersion, in.Endpoint, in.Eligibility, strconv.Itoa(in.Weight), until(in.LeaseExpiresAt)}
		if wide {
			var caps []string
			for _, c := range in.Capabilities {
				caps = append(caps, c.CapabilityID+"@"+c.CapabilityVersion)
			}
			r = append(r, dash(region), dash(in.Zone), dash(in.Readiness), strconv.FormatInt(in.Generation, 10), in.Health, dash(in.Owner), strings.Join(caps, ","))
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func servicesTable(insts []apiv1.Instance, wide bool) *table {
	type svc struct {
		instances, inRotation int
		caps                  map[string]bool
	}
	by := map[string]*svc{}
	for _, in := range insts {
		k := in.ServiceName + "\t" + in.ServiceVersion
		s := by[k]
		if s == nil {
			s = &svc{caps: map[string]bool{}}
			by[k] = s
		}
		s.instances++
		if apiv1.InRotation(in.Eligibility) {
			s.inRotation++
		}
		for _, c := range in.Capabilities {
			s.caps[c.CapabilityID+"@"+c.CapabilityVersion] = true
		}
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t := &table{header: []string{"SERVICE", "VERSION", "INSTANCES", "IN ROTATION"}}
	if wide {
		t.header = append(t.header, "CAPABILITIES")
	}
	for _, k := range keys {
		s := by[k]
		name, ver, _ := strings.Cut(k, "\t")
		r := []string{name, ver, strconv.Itoa(s.instances), strconv.Itoa(s.inRotation)}
		if wide {
			caps := make([]string, 0, len(s.caps))
			for c := range s.caps {
				caps = append(caps, c)
			}
			sort.Strings(caps)
			r = append(r, strings.Join(caps, ","))
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func capabilitiesTable(ans *apiv1.DiscoveryResponse, wide bool) *table {
	t := &table{header: []string{"CAPABILITY", "VERSION", "PROVIDER", "INSTANCE", "ELIGIBILITY", "WEIGHT"}}
	if wide {
		t.header = append(t.header, "SERVICE", "ENDPOINT", "ZONE", "PANIC")
	}
	for _, c := range ans.Capabilities {
		r := []string{c.CapabilityID, c.CapabilityVersion, c.Provider, c.InstanceID, c.Eligibility, strconv.Itoa(c.Weight)}
		if wide {
			r = append(r, c.ServiceName+"@"+c.ServiceVersion, c.Endpoint, dash(c.Zone), strconv.FormatBool(c.Panic))
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func routesTable(gr *routing.RoutesAnswer, wide bool) *table {
	t := &table{header: []string{"METHOD", "PATTERN", "TARGET", "INSTANCES"}}
	if wide {
		t.header = append(t.header, "SOURCE", "WEIGHT", "IDEMPOTENT", "MAX BODY", "SCHEMA")
	}
	for _, rt := range gr.Routes {
		target := rt.Service + "@" + rt.Version
		if rt.Source == "static" {
			target = rt.Upstream
		}
		r := []string{rt.Method, rt.Pattern, target, dash(strings.Join(rt.Instances, ","))}
		if wide {
			w := "-"
			if rt.Weight != nil {
				w = strconv.Itoa(*rt.Weight)
			}
			maxBody := "-" // the gateway's --max-body-bytes
			if rt.MaxBodyBytes > 0 {
				maxBody = strconv.FormatInt(rt.MaxBodyBytes, 10)
			}
			if rt.Streaming {
				maxBody += ",streamed"
			}
			r = append(r, rt.Source, w, strconv.FormatBool(rt.Idempotent), maxBody, dash(rt.Schema))
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func workflowsTable(wl *apiv1.WorkflowList, wide bool) *table {
	t := &table{header: []string{"WORKFLOW", "PUBLISHED", "REVISION", "CONTRACT", "PROVIDERS"}}
	if wide {
		t.header = append(t.header, "PUBLISHED REVISION", "VALIDATED")
	}
	for _, w := range wl.Workflows {
		r := []string{w.Name, strconv.FormatBool(w.Published), strconv.Itoa(w.Revision), w.ContractStatus, w.ProviderStatus}
		if wide {
			r = append(r, strconv.Itoa(w.PublishedRevision), w.ValidatedAt.UTC().Format(time.RFC3339))
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func runsTable(h *apiv1.RunHistory, wide bool) *table {
	t := &table{header: []string{"RUN", "STATUS", "TRIGGER", "STARTED", "DURATION"}}
	if wide {
		t.header = append(t.header, "STEPS", "FAILED STEP")
	}
	for _, r := range h.Runs {
		row := []string{r.RunID, r.Status, r.Trigger, r.StartedAt.UTC().Format(time.RFC3339), fmt.Sprintf("%.1fms", r.DurationMS)}
		if wide {
			failed := "-"
			for _, s := range r.Steps {
				if s.Error != nil {
					failed = s.StepID + ": " + s.Error.Code
					break
				}
			}
			row = append(row, strconv.Itoa(len(r.Steps)), failed)
		}
		t.rows = append(t.rows, row)
	}
	return t
}

func incidentsTable(in *apiv1.IncidentsResponse, wide bool) *table {
	t := &table{header: []string{"ID", "SEVERITY", "STATUS", "KIND", "SUBJECT", "OPENED"}}
	if wide {
		t.header = append(t.header, "OCCURRENCES", "OWNER", "SUMMARY")
	}
	for _, i := range in.Incidents {
		r := []string{i.ID, i.Severity, i.Status, i.Kind, i.Subject, i.OpenedAt.UTC().Format(time.RFC3339)}
		if wide {
			r = append(r, strconv.Itoa(i.Occurrences), dash(i.Owner), i.Summary)
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func eventsTable(es []apiv1.Event, wide bool) *table {
	t := &table{header: []string{"SEQ", "TIME", "SEVERITY", "TYPE", "SUBJECT", "MESSAGE"}}
	for _, e := range es {
		msg := e.Message
		if !wide && len(msg) > 100 {
			msg = msg[:97] + "..."
		}
		t.rows = append(t.rows, []string{strconv.FormatInt(e.Seq, 10), e.Time.UTC().Format(time.RFC3339), e.Severity, e.Type, e.Subject, msg})
	}
	return t
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
