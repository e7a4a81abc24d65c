package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// --- metrics ---

// metricsWindows are the windows the Metrics view offers (the registry keeps an hour).
var metricsWindows = []string{"15m", "30m", "1h"}

type metricsData struct {
	Window  string
	Windows []string
	Charts  []metricChart
	// Grafana links the registry's Grafana dashboard, when configured.
	Grafana string
}

type metricChart struct {
	Series apiv1.MetricSeries
	Chart  chart
}

// metrics is the Metrics view: the registry's key series over the last hour, from its own
// in-memory history (no Prometheus needed).
func (d *Dashboard) metrics(w http.ResponseWriter, r *http.Request) {
	data := metricsData{Window: r.URL.Query().Get("window"), Windows: metricsWindows}
	if !slices.Contains(metricsWindows, data.Window) {
		data.Window = "1h"
	}
	if d.cfg.GrafanaURL != "" {
		data.Grafana = d.cfg.GrafanaURL + "/d/meshflows-registry"
	}
	span, _ := time.ParseDuration(data.Window)
	to := d.cfg.Now()
	h, err := d.registry.MetricsHistory(r.Context())
	if err == nil {
		data.Charts = charts(h, to.Add(-span), to)
	}
	d.render(w, r, "metrics", "Metrics", data, errString("registry metrics history", err))
}

// charts draws each series of h over [from, to].
func charts(h *apiv1.MetricsHistory, from, to time.Time) []metricChart {
	out := make([]metricChart, 0, len(h.Series))
	for _, s := range h.Series {
		out = append(out, metricChart{Series: s, Chart: lineChart([]apiv1.MetricSeries{s}, from, to, 600, 120)})
	}
	return out
}

// --- logs ---

// components are the parts of the system an event comes from: the first word of its type.
func components() []string {
	var out []string
	for _, t := range apiv1.EventTypes {
		c, _, _ := strings.Cut(t, ".")
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// componentTypes are the event types of a component.
func componentTypes(c string) []string {
	var out []string
	for _, t := range apiv1.EventTypes {
		if strings.HasPrefix(t, c+".") {
			out = append(out, t)
		}
	}
	return out
}

// consoleTime reads a time the console's forms send: RFC 3339, or a datetime-local field's
// "2006-01-02T15:04" (UTC).
func consoleTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// logsLink is the Logs view filtered to a subject over a window.
func logsLink(subject string, from, until time.Time) string {
	v := url.Values{"from": {from.UTC().Format(time.RFC3339)}, "until": {until.UTC().Format(time.RFC3339)}}
	if subject != "" {
		v.Set("subject", subject)
	}
	return "/logs?" + v.Encode()
}

// --- incidents: investigate ---

// evidenceBefore is how far before an incident opened its evidence window starts.
const evidenceBefore = 15 * time.Minute

type investigateData struct {
	Incident apiv1.Incident
	// From and Until bound the evidence: from a quarter of an hour before it opened to its
	// resolution (or now).
	From, Until time.Time
	// Explanations are the eligibility explanations of its instances: the instance of a
	// quarantine, the capability's instances (at most 20) of a panic or a zone outlier.
	Explanations []apiv1.Explanation
	Events       []eventRow
	LogsLink     string
	Charts       []metricChart
	Scale        scaleForm
}

// scaleForm is the Scale provider button of an incident: what it would scale, or why it is
// disabled.
type scaleForm struct {
	Service, Zone string
	Enabled       bool
	Why           string // why it is disabled
}

// findIncident returns the incident id from the registry's list.
func (d *Dashboard) findIncident(ctx context.Context, id string) (*apiv1.Incident, error) {
	list, err := d.registry.Incidents(ctx, "")
	if err != nil {
		return nil, err
	}
	for i := range list.Incidents {
		if list.Incidents[i].ID == id {
			return &list.Incidents[i], nil
		}
	}
	return nil, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no incident %q", id)
}

// incidentCapability is the capability and zone of a panic or zone-outlier incident.
func incidentCapability(in apiv1.Incident) (capability, zone string, ok bool) {
	if in.Kind != apiv1.IncidentPanic && in.Kind != apiv1.IncidentZoneOutlier {
		return "", "", false
	}
	capability, zone, _ = strings.Cut(in.Subject, "/")
	return capability, zone, true
}

// investigate is an incident's evidence: its instances' eligibility explanations, the
// journal around it and the registry's series over its window.
func (d *Dashboard) investigate(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	in, err := d.findIncident(ctx, r.PathValue("id"))
	if err != nil {
		http.Error(w, "incident: "+err.Error(), upstreamStatus(err))
		return
	}
	data := investigateData{Incident: *in, From: in.OpenedAt.Add(-evidenceBefore).UTC(), Until: d.cfg.Now().UTC()}
	if in.ResolvedAt != nil {
		data.Until = in.ResolvedAt.Add(time.Minute).UTC()
	}
	if !data.Until.After(in.OpenedAt) { // clocks apart (a reporter's): a window that holds it
		data.Until = in.OpenedAt.Add(time.Minute).UTC()
	}
	var errs []string
	var ids []string
	switch in.Kind {
	case apiv1.IncidentQuarantine:
		ids = []string{in.Subject}
	case apiv1.IncidentPanic, apiv1.IncidentZoneOutlier:
		capID, zone, _ := incidentCapability(*in)
		if sum, err := d.registry.CatalogSummary(ctx, client.SummaryQuery{CapabilityID: capID, Limit: 20}); err != nil {
			errs = append(errs, errString("registry catalog", err)...)
		} else {
			for _, i := range sum.Instances {
				if zone == "" || i.Zone == zone {
					ids = append(ids, i.InstanceID)
				}
			}
		}
	}
	for _, id := range ids {
		if ex, err := d.registry.Eligibility(ctx, id); err == nil {
			data.Explanations = append(data.Explanations, *ex)
		} else if ae := (*apiv1.Error)(nil); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			errs = append(errs, errString("eligibility of "+id, err)...)
		}
	}
	subject := incidentSubject(*in)
	q := apiv1.EventsQuery{From: data.From, Until: data.Until, Limit: 200}
	if in.Kind == apiv1.IncidentTrigger || in.Kind == apiv1.IncidentRoute || in.Kind == apiv1.IncidentValidation {
		q.Text = subject // reported events name it in their subject or message
	} else {
		q.Subject = subject
	}
	if ev, err := d.registry.Events(ctx, q); err != nil {
		errs = append(errs, errString("registry events", err)...)
	} else {
		data.Events = rows(ev.Events)
		slices.Reverse(data.Events)
	}
	data.LogsLink = incidentLogs(*in, data.From, data.Until)
	if h, err := d.registry.MetricsHistory(ctx); err == nil {
		data.Charts = charts(h, data.From, data.Until)
	} // a registry without the history: the evidence has no charts, and says so
	data.Scale = d.scaleTarget(ctx, *in)
	d.render(w, r, "investigate", "Incident "+in.ID, data, errs)
}

// incidentSubject is the journal subject of an incident's events.
func incidentSubject(in apiv1.Incident) string {
	if c, _, ok := incidentCapability(in); ok && in.Kind == apiv1.IncidentPanic {
		return c // the journal's panic events are the capability's
	}
	return in.Subject
}

// incidentLogs is the Logs view of an incident's subject over its evidence window.
func incidentLogs(in apiv1.Incident, from, until time.Time) string {
	if in.Kind == apiv1.IncidentTrigger || in.Kind == apiv1.IncidentRoute || in.Kind == apiv1.IncidentValidation {
		v := url.Values{"q": {in.Subject}, "from": {from.UTC().Format(time.RFC3339)}, "until": {until.UTC().Format(time.RFC3339)}}
		return "/logs?" + v.Encode()
	}
	return logsLink(incidentSubject(in), from, until)
}

// incidentLogsAt is incidentLogs over the incident's evidence window as of now.
func incidentLogsAt(in apiv1.Incident, now time.Time) string {
	until := now
	if in.ResolvedAt != nil {
		until = in.ResolvedAt.Add(time.Minute)
	}
	return incidentLogs(in, in.OpenedAt.Add(-evidenceBefore), until)
}

// --- incidents: scale provider ---

// ScaleCommandExample is the --scale-command the help and the console guide show: the
// repository's script that adds one replica to a Deployment (kubectl scale --replicas is
// absolute: "--replicas=+1" would set one). TestScaleCommandExampleAddsOne runs it against a
// fake kubectl.
const ScaleCommandExample = "deploy/scale/add-replica {service}"

// scaleTimeout bounds a scale hook: the button answers within it.
const scaleTimeout = 5 * time.Second

// ScaleHook is what the Scale provider button of an incident calls: MeshFlows cannot add
// capacity itself, an orchestrator of the fleet can. Command runs (no shell) with
// "{service}" and "{zone}" replaced in every argument and MESHFLOWS_SCALE_SERVICE,
// MESHFLOWS_SCALE_ZONE, MESHFLOWS_SCALE_INCIDENT and MESHFLOWS_SCALE_BY set; Webhook is an
// http(s) URL template ("{service}" and "{zone}" replaced, escaped) POSTed a JSON body
// {service, zone, incident, by}. One of them, or neither (the button is then disabled and
// says why).
type ScaleHook struct {
	Command []string
	Webhook string
}

func (h ScaleHook) configured() bool { return len(h.Command) > 0 || h.Webhook != "" }

// validate reports a hook that cannot work.
func (h ScaleHook) validate() error {
	switch {
	case len(h.Command) > 0 && h.Webhook != "":
		return errors.New("give a scale command or a scale webhook, not both")
	case h.Webhook != "":
		u, err := url.Parse(strings.NewReplacer("{service}", "s", "{zone}", "z").Replace(h.Webhook))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("scale webhook %q: want an http(s) URL (with {service} and {zone} where they go)", h.Webhook)
		}
	}
	return nil
}

// scaleTarget is what an incident's Scale provider button would scale: the service (and
// zone) its subject names.
func (d *Dashboard) scaleTarget(ctx context.Context, in apiv1.Incident) scaleForm {
	var f scaleForm
	switch in.Kind {
	case apiv1.IncidentQuarantine:
		if i, err := d.registry.Instance(ctx, in.Subject); err == nil {
			f.Service, f.Zone = i.ServiceName, i.Zone
		}
	case apiv1.IncidentPanic, apiv1.IncidentZoneOutlier:
		capID, zone, _ := incidentCapability(in)
		f.Zone = zone
		if sum, err := d.registry.CatalogSummary(ctx, client.SummaryQuery{CapabilityID: capID, Limit: 1}); err == nil && len(sum.Instances) > 0 {
			f.Service = sum.Instances[0].ServiceName
		}
	case apiv1.IncidentRoute:
		if gr, err := d.gatewayTable(ctx); err == nil {
			for _, rt := range gr.Routes {
				if rt.Method+" "+rt.Pattern == in.Subject {
					f.Service = rt.Service
				}
			}
		}
	}
	switch {
	case !d.cfg.Scale.configured():
		f.Why = "no scale hook is configured: start the dashboard with --scale-command or --scale-webhook (MeshFlows does not add capacity by itself)"
	case f.Service == "":
		f.Why = "this incident names no provider service to scale"
	default:
		f.Enabled = true
	}
	return f
}

type scaleResult struct {
	Incident, Service, Zone string
	OK                      bool
	Output                  string
	Took                    time.Duration
}

// scale calls the scale hook for the service and zone of the form, within scaleTimeout, and
// shows what it answered.
func (d *Dashboard) scale(w http.ResponseWriter, r *http.Request) {
	if !d.cfg.Scale.configured() {
		http.Error(w, "scale: no scale hook is configured (--scale-command or --scale-webhook)", http.StatusConflict)
		return
	}
	res := scaleResult{Incident: r.PathValue("id"), Service: strings.TrimSpace(r.PostFormValue("service")), Zone: strings.TrimSpace(r.PostFormValue("zone"))}
	if res.Service == "" || strings.ContainsAny(res.Service+res.Zone, "\x00\n\r") {
		http.Error(w, "scale: name the service (and optionally the zone) to scale", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), scaleTimeout)
	defer cancel()
	start := time.Now()
	by := viewerOf(r).identity
	if by == "" {
		by = "anonymous (open mode)"
	}
	out, err := d.cfg.Scale.call(ctx, res.Service, res.Zone, res.Incident, by)
	res.Took, res.OK, res.Output = time.Since(start).Round(time.Millisecond), err == nil, out
	if err != nil {
		res.Output = strings.TrimSpace(out + "\n" + err.Error())
	}
	d.cfg.Logger.Info("scale hook", slog.String("identity", by), slog.String("incident", res.Incident),
		slog.String("service", res.Service), slog.String("zone", res.Zone), slog.Bool("ok", res.OK), slog.Duration("took", res.Took))
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadGateway
	}
	var b bytes.Buffer
	if err := d.tmpl.ExecuteTemplate(&b, "scaled", page{Title: "Scale " + res.Service, Path: r.URL.Path, Insecure: d.cfg.Insecure, Viewer: viewerOf(r).identity, Data: res}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// maxHookOutput bounds what the page shows of a hook's output.
const maxHookOutput = 4 << 10

// call runs the hook and returns what it said.
func (h ScaleHook) call(ctx context.Context, service, zone, incident, by string) (string, error) {
	if len(h.Command) > 0 {
		rep := strings.NewReplacer("{service}", service, "{zone}", zone)
		args := make([]string, len(h.Command))
		for i, a := range h.Command {
			args[i] = rep.Replace(a)
		}
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(cmd.Environ(), "MESHFLOWS_SCALE_SERVICE="+service, "MESHFLOWS_SCALE_ZONE="+zone, "MESHFLOWS_SCALE_INCIDENT="+incident, "MESHFLOWS_SCALE_BY="+by)
		out, err := cmd.CombinedOutput()
		if len(out) > maxHookOutput {
			out = out[:maxHookOutput]
		}
		if err != nil {
			return string(out), fmt.Errorf("scale command: %w", err)
		}
		return string(out), nil
	}
	target := strings.NewReplacer("{service}", url.PathEscape(service), "{zone}", url.PathEscape(zone)).Replace(h.Webhook)
	body, _ := json.Marshal(map[string]string{"service": service, "zone": zone, "incident": incident, "by": by})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("scale webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("scale webhook: %w", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, maxHookOutput))
	if resp.StatusCode/100 != 2 {
		return string(out), fmt.Errorf("scale webhook answered %s", resp.Status)
	}
	return string(out), nil
}

// --- workflows: the providers of each step ---

// stepProvider is the health of the providers of one step of a workflow, as the registry
// sees them now.
type stepProvider struct {
	StepID, Capability string
	// Connected: at least one instance holds a live lease; Instances counts them,
	// InRotation those eligibility keeps in rotation.
	Connected             bool
	Instances, InRotation int
	// LastHeartbeat is the newest heartbeat of its instances (a lease before its expiry);
	// zero when the registry does not say its lease.
	LastHeartbeat time.Time
}

// stepProviders reads, for each step of each workflow with a capability, the health of its
// providers; capabilities are asked once whatever the number of steps naming them.
func (d *Dashboard) stepProviders(ctx context.Context, yamlByWorkflow map[string]string, order map[string][]string) (map[string][]stepProvider, error) {
	ttl := time.Duration(0)
	if h, err := d.registry.DiscoveryHealth(ctx); err == nil {
		ttl = time.Duration(h.LeaseTTLSeconds) * time.Second
	} else {
		return nil, err
	}
	now := d.cfg.Now()
	byCap := map[string]stepProvider{}
	out := map[string][]stepProvider{}
	for name, src := range yamlByWorkflow {
		caps := stepCapabilities(src)
		for _, step := range order[name] {
			capID := caps[step]
			if capID == "" {
				continue
			}
			sp, ok := byCap[capID]
			if !ok {
				sum, err := d.registry.CatalogSummary(ctx, client.SummaryQuery{CapabilityID: capID, Limit: 100})
				if err != nil {
					return nil, err
				}
				sp.Capability = capID
				for _, in := range sum.Instances {
					if !in.LeaseExpiresAt.After(now) {
						continue
					}
					sp.Connected = true
					sp.Instances++
					if apiv1.InRotation(in.Eligibility) {
						sp.InRotation++
					}
					if hb := in.LeaseExpiresAt.Add(-ttl); ttl > 0 && hb.After(sp.LastHeartbeat) {
						sp.LastHeartbeat = hb
					}
				}
				byCap[capID] = sp
			}
			sp.StepID = step
			out[name] = append(out[name], sp)
		}
	}
	return out, nil
}
