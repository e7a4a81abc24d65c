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
	for _, k := range []string{apiv1.IncidentQuarantine, apiv1.IncidentPanic, apiv1.IncidentSelfPreservation} {
		l.open.WithLabelValues(k)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(l.open); err != nil {
			return nil, fmt.Errorf("register incident metrics: %w", err)
		}
	}
	return l, nil
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
		Status: apiv1.IncidentOpen, OpenedAt: l.cfg.Now().UTC(), Occurrences: 1}
	l.incidents = append(l.incidents, in)
	l.trim()
	l.open.WithLabelValues(kind).Inc()
	l.cfg.Logger.Warn("incident raised", slog.String("id", in.ID), slog.String("kind", kind), slog.String("subject", subject),
		slog.String("owner", owner), slog.String("summary", summary))
	return *in
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
	in.Status, in.ResolvedAt, in.ResolvedBy = apiv1.IncidentResolved, &now, by
	l.open.WithLabelValues(in.Kind).Dec()
	l.cfg.Logger.Info("incident resolved", slog.String("id", in.ID), slog.String("kind", in.Kind), slog.String("subject", in.Subject),
		slog.String("by", by))
}

// trim drops the oldest resolved incidents (then the oldest of all) past Max.
func (l *Log) trim() {
	for len(l.incidents) > l.cfg.Max {
		i := slices.IndexFunc(l.incidents, func(in *apiv1.Incident) bool { return in.Status == apiv1.IncidentResolved })
		if i < 0 {
			i = 0
			l.open.WithLabelValues(l.incidents[0].Kind).Dec()
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
	return l.update(id, func(in *apiv1.Incident) {
		if in.Status == apiv1.IncidentOpen {
			now := l.cfg.Now().UTC()
			in.Status, in.AcknowledgedAt, in.AcknowledgedBy = apiv1.IncidentAcknowledged, &now, by
		}
	})
}

// Resolve closes an incident; resolving a resolved one changes nothing. If its condition
// still holds, the next time it is raised opens a new incident.
func (l *Log) Resolve(id, by string) (apiv1.Incident, error) {
	return l.update(id, func(in *apiv1.Incident) {
		if in.Status != apiv1.IncidentResolved {
			l.resolve(in, by)
		}
	})
}

// update applies change to incident id under the lock and returns the incident as it is then.
func (l *Log) update(id string, change func(*apiv1.Incident)) (apiv1.Incident, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	in, err := l.find(id)
	if err != nil {
		return apiv1.Incident{}, err
	}
	change(in)
	return *in, nil
}
