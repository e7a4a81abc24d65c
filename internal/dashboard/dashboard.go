package dashboard

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/routing"
)

//go:embed assets templates.html
var files embed.FS

// Config configures a Dashboard.
type Config struct {
	// RegistryURL, GatewayURL and OrchestratorURL are the components' base URLs; an empty
	// one leaves its pages saying so.
	RegistryURL, GatewayURL, OrchestratorURL string
	// RegistryURLs, when set, are the registries to fail over between, in turn (RegistryURL
	// is then ignored): --registry takes a list here as in every other command.
	RegistryURLs []string
	// Client talks to them (default: a plain client).
	Client *http.Client
	// AdminToken signs in with every permission (the sign-in page, a bearer token or the
	// "token" field of a write action); Viewers, when set, identifies other callers by
	// client certificate or bearer token and says what each may see and do. Without
	// Insecure every page but the sign-in page, /healthz and the assets needs one of them;
	// Insecure opens everything (meshflows dev).
	AdminToken string
	Viewers    Viewers
	Insecure   bool
	// SessionTTL is how long a sign-in lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Logger receives sign-ins and write actions, with who did them (default: discarded).
	Logger *slog.Logger
	// ExpiringWithin marks an instance "expiring soon" (default 30 s, one heartbeat interval).
	ExpiringWithin time.Duration
	// MapLimit is the most routes the route map draws (default 50).
	MapLimit int
	// TableLimit is the most instances the capabilities table lists (default 500, at most
	// 10,000): of a large fleet it shows the first that match the filters, and the registry
	// counts them all.
	TableLimit int
	// GrafanaURL, when set, is a Grafana with deploy/grafana's dashboards: each page links
	// the matching one ("Metrics").
	GrafanaURL string
	// TraceURLTemplate, when set, links every run, and every event that names a trace
	// (attrs.trace_id: a failed run's), to its trace: "{trace_id}" in it is replaced, as in
	// https://tempo.example/trace/{trace_id}.
	TraceURLTemplate string
	// Scale is what an incident's Scale provider button calls (neither set: the button is
	// disabled and says why).
	Scale ScaleHook
	Now   func() time.Time
}

// Dashboard serves the console.
type Dashboard struct {
	cfg                    Config
	tmpl                   *template.Template
	sessions               sessions
	adminToken             atomic.Pointer[string] // Config.AdminToken, then SetAdminToken's
	adminGen               atomic.Uint64          // moves with every new admin token
	registry, gateway, orc *client.Client         // typed clients of the components (see source)
}

// New returns a Dashboard.
func New(cfg Config) (*Dashboard, error) {
	if !cfg.Insecure && cfg.AdminToken == "" && cfg.Viewers == nil {
		return nil, errors.New("dashboard: give an admin token (--admin-token-file) and/or identities (--client-ca or --jwt-keys with --rbac), or run --insecure")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("dashboard: session TTL %s is negative", cfg.SessionTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.ExpiringWithin == 0 {
		cfg.ExpiringWithin = 30 * time.Second
	}
	if cfg.MapLimit == 0 {
		cfg.MapLimit = 50
	}
	if cfg.TableLimit == 0 {
		cfg.TableLimit = 500
	}
	if cfg.TableLimit < 0 || cfg.TableLimit > apiv1.MaxLimit {
		return nil, fmt.Errorf("dashboard: table limit %d: want 1 to %d (what the registry lists at most)", cfg.TableLimit, apiv1.MaxLimit)
	}
	if cfg.GrafanaURL != "" {
		u, err := url.Parse(cfg.GrafanaURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("dashboard: Grafana URL %q: want http(s)://host[/path]", cfg.GrafanaURL)
		}
		cfg.GrafanaURL = strings.TrimSuffix(cfg.GrafanaURL, "/")
	}
	if t := cfg.TraceURLTemplate; t != "" {
		u, err := url.Parse(strings.ReplaceAll(t, "{trace_id}", "0"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(t, "{trace_id}") {
			return nil, fmt.Errorf("dashboard: trace URL template %q: want an http(s) URL with {trace_id} in it", t)
		}
	}
	if err := cfg.Scale.validate(); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t, err := template.New("").Funcs(template.FuncMap{
		"json":     func(v any) string { b, _ := json.MarshalIndent(v, "", "  "); return string(b) },
		"ago":      func(t time.Time) string { return cfg.Now().Sub(t).Round(time.Second).String() },
		"in":       func(t time.Time) string { return t.Sub(cfg.Now()).Round(time.Second).String() },
		"join":     strings.Join,
		"list":     func(s ...string) []string { return s },
		"traceURL": func(id string) string { return traceURL(cfg.TraceURLTemplate, id) },
		"eventTrace": func(e eventRow) string {
			id, _ := e.Attrs["trace_id"].(string)
			return traceURL(cfg.TraceURLTemplate, id)
		},
		"incidentRunbook": incidentRunbook,
		"incidentLogs":    func(in apiv1.Incident) string { return incidentLogsAt(in, cfg.Now()) },
		"pct":             func(f float64) string { return strconv.FormatFloat(f*100, 'f', 0, 64) + "%" },
		"pct2":            func(f float64) string { return strconv.FormatFloat(f*100, 'f', 2, 64) + "%" },
		"ms":              func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) + " ms" },
		"utc":             func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"depth":           func(path string) int { return strings.Count(path, ".steps[") }, // a branch's steps are one level down, like a loop body's
	}).ParseFS(files, "templates.html")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, tmpl: t}
	d.adminToken.Store(&cfg.AdminToken)
	registries := cfg.RegistryURLs
	if len(registries) == 0 && cfg.RegistryURL != "" {
		registries = []string{cfg.RegistryURL}
	}
	for _, s := range []struct {
		c    **client.Client
		name string
		base []string
	}{{&d.registry, "registry", registries}, {&d.gateway, "gateway", nonEmpty(cfg.GatewayURL)}, {&d.orc, "orchestrator", nonEmpty(cfg.OrchestratorURL)}} {
		if *s.c, err = source(s.base, cfg.Client); err != nil {
			return nil, fmt.Errorf("dashboard: %s URL: %w", s.name, err)
		}
	}
	return d, nil
}

// Handler serves every page, the fragments the JS fetches, the write actions and the assets.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(files, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	// Every page needs the read permission of what it shows, every action its own (access.go).
	mux.HandleFunc("GET /login", d.login)
	mux.HandleFunc("POST /login", d.login)
	mux.HandleFunc("POST /logout", d.logout)
	mux.HandleFunc("GET /{$}", d.read(permSignedIn, d.overview))
	mux.HandleFunc("GET /capabilities", d.read(PermDiscover, d.capabilities))
	mux.HandleFunc("GET /capabilities/fragment", d.read(PermDiscover, d.capabilitiesFragment))
	mux.HandleFunc("POST /capabilities/refresh", d.write(PermAdmin, d.refresh))
	mux.HandleFunc("GET /validation", d.read(PermWorkflowsRead, d.validation))
	mux.HandleFunc("GET /validation/{name}/export", d.read(PermWorkflowsRead, d.export))
	mux.HandleFunc("POST /validation/{name}/revalidate", d.write(PermWorkflowsWrite, d.revalidate))
	mux.HandleFunc("POST /validation/upload", d.write(PermWorkflowsWrite, d.upload))
	mux.HandleFunc("POST /validation/{name}/publish", d.write(PermWorkflowsWrite, d.publish))
	mux.HandleFunc("GET /routes", d.read(PermGatewayAdmin, d.routes))
	mux.HandleFunc("GET /routes/map", d.read(PermGatewayAdmin, d.routeMap))
	mux.HandleFunc("GET /routes/health.csv", d.read(PermGatewayAdmin, d.routesHealthExport))
	mux.HandleFunc("GET /logs", d.read(PermDiscover, d.events))
	mux.HandleFunc("GET /events", d.read(PermDiscover, func(w http.ResponseWriter, r *http.Request) { // the Logs view's name before
		http.Redirect(w, r, "/logs?"+r.URL.RawQuery, http.StatusMovedPermanently)
	}))
	mux.HandleFunc("GET /registry/metrics", d.read(PermDiscover, d.metrics)) // /metrics is the dashboard's own Prometheus endpoint
	mux.HandleFunc("GET /events/fragment", d.read(PermDiscover, d.eventsFragment))
	mux.HandleFunc("GET /events/export", d.read(PermDiscover, d.eventsExport))
	mux.HandleFunc("GET /incidents", d.read(PermDiscover, d.incidents))
	mux.HandleFunc("GET /incidents/timeline.csv", d.read(PermDiscover, d.timelineExport))
	mux.HandleFunc("POST /incidents/{id}/acknowledge", d.write(PermDiscover, d.incidentAction))
	mux.HandleFunc("POST /incidents/{id}/resolve", d.write(PermDiscover, d.incidentAction))
	mux.HandleFunc("POST /incidents/{id}/ignore", d.write(PermDiscover, d.incidentAction))
	mux.HandleFunc("POST /incidents/acknowledge", d.write(PermDiscover, d.bulkAcknowledge))
	mux.HandleFunc("GET /incidents/{id}", d.read(PermDiscover, d.investigate))
	mux.HandleFunc("GET /slice", d.read(permSignedIn, d.slice))     // the permission of what it names (slices.go)
	mux.HandleFunc("GET /compare", d.read(permSignedIn, d.compare)) // likewise
	mux.HandleFunc("POST /incidents/{id}/scale", d.write(PermAdmin, d.scale))
	mux.HandleFunc("GET /evacuations", d.read(PermDiscover, d.evacuations))
	mux.HandleFunc("POST /evacuations/{id}/cancel", d.write(PermAdmin, d.evacuationAction))
	mux.HandleFunc("POST /evacuations/{id}/extend", d.write(PermAdmin, d.evacuationAction))
	mux.HandleFunc("GET /runbooks", d.read(permSignedIn, d.runbooks))
	mux.HandleFunc("GET /runbooks/{name}", d.read(permSignedIn, d.runbooks))
	mux.HandleFunc("GET /workflows", d.read(PermWorkflowsRead, d.workflows))
	mux.HandleFunc("POST /workflows/{name}/run", d.write(PermWorkflowsRun, d.run))
	mux.HandleFunc("GET /workflows/{name}/runs/{run_id}", d.read(PermWorkflowsRead, d.runPage))
	mux.HandleFunc("POST /workflows/{name}/runs/{run_id}/cancel", d.write(PermWorkflowsRun, d.cancelRun))
	mux.HandleFunc("GET /workflows/{name}/runs", d.read(PermWorkflowsRead, d.sliceRuns))
	mux.HandleFunc("GET /workflows/health.csv", d.read(PermWorkflowsRead, d.triggerExport))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", httpapi.NotRouted(mux))         // 405 with Allow, or 404, with the error body
	return http.NewCrossOriginProtection().Handler(mux) // a signed-in browser's write actions come from this origin only
}

// upstreamStatus is the status a failed call to a component answers: its own 404 (a workflow
// or an incident that does not exist) and 400 (an upload that is not a workflow) are that
// here too; anything else is 502.
func upstreamStatus(err error) int {
	var ae *apiv1.Error
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusBadRequest) {
		return ae.Status // the request's own fault (a bad workflow, a bad filter): said as the component said it
	}
	return http.StatusBadGateway
}

// page is what every template gets.
type page struct {
	Title    string
	Path     string
	Insecure bool
	// Viewer is who is signed in ("" in open mode).
	Viewer string
	Errors []string
	Data   any
	// Metrics links the page's Grafana dashboard (empty without --grafana-url).
	Metrics string
}

// grafanaDashboards maps each page to the uid of the deploy/grafana dashboard with its
// metrics.
var grafanaDashboards = map[string]string{
	"/": "meshflows-registry", "/logs": "meshflows-registry", "/registry/metrics": "meshflows-registry", "/incidents": "meshflows-registry",
	"/capabilities": "meshflows-providers",
	"/routes":       "meshflows-routes", "/routes/map": "meshflows-routes", "/workflows": "meshflows-routes", "/validation": "meshflows-routes",
}

// metricsLink returns the Grafana dashboard of the page at path, or "".
func (d *Dashboard) metricsLink(path string) string {
	if d.cfg.GrafanaURL == "" {
		return ""
	}
	uid, ok := grafanaDashboards[path]
	if !ok && strings.HasPrefix(path, "/workflows/") {
		uid, ok = "meshflows-routes", true
	}
	if !ok {
		return ""
	}
	return d.cfg.GrafanaURL + "/d/" + uid
}

// render answers the page name. It is rendered whole before a byte is sent, so that a
// template that fails answers 500 alone, not a page cut short with the error after it.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, name, title string, data any, errs []string) {
	var b bytes.Buffer
	if err := d.tmpl.ExecuteTemplate(&b, name, page{Title: title, Path: r.URL.Path, Insecure: d.cfg.Insecure, Viewer: viewerOf(r).identity, Errors: errs, Data: data, Metrics: d.metricsLink(r.URL.Path)}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
	w.Write(b.Bytes()) // an error here is the client's going: nothing to tell it
}

func errString(what string, err error) []string {
	if err == nil {
		return nil
	}
	return []string{what + ": " + err.Error()}
}

// --- overview ---

type overviewData struct {
	Health   *apiv1.HealthResponse
	Complete bool
	Routes   *routing.RoutesAnswer
	Failing  []string
	// Workflows: the viewer may see them (Failing is then meaningful).
	Workflows bool
	Counts    map[string]int
	// Open counts open and acknowledged incidents by severity; Incidents is false when the
	// registry raises none (no eligibility engine).
	Open      map[string]int
	Incidents bool
	// Recent is the newest events.
	Recent []eventRow
	// Evacuations are those that hold or return now; Outliers counts the instances ejected
	// as relative outliers (the registry's latest sample).
	Evacuations []apiv1.Evacuation
	Outliers    string
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var data overviewData
	var errs []string
	v := viewerOf(r)
	withheld := func(what, perm string) {
		errs = append(errs, fmt.Sprintf("%s withheld: identity %q needs a role granting %s", what, v.identity, perm))
	}
	if !d.may(v, PermDiscover) {
		withheld("the registry, incidents and events", PermDiscover)
	} else if h, err := d.registry.DiscoveryHealth(ctx); err != nil {
		errs = append(errs, errString("registry", err)...)
	} else {
		data.Health = h
		if caps, err := d.registry.Capabilities(ctx, noCapability, client.Poll{}); err == nil {
			data.Complete = caps.Complete
		}
	}
	if !d.may(v, PermGatewayAdmin) {
		withheld("the gateway's table", PermGatewayAdmin)
	} else if gr, err := d.gatewayTable(ctx); err != nil {
		errs = append(errs, errString("gateway", err)...)
	} else {
		data.Routes = gr
	}
	if !d.may(v, PermWorkflowsRead) {
		withheld("the workflows", PermWorkflowsRead)
	} else {
		data.Workflows = true
		wl, err := d.orc.Workflows(ctx)
		if err != nil {
			errs = append(errs, errString("orchestrator", err)...)
		}
		for _, wf := range wl.Workflows {
			if wf.ContractStatus == apiv1.StatusFailed || wf.ProviderStatus == apiv1.StatusFailed {
				data.Failing = append(data.Failing, wf.Name)
			}
		}
	}
	if d.may(v, PermDiscover) {
		if list, err := d.registry.Incidents(ctx, "unresolved"); err == nil {
			data.Incidents, data.Open = true, map[string]int{}
			for _, in := range list.Incidents {
				if in.Status != apiv1.IncidentIgnored {
					data.Open[in.Severity]++
				}
			}
		}
		if ev, err := d.registry.Events(ctx, apiv1.EventsQuery{Limit: 5}); err == nil {
			data.Recent = rows(ev.Events)
			slices.Reverse(data.Recent)
		}
		if list, err := d.registry.Evacuations(ctx); err == nil {
			for _, e := range list.Evacuations {
				if e.State != apiv1.EvacuationEnded {
					data.Evacuations = append(data.Evacuations, e)
				}
			}
		}
		data.Outliers = "—"
		if h, err := d.registry.MetricsHistory(ctx); err == nil {
			for _, s := range h.Series {
				if n := len(s.Points); s.Name == "outliers" && n > 0 {
					data.Outliers = formatValue(s.Points[n-1].Value)
				}
			}
		}
	}
	d.render(w, r, "overview", "Overview", data, errs)
}

// --- capabilities ---

type capRow struct {
	Instance apiv1.Instance
	Status   string
	Caps     []apiv1.Capability
	Outcome  *apiv1.OutcomeWindow // its error share over the outlier window, beside its peers'
}

type capsData struct {
	Revision           int64
	Rows               []capRow // the first TableLimit of those that match
	Provider, Cap, Svc string
	Providers, CapIDs  []string
	Detail             *apiv1.Instance
	DetailOutcome      *apiv1.OutcomeWindow // the detail's outcome window, when reported on
	// Total counts the catalog's instances, Matching those the filters keep, Shown the rows
	// listed; ExpiringSoon and Expired count among Matching.
	Total, Matching, Shown int
	ExpiringSoon, Expired  int
}

// catalog reads what the capabilities page shows: the registry counts the catalog and lists
// the first TableLimit instances the filters keep (GET /v1/catalog/summary), so a look at a
// fleet of a million instances carries a few kilobytes, not the catalog's 700 MB.
func (d *Dashboard) catalog(ctx context.Context, v url.Values) (*capsData, error) {
	data := &capsData{Provider: v.Get("provider"), Cap: v.Get("capability_id"), Svc: v.Get("service_name")}
	sum, err := d.registry.CatalogSummary(ctx, client.SummaryQuery{ServiceName: data.Svc, CapabilityID: data.Cap, Provider: data.Provider,
		ExpiringWithin: d.cfg.ExpiringWithin, Limit: d.cfg.TableLimit})
	if err != nil {
		return nil, err
	}
	data.Revision, data.Total, data.Matching = sum.Revision, sum.Total, sum.Matching
	data.Expired, data.ExpiringSoon = sum.Expired, sum.ExpiringSoon
	data.Providers, data.CapIDs = sum.Providers, sum.CapabilityIDs
	now := d.cfg.Now()
	for _, in := range sum.Instances {
		var caps []apiv1.Capability
		for _, c := range in.Capabilities {
			if (data.Provider == "" || c.Provider == data.Provider) && (data.Cap == "" || c.CapabilityID == data.Cap) {
				caps = append(caps, c)
			}
		}
		status := "active"
		switch left := in.LeaseExpiresAt.Sub(now); {
		case left <= 0:
			status = "stale"
		case left < d.cfg.ExpiringWithin:
			status = "expiring soon"
		}
		data.Rows = append(data.Rows, capRow{Instance: in, Status: status, Caps: caps, Outcome: sum.Outcomes[in.InstanceID]})
	}
	data.Shown = len(data.Rows)
	if id := v.Get("instance"); id != "" {
		in, err := d.registry.Instance(ctx, id)
		var ae *apiv1.Error
		switch {
		case err == nil:
			data.Detail = in
			if ex, err := d.registry.Eligibility(ctx, id); err == nil {
				data.DetailOutcome = ex.Outcomes // without the engine, or without the permission: none shown
			}
		case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
			// gone since the link was drawn: the page says nothing of it, as before
		default:
			return nil, err
		}
	}
	return data, nil
}

func (d *Dashboard) capabilities(w http.ResponseWriter, r *http.Request) {
	data, err := d.catalog(r.Context(), r.URL.Query())
	if data == nil {
		data = &capsData{}
	}
	d.render(w, r, "capabilities", "Capabilities", data, errString("registry", err))
}

// capabilitiesFragment answers the live table once the registry's revision passes index.
func (d *Dashboard) capabilitiesFragment(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	if idx, err := strconv.ParseInt(v.Get("index"), 10, 64); err == nil {
		// a long poll on the registry, then the fresh catalog: a delta watch of the whole
		// fleet, so that any registration wakes it (a poll on one capability wakes only on
		// that capability's changes), answering the changes since idx alone
		d.registry.Capabilities(r.Context(), fleetDelta, client.Poll{Index: idx, Wait: 25 * time.Second})
	}
	start := d.cfg.Now()
	data, err := d.catalog(r.Context(), v)
	if err != nil {
		http.Error(w, err.Error(), upstreamStatus(err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Registry-Revision", strconv.FormatInt(data.Revision, 10))
	w.Header().Set("X-Refresh-After", strconv.FormatInt(refreshAfter(d.cfg.Now().Sub(start)).Milliseconds(), 10))
	d.tmpl.ExecuteTemplate(w, "captable", data)
}

// refreshAfter is how long the live table waits after a refresh before the next one, given
// how long the registry took to count the catalog for it: ten times that, from one second
// to thirty. A catalog of a million instances that changes all the time then costs the
// registry a tenth of a core per open tab, not half of one.
func refreshAfter(took time.Duration) time.Duration {
	return min(max(10*took, time.Second), 30*time.Second)
}

func (d *Dashboard) refresh(w http.ResponseWriter, r *http.Request) {
	var errs []error
	for _, s := range []*client.Client{d.gateway, d.orc} {
		if err := s.Invalidate(r.Context()); err != nil && !errors.Is(err, errNotConfigured) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		http.Error(w, "refresh: "+err.Error(), upstreamStatus(err))
		return
	}
	http.Redirect(w, r, "/capabilities", http.StatusSeeOther)
}

// --- routes ---

func (d *Dashboard) routes(w http.ResponseWriter, r *http.Request) {
	gr, err := d.gatewayTable(r.Context())
	errs := errString("gateway", err)
	data := routesData{RoutesAnswer: gr}
	if h, err := d.gateway.GatewayRouteHealth(r.Context()); err != nil {
		errs = append(errs, errString("gateway route health", err)...)
	} else {
		data.Health, data.Width, data.From = routeStrips(h, d.cfg.Now())
		data.To = d.cfg.Now().UTC()
	}
	if rg, err := d.gateway.GatewayRegions(r.Context()); err == nil && rg.Home != "" {
		data.Regions = rg
	} else if ae := (*apiv1.Error)(nil); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		errs = append(errs, errString("gateway regions", err)...)
	}
	d.render(w, r, "routes", "Routes", data, errs)
}

// routesHealthExport downloads the gateway's route health as CSV.
func (d *Dashboard) routesHealthExport(w http.ResponseWriter, r *http.Request) {
	body, err := d.gateway.GatewayRouteHealthCSV(r.Context())
	downloadCSV(w, "gateway route health", "meshflows-route-health.csv", body, err)
}

// gatewayTable asks the gateway for its routing table; a summary (the dashboard's
// credentials lack gateway_admin) is an error that says so.
func (d *Dashboard) gatewayTable(ctx context.Context) (*routing.RoutesAnswer, error) {
	var raw json.RawMessage
	if err := d.gateway.GatewayRoutes(ctx, &raw); err != nil {
		return &routing.RoutesAnswer{}, err
	}
	var sum routing.RoutesSummary
	if json.Unmarshal(raw, &sum) == nil && sum.Summary {
		return &routing.RoutesAnswer{}, fmt.Errorf("%d routes, not shown: %s (give the dashboard's identity a role with gateway_admin)", sum.RouteCount, sum.FullTable)
	}
	var gr routing.RoutesAnswer
	return &gr, json.Unmarshal(raw, &gr)
}

// --- workflows ---

type wfRow struct {
	Name      string
	Published bool
	History   apiv1.RunHistory
	Strip     triggerStrip
	// Providers is the health of each step's providers, in step order.
	Providers []stepProvider
}

// workflowsData is the Workflows page.
type workflowsData struct {
	Rows              []wfRow
	Width             int
	From, To          time.Time
	Warning, Critical string
	HealthUnavailable bool
	// ProvidersWithheld says why the steps' providers are not shown (the viewer may not
	// discover, or the registry did not answer).
	ProvidersWithheld string
}

func (d *Dashboard) workflows(w http.ResponseWriter, r *http.Request) {
	wl, err := d.orc.Workflows(r.Context())
	errs := errString("orchestrator", err)
	data := workflowsData{}
	var strips map[string]triggerStrip
	if th, err := d.orc.TriggerHealth(r.Context()); err != nil {
		errs = append(errs, errString("orchestrator trigger health", err)...)
		data.HealthUnavailable = true
	} else {
		strips, data.Width, data.From = triggerStrips(th, d.cfg.Now())
		data.To = d.cfg.Now().UTC()
		data.Warning, data.Critical = fmt.Sprintf("%.0f %%", 100*th.Warning), fmt.Sprintf("%.0f %%", 100*th.Critical)
	}
	srcs, order := map[string]string{}, map[string][]string{}
	for _, wf := range wl.Workflows {
		row := wfRow{Name: wf.Name, Published: wf.Published, Strip: strips[wf.Name]}
		if h, err := d.orc.Runs(r.Context(), wf.Name); err == nil {
			row.History = *h
		}
		if len(row.History.Runs) > 10 {
			row.History.Runs = row.History.Runs[:10]
		}
		if det, err := d.orc.Workflow(r.Context(), wf.Name); err == nil && det.Validation != nil {
			srcs[wf.Name] = det.YAML
			for _, s := range det.Validation.Steps {
				order[wf.Name] = append(order[wf.Name], s.StepID)
			}
		}
		data.Rows = append(data.Rows, row)
	}
	if v := viewerOf(r); !d.may(v, PermDiscover) {
		data.ProvidersWithheld = fmt.Sprintf("the steps' providers withheld: identity %q needs a role granting %s", v.identity, PermDiscover)
	} else if byWf, err := d.stepProviders(r.Context(), srcs, order); err != nil {
		data.ProvidersWithheld = "the steps' providers unavailable: registry: " + err.Error()
	} else {
		for i := range data.Rows {
			data.Rows[i].Providers = byWf[data.Rows[i].Name]
		}
	}
	d.render(w, r, "workflows", "Workflows", data, errs)
}

// sliceRunsData is the runs of one slice of a workflow's strip.
type sliceRunsData struct {
	Workflow string
	From, To time.Time
	Runs     []*apiv1.Run
	Kept     int // how many runs the history keeps
}

// sliceRuns lists the runs of a workflow that started in the 5 minutes from ?from (unix).
func (d *Dashboard) sliceRuns(w http.ResponseWriter, r *http.Request) {
	from, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	if err != nil {
		http.Error(w, "from: a unix time", http.StatusBadRequest)
		return
	}
	name := r.PathValue("name")
	h, err := d.orc.Runs(r.Context(), name)
	if err != nil {
		http.Error(w, "orchestrator: "+err.Error(), upstreamStatus(err))
		return
	}
	data := sliceRunsData{Workflow: name, From: time.Unix(from, 0).UTC(), To: time.Unix(from, 0).Add(5 * time.Minute).UTC(), Kept: len(h.Runs)}
	for _, run := range h.Runs {
		if !run.StartedAt.Before(data.From) && run.StartedAt.Before(data.To) {
			data.Runs = append(data.Runs, run)
		}
	}
	d.render(w, r, "sliceruns", "Runs of "+name, data, nil)
}

// triggerExport downloads the orchestrator's trigger health as CSV.
func (d *Dashboard) triggerExport(w http.ResponseWriter, r *http.Request) {
	body, err := d.orc.TriggerHealthCSV(r.Context())
	downloadCSV(w, "orchestrator trigger health", "meshflows-trigger-health.csv", body, err)
}

// runRow is one step record of a run, flattened with its nesting.
type runRow struct {
	Depth int
	Where string // the iteration or branch it ran in
	apiv1.StepRun
}

type runData struct {
	Run  *apiv1.Run
	Rows []runRow
}

// flattenRun lists a run's step records in order, each nested one after its loop or
// parallel step, with where it ran.
func flattenRun(steps []apiv1.StepRun, depth int, where string, out []runRow) []runRow {
	for _, s := range steps {
		out = append(out, runRow{Depth: depth, Where: where, StepRun: s})
		for _, it := range s.Iterations {
			out = flattenRun(it.Steps, depth+1, fmt.Sprintf("%s iteration %d", s.StepID, it.Index), out)
		}
		for _, b := range s.Branches {
			out = flattenRun(b.Steps, depth+1, fmt.Sprintf("%s branch %s (%s)", s.StepID, b.BranchID, b.Status), out)
		}
	}
	return out
}

// runPage shows one run: its nested steps, where each ran, and the final context.
func (d *Dashboard) runPage(w http.ResponseWriter, r *http.Request) {
	run, err := d.orc.Run(r.Context(), r.PathValue("name"), r.PathValue("run_id"))
	if err != nil {
		http.Error(w, err.Error(), upstreamStatus(err))
		return
	}
	d.render(w, r, "run", "Run "+run.RunID, runData{Run: run, Rows: flattenRun(run.Steps, 0, "", nil)}, nil)
}

// cancelRun cancels a run in progress and shows its page again.
func (d *Dashboard) cancelRun(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("name"), r.PathValue("run_id")
	if err := d.orc.CancelRun(r.Context(), name, id); err != nil {
		http.Error(w, "cancel: "+err.Error(), upstreamStatus(err))
		return
	}
	http.Redirect(w, r, "/workflows/"+url.PathEscape(name)+"/runs/"+url.PathEscape(id), http.StatusSeeOther)
}

func (d *Dashboard) run(w http.ResponseWriter, r *http.Request) {
	input := r.FormValue("input")
	if input == "" {
		input = "{}"
	}
	if _, err := d.orc.RunWorkflow(r.Context(), r.PathValue("name"), json.RawMessage(input)); err != nil {
		http.Error(w, "run: "+err.Error(), upstreamStatus(err))
		return
	}
	http.Redirect(w, r, "/workflows", http.StatusSeeOther)
}
