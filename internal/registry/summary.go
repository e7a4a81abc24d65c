package registry

import (
	"container/heap"
	"maps"
	"slices"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// SummaryQuery selects what a catalog summary counts and lists (GET /v1/catalog/summary).
// Every filter set must match: the service name, and one capability of the instance with
// both the capability id and the provider set.
type SummaryQuery struct {
	ServiceName  string
	CapabilityID string
	Provider     string
	// ExpiringWithin counts a lease that ends within it (and has not ended) as expiring soon.
	ExpiringWithin time.Duration
	// Limit is the most instances the summary lists; 0 lists none.
	Limit int
}

// matches reports whether rec is one of the instances q keeps.
func (q *SummaryQuery) matches(rec *Record) bool {
	if q.ServiceName != "" && rec.ServiceName != q.ServiceName {
		return false
	}
	if q.CapabilityID == "" && q.Provider == "" {
		return true
	}
	for i := range rec.Capabilities {
		c := &rec.Capabilities[i]
		if (q.CapabilityID == "" || c.CapabilityID == q.CapabilityID) && (q.Provider == "" || c.Provider == q.Provider) {
			return true
		}
	}
	return false
}

// Summary counts the catalog and lists the first q.Limit instances q keeps, in Catalog's
// order, in one pass over the records: no instance is encoded, and only those listed are
// sorted. The whole catalog of a million instances is about 700 MB of JSON; what a console
// needs of it (how many, which match, the values a filter can take, a first screen of rows)
// is a few kilobytes.
func (r *Registry) Summary(q SummaryQuery) apiv1.CatalogSummary {
	st := r.State()
	now := r.cfg.Now().UnixNano()
	within := q.ExpiringWithin.Nanoseconds()
	recs := r.store.Records()
	out := apiv1.CatalogSummary{RegistryEpoch: st.Epoch, Region: st.Region, Revision: st.Revision, Total: len(recs)}
	providers, capIDs := map[string]struct{}{}, map[string]struct{}{}
	// The replicas of a service mostly share one capability list (intern.go): its values
	// are taken once. A fleet whose lists are not shared (metadata of each instance's own)
	// would make this a map of the fleet: past maxSeenLists, values are taken from each.
	seen := map[*capabilityList]struct{}{}
	first := &catalogHeap{}
	for _, rec := range recs {
		if l := rec.capList; l == nil || !has(seen, l) {
			if l != nil && len(seen) < maxSeenLists {
				seen[l] = struct{}{}
			}
			addValues(providers, capIDs, rec.Capabilities)
		}
		if !q.matches(rec) {
			continue
		}
		out.Matching++
		switch left := rec.lease.Load() - now; {
		case left <= 0:
			out.Expired++
		case left < within:
			out.ExpiringSoon++
		}
		switch {
		case q.Limit <= 0:
		case first.Len() < q.Limit:
			heap.Push(first, rec)
		case catalogOrder(rec, (*first)[0]) < 0:
			(*first)[0] = rec
			heap.Fix(first, 0)
		}
	}
	out.Providers = slices.Sorted(maps.Keys(providers))
	out.CapabilityIDs = slices.Sorted(maps.Keys(capIDs))
	listed := sortedRecords(*first)
	out.Instances = make([]apiv1.Instance, len(listed))
	for i, rec := range listed {
		out.Instances[i] = r.Wire(rec)
		if m := r.cfg.Eligibility; m != nil {
			if w := m.OutcomeWindow(rec.InstanceID, r.cfg.Now()); w != nil {
				if out.Outcomes == nil {
					out.Outcomes = map[string]*apiv1.OutcomeWindow{}
				}
				out.Outcomes[rec.InstanceID] = w
			}
		}
	}
	return out
}

func has[K comparable](m map[K]struct{}, k K) bool { _, ok := m[k]; return ok }

// maxSeenLists bounds the capability lists a summary remembers having taken the values of.
const maxSeenLists = 1 << 16

func addValues(providers, capIDs map[string]struct{}, caps []Capability) {
	for i := range caps {
		providers[caps[i].Provider] = struct{}{}
		capIDs[caps[i].CapabilityID] = struct{}{}
	}
}

// catalogOrder is Catalog's order: service name, then instance id.
func catalogOrder(a, b *Record) int {
	if c := strings.Compare(a.ServiceName, b.ServiceName); c != 0 {
		return c
	}
	return strings.Compare(a.InstanceID, b.InstanceID)
}

// catalogHeap keeps the first records in catalog order seen so far, the last of them on
// top (a max-heap), so that a record before it replaces it.
type catalogHeap []*Record

func (h catalogHeap) Len() int           { return len(h) }
func (h catalogHeap) Less(i, j int) bool { return catalogOrder(h[i], h[j]) > 0 }
func (h catalogHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *catalogHeap) Push(x any)        { *h = append(*h, x.(*Record)) }
func (h *catalogHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
