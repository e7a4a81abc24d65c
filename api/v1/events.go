package apiv1

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PathEvents is the registry's event journal: GET with EventsQuery's parameters.
const PathEvents = "/v1/events"

// Event types. Every event of the journal has one of them; a reader the journal's bound
// overtook gets one EventJournalGap saying how many it missed.
const (
	EventRegistered       = "instance.registered"
	EventReregistered     = "instance.reregistered"
	EventDeregistered     = "instance.deregistered"
	EventExpired          = "instance.expired"
	EventEligibility      = "eligibility.transition"
	EventPanic            = "eligibility.panic"
	EventSelfPreservation = "registry.self_preservation"
	EventSnapshot         = "registry.snapshot"
	EventIncidentOpened   = "incident.opened"
	EventIncidentAcked    = "incident.acknowledged"
	EventIncidentResolved = "incident.resolved"
	EventIncidentIgnored  = "incident.ignored"
	EventJournalGap       = "journal.gap"
	// EventEvacuation and EventOverride are operator actions (refused ones too).
	EventEvacuation = "operator.evacuation"
	EventOverride   = "operator.override"
	// EventOutcomeDisputed: a reporter's outcome was ignored: others saw the instance healthy.
	EventOutcomeDisputed = "eligibility.outcome_disputed"
	// EventZoneOutlier: a zone of a capability became, or stopped being, a zone outlier.
	EventZoneOutlier = "eligibility.zone_outlier"

	// Reported by gateways and orchestrators (POST /v1/reports).
	EventRouteConflict      = "route.conflict"
	EventRouteRejected      = "route.rejected"
	EventRouteNoUpstream    = "route.no_upstream"
	EventWorkflowValidation = "workflow.validation"
	EventWorkflowRunFailed  = "workflow.run_failed"
	// EventRouteRequestFailed: a traced request through a gateway failed (a 5xx, or no
	// answer from the upstream); at most one per route every 10 s, with its trace_id.
	EventRouteRequestFailed = "route.request_failed"

	// Reported by a runtime syncer (meshflows-kube-sync) with any identity that holds a role
	// (POST /v1/reports): a workload of the runtime it does not register, and why (a
	// Kubernetes Service's annotations invalid); its subject is "kubernetes/NAMESPACE/NAME".
	EventRuntimeRejected = "runtime.rejected"

	// EventOwnerNotified: an instance's owner was told of a defect (a quarantine, an outlier,
	// a failing self-report) — by its webhook (attribute delivery "webhook") or, with no
	// webhook for it, by this event alone ("journal"); EventOwnerNotifyFailed: its webhook
	// refused every attempt.
	EventOwnerNotified     = "owner.notified"
	EventOwnerNotifyFailed = "owner.notify_failed"
)

// ReportedEventTypes are the event types a gateway or an orchestrator may report.
var ReportedEventTypes = []string{EventRouteConflict, EventRouteRejected, EventRouteNoUpstream, EventWorkflowValidation, EventWorkflowRunFailed, EventRouteRequestFailed}

// RuntimeEventTypes are the event types a runtime syncer may report without a gateway role.
var RuntimeEventTypes = []string{EventRuntimeRejected}

// EventTypes lists every event type, for validating a filter.
var EventTypes = []string{EventRegistered, EventReregistered, EventDeregistered, EventExpired, EventEligibility,
	EventPanic, EventSelfPreservation, EventSnapshot, EventIncidentOpened, EventIncidentAcked, EventIncidentResolved,
	EventIncidentIgnored, EventJournalGap, EventRouteConflict, EventRouteRejected, EventRouteNoUpstream, EventWorkflowValidation,
	EventWorkflowRunFailed, EventEvacuation, EventOverride, EventOutcomeDisputed, EventZoneOutlier, EventRuntimeRejected, EventRouteRequestFailed,
	EventOwnerNotified, EventOwnerNotifyFailed}

// Event is one entry of the registry's journal: something that changed what consumers see.
type Event struct {
	// Seq is the event's place in the journal: it only grows. A gap event has seq 0.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Type is one of EventTypes.
	Type string `json:"type"`
	// Severity is info, warning or error (SeverityInfo, SeverityWarning, SeverityError).
	Severity string `json:"severity"`
	// Subject is what the event is about: an instance id, a capability id, an incident
	// ("incident/7"), "registry" or "journal".
	Subject string `json:"subject"`
	// Message is one human line.
	Message string         `json:"message"`
	Attrs   map[string]any `json:"attrs,omitempty"`
}

// EventsResponse is the answer of GET /v1/events: oldest first; Next is the since to ask
// with to read on.
type EventsResponse struct {
	Events []Event `json:"events"`
	Next   int64   `json:"next"`
}

// EventsQuery is GET /v1/events' parameters.
type EventsQuery struct {
	// Since asks for the events after this sequence number (the Next of the previous
	// answer); without it (HasSince false) the answer is the newest events of the filter.
	Since    int64
	HasSince bool
	// Types, Subject (exact, or a prefix ending in "*"), Severity and Text (a literal,
	// case-insensitive substring of the subject, type or message) filter.
	Types    []string
	Subject  string
	Severity string
	Text     string
	// From and Until, when set, keep the events of that window (From included, Until not):
	// what happened around an incident or in one slice of a timeline.
	From, Until time.Time
	// Limit bounds the answer (default 100, at most 1,000; a CSV export takes the whole
	// journal by default).
	Limit int
	// Wait makes a request with Since a long poll: the answer waits up to Wait for a match.
	Wait time.Duration
}

// Values encodes q as query parameters.
func (q EventsQuery) Values() url.Values {
	v := url.Values{}
	if q.HasSince {
		v.Set("since", strconv.FormatInt(q.Since, 10))
	}
	if len(q.Types) > 0 {
		v.Set("type", strings.Join(q.Types, ","))
	}
	for k, s := range map[string]string{"subject": q.Subject, "severity": q.Severity, "q": q.Text} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	return v
}

// PathReports is where gateways and orchestrators report what they see: events for the
// journal, and conditions that raise and clear incidents.
const PathReports = "/v1/reports"

// Bounds of a report.
const (
	MaxReportEvents     = 100
	MaxReportConditions = 100
	// MaxReportWorkflows bounds the workflows an orchestrator's report lists.
	MaxReportWorkflows = 10000
	maxReportMessage   = 1000
	maxReportSubject   = 300
)

// ReportRequest is what a gateway or an orchestrator reports (POST /v1/reports, with the
// permission outcomes need).
type ReportRequest struct {
	// Reporter names the gateway or orchestrator (its --id, or its host).
	Reporter   string          `json:"reporter"`
	Events     []ReportedEvent `json:"events,omitempty"`
	Conditions []Condition     `json:"conditions,omitempty"`
	// Workflows are the workflows the reporting orchestrator holds. A report that raises a
	// trigger condition lists them, and the condition must name one of them: the registry
	// knows no workflows itself, so a trigger for a workflow its orchestrator does not hold
	// is refused rather than opening an incident nobody can act on. Clearing a trigger needs
	// no list (the workflow may be gone).
	Workflows []string `json:"workflows,omitempty"`
}

// ReportedEvent is an event for the registry's journal; its type is one of
// ReportedEventTypes.
type ReportedEvent struct {
	Type     string         `json:"type"`
	Severity string         `json:"severity"`
	Subject  string         `json:"subject"`
	Message  string         `json:"message"`
	Attrs    map[string]any `json:"attrs,omitempty"`
}

// Condition is the state of something that raises an incident while it holds: a workflow
// below its critical success rate (kind trigger, subject the workflow), a route without an
// eligible upstream (kind route, subject "METHOD pattern").
type Condition struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	// Active: the condition holds (raise, or count an occurrence); false clears it.
	Active  bool   `json:"active"`
	Summary string `json:"summary,omitempty"`
	// TraceID is the trace of the failure that raised it (a trigger's: the failed run's),
	// which the incident keeps and the console links.
	TraceID string `json:"trace_id,omitempty"`
}

// ReportResponse is the answer of POST /v1/reports.
type ReportResponse struct {
	// Recorded is how many events went into the journal.
	Recorded int `json:"recorded"`
}

// Validate reports every problem of a report.
func (r *ReportRequest) Validate() error {
	var ds []Detail
	if r.Reporter == "" || len(r.Reporter) > maxReportSubject {
		ds = append(ds, Detail{Path: "reporter", Message: fmt.Sprintf("required, at most %d bytes", maxReportSubject)})
	}
	if len(r.Events) > MaxReportEvents {
		ds = append(ds, Detail{Path: "events", Message: fmt.Sprintf("at most %d per report, got %d", MaxReportEvents, len(r.Events))})
	} else {
		for i, e := range r.Events {
			p := fmt.Sprintf("events[%d]", i)
			if !slices.Contains(ReportedEventTypes, e.Type) && !slices.Contains(RuntimeEventTypes, e.Type) {
				ds = append(ds, Detail{Path: p + ".type", Message: fmt.Sprintf("must be one of %s, %s, got %q", strings.Join(ReportedEventTypes, ", "), strings.Join(RuntimeEventTypes, ", "), e.Type)})
			}
			if e.Severity != SeverityInfo && e.Severity != SeverityWarning && e.Severity != SeverityError {
				ds = append(ds, Detail{Path: p + ".severity", Message: fmt.Sprintf("must be info, warning or error, got %q", e.Severity)})
			}
			if e.Subject == "" || len(e.Subject) > maxReportSubject {
				ds = append(ds, Detail{Path: p + ".subject", Message: fmt.Sprintf("required, at most %d bytes", maxReportSubject)})
			}
			if e.Message == "" || len(e.Message) > maxReportMessage {
				ds = append(ds, Detail{Path: p + ".message", Message: fmt.Sprintf("required, at most %d bytes", maxReportMessage)})
			}
		}
	}
	if len(r.Conditions) > MaxReportConditions {
		ds = append(ds, Detail{Path: "conditions", Message: fmt.Sprintf("at most %d per report, got %d", MaxReportConditions, len(r.Conditions))})
	} else {
		for i, c := range r.Conditions {
			p := fmt.Sprintf("conditions[%d]", i)
			if c.Kind != IncidentTrigger && c.Kind != IncidentRoute && c.Kind != IncidentValidation {
				ds = append(ds, Detail{Path: p + ".kind", Message: fmt.Sprintf("must be trigger, route or validation, got %q", c.Kind)})
			}
			if c.Subject == "" || len(c.Subject) > maxReportSubject {
				ds = append(ds, Detail{Path: p + ".subject", Message: fmt.Sprintf("required, at most %d bytes", maxReportSubject)})
			}
			if len(c.Summary) > maxReportMessage {
				ds = append(ds, Detail{Path: p + ".summary", Message: fmt.Sprintf("at most %d bytes", maxReportMessage)})
			}
			if (c.Kind == IncidentTrigger || c.Kind == IncidentValidation) && c.Active && !slices.Contains(r.Workflows, c.Subject) {
				ds = append(ds, Detail{Path: p + ".subject", Message: fmt.Sprintf("workflow %q is not in the report's workflows list: a trigger is raised only for a workflow the reporting orchestrator holds", c.Subject)})
			}
		}
	}
	if len(r.Workflows) > MaxReportWorkflows {
		ds = append(ds, Detail{Path: "workflows", Message: fmt.Sprintf("at most %d per report, got %d", MaxReportWorkflows, len(r.Workflows))})
	} else if i := slices.IndexFunc(r.Workflows, func(w string) bool { return w == "" || len(w) > maxReportSubject }); i >= 0 {
		ds = append(ds, Detail{Path: fmt.Sprintf("workflows[%d]", i), Message: fmt.Sprintf("required, at most %d bytes", maxReportSubject)})
	}
	if len(ds) > 0 {
		return InvalidRequest(ds)
	}
	return nil
}
