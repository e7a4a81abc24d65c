package registry

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// decodeRegistration decodes a registration as the HTTP handler does, so that every string
// in it is a fresh allocation.
func decodeRegistration(t *testing.T, id string) *apiv1.RegisterRequest {
	t.Helper()
	body := fmt.Sprintf(`{"instance_id":%q,"service_name":"billing","service_version":"1.4.0","endpoint":"http://10.0.0.1:8080",
		"zone":"zone-a","capabilities":[{"capability_id":"invoice.create","capability_version":"2.1.0",
		"contract_schema_version":"1","provider":"jms","metadata":{"priority":3}}]}`, id)
	var req apiv1.RegisterRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return &req
}

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestRecordsShareRepeatedValues(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := newRecord(decodeRegistration(t, "a"), now, time.Minute)
	b := newRecord(decodeRegistration(t, "b"), now, time.Minute)
	snap := RecordFromInstance(b.Instance(), now)
	ca, cb, cs := a.Capabilities[0], b.Capabilities[0], snap.Capabilities[0]
	for _, tc := range []struct {
		name   string
		shared bool
	}{
		{"service name", sameString(a.ServiceName, b.ServiceName) && sameString(a.ServiceName, snap.ServiceName)},
		{"service version", sameString(a.ServiceVersion, b.ServiceVersion)},
		{"zone", sameString(a.Zone, b.Zone)},
		{"capability id", sameString(ca.CapabilityID, cb.CapabilityID) && sameString(ca.CapabilityID, cs.CapabilityID)},
		{"capability version", sameString(ca.CapabilityVersion, cb.CapabilityVersion)},
		{"schema version", sameString(ca.ContractSchemaVersion, cb.ContractSchemaVersion)},
		{"provider", sameString(ca.Provider, cb.Provider)},
		{"metadata", &ca.Metadata[0] == &cb.Metadata[0]},
		{"parsed version", ca.Version == cb.Version && ca.Version == cs.Version},
		{"capability list", &a.Capabilities[0] == &b.Capabilities[0] && &a.Capabilities[0] == &snap.Capabilities[0]},
		{"ids the engine sees", &healthInstance(a).Capabilities[0] == &healthInstance(b).Capabilities[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.shared {
				t.Error("two records of one service hold separate copies")
			}
		})
	}
	if a.InstanceID == b.InstanceID || ca.Priority != 3 || ca.Version.String() != "2.1.0" {
		t.Errorf("records changed by sharing: %q %q priority %d version %v", a.InstanceID, b.InstanceID, ca.Priority, ca.Version)
	}
}

func TestInternTableStartsOverPastItsBound(t *testing.T) {
	first := intern(fmt.Sprint("first-", 1)) // a fresh copy: the table's from now on
	if again := intern(fmt.Sprint("first-", 1)); !sameString(again, first) {
		t.Fatal("a value interned twice was not shared")
	}
	for i := range internMax + 10 {
		if got, want := intern(fmt.Sprint("value-", i)), fmt.Sprint("value-", i); got != want {
			t.Fatalf("intern(%q) = %q", want, got)
		}
	}
	if n := internedStrings.len(); n > internMax {
		t.Errorf("table holds %d values, more than its bound %d", n, internMax)
	}
	if again := intern(fmt.Sprint("first-", 1)); sameString(again, first) {
		t.Error("a value from before the bound is still in the table: it never started over")
	}
	long := strings.Repeat("m", internMaxLen+1)
	if got := intern(long); !sameString(got, long) {
		t.Error("a value longer than the bound was copied into the table")
	}
}

func TestCapabilityKeysTellListsApart(t *testing.T) {
	base := apiv1.Capability{CapabilityID: "ab", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1", Provider: "p",
		Metadata: json.RawMessage(`{"a":1}`)}
	key := func(cs ...apiv1.Capability) string {
		k, ok := appendCapabilityKey(nil, cs)
		if !ok {
			t.Fatalf("appendCapabilityKey(%v) refused a short list", cs)
		}
		return string(k)
	}
	with := func(f func(*apiv1.Capability)) apiv1.Capability { c := base; f(&c); return c }
	for _, tc := range []struct {
		name string
		a, b []apiv1.Capability
	}{
		{"id", []apiv1.Capability{base}, []apiv1.Capability{with(func(c *apiv1.Capability) { c.CapabilityID = "ac" })}},
		{"version", []apiv1.Capability{base}, []apiv1.Capability{with(func(c *apiv1.Capability) { c.CapabilityVersion = "1.0.1" })}},
		{"schema", []apiv1.Capability{base}, []apiv1.Capability{with(func(c *apiv1.Capability) { c.ContractSchemaVersion = "2" })}},
		{"provider", []apiv1.Capability{base}, []apiv1.Capability{with(func(c *apiv1.Capability) { c.Provider = "q" })}},
		{"metadata", []apiv1.Capability{base}, []apiv1.Capability{with(func(c *apiv1.Capability) { c.Metadata = json.RawMessage(`{"a":2}`) })}},
		{"no metadata", []apiv1.Capability{base}, []apiv1.Capability{with(func(c *apiv1.Capability) { c.Metadata = nil })}},
		{"a boundary moved between fields",
			[]apiv1.Capability{with(func(c *apiv1.Capability) { c.CapabilityID, c.CapabilityVersion = "ab", "c" })},
			[]apiv1.Capability{with(func(c *apiv1.Capability) { c.CapabilityID, c.CapabilityVersion = "a", "bc" })}},
		{"order", []apiv1.Capability{base, with(func(c *apiv1.Capability) { c.CapabilityID = "x" })},
			[]apiv1.Capability{with(func(c *apiv1.Capability) { c.CapabilityID = "x" }), base}},
		{"one more", []apiv1.Capability{base}, []apiv1.Capability{base, base}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if key(tc.a...) == key(tc.b...) {
				t.Errorf("two different lists share the key %q", key(tc.a...))
			}
			if capabilities(tc.a) == capabilities(tc.b) {
				t.Error("two different lists were handed the same shared list")
			}
		})
	}
	long := with(func(c *apiv1.Capability) {
		c.Metadata = json.RawMessage(`{"x":"` + strings.Repeat("y", capabilityKeyMax) + `"}`)
	})
	if _, ok := appendCapabilityKey(nil, []apiv1.Capability{long}); ok {
		t.Error("a list longer than the bound got a key")
	}
	if l := capabilities([]apiv1.Capability{long}); len(l.caps) != 1 || string(l.caps[0].Metadata) != string(long.Metadata) || l.ids[0] != "ab" {
		t.Errorf("a list too long to share was not built as sent: %+v", l)
	}
}

// TestMetadataJSON: a capability's metadata is kept as encoding/json writes it (valid,
// compact), once, so that answers copy it; metadata that is not JSON is kept as sent and
// said not to be.
func TestMetadataJSON(t *testing.T) {
	for _, tc := range []struct {
		sent, kept string
		compact    bool
	}{
		{"", "{}", true},
		{"null", "{}", true},
		{`{"owner":"a"}`, `{"owner":"a"}`, true},
		{" {\n  \"owner\": \"a b\",\t\"n\": [1, 2]\n} ", `{"owner":"a b","n":[1,2]}`, true},
		{`{"owner":`, `{"owner":`, false},
	} {
		rec := RecordFromInstance(apiv1.Instance{InstanceID: "i-1", ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://e:1",
			Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "p",
				Metadata: json.RawMessage(tc.sent)}}}, time.Now())
		m, compact := rec.Capabilities[0].MetadataJSON()
		if string(m) != tc.kept || compact != tc.compact {
			t.Errorf("metadata %q: kept %q (compact %v), want %q (%v)", tc.sent, m, compact, tc.kept, tc.compact)
		}
	}
}
