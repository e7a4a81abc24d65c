package gateway

import (
	"net/http"
	"time"

	"github.com/meshflows/meshflows/discovery"
)

// PoolState is how a gateway's pool for one request stands, for a router that chooses
// among the gateways of several regions (internal/region).
type PoolState int

const (
	// PoolNone: the gateway would not serve the request from an upstream — no route, no
	// upstream left, no view of the registry yet, or a view past its max-stale.
	PoolNone PoolState = iota
	// PoolPanic: the route's pool is under the panic threshold: it would be served from
	// every member, in rotation or not.
	PoolPanic
	// PoolReady: the route has in-rotation upstreams and is not in panic (or is static).
	PoolReady
)

func (p PoolState) String() string {
	switch p {
	case PoolReady:
		return "ready"
	case PoolPanic:
		return "panic"
	}
	return "none"
}

// PoolState says how the pool that would serve r stands now; it reads the current table
// and allocates nothing.
func (g *Gateway) PoolState(r *http.Request) PoolState {
	st := g.state.Load()
	if st == nil {
		return PoolNone
	}
	m := st.table.Match(r.Method, r.URL.Path)
	if m.Entry == nil {
		return PoolNone
	}
	if m.Entry.Source == "static" {
		return PoolReady
	}
	if f := g.fresh.Load(); f != nil && f.expired {
		return PoolNone
	}
	sv := st.serving[m.Entry]
	switch {
	case sv == nil || len(sv.upstreams) == 0:
		return PoolNone
	case sv.maxStale > 0 && g.staleFor(sv.maxStale):
		return PoolNone
	case sv.panic:
		return PoolPanic
	}
	return PoolReady
}

// staleFor says whether the view is last-known-good and older than d.
func (g *Gateway) staleFor(d time.Duration) bool {
	f := g.fresh.Load()
	return f != nil && f.source == discovery.SourceSnapshot && g.cfg.Now().Sub(f.validAt) > d
}

// ViewSource says whether the table comes from a fresh view of the registry or the
// last-known-good one, and its age.
func (g *Gateway) ViewSource() (discovery.Source, time.Duration) { return g.source() }
