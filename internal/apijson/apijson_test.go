package apijson_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/apijson"
)

// instance is a catalog entry as the registry writes it.
func instance(id string) apiv1.Instance {
	at := time.Date(2026, 12, 1, 13, 0, 0, 123456789, time.UTC)
	return apiv1.Instance{InstanceID: id, ServiceName: "egress-jms", ServiceVersion: "0.1.3", Endpoint: "http://egress-jms:8080",
		Zone: "a", Generation: 42, RegisteredAt: at, LeaseExpiresAt: at.Add(30 * time.Second), Health: "ok",
		Eligibility: apiv1.EligibilityServing, Weight: 100, Capabilities: []apiv1.Capability{
			{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms", Metadata: json.RawMessage(`{"priority":1}`)},
			{CapabilityID: "messaging.consume", CapabilityVersion: "1.1.0", ContractSchemaVersion: "1.0", Provider: "jms"},
		}}
}

// check holds what Catalog writes for c to what httpapi.Marshal writes, errors included.
func check(t *testing.T, c *apiv1.CatalogResponse) {
	t.Helper()
	want, wantErr := httpapi.Marshal(c)
	got, err := apijson.Catalog(nil, c)
	if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("error %v, encoding/json's %v", err, wantErr)
	}
	if diff := cmp.Diff(string(want), string(got)); err == nil && diff != "" {
		t.Errorf("not encoding/json's bytes (-encoding/json +apijson):\n%s", diff)
	}
	for i := range c.Instances {
		want, wantErr := json.Marshal(&c.Instances[i])
		got, err := apijson.Instance(nil, &c.Instances[i])
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("instance %d: error %v, encoding/json's %v", i, err, wantErr)
		}
		if err != nil {
			continue
		}
		var a, b any // json.Marshal escapes HTML, which Instance does not: compare what they say
		if err := errors.Join(json.Unmarshal(want, &a), json.Unmarshal(got, &b)); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("instance %d says something else than json.Marshal's (-encoding/json +apijson):\n%s", i, diff)
		}
	}
}

func TestCatalogIsEncodingJSONs(t *testing.T) {
	plain := instance("egress-jms-7c9f5d8c4f-9x2kq")
	odd := instance(`a"quoted\id <&> é` + "\u2028\xff")
	odd.Zone, odd.Owner, odd.Restored = "", "spiffe://mesh/egress", true
	odd.Capabilities[0].Metadata = json.RawMessage("{ \"spaced\" : [1, 2] }")
	odd.RegisteredAt = odd.RegisteredAt.In(time.FixedZone("", 5*3600+30*60))
	odd.Manifest = &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: "egress-jms", Instance: odd.InstanceID, Version: "0.1.3"},
		Routes: []apiv1.ManifestRoute{{Path: "/publish/<topic>", Methods: []string{"POST"}}}}
	seconds := instance("zone-offset-in-seconds")
	seconds.LeaseExpiresAt = seconds.LeaseExpiresAt.In(time.FixedZone("", 3600+7))
	none := instance("no-capabilities")
	none.Capabilities = nil
	empty := instance("empty-capabilities")
	empty.Capabilities = []apiv1.Capability{}
	late := instance("year-10000")
	late.LeaseExpiresAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	bad := instance("metadata-not-json")
	bad.Capabilities[1].Metadata = json.RawMessage(`{"open":`)
	for _, tc := range []struct {
		name string
		c    apiv1.CatalogResponse
	}{
		{"no instances", apiv1.CatalogResponse{RegistryEpoch: "2026-12-01T13:00:00Z", Revision: 17}},
		{"an empty page", apiv1.CatalogResponse{RegistryEpoch: "e", Instances: []apiv1.Instance{}, NextPageToken: "tok"}},
		{"the usual", apiv1.CatalogResponse{RegistryEpoch: "e", Revision: 3, Instances: []apiv1.Instance{plain, plain}}},
		{"what needs escaping, a manifest, an owner", apiv1.CatalogResponse{RegistryEpoch: "ep\"och", Instances: []apiv1.Instance{odd}, NextPageToken: "<next>"}},
		{"a zone offset in seconds", apiv1.CatalogResponse{Instances: []apiv1.Instance{seconds}}},
		{"capabilities nil and empty", apiv1.CatalogResponse{Instances: []apiv1.Instance{none, empty}}},
		{"a year past 9999", apiv1.CatalogResponse{Instances: []apiv1.Instance{plain, late}}},
		{"metadata that is not JSON", apiv1.CatalogResponse{Instances: []apiv1.Instance{bad}}},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, &tc.c) })
	}
}

// FuzzCatalog holds Catalog and Instance to encoding/json for any strings, metadata, times
// and flags.
func FuzzCatalog(f *testing.F) {
	f.Add("i-1", "svc", "a", "ok", `{"priority":1}`, int64(1764594000), int64(123456789), 0, uint8(1), "")
	f.Add("i\"2", "<svc>", "", "", "{ \"a\" : 1 }", int64(-62135596800), int64(0), 3607, uint8(6), "tok")
	f.Add("\xff\u2028", "s", "z", "degraded", `[1,`, int64(253402300800), int64(1), -3600, uint8(10), "")
	f.Fuzz(func(t *testing.T, id, svc, zone, health, metadata string, secs, nanos int64, offset int, flags uint8, token string) {
		at := time.Unix(secs, nanos%1e9).In(time.FixedZone("", offset%86400))
		in := apiv1.Instance{InstanceID: id, ServiceName: svc, ServiceVersion: svc + "-v", Endpoint: "http://" + id, Zone: zone,
			Generation: nanos % 1000, RegisteredAt: at, LeaseExpiresAt: at.Add(time.Duration(offset) * time.Second), Health: health,
			Eligibility: health, Weight: offset, Owner: zone + id, Restored: flags&1 != 0}
		if flags&2 != 0 {
			in.Capabilities = []apiv1.Capability{{CapabilityID: id, CapabilityVersion: svc, ContractSchemaVersion: zone, Provider: health, Metadata: json.RawMessage(metadata)}, {CapabilityID: "x"}}
		} else if flags&4 != 0 {
			in.Capabilities = []apiv1.Capability{}
		}
		if flags&8 != 0 {
			in.Manifest = &apiv1.Manifest{FARP: metadata, Service: apiv1.ManifestService{Name: svc, Instance: id}}
		}
		check(t, &apiv1.CatalogResponse{RegistryEpoch: health, Revision: nanos, Instances: []apiv1.Instance{in}, NextPageToken: token})
	})
}

// BenchmarkCatalog writes a catalog of 1,000 usual instances, directly and with
// encoding/json.
func BenchmarkCatalog(b *testing.B) {
	c := apiv1.CatalogResponse{RegistryEpoch: "2026-12-01T13:00:00Z", Revision: 1000}
	for range 1000 {
		c.Instances = append(c.Instances, instance("egress-jms-7c9f5d8c4f-9x2kq"))
	}
	b.Run("apijson", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = apijson.Catalog(buf[:0], &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := httpapi.Marshal(&c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
