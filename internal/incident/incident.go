package incident

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/journal"
)

// DefaultMax is how many incidents a Log keeps by default.
const DefaultMax = 1000

// ResolvedBySystem is who resolved an incident whose condition ended.
const ResolvedBySystem = "meshflows (condition ended)"

// ErrNotFound: no incident with that id.
var ErrNotFound = errors.New("incident not found")

// Config configures a Log.
type Config struct {
	// Max bounds the incidents kept (default 1000); past it the oldest resolved go first.
	Max int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives raised and resolved incidents; nil is silent.
	Logger *slog.Logger
	// Registerer receives meshflows_incidents_open{kind}; nil registers none.
	Registerer prometheus.Registerer
	// Journal, when set, records every incident opened and every action taken on one.
	Journal *journal.Journal
}

// Log holds incidents; it is safe for concurrent use.
type Log struct {
	cfg Config

	mu        sync.Mutex
	incidents []*apiv1.Incident // oldest first
	next      int
	open      *prometheus.GaugeVec
}

// New returns a Log with cfg.
func New(cfg Config) (*Log, error) {
	if cfg.Max == 0 {
		cfg.Max = DefaultMax
	}
	if cfg.Max < 1 {
		return nil, fmt.Errorf("incident log: max %d is under 1", cfg.Max)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{cfg: cfg, open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshflows_incidents_open",
		Help: "Incidents not resolved (open or acknowledged), by kind."}, []string{"kind"})}
	for _, k := range []string{apiv1.IncidentQuarantine, apiv1.IncidentPanic, apiv1.IncidentSelfPreservation, apiv1.IncidentTrigger, apiv1.IncidentRoute, apiv1.IncidentZoneOutlier, apiv1.IncidentValidation, apiv1.IncidentCohortFlapping} {
		l.open.WithLabelValues(k)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(l.open); err != nil {
			return nil, fmt.Errorf("register incident metrics: %w", err)
		}
	}
	return l, nil
}

// MaxComment bounds the comment of an action, in bytes.
const MaxComment = 1000

// ErrBadAction: an action that is not acknowledge, resolve or ignore, or a comment too long.
var ErrBadAction = errors.New("bad incident action")

// Severity returns the severity of an incident of kind: a group in panic, the registry in
// self-preservation, a failing trigger or a route without upstreams is critical (consumers
// may be sent to dead instances, or nowhere); anything else — a quarantined instance, whose
// group serves on — a warning. There is no third severity.
func Severity(kind string) string {
	switch kind {
	case apiv1.IncidentPanic, apiv1.IncidentSelfPreservation, apiv1.IncidentTrigger, apiv1.IncidentRoute, apiv1.IncidentZoneOutlier, apiv1.IncidentCohortFlapping:
		return apiv1.IncidentCritical
	default:
		return apiv1.IncidentWarning
	}
}

// Subject is the journal subject of incident id: "incident/ID".
func Subject(id string) string { return "incident/" + id }

func (l *Log) journal(typ string, in *apiv1.Incident, message string, extra map[string]any) {
	if l.cfg.Journal == nil {
		return
	}
	sev := apiv1.SeverityInfo
	if typ == apiv1.EventIncidentOpened {
		sev = apiv1.SeverityWarning
		if in.Severity == apiv1.IncidentCritical {
			sev = apiv1.SeverityError
		}
	}
	attrs := map[string]any{"incident_id": in.ID, "kind": in.Kind, "subject": in.Subject, "severity": in.Severity}
	for k, v := range extra {
		attrs[k] = v
	}
	l.cfg.Journal.Record(typ, sev, Subject(in.ID), message, attrs)
}

// standing returns the unresolved incident of (kind, subject), or nil.
func (l *Log) standing(kind, subject string) *apiv1.Incident {
	for i := len(l.incidents) - 1; i >= 0; i-- {
		if in := l.incidents[i]; in.Kind == kind && in.Subject == subject && in.Status != apiv1.IncidentResolved {
			return in
		}
	}
	return nil
}

// Raise opens an incident for (kind, subject), or counts one more occurrence of the one
// that stands.
func (l *Log) Raise(kind, subject, owner, summary string) apiv1.Incident {
	l.mu.Lock()
	defer l.mu.Unlock()
	if in := l.standing(kind, subject); in != nil {
		in.Occurrences++
		in.Summary = summary
		return *in
	}
	l.next++
	in := &apiv1.Incident{ID: strconv.Itoa(l.next), Kind: kind, Subject: subject, Owner: owner, Summary: summary,
		Severity: Severity(kind), Status: apiv1.IncidentOpen, OpenedAt: l.cfg.Now().UTC(), Occurrences: 1}
	l.incidents = append(l.incidents, in)
	l.trim()
	l.open.WithLabelValues(kind).Inc()
	l.cfg.Logger.Warn("incident raised", slog.String("id", in.ID), slog.String("kind", kind), slog.String("subject", subject),
		slog.String("owner", owner), slog.String("summary", summary))
	l.journal(apiv1.EventIncidentOpened, in, fmt.Sprintf("incident %s opened (%s, %s): %s", in.ID, in.Kind, in.Severity, summary), nil)
	return *in
}

// SetTrace records traceID as the trace of the standing incident of (kind, subject): the
// latest failure reported with it.
func (l *Log) SetTrace(kind, subject, traceID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if in := l.standing(kind, subject); in != nil && traceID != "" {
		in.TraceID = traceID
	}
}

// Find returns the standing (unresolved) incident of (kind, subject).
func (l *Log) Find(kind, subject string) (apiv1.Incident, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if in := l.standing(kind, subject); in != nil {
		return *in, true
	}
	return apiv1.Incident{}, false
}

// Told records on the incident id that an owner was told of it (the console shows who);
// false when no such incident is kept.
func (l *Log) Told(id string, n apiv1.OwnerNotice) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, in := range l.incidents {
		if in.ID == id {
			// a copy handed out by List keeps its own slice: never append in place
			in.Notified = append(slices.Clip(in.Notified), n)
			return true
		}
	}
	return false
}

// Clear resolves the standing incident of (kind, subject): its condition ended.
func (l *Log) Clear(kind, subject string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if in := l.standing(kind, subject); in != nil {
		l.resolve(in, ResolvedBySystem)
	}
}

func (l *Log) resolve(in *apiv1.Incident, by string) {
	now := l.cfg.Now().UTC()
	if in.Status != apiv1.IncidentIgnored {
		l.open.WithLabelValues(in.Kind).Dec()
	}
	in.Status, in.ResolvedAt, in.ResolvedBy = apiv1.IncidentResolved, &now, by
	l.cfg.Logger.Info("incident resolved", slog.String("id", in.ID), slog.String("kind", in.Kind), slog.String("subject", in.Subject),
		slog.String("by", by))
	if by == ResolvedBySystem {
		l.journal(apiv1.EventIncidentResolved, in, fmt.Sprintf("incident %s resolved: its condition ended (%s %s)", in.ID, in.Kind, in.Subject), nil)
	}
}

// trim drops the oldest resolved incidents (then the oldest of all) past Max.
func (l *Log) trim() {
	for len(l.incidents) > l.cfg.Max {
		i := slices.IndexFunc(l.incidents, func(in *apiv1.Incident) bool { return in.Status == apiv1.IncidentResolved })
		if i < 0 {
			i = 0
			if l.incidents[0].Status != apiv1.IncidentIgnored {
				l.open.WithLabelValues(l.incidents[0].Kind).Dec()
			}
		}
		l.incidents = slices.Delete(l.incidents, i, i+1)
	}
}

// List returns the incidents with status ("" for all), newest first.
func (l *Log) List(status string) []apiv1.Incident {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []apiv1.Incident{}
	for i := len(l.incidents) - 1; i >= 0; i-- {
		if in := l.incidents[i]; status == "" || in.Status == status || status == "unresolved" && in.Status != apiv1.IncidentResolved {
			out = append(out, *in)
		}
	}
	return out
}

// Get returns one incident.
func (l *Log) Get(id string) (apiv1.Incident, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	in, err := l.find(id)
	if err != nil {
		return apiv1.Incident{}, err
	}
	return *in, nil
}

func (l *Log) find(id string) (*apiv1.Incident, error) {
	for _, in := range l.incidents {
		if in.ID == id {
			return in, nil
		}
	}
	return nil, fmt.Errorf("incident %q: %w", id, ErrNotFound)
}

// Acknowledge records that by is on it. Acknowledging a resolved or acknowledged incident
// changes nothing.
func (l *Log) Acknowledge(id, by string) (apiv1.Incident, error) {
	return l.Act(id, apiv1.IncidentActionAcknowledge, by, "")
}

// Resolve closes an incident; resolving a resolved one changes nothing. If its condition
// still holds, the next time it is raised opens a new incident.
func (l *Log) Resolve(id, by string) (apiv1.Incident, error) {
	return l.Act(id, apiv1.IncidentActionResolve, by, "")
}

// Act takes action (acknowledge, resolve or ignore) on incident id for by, with an optional
// comment saying why; the action is kept on the incident and recorded in the journal. An
// action that changes nothing (acknowledging a resolved incident) is still kept when it
// carries a comment, so a note is never lost.
//
// Ignoring takes the incident out of the open count and keeps it standing: the condition
// returning counts an occurrence instead of paging again; it resolves when the condition ends.
func (l *Log) Act(id, action, by, comment string) (apiv1.Incident, error) {
	if len(comment) > MaxComment {
		return apiv1.Incident{}, fmt.Errorf("%w: the comment has %d bytes, at most %d", ErrBadAction, len(comment), MaxComment)
	}
	var change func(in *apiv1.Incident, now time.Time) bool
	switch action {
	case apiv1.IncidentActionAcknowledge:
		change = func(in *apiv1.Incident, now time.Time) bool {
			if in.Status != apiv1.IncidentOpen {
				return false
			}
			in.Status, in.AcknowledgedAt, in.AcknowledgedBy = apiv1.IncidentAcknowledged, &now, by
			return true
		}
	case apiv1.IncidentActionResolve:
		change = func(in *apiv1.Incident, _ time.Time) bool {
			if in.Status == apiv1.IncidentResolved {
				return false
			}
			l.resolve(in, by)
			return true
		}
	case apiv1.IncidentActionIgnore:
		change = func(in *apiv1.Incident, now time.Time) bool {
			if in.Status == apiv1.IncidentResolved || in.Status == apiv1.IncidentIgnored {
				return false
			}
			l.open.WithLabelValues(in.Kind).Dec()
			in.Status, in.IgnoredAt, in.IgnoredBy = apiv1.IncidentIgnored, &now, by
			return true
		}
	default:
		return apiv1.Incident{}, fmt.Errorf("%w: %q is not acknowledge, resolve or ignore", ErrBadAction, action)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	in, err := l.find(id)
	if err != nil {
		return apiv1.Incident{}, err
	}
	now := l.cfg.Now().UTC()
	if !change(in, now) && comment == "" {
		return *in, nil
	}
	in.Actions = append(in.Actions, apiv1.IncidentComment{At: now, By: by, Action: action, Comment: comment})
	typ := map[string]string{apiv1.IncidentActionAcknowledge: apiv1.EventIncidentAcked, apiv1.IncidentActionResolve: apiv1.EventIncidentResolved,
		apiv1.IncidentActionIgnore: apiv1.EventIncidentIgnored}[action]
	msg := fmt.Sprintf("incident %s (%s %s): %s by %s", in.ID, in.Kind, in.Subject, pastTense(action), by)
	if comment != "" {
		msg += ": " + comment
	}
	l.journal(typ, in, msg, map[string]any{"by": by, "comment": comment, "status": in.Status})
	return *in, nil
}

func pastTense(action string) string {
	if action == apiv1.IncidentActionIgnore {
		return "ignored"
	}
	return action + "d"
}
