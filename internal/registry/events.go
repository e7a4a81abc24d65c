package registry

import (
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
func (r *Registry) journalRegistration(rec, prev *Record, warmingUp bool) {
	j := r.cfg.Journal
	if j == nil {
		return
	}
	// The attributes in their keys' byte order (journal.Object): capabilities, eligibility,
	// endpoint, generation, previous_generation, reason, service_name, warm_up.
	var buf [256]byte
	attrs := journal.NewObject(buf[:]).Int("capabilities", int64(len(rec.Capabilities)))
	if r.cfg.Eligibility != nil {
		// the new incarnation's first verdict, which the journal records nowhere else
		attrs = attrs.Str("eligibility", health.FirstState(rec.Probed()))
	}
	attrs = attrs.Str("endpoint", rec.Endpoint).Int("generation", rec.Generation)
	gen := strconv.FormatInt(rec.Generation, 10)
	if prev == nil {
		attrs = attrs.Str("service_name", rec.ServiceName)
		during := ""
		if warmingUp {
			attrs = attrs.Bool("warm_up", true)
			during = " during the registry's warm-up"
		}
		j.RecordObject(apiv1.EventRegistered, apiv1.SeverityInfo, rec.InstanceID,
			rec.InstanceID+" ("+rec.ServiceName+") registered at "+rec.Endpoint+", generation "+gen+during, attrs) // one string, not two
		return
	}
	reason := "a new incarnation replaced the registered one (the provider restarted or lost its lease)"
	if prev.Restored() {
		reason = "the provider re-registered after the registry restarted (its record was restored from a snapshot)"
	}
	attrs = attrs.Int("previous_generation", prev.Generation).Str("reason", reason).Str("service_name", rec.ServiceName)
	j.RecordObject(apiv1.EventReregistered, apiv1.SeverityInfo, rec.InstanceID,
		rec.InstanceID+" ("+rec.ServiceName+") re-registered, generation "+gen+" replaces "+strconv.FormatInt(prev.Generation, 10)+": "+reason, attrs)
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
