package nameserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
)

// TestIndexByChangeIsTheWholeView: after every change of a random sequence — entries put (new
// instances, new weights and verdicts, new incarnations), instances gone, answers of a
// registry warming up, a whole view now and then — the index kept by change answers every name as one built from the whole view does,
// and as the rules say: a service's and an instance's name one record per instance in
// rotation, a capability's one per entry in rotation, in preference order.
func TestIndexByChangeIsTheWholeView(t *testing.T) {
	caps := []struct{ id, provider, version, meta string }{
		{"orders.read", "db", "1.0.0", ""}, {"orders.read", "db", "2.1.0", `{"priority":2}`},
		{"orders.read", "cache", "1.0.0", ""}, {"messaging.publish", "jms", "1.0.0", `{"priority":1}`},
	}
	rapid.Check(t, func(rt *rapid.T) {
		ix := newIndex("meshflows.")
		view := map[entryKey]apiv1.CapabilityEntry{}
		gen := int64(0)
		entry := func(rt *rapid.T, id string) apiv1.CapabilityEntry {
			c := caps[rapid.IntRange(0, len(caps)-1).Draw(rt, "cap")]
			gen++
			e := apiv1.CapabilityEntry{InstanceID: id, ServiceName: "svc-" + id[len(id)-1:], CapabilityID: c.id, Provider: c.provider,
				CapabilityVersion: c.version, Generation: gen,
				Endpoint:    fmt.Sprintf("http://10.0.0.%d:80%02d", rapid.IntRange(1, 3).Draw(rt, "host"), rapid.IntRange(1, 9).Draw(rt, "port")),
				Eligibility: rapid.SampledFrom([]string{"serving", "slow_start", "degraded", "withdrawn", "draining"}).Draw(rt, "eligibility"),
				Weight:      rapid.IntRange(0, 100).Draw(rt, "weight"), Panic: rapid.Bool().Draw(rt, "panic")}
			if c.meta != "" {
				e.Metadata = json.RawMessage(c.meta)
			}
			switch rapid.IntRange(0, 9).Draw(rt, "endpoint kind") {
			case 0:
				e.Endpoint = "not a url"
			case 1:
				e.Endpoint = "http://host-" + strings.ToLower(id) + ".example:8080"
			}
			return e
		}
		// I-2 and i-2 share a DNS name; the 64 letters are too long for a label
		ids := []string{"i-1", "i-2", "I-2", "i-3", strings.Repeat("l", 64), "i-5"}
		whole := func() *index {
			w := newIndex("meshflows.")
			w.apply(&discovery.Delta{Complete: true, Reset: true, Entries: slices.Collect(maps.Values(view))})
			return w
		}
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				var put []apiv1.CapabilityEntry
				for range rapid.IntRange(1, 3).Draw(rt, "n") {
					e := entry(rt, rapid.SampledFrom(ids).Draw(rt, "id"))
					view[keyOf(&e)] = e
					put = append(put, e)
				}
				ix.apply(&discovery.Delta{Complete: true, Put: put})
			},
			"gone": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				g := rapid.Int64Range(0, gen).Draw(rt, "generation")
				for k, e := range view {
					if e.InstanceID == id && e.Generation <= g {
						delete(view, k)
					}
				}
				ix.apply(&discovery.Delta{Complete: true, Gone: []apiv1.Removal{{InstanceID: id, Generation: g}}})
			},
			"warming": func(rt *rapid.T) {
				// a registry warming up answers some instances anew: their entries are
				// replaced, the others kept
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				var es []apiv1.CapabilityEntry
				for range rapid.IntRange(1, 2).Draw(rt, "n") {
					es = append(es, entry(rt, id))
				}
				for k := range view {
					if k.instance == id {
						delete(view, k)
					}
				}
				for _, e := range es {
					view[keyOf(&e)] = e
				}
				ix.apply(&discovery.Delta{Reset: true, Entries: es})
			},
			"whole": func(rt *rapid.T) {
				ix.apply(&discovery.Delta{Complete: true, Reset: true, Entries: slices.Collect(maps.Values(view))})
			},
			"": func(rt *rapid.T) {
				w := whole()
				for _, n := range allNames(view) {
					got, gotKnown := ix.lookup(n)
					want, wantKnown := w.lookup(n)
					if gotKnown != wantKnown || !slices.Equal(records(got), records(want)) {
						rt.Fatalf("%+v: by change %v %v, from the whole view %v %v", n, gotKnown, records(got), wantKnown, records(want))
					}
					if spec := answerable(view, n); !slices.Equal(instancesOf(got), spec) || !slices.IsSortedFunc(got, byPreference) {
						rt.Fatalf("%+v: answers %v; the instances in rotation with an address are %v", n, records(got), spec)
					}
				}
				if len(ix.entries) != len(view) || len(ix.known) != len(w.known) || len(ix.built) != len(w.built) || len(ix.rep) != len(w.rep) {
					rt.Fatalf("the index holds %d entries, %d names, %d built, %d representatives; the whole view %d, %d, %d, %d",
						len(ix.entries), len(ix.known), len(ix.built), len(ix.rep), len(view), len(w.known), len(w.built), len(w.rep))
				}
			},
		})
	})
}

// allNames is every capability, service and instance name of the view, and some it lacks.
func allNames(view map[entryKey]apiv1.CapabilityEntry) []name {
	out := []name{{kind: kindCapability, capability: "nothing.here", major: -1}, {kind: kindService, id: "svc-none"}, {kind: kindInstance, id: "none"}}
	for _, e := range view {
		out = append(out, name{kind: kindCapability, capability: e.CapabilityID, major: -1},
			name{kind: kindCapability, capability: e.CapabilityID, provider: e.Provider, major: -1},
			name{kind: kindCapability, capability: e.CapabilityID, major: 2},
			name{kind: kindService, id: strings.ToLower(e.ServiceName)}, name{kind: kindInstance, id: strings.ToLower(e.InstanceID)})
	}
	return out
}

// answerable is what the rules say name n answers: the instances (once each for a service or
// instance name; once per entry for a capability) of the entries in rotation, or in a panic
// answer, with an address to give.
func answerable(view map[entryKey]apiv1.CapabilityEntry, n name) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range view {
		if !apiv1.InRotation(e.Eligibility) && !e.Panic {
			continue
		}
		host, _, ok := apiv1.HostPort(e.Endpoint)
		if !ok || len(e.InstanceID) > 63 && host[0] >= '0' && host[0] <= '9' { // an address needs the instance's name
			continue
		}
		switch n.kind {
		case kindService:
			if strings.ToLower(e.ServiceName) != n.id || seen[e.InstanceID] {
				continue
			}
		case kindInstance:
			if strings.ToLower(e.InstanceID) != n.id || seen[e.InstanceID] {
				continue
			}
		default:
			major := -1
			if m, _, ok := strings.Cut(e.CapabilityVersion, "."); ok {
				major = atoi(m)
			}
			if e.CapabilityID != n.capability || n.provider != "" && e.Provider != n.provider || n.major >= 0 && major != n.major {
				continue
			}
		}
		seen[e.InstanceID] = true
		out = append(out, e.InstanceID)
	}
	slices.Sort(out)
	return out
}

func instancesOf(es []*entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.instance)
	}
	slices.Sort(out)
	return out
}

func records(es []*entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s:%d p%d w%d", e.instance, e.target, e.port, e.priority, e.weight))
	}
	return out
}
