package registry

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
)

// What the registry tells the journal (Config.Journal). Heartbeats are not events: they
// change nothing a consumer sees.

// journalRegistration records a registration; prev is the incarnation it replaces, if any.
// The event keeps what it says (registrationEvent), and its message and attributes are
// written when it is read.
func (r *Registry) journalRegistration(rec, prev *Record, warmingUp bool) {
	j := r.cfg.Journal
	if j == nil {
		return
	}
	e := &registrationEvent{id: rec.InstanceID, service: rec.ServiceName, endpoint: rec.Endpoint, generation: rec.Generation,
		capabilities: int32(len(rec.Capabilities)), probed: rec.Probed(), judged: r.cfg.Eligibility != nil, warmingUp: warmingUp}
	typ := apiv1.EventRegistered
	if prev != nil {
		typ, e.replaced, e.prevGeneration, e.prevRestored = apiv1.EventReregistered, true, prev.Generation, prev.Restored()
	}
	j.RecordDeferred(typ, apiv1.SeverityInfo, rec.InstanceID, e)
}

// registrationEvent is a registration's event as the journal keeps it (journal.Deferred):
// what it says, in 80 bytes where its message and attributes took some 270. It holds the
// record's strings, not the record: the record of an instance gone since would hold its
// eligibility view with it, for as long as the journal holds the event.
type registrationEvent struct {
	id, service, endpoint string
	generation            int64
	prevGeneration        int64 // of the incarnation it replaced
	capabilities          int32
	probed                bool // its manifest declares health
	replaced              bool // a re-registration: it replaced an incarnation
	prevRestored          bool // the replaced incarnation was restored from a snapshot, not heard from since
	warmingUp             bool // registered during the registry's warm-up
	judged                bool // the registry runs the eligibility engine
}

// reason says why a re-registration replaced the incarnation before it.
func (e *registrationEvent) reason() string {
	if e.prevRestored {
		return "the provider re-registered after the registry restarted (its record was restored from a snapshot)"
	}
	return "a new incarnation replaced the registered one (the provider restarted or lost its lease)"
}

// Message writes the event's message.
func (e *registrationEvent) Message() string {
	gen := strconv.FormatInt(e.generation, 10)
	if e.replaced {
		return e.id + " (" + e.service + ") re-registered, generation " + gen + " replaces " + strconv.FormatInt(e.prevGeneration, 10) + ": " + e.reason()
	}
	during := ""
	if e.warmingUp {
		during = " during the registry's warm-up"
	}
	return e.id + " (" + e.service + ") registered at " + e.endpoint + ", generation " + gen + during
}

// Attrs writes the event's attributes, in their keys' byte order (journal.Object):
// capabilities, eligibility, endpoint, generation, previous_generation, reason,
// service_name, warm_up.
func (e *registrationEvent) Attrs() json.RawMessage {
	var buf [256]byte
	attrs := journal.NewObject(buf[:]).Int("capabilities", int64(e.capabilities))
	if e.judged {
		// the new incarnation's first verdict, which the journal records nowhere else
		attrs = attrs.Str("eligibility", health.FirstState(e.probed))
	}
	attrs = attrs.Str("endpoint", e.endpoint).Int("generation", e.generation)
	if e.replaced {
		attrs = attrs.Int("previous_generation", e.prevGeneration).Str("reason", e.reason())
	}
	attrs = attrs.Str("service_name", e.service)
	if e.warmingUp && !e.replaced {
		attrs = attrs.Bool("warm_up", true)
	}
	return attrs.JSON()
}

// journalDeregistration records a deregistration by the provider.
func (r *Registry) journalDeregistration(rec *Record, by string) {
	if r.cfg.Journal == nil {
		return
	}
	attrs := map[string]any{"service_name": rec.ServiceName, "generation": rec.Generation}
	if by != "" {
		attrs["by"] = by
	}
	r.cfg.Journal.Record(apiv1.EventDeregistered, apiv1.SeverityInfo, rec.InstanceID,
		fmt.Sprintf("%s (%s) deregistered generation %d", rec.InstanceID, rec.ServiceName, rec.Generation), attrs)
}

// journalExpiry records an eviction: the lease ended without a heartbeat.
func (r *Registry) journalExpiry(rec *Record, now time.Time) {
	if r.cfg.Journal == nil {
		return
	}
	expired := rec.LeaseExpiresAt()
	r.cfg.Journal.Record(apiv1.EventExpired, apiv1.SeverityWarning, rec.InstanceID,
		fmt.Sprintf("%s (%s) evicted: its lease ended at %s without a heartbeat (lease %s)", rec.InstanceID, rec.ServiceName,
			expired.Format(time.RFC3339), r.cfg.LeaseTTL),
		map[string]any{"service_name": rec.ServiceName, "generation": rec.Generation, "lease_expired_at": expired, "evicted_at": now.UTC()})
}

// journalSnapshot records a snapshot written.
func (r *Registry) journalSnapshot(resp *apiv1.SnapshotResponse) {
	if r.cfg.Journal == nil {
		return
	}
	r.cfg.Journal.Record(apiv1.EventSnapshot, apiv1.SeverityInfo, "registry",
		fmt.Sprintf("snapshot written: %d instances, %d capabilities at revision %d", resp.Instances, resp.Capabilities, resp.Revision),
		map[string]any{"path": resp.Path, "revision": resp.Revision, "instances": resp.Instances})
}
