package server

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"slices"
	"strconv"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/apijson"
	"github.com/meshflows/meshflows/internal/registry"
)

// A discovery answer is encoded once per revision and query, but encoding/json's reflection
// made it most of the cost of an answer after a change, and of an unfiltered answer of a large
// fleet (what DNS and xDS servers ask: 200,000 entries at 100,000 instances), with every
// entry first copied into its wire struct. appendDiscovery writes the JSON from the registry's
// entries directly.

// appendDiscovery appends the discovery answer ans to b as httpapi.Marshal writes it as an
// apiv1.DiscoveryResponse (each entry's Wire form, capabilities [] when there are none, no
// HTML escaping, a newline at the end), byte for byte: FuzzAppendDiscovery holds it to that.
// The error is encoding/json's for metadata that is not JSON.
func appendDiscovery(b []byte, ans *registry.Answer) ([]byte, error) {
	return writeDiscovery(b, ans, nil)
}

// writeDiscovery appends ans to b as appendDiscovery does, its entries as apijson.List
// writes them: with flush, a piece at a time (flush also takes what is left at the end);
// without, in room taken once for the whole answer.
func writeDiscovery(b []byte, ans *registry.Answer, flush func([]byte) ([]byte, error)) ([]byte, error) {
	b = appendState(b, ans.State)
	b = append(b, `,"capabilities":`...)
	b, err := apijson.List(b, slices.Values(ans.Entries), len(ans.Entries), appendEntry, flush)
	if err != nil {
		return nil, err
	}
	if len(ans.Removed) > 0 {
		b = append(b, `,"removed":`...)
		b = appendRemovals(b, ans.Removed)
	}
	b = append(b, "}\n"...)
	if flush != nil {
		return flush(b)
	}
	return b, nil
}

// appendState opens an answer's JSON object with the registry's state: epoch, revision and
// completeness.
func appendState(b []byte, st registry.State) []byte {
	b = append(b, `{"registry_epoch":`...)
	b = apijson.String(b, st.Epoch)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, st.Revision, 10)
	b = append(b, `,"complete":`...)
	b = strconv.AppendBool(b, st.Complete)
	if st.Region != "" {
		b = append(b, `,"region":`...)
		b = apijson.String(b, st.Region)
	}
	return b
}

// appendRemovals appends rs as a JSON array of {"instance_id", "generation"}.
func appendRemovals(b []byte, rs []apiv1.Removal) []byte {
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"instance_id":`...)
		b = apijson.String(b, r.InstanceID)
		b = append(b, `,"generation":`...)
		b = strconv.AppendInt(b, r.Generation, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// encodeDiscovery encodes ans for the answer cache: compressed only when it is large and the
// client that asked accepts gzip (zippedAnswer), else as JSON.
func encodeDiscovery(ans *registry.Answer, gzipMin int64, gzipOK bool) (*encoded, error) {
	if gzipOK && gzipMin >= 0 {
		if e, ok, err := zippedAnswer(ans, gzipMin); err != nil || ok {
			return e, err
		}
	}
	body, err := appendDiscovery(nil, ans)
	if err != nil {
		return nil, err
	}
	return encodedAs(ans.State, body), nil
}

// zippedFrom is the size from which an answer asked for by a client that accepts gzip is
// built compressed, without its JSON: a few megabytes are worth neither their memory nor the
// page faults of writing them, only to be compressed and, for most clients, never sent.
const zippedFrom = 4 << 20

// zippedAnswer builds ans compressed, streaming its JSON through gzip in 64 KiB pieces, when
// its first entry says the JSON would be at least zippedFrom bytes long, and gzipMin (the
// size from which answers go compressed); ok is false otherwise (and when it would not be
// smaller). The JSON is written only if a client that does not accept gzip asks for it: with
// the leases as they are then (a heartbeat moves no revision), the rest as it was.
func zippedAnswer(ans *registry.Answer, gzipMin int64) (e *encoded, ok bool, err error) {
	if len(ans.Entries) == 0 {
		return nil, false, nil
	}
	first, err := appendEntry(nil, ans.Entries[0])
	if err != nil {
		return nil, false, err
	}
	if n := int64(len(first)+1) * int64(len(ans.Entries)); n < zippedFrom || n < gzipMin {
		return nil, false, nil
	}
	var gz bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&gz)
	size := 0
	if _, err := writeDiscovery(make([]byte, 0, 80<<10), ans, func(piece []byte) ([]byte, error) {
		n, err := zw.Write(piece)
		size += n
		return piece[:0], err
	}); err != nil {
		return nil, false, err
	}
	if err := zw.Close(); err != nil {
		return nil, false, err
	}
	if gz.Len() >= size {
		return nil, false, nil
	}
	return zipped(ans.State, size, bytes.Clone(gz.Bytes()), func() []byte {
		b, _ := appendDiscovery(nil, ans) // it encoded once already: it encodes again
		return b
	}), true, nil
}

// appendEntry appends the JSON of e.Wire(). What never changes in it is encoded once and
// copied after: its capability's part once for every record that shares the capability
// list (capabilityParts), and the record's own (recordPart) once per record.
func appendEntry(b []byte, e registry.Entry) ([]byte, error) {
	r := e.Record
	var err error
	if caps := r.CapabilitiesEncoded(capabilityParts); e.Cap < len(caps) && caps[e.Cap] != nil {
		b = append(b, caps[e.Cap]...)
	} else if b, err = appendCapabilityPart(b, e.Capability()); err != nil {
		return nil, err
	}
	b = append(b, r.Encoded(recordPart)...)
	b = append(b, `,"generation":`...)
	b = strconv.AppendInt(b, r.Generation, 10)
	b = append(b, `,"lease_expires_at":`...)
	if b, err = apijson.Time(b, r.LeaseExpiresAt()); err != nil {
		return nil, err
	}
	b = append(b, `,"health":`...)
	b = apijson.String(b, r.Health())
	b = append(b, `,"eligibility":`...)
	b = apijson.String(b, cmp.Or(e.Eligibility, apiv1.EligibilityServing))
	b = append(b, `,"weight":`...)
	w := e.Weight
	if e.Eligibility == "" {
		w = 100
	}
	b = strconv.AppendInt(b, int64(w), 10)
	if e.Panic {
		b = append(b, `,"panic":true`...)
	}
	if e.Excluded {
		b = append(b, `,"excluded":true`...)
	}
	if r.Restored() {
		b = append(b, `,"restored":true`...)
	}
	return append(b, '}'), nil
}

// capabilityParts encodes the start of the JSON of an entry of each capability of cs
// (appendCapabilityPart); a capability whose part does not encode (metadata that is not
// JSON) has none, and its entries are encoded in full, failing as they do.
func capabilityParts(cs []registry.Capability) [][]byte {
	out := make([][]byte, len(cs))
	for i := range cs {
		if b, err := appendCapabilityPart(nil, &cs[i]); err == nil {
			out[i] = b
		}
	}
	return out
}

// appendCapabilityPart appends the start of the JSON of an entry of capability c: its opening
// brace to its metadata.
func appendCapabilityPart(b []byte, c *registry.Capability) ([]byte, error) {
	b = append(b, `{"capability_id":`...)
	b = apijson.String(b, c.CapabilityID)
	b = append(b, `,"capability_version":`...)
	b = apijson.String(b, c.CapabilityVersion)
	b = append(b, `,"contract_schema_version":`...)
	b = apijson.String(b, c.ContractSchemaVersion)
	b = append(b, `,"provider":`...)
	b = apijson.String(b, c.Provider)
	b = append(b, `,"metadata":`...)
	m, compact := c.MetadataJSON()
	if compact {
		return append(b, m...), nil
	}
	return apijson.Raw(b, m)
}

// recordPart is the JSON of what an entry says of its record that never changes, after its
// capability's part: its instance, service, endpoint and zone, exactly sized.
func recordPart(r *registry.Record) []byte {
	var buf [256]byte
	b := append(buf[:0], `,"instance_id":`...)
	b = apijson.String(b, r.InstanceID)
	b = append(b, `,"service_name":`...)
	b = apijson.String(b, r.ServiceName)
	b = append(b, `,"service_version":`...)
	b = apijson.String(b, r.ServiceVersion)
	b = append(b, `,"endpoint":`...)
	b = apijson.String(b, r.Endpoint)
	if r.Zone != "" {
		b = append(b, `,"zone":`...)
		b = apijson.String(b, r.Zone)
	}
	b = append(b, `,"readiness":`...)
	b = apijson.String(b, r.Readiness())
	return bytes.Clone(b)
}
