package dashboard

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// tailWait is how long the Events page's live tail waits for news per request.
const tailWait = 25 * time.Second

// eventsData is the Events page.
type eventsData struct {
	Events []eventRow
	Next   int64
	Filter eventFilter
	Types  []string
	// Components are the parts of the system an event comes from (its type's first word).
	Components []string
	Query      template.URL // the filter as a query string, for the tail and the export
	ShownMax   int
}

// eventFilter is the filter of the Logs view, as the form sends it: Severity is the level,
// Component the first word of the types (instance, eligibility, route, …), From and Until
// a window (RFC 3339, or a datetime-local field's value, UTC).
type eventFilter struct {
	Type, Severity, Subject, Text, Component string
	From, Until                              string
}

func (f eventFilter) query() apiv1.EventsQuery {
	q := apiv1.EventsQuery{Subject: f.Subject, Severity: f.Severity, Text: f.Text}
	switch {
	case f.Type != "":
		q.Types = []string{f.Type}
	case f.Component != "":
		q.Types = componentTypes(f.Component)
	}
	q.From, _ = consoleTime(f.From)
	q.Until, _ = consoleTime(f.Until)
	return q
}

func (f eventFilter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"type": f.Type, "severity": f.Severity, "subject": f.Subject, "q": f.Text, "component": f.Component, "from": f.From, "until": f.Until} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// readFilter reads the Logs view's filter; a component or a time it does not know is
// refused, so that a typo never shows every event as if they matched.
func readFilter(r *http.Request) (eventFilter, error) {
	v := r.URL.Query()
	f := eventFilter{Type: v.Get("type"), Severity: v.Get("severity"), Subject: strings.TrimSpace(v.Get("subject")), Text: v.Get("q"),
		Component: v.Get("component"), From: strings.TrimSpace(v.Get("from")), Until: strings.TrimSpace(v.Get("until"))}
	if f.Component != "" && len(componentTypes(f.Component)) == 0 {
		return f, fmt.Errorf("component %q: want one of %s", f.Component, strings.Join(components(), ", "))
	}
	for name, t := range map[string]string{"from": f.From, "until": f.Until} {
		if _, ok := consoleTime(t); t != "" && !ok {
			return f, fmt.Errorf("%s %q: want a time like 2026-12-04T10:00 (UTC) or 2026-12-04T10:00:00Z", name, t)
		}
	}
	return f, nil
}

// eventRow is one event with the page its subject links to.
type eventRow struct {
	apiv1.Event
	Link string
}

// subjectLink returns the console page of an event's subject.
func subjectLink(e apiv1.Event) string {
	switch {
	case strings.HasPrefix(e.Subject, "incident/"):
		return "/incidents#incident-" + strings.TrimPrefix(e.Subject, "incident/")
	case e.Subject == "registry":
		return "/"
	case e.Subject == "journal":
		return "/logs"
	case e.Type == apiv1.EventPanic:
		return "/capabilities?capability_id=" + url.QueryEscape(e.Subject)
	case strings.HasPrefix(e.Type, "instance.") || e.Type == apiv1.EventEligibility:
		return "/capabilities?instance=" + url.QueryEscape(e.Subject) + "#detail"
	}
	return ""
}

// traceURL is the link to trace id by template ("" without either, or for an id that is
// not 32 hex digits).
func traceURL(template, id string) string {
	if template == "" || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return ""
	}
	return strings.ReplaceAll(template, "{trace_id}", id)
}

func rows(es []apiv1.Event) []eventRow {
	out := make([]eventRow, len(es))
	for i, e := range es {
		out[i] = eventRow{Event: e, Link: subjectLink(e)}
	}
	return out
}

// events is the Events page: the newest events of the filter, newest first; the live tail
// (app.js) prepends what comes after.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	f, ferr := readFilter(r)
	data := &eventsData{Filter: f, Types: apiv1.EventTypes, Components: components(), Query: template.URL(f.values().Encode()), ShownMax: 200} // encoded by url.Values: safe in a URL
	q := f.query()
	q.Limit = data.ShownMax
	var errs []string
	if ferr != nil {
		errs = errString("filter", ferr)
	} else if resp, err := d.registry.Events(r.Context(), q); err != nil {
		errs = errString("registry events", err)
	} else {
		data.Events, data.Next = rows(resp.Events), resp.Next
		slices.Reverse(data.Events)
	}
	d.render(w, r, "events", "Logs", data, errs)
}

// eventsFragment is the live tail: the rows after since (long poll), newest first, and
// X-Next-Since.
func (d *Dashboard) eventsFragment(w http.ResponseWriter, r *http.Request) {
	since, err := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	if err != nil || since < 0 {
		http.Error(w, "since: a sequence number >= 0", http.StatusBadRequest)
		return
	}
	f, err := readFilter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := f.query()
	q.Since, q.HasSince, q.Wait, q.Limit = since, true, tailWait, 200
	resp, err := d.registry.Events(r.Context(), q)
	if err != nil {
		http.Error(w, "registry events: "+err.Error(), upstreamStatus(err))
		return
	}
	es := rows(resp.Events)
	slices.Reverse(es)
	var b bytes.Buffer
	if err := d.tmpl.ExecuteTemplate(&b, "eventrows", es); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Next-Since", strconv.FormatInt(resp.Next, 10))
	w.Write(b.Bytes())
}

// eventsExport downloads the filter's events as CSV, as the registry writes them.
func (d *Dashboard) eventsExport(w http.ResponseWriter, r *http.Request) {
	f, err := readFilter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, err := d.registry.EventsCSV(r.Context(), f.query())
	downloadCSV(w, "registry events", "meshflows-events.csv", body, err)
}

// downloadCSV answers a CSV export a component wrote (body), or what went wrong getting it.
func downloadCSV(w http.ResponseWriter, what, filename string, body []byte, err error) {
	if err != nil {
		http.Error(w, what+": "+err.Error(), upstreamStatus(err))
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	w.Write(body)
}
