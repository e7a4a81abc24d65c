package server

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
)

// Bounds of GET /v1/events' filters.
const (
	maxEventText    = 200
	maxEventSubject = 300
)

// errNoJournal: the server was built without a journal.
var errNoJournal = apiv1.Errorf(http.StatusNotImplemented, apiv1.CodeUnavailable, "this registry keeps no event journal")

// eventsRequest is GET /v1/events parsed.
type eventsRequest struct {
	q      journal.Query
	newest bool // no since: the newest events
	wait   time.Duration
	csv    bool
}

// parseEvents reads GET /v1/events' parameters; every problem is named in one 400.
func parseEvents(v url.Values, maxEvents int) (eventsRequest, error) {
	if err := registry.UnknownParameters(v, registry.EventsListing); err != nil {
		return eventsRequest{}, err
	}
	var (
		er eventsRequest
		ds []apiv1.Detail
	)
	switch f := v.Get("format"); f {
	case "", "json":
	case "csv":
		er.csv = true
	default:
		ds = append(ds, apiv1.Detail{Path: "format", Message: fmt.Sprintf("must be json or csv, got %q", f)})
	}
	maxLimit := journal.MaxLimit
	if er.csv {
		maxLimit = max(maxEvents, journal.MaxLimit) // an export may take the whole journal
	}
	if ss := v.Get("since"); ss == "" {
		er.newest = true
	} else if n, err := strconv.ParseInt(ss, 10, 64); err != nil || n < 0 {
		ds = append(ds, apiv1.Detail{Path: "since", Message: fmt.Sprintf("must be a sequence number >= 0, got %q", ss)})
	} else {
		er.q.Since = n
	}
	er.q.Limit = journal.DefaultLimit
	if er.csv {
		er.q.Limit = maxLimit
	}
	if ls := v.Get("limit"); ls != "" {
		n, err := strconv.Atoi(ls)
		if err != nil || n < 1 || n > maxLimit {
			ds = append(ds, apiv1.Detail{Path: "limit", Message: fmt.Sprintf("must be an integer from 1 to %d, got %q", maxLimit, ls)})
		}
		er.q.Limit = n
	}
	for _, ts := range v["type"] {
		for t := range strings.SplitSeq(ts, ",") {
			switch t = strings.TrimSpace(t); {
			case t == "":
			case slices.Contains(apiv1.EventTypes, t):
				er.q.Types = append(er.q.Types, t)
			default:
				ds = append(ds, apiv1.Detail{Path: "type", Message: fmt.Sprintf("unknown event type %q (known: %s)", t, strings.Join(apiv1.EventTypes, ", "))})
			}
		}
	}
	switch sev := v.Get("severity"); sev {
	case "", apiv1.SeverityInfo, apiv1.SeverityWarning, apiv1.SeverityError:
		er.q.Severity = sev
	default:
		ds = append(ds, apiv1.Detail{Path: "severity", Message: fmt.Sprintf("must be info, warning or error, got %q", sev)})
	}
	if er.q.Subject = v.Get("subject"); len(er.q.Subject) > maxEventSubject {
		ds = append(ds, apiv1.Detail{Path: "subject", Message: fmt.Sprintf("at most %d bytes", maxEventSubject)})
	}
	if er.q.Text = v.Get("q"); len(er.q.Text) > maxEventText {
		ds = append(ds, apiv1.Detail{Path: "q", Message: fmt.Sprintf("at most %d bytes", maxEventText)})
	}
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"from", &er.q.From}, {"until", &er.q.Until}} {
		if ts := v.Get(b.name); ts != "" {
			t, err := time.Parse(time.RFC3339, ts)
			if err != nil {
				ds = append(ds, apiv1.Detail{Path: b.name, Message: fmt.Sprintf("must be an RFC 3339 time like 2026-12-04T10:00:00Z, got %q", ts)})
			}
			*b.t = t
		}
	}
	if !er.q.From.IsZero() && !er.q.Until.IsZero() && !er.q.Until.After(er.q.From) {
		ds = append(ds, apiv1.Detail{Path: "until", Message: "must be after from"})
	}
	if ws := v.Get("wait"); ws != "" {
		w, err := time.ParseDuration(ws)
		switch {
		case err != nil || w <= 0:
			ds = append(ds, apiv1.Detail{Path: "wait", Message: fmt.Sprintf("must be a positive duration like 30s, got %q", ws)})
		case er.newest || er.csv:
			ds = append(ds, apiv1.Detail{Path: "wait", Message: "a long poll needs since (the next of the previous answer), and answers JSON"})
		}
		er.wait = min(w, MaxWait)
	}
	if len(ds) > 0 {
		return eventsRequest{}, apiv1.InvalidRequest(ds)
	}
	return er, nil
}

// events answers GET /v1/events: without since, the newest events of the filter; with since,
// those after it, waiting up to wait for one when none is there yet. ?format=csv answers
// text/csv with a header row.
func (s *Server) events(w http.ResponseWriter, r *http.Request) (any, error) {
	j := s.cfg.Journal
	if j == nil {
		return nil, errNoJournal
	}
	er, err := parseEvents(r.URL.Query(), j.Max())
	if err != nil {
		return nil, err
	}
	find := func() ([]apiv1.Event, int64) {
		if er.newest {
			return j.Newest(er.q)
		}
		return j.Find(er.q)
	}
	events, next := find()
	// Long poll: wait for news past what was looked at, until a match or the wait ends.
	// The wait is the client's, in real time (the injected clock stamps events, not requests).
	for deadline := time.Now().Add(er.wait); er.wait > 0 && len(events) == 0 && r.Context().Err() == nil; events, next = find() {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		j.Wait(r.Context(), next, left)
		er.q.Since = next
	}
	if er.csv {
		w.Header().Set("X-Next-Since", strconv.FormatInt(next, 10))
		if err := journal.WriteCSV(w, events); err != nil {
			s.cfg.Logger.Warn("writing the events CSV failed", "error", err)
		}
		return written{}, nil
	}
	return apiv1.EventsResponse{Events: events, Next: next}, nil
}

// written says the handler wrote its answer itself.
type written struct{}

// report takes what a gateway or an orchestrator reports: its events go into the journal
// (with the reporter in attrs), its conditions raise and clear incidents.
func (s *Server) report(w http.ResponseWriter, r *http.Request) (any, error) {
	var req apiv1.ReportRequest
	if err := s.decode(w, r, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := s.mayReport(registry.CallerFrom(r.Context()).Identity, &req); err != nil {
		return nil, err
	}
	reporter := req.Reporter
	if id := registry.CallerFrom(r.Context()).Identity; id != "" {
		reporter = id + " (" + req.Reporter + ")" // who authenticated, and what it calls itself
	}
	recorded := 0
	if j := s.cfg.Journal; j != nil {
		for _, e := range req.Events {
			attrs := make(map[string]any, len(e.Attrs)+1)
			for k, v := range e.Attrs {
				attrs[k] = v
			}
			attrs["reporter"] = reporter
			j.Append(apiv1.Event{Type: e.Type, Severity: e.Severity, Subject: e.Subject, Message: e.Message, Attrs: attrs})
			recorded++
		}
	}
	if in := s.cfg.Incidents; in != nil {
		for _, c := range req.Conditions {
			if c.Active {
				in.Raise(c.Kind, c.Subject, "", c.Summary)
				in.SetTrace(c.Kind, c.Subject, c.TraceID)
			} else {
				in.Clear(c.Kind, c.Subject)
			}
		}
	}
	return apiv1.ReportResponse{Recorded: recorded}, nil
}

// mayReport refuses a report a caller without a gateway role may not make: anything but a
// runtime syncer's events (conditions and the gateways' and orchestrators' event types need
// a gateway role). A registry run open lets every caller report.
func (s *Server) mayReport(identity string, req *apiv1.ReportRequest) error {
	if s.cfg.Authenticator == nil || s.cfg.Policy.IsGateway(identity) {
		return nil
	}
	var ds []apiv1.Detail
	for i, e := range req.Events {
		if !slices.Contains(apiv1.RuntimeEventTypes, e.Type) {
			ds = append(ds, apiv1.Detail{Path: fmt.Sprintf("events[%d].type", i), Message: fmt.Sprintf("%q is a gateway's or an orchestrator's to report", e.Type)})
		}
	}
	if len(req.Conditions) > 0 {
		ds = append(ds, apiv1.Detail{Path: "conditions", Message: "conditions are a gateway's or an orchestrator's to report"})
	}
	if len(ds) == 0 {
		return nil
	}
	e := apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, "identity %q has no gateway role: it may report only %s", identity, strings.Join(apiv1.RuntimeEventTypes, ", "))
	e.Details = ds
	return e
}
