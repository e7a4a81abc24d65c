package apijson

import (
	"bytes"
	"encoding/json"
	"iter"
	"slices"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

// Plain reports whether httpapi.Marshal writes s as it is, between quotes: printable ASCII
// without a quote or a backslash.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// String appends s as a JSON string without HTML escaping: copied as it is when plain
// (Plain), which nearly all of an answer's strings are.
func String(b []byte, s string) []byte {
	if Plain(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := httpapi.Marshal(s) // a string always encodes
	return append(b, q[:len(q)-1]...)
}

// Raw appends raw JSON as encoding/json writes a json.RawMessage: null when nil, else
// compacted (an error when it is not JSON). JSON already compact is copied.
func Raw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if json.Valid(raw) && !bytes.ContainsAny(raw, " \t\r\n") {
		return append(b, raw...), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		_, err = json.Marshal(raw) // encoding/json's own error for it
		return nil, err
	}
	return append(b, buf.Bytes()...), nil
}

// Time appends t as httpapi.Marshal writes it (TimeFast), or encoding/json's error for it.
func Time(b []byte, t time.Time) ([]byte, error) {
	if b2, ok := TimeFast(b, t); ok {
		return b2, nil
	}
	return value(b, t)
}

// TimeFast appends t as encoding/json writes it (RFC 3339 with nanoseconds, quoted), or
// reports false when only encoding/json writes it correctly: a year outside 0–9999, or a
// zone offset in seconds.
func TimeFast(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off%60 != 0 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

// value appends v as httpapi.Marshal writes it, without its newline.
func value(b []byte, v any) ([]byte, error) {
	q, err := httpapi.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, q[:len(q)-1]...), nil
}

// Capability appends c as encoding/json writes an apiv1.Capability.
func Capability(b []byte, c *apiv1.Capability) ([]byte, error) {
	b = append(b, `{"capability_id":`...)
	b = String(b, c.CapabilityID)
	b = append(b, `,"capability_version":`...)
	b = String(b, c.CapabilityVersion)
	b = append(b, `,"contract_schema_version":`...)
	b = String(b, c.ContractSchemaVersion)
	b = append(b, `,"provider":`...)
	b = String(b, c.Provider)
	if len(c.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		var err error
		if b, err = Raw(b, c.Metadata); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// Instance appends in as encoding/json writes an apiv1.Instance (without a newline); the
// error is encoding/json's for what it cannot write (metadata that is not JSON, a time past
// year 9999).
func Instance(b []byte, in *apiv1.Instance) ([]byte, error) {
	b = append(b, `{"instance_id":`...)
	b = String(b, in.InstanceID)
	b = append(b, `,"service_name":`...)
	b = String(b, in.ServiceName)
	b = append(b, `,"service_version":`...)
	b = String(b, in.ServiceVersion)
	b = append(b, `,"endpoint":`...)
	b = String(b, in.Endpoint)
	if in.Zone != "" {
		b = append(b, `,"zone":`...)
		b = String(b, in.Zone)
	}
	if in.Readiness != "" {
		b = append(b, `,"readiness":`...)
		b = String(b, in.Readiness)
	}
	b = append(b, `,"generation":`...)
	b = strconv.AppendInt(b, in.Generation, 10)
	b = append(b, `,"registered_at":`...)
	b, err := Time(b, in.RegisteredAt)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"lease_expires_at":`...)
	if b, err = Time(b, in.LeaseExpiresAt); err != nil {
		return nil, err
	}
	b = append(b, `,"health":`...)
	b = String(b, in.Health)
	b = append(b, `,"eligibility":`...)
	b = String(b, in.Eligibility)
	b = append(b, `,"weight":`...)
	b = strconv.AppendInt(b, int64(in.Weight), 10)
	b = append(b, `,"capabilities":`...)
	if in.Capabilities == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range in.Capabilities {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = Capability(b, &in.Capabilities[i]); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if in.Manifest != nil {
		b = append(b, `,"manifest":`...)
		if b, err = value(b, in.Manifest); err != nil {
			return nil, err
		}
	}
	if in.Owner != "" {
		b = append(b, `,"owner":`...)
		b = String(b, in.Owner)
	}
	if in.Restored {
		b = append(b, `,"restored":true`...)
	}
	return append(b, '}'), nil
}

// Chunk is how much of a long list List makes before it hands it to its flush.
const Chunk = 64 << 10

// List appends the JSON list of what items yields, each written by write. With flush, the
// list is made a piece at a time: whenever what is made reaches Chunk, flush takes it and
// returns the buffer to go on in (an answer streamed, a file written as it is made; what is
// left at the end is the caller's to write). Without flush, room for the whole list is taken
// once, from the first item's size and n, the number of items, with an eighth more: a list
// of 80 MB grown by appending was copied over and over.
func List[T any](b []byte, items iter.Seq[T], n int, write func([]byte, T) ([]byte, error), flush func([]byte) ([]byte, error)) ([]byte, error) {
	b = append(b, '[')
	i := 0
	for it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		at := len(b)
		var err error
		if b, err = write(b, it); err != nil {
			return nil, err
		}
		switch {
		case flush != nil && len(b) >= Chunk:
			if b, err = flush(b); err != nil {
				return nil, err
			}
		case flush == nil && i == 0 && n > 1:
			rest := (len(b) - at + 1) * (n - 1)
			b = slices.Grow(b, rest+rest/8+64)
		}
		i++
	}
	return append(b, ']'), nil
}

// Catalog appends c as httpapi.Marshal writes an apiv1.CatalogResponse: one line of JSON
// and a newline.
func Catalog(b []byte, c *apiv1.CatalogResponse) ([]byte, error) {
	b = CatalogHead(b, c)
	if c.Instances == nil {
		b = append(b, "null"...)
	} else {
		var err error
		all := func(yield func(*apiv1.Instance) bool) { // not copied, as slices.Values would
			for i := range c.Instances {
				if !yield(&c.Instances[i]) {
					return
				}
			}
		}
		if b, err = List(b, all, len(c.Instances), Instance, nil); err != nil {
			return nil, err
		}
	}
	return CatalogTail(b, c), nil
}

// InstanceValue is Instance for a List of instances.
func InstanceValue(b []byte, in apiv1.Instance) ([]byte, error) { return Instance(b, &in) }

// CatalogHead appends what Catalog writes of c before its instances, up to the colon of
// "instances"; a catalog written in pieces continues with its list, then CatalogTail.
func CatalogHead(b []byte, c *apiv1.CatalogResponse) []byte {
	b = append(b, `{"registry_epoch":`...)
	b = String(b, c.RegistryEpoch)
	if c.Region != "" {
		b = append(b, `,"region":`...)
		b = String(b, c.Region)
	}
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, c.Revision, 10)
	return append(b, `,"instances":`...)
}

// CatalogTail appends what Catalog writes of c after its instances.
func CatalogTail(b []byte, c *apiv1.CatalogResponse) []byte {
	if c.NextPageToken != "" {
		b = append(b, `,"next_page_token":`...)
		b = String(b, c.NextPageToken)
	}
	return append(b, "}\n"...)
}
