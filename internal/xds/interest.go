package xds

import (
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Assignments nobody asks for are built when someone does. Each capability has two clusters
// (every provider, and each provider), and a client usually asks for the endpoints of one:
// under an evacuation's churn, building every assignment again at every change of its
// members was most of the server's work for resources no stream held. The clusters and
// listeners are always current (CDS and LDS clients ask for them all); an assignment
// (ClusterLoadAssignment) is built at once when a stream subscribes to it, and otherwise
// waits, marked pending, until one does (interest.subscribe, Server.realize).

// interest is what the streams subscribe to of the assignments: the names each stream asked
// for, and the streams that asked for all of them (a wildcard).
type interest struct {
	mu       sync.Mutex
	byStream map[stream]map[string]struct{}
	wild     map[stream]bool
	count    map[string]int // streams per name
}

// stream names a stream: state-of-the-world and incremental streams are numbered apart.
type stream struct {
	delta bool
	id    int64
}

// wants reports whether a stream subscribes to the assignment n, or to all of them.
func (in *interest) wants(n string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.wild) > 0 || in.count[n] > 0
}

// set makes names (all of them when wildcard) the subscription of stream id, and returns
// those it did not subscribe to before (all: it now subscribes to every assignment, and did
// not).
func (in *interest) set(id stream, names []string, wildcard bool) (added []string, all bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.byStream == nil {
		in.byStream, in.wild, in.count = map[stream]map[string]struct{}{}, map[stream]bool{}, map[string]int{}
	}
	if wildcard {
		all = !in.wild[id] && len(in.wild) == 0
		in.wild[id] = true
	} else {
		delete(in.wild, id)
	}
	old := in.byStream[id]
	cur := make(map[string]struct{}, len(names))
	for _, n := range names {
		cur[n] = struct{}{}
	}
	for n := range cur {
		if _, had := old[n]; !had {
			in.count[n]++
			added = append(added, n)
		}
	}
	for n := range old {
		if _, kept := cur[n]; !kept {
			in.drop(n)
		}
	}
	in.byStream[id] = cur
	return added, all
}

// change adds and removes names from stream id's subscription (incremental xDS), and returns
// what set does.
func (in *interest) change(id stream, subscribe, unsubscribe []string) (added []string, all bool) {
	in.mu.Lock()
	if _, known := in.byStream[id]; !known && !in.wild[id] && len(subscribe) == 0 {
		subscribe = []string{"*"} // a first request naming nothing: every assignment
	}
	cur := map[string]struct{}{}
	for n := range in.byStream[id] {
		cur[n] = struct{}{}
	}
	wildcard := in.wild[id]
	in.mu.Unlock()
	for _, n := range unsubscribe {
		if n == "*" {
			wildcard = false
		}
		delete(cur, n)
	}
	for _, n := range subscribe {
		if n == "*" {
			wildcard = true
			continue
		}
		cur[n] = struct{}{}
	}
	names := make([]string, 0, len(cur))
	for n := range cur {
		names = append(names, n)
	}
	return in.set(id, names, wildcard)
}

// end forgets stream id's subscription.
func (in *interest) end(id stream) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for n := range in.byStream[id] {
		in.drop(n)
	}
	delete(in.byStream, id)
	delete(in.wild, id)
}

func (in *interest) drop(n string) {
	if in.count[n]--; in.count[n] <= 0 {
		delete(in.count, n)
	}
}

// onRequest notes what an EDS request of stream id subscribes to (a state-of-the-world
// request names the whole subscription; none is every assignment), and has the pending
// assignments it newly subscribes to built before the cache answers it.
func (s *Server) onRequest(id int64, req *discoveryv3.DiscoveryRequest) {
	if req.GetTypeUrl() != resourcev3.EndpointType {
		return
	}
	names := req.GetResourceNames()
	wildcard := len(names) == 0
	for _, n := range names {
		wildcard = wildcard || n == "*"
	}
	s.realize(s.interest.set(stream{id: id}, names, wildcard))
}

// onDeltaRequest is onRequest for incremental xDS: a stream's first request with no name
// subscribes to every assignment, as "*" does.
func (s *Server) onDeltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) {
	if req.GetTypeUrl() != resourcev3.EndpointType {
		return
	}
	s.realize(s.interest.change(stream{delta: true, id: id}, req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()))
}

// realize builds the pending assignments of names (every one when all) and installs them.
func (s *Server) realize(names []string, all bool) {
	if len(names) == 0 && !all {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	if all {
		names = names[:0]
		for n := range s.pending {
			names = append(names, n)
		}
	}
	built := map[string]struct{}{}
	for _, n := range names {
		if _, ok := s.pending[n]; !ok {
			continue
		}
		delete(s.pending, n)
		delete(s.held, n)
		if s.buildLocked(n, "") {
			built[n] = struct{}{}
		}
	}
	s.installNamesLocked(built)
}
