package routing_test

import (
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// changeFleet is services services of 1–3 routes each (by index), instances instances each,
// every instance publishing its service's manifest (decoded, as a gateway holds them), and the
// policy that grants each service its prefix.
func changeFleet(services, instances int) routing.Input {
	in := routing.Input{Policy: routing.Policy{}}
	gen := int64(0)
	for s := range services {
		svc := fmt.Sprintf("svc-%d", s)
		in.Policy[svc] = []string{"/" + svc}
		routes := []apiv1.ManifestRoute{
			{Path: "/" + svc + "/items", Methods: []string{"GET", "POST"}, Idempotent: []string{"GET"}},
			{Path: "/" + svc + "/items/{id}", Methods: []string{"GET", "PUT"}},
			{Path: "/" + svc + "/files/{rest...}", Methods: []string{"GET"}},
		}[:1+s%3]
		for i := range instances {
			gen++
			inst := fmt.Sprintf("%s-%d", svc, i)
			m := &apiv1.Manifest{FARP: "1.0", Service: apiv1.ManifestService{Name: svc, Version: "1.2.3", Instance: inst}, Routes: routes}
			in.Manifests = append(in.Manifests, routing.ManifestInput{InstanceID: inst, Generation: gen, Endpoint: "http://" + inst + ":8080", Parsed: m})
		}
	}
	return in
}

// BenchmarkApplyChange is one change applied to a Deriver holding services services of 100
// instances each (10 at 100,000 services: a million instances either way): a manifest
// replaced (a new generation), an instance's upstream removed and added back (two changes,
// reported per change), a service's policy set again (its claims judged anew).
func BenchmarkApplyChange(b *testing.B) {
	for _, size := range []struct{ services, instances int }{{1000, 100}, {10000, 100}, {100000, 10}} {
		in := changeFleet(size.services, size.instances)
		d := routing.NewDeriver(in)
		gen := int64(len(in.Manifests))
		name := fmt.Sprintf("services=%d/instances=%d", size.services, size.instances)
		b.Run(name+"/manifest-replaced", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				mi := in.Manifests[(i*7919)%len(in.Manifests)]
				gen++
				mi.Generation = gen
				d.Apply(routing.Change{PutManifest: &mi})
				i++
			}
		})
		b.Run(name+"/upstream-removed", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				mi := in.Manifests[(i*7919)%len(in.Manifests)]
				d.Apply(routing.Change{DeleteManifest: mi.InstanceID})
				gen++
				mi.Generation = gen
				d.Apply(routing.Change{PutManifest: &mi})
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/change")
		})
		b.Run(name+"/policy", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				svc := fmt.Sprintf("svc-%d", (i*7919)%size.services)
				d.Apply(routing.Change{Policy: &routing.PolicyChange{Service: svc, Prefixes: []string{"/" + svc}}})
				i++
			}
		})
	}
}
