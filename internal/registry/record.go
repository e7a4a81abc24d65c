package registry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// emptyObject is the metadata of a capability registered without any.
var emptyObject = json.RawMessage(`{}`)

// Capability is a registered capability with the values queries sort and filter on parsed
// once, at registration.
type Capability struct {
	apiv1.Capability
	// Version is CapabilityVersion parsed.
	Version *semver.Version
	// Priority is metadata.priority (an integer, default 0); higher sorts first.
	Priority int64
	// PublicPaths is metadata.public_paths, when it is a list of strings.
	PublicPaths []string
	// compact says Metadata is valid JSON without white space between its tokens, as
	// encoding/json writes a json.RawMessage (MetadataJSON).
	compact bool
}

// MetadataJSON returns the capability's metadata, and whether it is already as encoding/json
// writes it (valid, compact): then a writer copies it, without checking it again for every
// answer it is in.
func (c *Capability) MetadataJSON() (json.RawMessage, bool) { return c.Metadata, c.compact }

// Record is one incarnation of an instance. Everything but the lease expiry and the
// self-reported health is fixed when the record is built; a re-registration makes a new
// Record. The lease and health are atomics so that heartbeats never take a write lock.
type Record struct {
	InstanceID     string
	ServiceName    string
	ServiceVersion string
	Endpoint       string
	Zone           string
	// Capabilities may be shared with other records that declared the same list: never
	// modify it.
	Capabilities []Capability
	Manifest     *apiv1.Manifest
	// Generation is assigned by the Store when the record is stored.
	Generation   int64
	RegisteredAt time.Time
	// Owner is the identity that registered the instance ("" in open mode); only it may
	// heartbeat or re-register the instance.
	Owner string
	// Team is the team the registration named as owning the instance ("": Owner's).
	Team string
	// Runtime says the runtime that runs the instance reports its readiness (a kube-sync
	// registration with readiness "runtime").
	Runtime bool

	capList *capabilityList // what Capabilities was taken from, with their ids (shared likewise)

	judged   atomic.Pointer[health.Handle] // the eligibility monitor's handle, when this replica registered it
	lease    atomic.Int64                  // unix nanoseconds
	health   atomic.Int32                  // index into healthNames
	restored atomic.Bool                   // restored from a snapshot, not heard from since
	encoded  atomic.Pointer[[]byte]        // Encoded's, once built
}

// Encoded returns what build made of the record on the first call: a writer of answers (the
// server's discovery JSON) keeps there its encoding of what never changes in the record (its
// instance, service, endpoint and zone), so that every answer that holds the record again
// copies it instead of encoding it again. Two first calls at once may both build; one is
// kept.
func (r *Record) Encoded(build func(*Record) []byte) []byte {
	if p := r.encoded.Load(); p != nil {
		return *p
	}
	v := build(r)
	r.encoded.Store(&v)
	return v
}

// CapabilitiesEncoded is Encoded for the record's capabilities, one part each: kept once for
// every record that shares them (the records of one registration's capability list do), so
// a fleet of a few kinds of instances keeps a few. A record built otherwise builds them at
// every call.
func (r *Record) CapabilitiesEncoded(build func([]Capability) [][]byte) [][]byte {
	l := r.capList
	if l == nil {
		return build(r.Capabilities)
	}
	if p := l.encoded.Load(); p != nil {
		return *p
	}
	v := build(l.caps)
	l.encoded.Store(&v)
	return v
}

// Restored reports whether the record was restored from a snapshot and its instance has not
// heartbeated since: it may have gone away while the registry was down.
func (r *Record) Restored() bool { return r.restored.Load() }

// MarkRestored says the record was restored from a snapshot: Restored until its instance
// is heard from.
func (r *Record) MarkRestored() { r.restored.Store(true) }

// Readiness is what tells the registry the instance is ready: its probes (a manifest health
// section), its runtime, or nothing.
func (r *Record) Readiness() string {
	switch {
	case r.Probed():
		return apiv1.ReadinessProbe
	case r.Runtime:
		return apiv1.ReadinessRuntime
	}
	return apiv1.ReadinessNone
}

// Probed reports whether the record's manifest declares a probe class: its instance is
// admitted by probes, not at registration, and the prober visits it.
func (r *Record) Probed() bool { return r.Manifest != nil && r.Manifest.Health != nil }

// Routed reports whether the record is an input of the gateways' routes: it publishes a
// manifest, or a capability of it declares a public path.
func (r *Record) Routed() bool {
	if r.Manifest != nil {
		return true
	}
	for _, c := range r.Capabilities {
		if len(c.PublicPaths) > 0 {
			return true
		}
	}
	return false
}

// Confirm clears the restored mark (the instance heartbeated) and reports whether it was set.
func (r *Record) Confirm() bool { return r.restored.Swap(false) }

var healthNames = [...]string{apiv1.HealthOK, apiv1.HealthDegraded, apiv1.HealthFailing, apiv1.HealthNotReady}

func healthIndex(h string) int32 {
	for i, n := range healthNames {
		if n == h {
			return int32(i)
		}
	}
	return 0
}

// LeaseExpiresAt returns when the record's lease ends.
func (r *Record) LeaseExpiresAt() time.Time { return time.Unix(0, r.lease.Load()).UTC() }

// SetLeaseExpiresAt moves the end of the lease.
func (r *Record) SetLeaseExpiresAt(t time.Time) { r.lease.Store(t.UnixNano()) }

// Expired reports whether the lease has ended at now.
func (r *Record) Expired(now time.Time) bool { return r.lease.Load() <= now.UnixNano() }

// Health returns the self-reported health: ok, degraded, failing or not_ready.
func (r *Record) Health() string { return healthNames[r.health.Load()] }

// SetHealth stores the self-reported health and reports whether it changed.
func (r *Record) SetHealth(h string) bool {
	i := healthIndex(h)
	return r.health.Swap(i) != i
}

// newRecord builds a record from a validated registration.
func newRecord(req *apiv1.RegisterRequest, now time.Time, lease time.Duration) *Record {
	rec := &Record{
		InstanceID:     req.InstanceID,
		ServiceName:    intern(req.ServiceName),
		ServiceVersion: intern(req.ServiceVersion),
		Endpoint:       req.Endpoint,
		Zone:           intern(req.Zone),
		Manifest:       req.Manifest,
		RegisteredAt:   now.UTC(),
		Runtime:        req.Readiness == apiv1.ReadinessRuntime,
		Team:           intern(req.Team),
	}
	l := capabilities(req.Capabilities)
	rec.Capabilities, rec.capList = l.caps, l
	rec.SetLeaseExpiresAt(now.Add(lease))
	rec.SetHealth(req.Health)
	return rec
}

// newCapability parses a capability's version and hints, once per distinct capability list
// (intern.go); its strings are shared with the lists of other services that repeat them.
func newCapability(c apiv1.Capability) Capability {
	c.CapabilityID, c.CapabilityVersion = intern(c.CapabilityID), intern(c.CapabilityVersion)
	c.ContractSchemaVersion, c.Provider = intern(c.ContractSchemaVersion), intern(c.Provider)
	out := Capability{Capability: c}
	out.Version, _ = semver.StrictNewVersion(c.CapabilityVersion)
	m := bytes.TrimSpace(c.Metadata)
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		out.Metadata, out.compact = emptyObject, true
		return out
	}
	// Compacted once here (once per distinct capability list), as encoding/json writes it,
	// rather than checked and compacted in every answer it is in: that was two fifths of
	// writing a discovery entry. Metadata that is not JSON is kept as sent, for the writers'
	// own error.
	if json.Valid(m) {
		out.Metadata, out.compact = m, true
		if bytes.ContainsAny(m, " \t\r\n") {
			var buf bytes.Buffer
			json.Compact(&buf, m) // valid: no error
			out.Metadata = buf.Bytes()
		}
	}
	// Most metadata names neither hint; skip decoding it then (registration hot path).
	if !bytes.Contains(m, []byte(`"priority"`)) && !bytes.Contains(m, []byte(`"public_paths"`)) {
		return out
	}
	if bytes.Contains(m, []byte(`"priority"`)) {
		out.Priority, _ = apiv1.Priority(m) // validated before: an integer or none
	}
	out.PublicPaths, _ = c.PublicPaths() // likewise (it looks for the key first)
	return out
}

// Instance returns the catalog form of the record.
func (r *Record) Instance() apiv1.Instance {
	caps := make([]apiv1.Capability, len(r.Capabilities))
	for i, c := range r.Capabilities {
		caps[i] = c.Capability
	}
	return apiv1.Instance{
		InstanceID:     r.InstanceID,
		ServiceName:    r.ServiceName,
		ServiceVersion: r.ServiceVersion,
		Endpoint:       r.Endpoint,
		Zone:           r.Zone,
		Readiness:      r.Readiness(),
		Generation:     r.Generation,
		RegisteredAt:   r.RegisteredAt,
		LeaseExpiresAt: r.LeaseExpiresAt(),
		Health:         r.Health(),
		Eligibility:    apiv1.EligibilityServing,
		Weight:         100,
		Capabilities:   caps,
		Manifest:       r.Manifest,
		Owner:          r.Owner,
		Team:           r.Team,
		Restored:       r.Restored(),
	}
}

// RecordFromInstance rebuilds a record from its catalog form (a snapshot), keeping its
// generation and giving it the lease end given.
func RecordFromInstance(in apiv1.Instance, leaseEnd time.Time) *Record {
	rec := &Record{
		InstanceID:     in.InstanceID,
		ServiceName:    intern(in.ServiceName),
		ServiceVersion: intern(in.ServiceVersion),
		Endpoint:       in.Endpoint,
		Zone:           intern(in.Zone),
		Manifest:       in.Manifest,
		Generation:     in.Generation,
		RegisteredAt:   in.RegisteredAt,
		Owner:          in.Owner,
		Team:           intern(in.Team),
		Runtime:        in.Readiness == apiv1.ReadinessRuntime,
	}
	l := capabilities(in.Capabilities)
	rec.Capabilities, rec.capList = l.caps, l
	rec.SetHealth(in.Health)
	rec.SetLeaseExpiresAt(leaseEnd)
	return rec
}

// Entry is one (record, capability) pair a query matched.
type Entry struct {
	Record *Record
	// Cap indexes Record.Capabilities.
	Cap int
	// Eligibility and Weight are the verdict on the instance ("" and 0 mean serving at 100:
	// no engine); Panic says its (capability, zone) is in panic.
	Eligibility string
	Weight      int
	Panic       bool
	// Excluded: an operator forced it out (apiv1.CapabilityEntry.Excluded).
	Excluded bool
}

// Capability returns the entry's capability.
func (e Entry) Capability() *Capability { return &e.Record.Capabilities[e.Cap] }

// Wire returns the discovery form of the entry.
func (e Entry) Wire() apiv1.CapabilityEntry {
	r, c := e.Record, &e.Record.Capabilities[e.Cap]
	out := apiv1.CapabilityEntry{
		CapabilityID:          c.CapabilityID,
		CapabilityVersion:     c.CapabilityVersion,
		ContractSchemaVersion: c.ContractSchemaVersion,
		Provider:              c.Provider,
		Metadata:              c.Metadata,
		InstanceID:            r.InstanceID,
		ServiceName:           r.ServiceName,
		ServiceVersion:        r.ServiceVersion,
		Endpoint:              r.Endpoint,
		Zone:                  r.Zone,
		Readiness:             r.Readiness(),
		Generation:            r.Generation,
		LeaseExpiresAt:        r.LeaseExpiresAt(),
		Health:                r.Health(),
		Eligibility:           cmp.Or(e.Eligibility, apiv1.EligibilityServing),
		Weight:                e.Weight,
		Panic:                 e.Panic,
		Excluded:              e.Excluded,
		Restored:              r.Restored(),
	}
	if e.Eligibility == "" {
		out.Weight = 100
	}
	return out
}
