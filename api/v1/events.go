package apiv1

import (
	"net/url"
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
)

// EventTypes lists every event type, for validating a filter.
var EventTypes = []string{EventRegistered, EventReregistered, EventDeregistered, EventExpired, EventEligibility,
	EventPanic, EventSelfPreservation, EventSnapshot, EventIncidentOpened, EventIncidentAcked, EventIncidentResolved,
	EventIncidentIgnored, EventJournalGap}

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
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	return v
}
