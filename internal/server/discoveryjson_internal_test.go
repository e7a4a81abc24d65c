package server

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/registry"
)

// wireAnswer is the answer as the handler built it before appendDiscovery: each entry in its
// Wire form, capabilities [] when there are none.
func wireAnswer(ans *registry.Answer) apiv1.DiscoveryResponse {
	resp := apiv1.DiscoveryResponse{RegistryEpoch: ans.Epoch, Revision: ans.Revision, Complete: ans.Complete,
		Capabilities: make([]apiv1.CapabilityEntry, len(ans.Entries)), Removed: ans.Removed}
	for i, e := range ans.Entries {
		resp.Capabilities[i] = e.Wire()
	}
	return resp
}

// checkAppendDiscovery: appendDiscovery writes ans byte for byte as httpapi.Marshal writes its
// wire form, and fails exactly when encoding/json does.
func checkAppendDiscovery(t *testing.T, ans *registry.Answer) {
	t.Helper()
	got, err := appendDiscovery(nil, ans)
	want, wantErr := httpapi.Marshal(wireAnswer(ans))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("appendDiscovery error %v, encoding/json's %v", err, wantErr)
	}
	if string(got) != string(want) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// discoveryEntry builds an entry of one capability.
func discoveryEntry(id, capID, metadata, zone, health string, gen int64, lease time.Time) registry.Entry {
	c := apiv1.Capability{CapabilityID: capID, CapabilityVersion: "1.2.3", ContractSchemaVersion: "1.0", Provider: "jms"}
	if metadata != "\x00" { // "\x00": no metadata at all
		c.Metadata = []byte(metadata)
	}
	rec := registry.RecordFromInstance(apiv1.Instance{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "0.1.3",
		Endpoint: "http://egress-jms:8080", Zone: zone, Generation: gen, Health: health, Capabilities: []apiv1.Capability{c}}, lease)
	return registry.Entry{Record: rec}
}

func TestAppendDiscovery(t *testing.T) {
	lease := time.Date(2026, 12, 1, 9, 30, 0, 123456000, time.UTC)
	e := discoveryEntry("i-1", "messaging.publish", `{"priority": 2, "path": "/a<b>&c"}`, "a", apiv1.HealthOK, 42, lease)
	judged := e
	judged.Eligibility, judged.Weight, judged.Panic = apiv1.EligibilitySlowStart, 30, true
	for _, tc := range []struct {
		name string
		ans  registry.Answer
	}{
		{"empty", registry.Answer{State: registry.State{Epoch: "2026-12-01T09:00:00Z", Revision: 7, Complete: true}}},
		{"no engine", registry.Answer{State: registry.State{Epoch: "e", Revision: 1, Complete: true}, Entries: []registry.Entry{e}}},
		{"judged, in panic", registry.Answer{State: registry.State{Epoch: "e", Revision: 1}, Entries: []registry.Entry{judged, e}}},
		{"no zone, no metadata", registry.Answer{Entries: []registry.Entry{discoveryEntry("i-2", "c", "\x00", "", apiv1.HealthDegraded, 1, lease)}}},
		{"metadata spaced and escaped", registry.Answer{Entries: []registry.Entry{discoveryEntry("i-3", "c", " {\n \"a\" : \"\\u00e9\\n\" } ", "z", "", 1, lease)}}},
		{"not ASCII, quotes, controls", registry.Answer{State: registry.State{Epoch: "é\"\\\t\u2028"}, Entries: []registry.Entry{discoveryEntry("ï\"<>", "c\x01", "{}", "ß", "", 1, lease)}}},
		{"metadata not JSON", registry.Answer{Entries: []registry.Entry{discoveryEntry("i-4", "c", "{", "", "", 1, lease)}}},
		{"metadata empty", registry.Answer{Entries: []registry.Entry{discoveryEntry("i-5", "c", "", "", "", 1, lease)}}},
		{"lease past year 9999", registry.Answer{Entries: []registry.Entry{discoveryEntry("i-6", "c", "{}", "", "", 1, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}}},
		{"removed during the warm-up", registry.Answer{State: registry.State{Epoch: "e"}, Entries: []registry.Entry{e},
			Removed: []apiv1.Removal{{InstanceID: "gone-1", Generation: 3}, {InstanceID: "gone\"2", Generation: 9}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkAppendDiscovery(t, &tc.ans) })
	}
}

// TestAppendDiscoveryOfARestoredRecord: a record restored from a snapshot is marked so.
func TestAppendDiscoveryOfARestoredRecord(t *testing.T) {
	e := discoveryEntry("i-1", "c", "{}", "a", "", 1, time.Unix(1e9, 0))
	e.Record.MarkRestored()
	ans := registry.Answer{Entries: []registry.Entry{e}}
	got, _ := appendDiscovery(nil, &ans)
	if !strings.Contains(string(got), `"restored":true`) {
		t.Fatalf("a restored record's entry does not say so: %s", got)
	}
	checkAppendDiscovery(t, &ans)
}

// TestAppendDiscoveryAfterAChange: an entry is encoded, then everything of it that can change
// without a new record changes (lease, health, verdict, panic, the restored mark): encoded
// again, it says so; what appendEntry keeps of the record is only what cannot change.
func TestAppendDiscoveryAfterAChange(t *testing.T) {
	e := discoveryEntry("i-1", "messaging.publish", `{"priority": 2}`, "a", apiv1.HealthOK, 42, time.Unix(1e9, 0))
	ans := registry.Answer{Entries: []registry.Entry{e}}
	checkAppendDiscovery(t, &ans)
	e.Record.SetLeaseExpiresAt(time.Unix(2e9, 5))
	e.Record.SetHealth(apiv1.HealthDegraded)
	e.Record.MarkRestored()
	e.Eligibility, e.Weight, e.Panic = apiv1.EligibilitySlowStart, 40, true
	ans.Entries = []registry.Entry{e}
	checkAppendDiscovery(t, &ans)
	if got, _ := appendDiscovery(nil, &ans); !strings.Contains(string(got), `"health":"degraded"`) || !strings.Contains(string(got), `"weight":40`) {
		t.Errorf("the entry encoded again does not say what changed: %s", got)
	}
}

// FuzzAppendDiscovery: whatever the answer holds, written directly it is byte for byte what
// httpapi.Marshal writes of its wire form, and an error exactly where encoding/json errs.
func FuzzAppendDiscovery(f *testing.F) {
	f.Add("2026-12-01T09:00:00Z", int64(7), true, "egress-jms-1", "messaging.publish", `{"priority":1}`, "a", "ok", int64(42), int64(1796063517800751195), "serving", 100, false, "", int64(0))
	f.Add("e", int64(-1), false, "é\"\\", "c\x7f", " { } ", "", "", int64(0), int64(0), "", 0, true, "gone", int64(3))
	f.Add("\u2028<&>", int64(1), false, "i", "c", "[1, 2,\t3]", "z", "failing", int64(-5), int64(-62135596800000000000/1000), "withdrawn", 0, false, "\x00", int64(-1))
	f.Fuzz(func(t *testing.T, epoch string, rev int64, complete bool, id, capID, metadata, zone, health string, gen, leaseNanos int64,
		eligibility string, weight int, panic bool, removed string, removedGen int64) {
		e := discoveryEntry(id, capID, metadata, zone, health, gen, time.Unix(0, leaseNanos))
		e.Eligibility, e.Weight, e.Panic = eligibility, weight, panic
		ans := registry.Answer{State: registry.State{Epoch: epoch, Revision: rev, Complete: complete}, Entries: []registry.Entry{e, e}}
		if removed != "" {
			ans.Removed = []apiv1.Removal{{InstanceID: removed, Generation: removedGen}}
		}
		checkAppendDiscovery(t, &ans)
	})
}

// TestZippedAnswer: a large answer asked for by a client that accepts gzip is built
// compressed only — the same JSON once decompressed, under the weak form of the answer's
// ETag — and its JSON is written when a client that does not accept gzip asks, the same
// bytes; a small answer is not built that way.
func TestZippedAnswer(t *testing.T) {
	lease := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	var ans registry.Answer
	ans.State = registry.State{Epoch: "2026-12-01T09:00:00Z", Revision: 9, Complete: true}
	for i := range 14000 {
		ans.Entries = append(ans.Entries, discoveryEntry(fmt.Sprintf("egress-jms-%05d", i), "messaging.publish", `{"priority":1,"path":"/v1/publish"}`, "a", apiv1.HealthOK, int64(i+1), lease))
	}
	want, err := appendDiscovery(nil, &ans)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < zippedFrom {
		t.Fatalf("the answer is %d bytes: under %d, the test asks nothing", len(want), zippedFrom)
	}
	e, ok, err := zippedAnswer(&ans, DefaultGzipMinBytes)
	if err != nil || !ok {
		t.Fatalf("zippedAnswer: ok %v, %v", ok, err)
	}
	if e.size != len(want) || e.body != nil {
		t.Fatalf("size %d (want %d), JSON written: %v", e.size, len(want), e.body != nil)
	}
	get := func(accept string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/v1/discovery/capabilities", nil)
		if accept != "" {
			r.Header.Set("Accept-Encoding", accept)
		}
		e.write(rec, r, DefaultGzipMinBytes)
		return rec
	}
	z := get("gzip")
	if z.Header().Get("Content-Encoding") != "gzip" || z.Header().Get("ETag") != `W/"2026-12-01T09:00:00Z/9"` {
		t.Fatalf("compressed answer: headers %v", z.Header())
	}
	zr, err := gzip.NewReader(z.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("decompressed answer differs from the JSON (%v): %d bytes, want %d", err, len(got), len(want))
	}
	if e.body != nil {
		t.Error("the JSON was written for a client that takes gzip")
	}
	plain := get("")
	if plain.Header().Get("Content-Encoding") != "" || plain.Header().Get("ETag") != `"2026-12-01T09:00:00Z/9"` || !bytes.Equal(plain.Body.Bytes(), want) {
		t.Fatalf("identity answer: headers %v, %d bytes, want %d", plain.Header(), plain.Body.Len(), len(want))
	}

	small := registry.Answer{Entries: ans.Entries[:100]}
	if _, ok, err := zippedAnswer(&small, DefaultGzipMinBytes); ok || err != nil {
		t.Errorf("a small answer was built compressed (%v)", err)
	}
	if _, ok, _ := zippedAnswer(&ans, 1<<30); ok {
		t.Error("an answer under the gzip threshold was built compressed")
	}
}
