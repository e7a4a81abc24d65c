package server

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/registry"
)

// Delta watches (GET /v1/discovery/capabilities?index=N&delta=true) are answered from the
// registry's log of the instances each revision changed (Registry.ChangesOf): for each
// instance changed since N, the delta removes what the watcher holds of its incarnations up
// to the current one (all of them when it is gone) and adds its entries in the answer now.
// A change of one instance costs that instance, whatever the size of the answer — the whole
// fleet's, which an xDS server watches, is 120,000 entries at 60,000 instances. When the log
// cannot tell the changes since N (N is 0, of another epoch, older than the log keeps, or a
// change of every instance came since: a panic flag, a restore), the answer is the whole
// answer with reset.

// maxDeltaQueries bounds the queries whose encoded deltas are kept for the watchers that ask
// the same at the same revision (past it they start over).
const maxDeltaQueries = 4096

// deltaBodies are the encoded deltas of one query at one state, by the index they start
// from, and its reset.
type deltaBodies struct {
	state registry.State
	reset []byte
	from  map[int64][]byte
	size  int64  // bytes of reset and from
	used  uint64 // the log's tick at its last use: the least recently used go first
}

// deltaLog keeps, per query, the encoded deltas of the current state: the watchers of one
// query at one revision share one. It holds at most max bytes of bodies (and the one body
// just built, whatever its size): a reset is the whole answer (37 MB for the whole fleet at
// 100,000 instances), so distinct queries that each reset would otherwise keep one each.
type deltaLog struct {
	mu    sync.Mutex
	m     map[string]*deltaBodies
	max   int64
	bytes int64
	tick  uint64
	// evicted counts the queries dropped to keep under max; held reports bytes.
	evicted func()
	held    func(int64)
}

// newDeltaLog returns a log of at most max bytes (0: DefaultMaxDeltaBytes).
func newDeltaLog(max int64) *deltaLog {
	if max <= 0 {
		max = DefaultMaxDeltaBytes
	}
	return &deltaLog{m: map[string]*deltaBodies{}, max: max, evicted: func() {}, held: func(int64) {}}
}

// load returns the body for (key, st, index) (index < 0: the reset), built by build when
// there is none.
func (d *deltaLog) load(key string, st registry.State, index int64, build func() ([]byte, error)) ([]byte, error) {
	d.mu.Lock()
	b := d.m[key]
	if b != nil && b.state == st {
		if body := b.get(index); body != nil {
			d.tick++
			b.used = d.tick
			d.mu.Unlock()
			return body, nil
		}
	}
	d.mu.Unlock()
	body, err := build() // outside the lock: two watchers at once may build the same
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b = d.m[key]
	if b == nil || b.state != st {
		if b != nil {
			d.bytes -= b.size
		}
		if len(d.m) >= maxDeltaQueries {
			clear(d.m)
			d.bytes = 0
		}
		b = &deltaBodies{state: st, from: map[int64][]byte{}}
		d.m[key] = b
	}
	old := b.get(index)
	if index < 0 {
		b.reset = body
	} else {
		b.from[index] = body
	}
	grown := int64(len(body) - len(old))
	b.size += grown
	d.bytes += grown
	d.tick++
	b.used = d.tick
	if d.bytes > d.max {
		d.evictLocked(key)
	}
	d.held(d.bytes)
	return body, nil
}

// evictLocked drops the least recently used queries other than keep's until the log is
// within its bound. One scan finds the oldest, which is usually enough; when it is not (an
// answer near or over the bound drops many), the rest are sorted once by use: a scan per
// eviction made dropping every other query quadratic (83 ms for 4,096 queries, under the
// lock).
func (d *deltaLog) evictLocked(keep string) {
	oldest, at := "", uint64(math.MaxUint64)
	for k, b := range d.m {
		if k != keep && b.used < at {
			oldest, at = k, b.used
		}
	}
	if oldest == "" {
		return
	}
	d.drop(oldest)
	if d.bytes <= d.max {
		return
	}
	keys := make([]string, 0, len(d.m))
	for k := range d.m {
		if k != keep {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(d.m[a].used, d.m[b].used) })
	for _, k := range keys {
		if d.bytes <= d.max {
			return
		}
		d.drop(k)
	}
}

// drop removes one query's bodies.
func (d *deltaLog) drop(k string) {
	d.bytes -= d.m[k].size
	delete(d.m, k)
	d.evicted()
}

func (b *deltaBodies) get(index int64) []byte {
	if index < 0 {
		return b.reset
	}
	return b.from[index]
}

// appendDelta writes the delta of the instances ids (their entries now in ans) as JSON.
func appendDelta(b []byte, ans *registry.Answer, removed []apiv1.Removal) ([]byte, error) {
	b = appendState(b, ans.State)
	b = append(b, `,"added":[`...)
	var err error
	for i, e := range ans.Entries {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendEntry(b, e); err != nil {
			return nil, err
		}
	}
	b = append(b, `],"updated":[],"removed":`...)
	b = appendRemovals(b, removed)
	return append(b, "}\n"...), nil
}

// appendReset writes the whole answer as a delta watch's reset: the discovery answer with
// "reset": true.
func appendReset(b []byte, ans *registry.Answer) ([]byte, error) {
	body, err := appendDiscovery(nil, ans)
	if err != nil {
		return nil, err
	}
	b = append(b, `{"reset":true,`...)
	return append(b, body[1:]...), nil
}

// deltaAnswer answers a delta watch of q (its key) at index (of epoch): the changes since
// the answer at index, or the whole answer as a reset.
func (s *Server) deltaAnswer(w http.ResponseWriter, key string, q *registry.Query, index int64, epoch string) (any, error) {
	return s.answerDelta(w, key, registry.TopicOf(q), index, epoch, func() ([]byte, error) {
		s.metrics.encodes.WithLabelValues("capabilities").Inc()
		ans := s.reg.Query(q)
		return appendReset(nil, &ans)
	}, func(st registry.State, ids []string) ([]byte, error) {
		ans := s.reg.EntriesOf(q, ids)
		ans.State = st
		return appendDelta(nil, &ans, s.removals(ids))
	})
}

// routesDeltaAnswer answers a delta watch of the routes view at index (of epoch).
func (s *Server) routesDeltaAnswer(w http.ResponseWriter, index int64, epoch string) (any, error) {
	return s.answerDelta(w, routesKey, registry.RoutesTopic, index, epoch, func() ([]byte, error) {
		s.metrics.encodes.WithLabelValues("routes").Inc()
		r := s.reg.Routes()
		return marshalLine(apiv1.RoutesDelta{RegistryEpoch: r.RegistryEpoch, Region: r.Region, Revision: r.Revision, Complete: r.Complete, Reset: true,
			Manifests: r.Manifests, PublicPaths: r.PublicPaths, Removed: r.Removed})
	}, func(st registry.State, ids []string) ([]byte, error) {
		r := s.reg.RoutesOf(ids)
		return marshalLine(apiv1.RoutesDelta{RegistryEpoch: st.Epoch, Region: st.Region, Revision: st.Revision, Complete: st.Complete,
			Manifests: r.Manifests, PublicPaths: r.PublicPaths, Removed: s.removals(ids)})
	})
}

// answerDelta writes the answer of a delta watch (its key, of topic) at index (of epoch): the
// delta of the instances changed since index by a change that touched topic (delta), or the
// whole answer as a reset (reset) when the registry cannot tell them. Watchers of one key at
// one state share the bodies.
func (s *Server) answerDelta(w http.ResponseWriter, key string, topic registry.Topic, index int64, epoch string, reset func() ([]byte, error),
	delta func(st registry.State, ids []string) ([]byte, error)) (any, error) {
	st := s.reg.State()
	kind := "delta"
	var body []byte
	err := errCannotTell
	if index > 0 && index <= st.Revision && (epoch == "" || epoch == st.Epoch) { // index 0: the watcher holds nothing yet
		// the watchers of one query at one state share the body: the log is read once
		body, err = s.deltas.load(key, st, index, func() ([]byte, error) {
			ids, ok := s.reg.ChangesOf(index, topic)
			if !ok {
				return nil, errCannotTell
			}
			return delta(st, ids)
		})
	}
	if errors.Is(err, errCannotTell) {
		kind = "reset"
		body, err = s.deltas.load(key, st, -1, reset)
	}
	if err != nil {
		return nil, err
	}
	s.metrics.deltas.WithLabelValues(kind).Inc()
	w.Header().Set("X-Registry-Revision", strconv.FormatInt(st.Revision, 10))
	w.Header().Set("Cache-Control", "no-cache")
	httpapi.WriteEncoded(w, http.StatusOK, body)
	return written{}, nil
}

// errCannotTell says the change log cannot tell the changes since a delta watch's index.
var errCannotTell = errors.New("the change log cannot tell the changes since index")

// removals names each instance of ids at the generation the registry holds of it, or at
// every generation when it holds none, in instance order: what a delta drops before it puts
// the instances' entries now.
func (s *Server) removals(ids []string) []apiv1.Removal {
	removed := make([]apiv1.Removal, 0, len(ids))
	for _, id := range ids {
		g, held := s.reg.Generation(id)
		if !held {
			g = math.MaxInt64 // gone: every incarnation of it
		}
		removed = append(removed, apiv1.Removal{InstanceID: id, Generation: g})
	}
	return sortedRemovalList(removed)
}

// marshalLine is v as JSON and a newline, as every answer ends.
func marshalLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode delta answer: %w", err)
	}
	return append(b, '\n'), nil
}

// sortedRemovalList orders removals by instance id.
func sortedRemovalList(rs []apiv1.Removal) []apiv1.Removal {
	slices.SortFunc(rs, func(x, y apiv1.Removal) int { return strings.Compare(x.InstanceID, y.InstanceID) })
	return rs
}
