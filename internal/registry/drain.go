package registry

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// maxWithdrawals bounds the deregistrations remembered for the drain handshake.
const maxWithdrawals = 10000

// drain is the registry's half of the drain handshake: gateways report the revision their
// table reflects; a deregistered incarnation is acknowledged once every live gateway (one
// heard from within GatewayTTL) has applied a revision at or past its withdrawal, and the
// registry has run long enough to have heard from every live gateway.
//
// During the warm-up after an empty start it also keeps the removals (deregistrations and
// evictions) of the epoch, which incomplete answers carry: consumers that merge an incomplete
// answer into what they knew drop them, so a table merged from warm-up answers never keeps an
// instance the registry removed, and a gateway may acknowledge it.
//
// An answer about one service lists only the removals of that service's instances: a
// warm-up with a rolling deployment in it would otherwise give a one-service answer every
// removal of the fleet, sorted anew for each answer built.
type drain struct {
	mu          sync.Mutex
	gateways    map[string]GatewayAck // with a store that does not share them
	withdrawals map[withdrawalKey]withdrawal
	// removals are the removals of removalsOf's epoch, instance id -> the highest generation
	// removed; byService and byCapability the same for each service's, and each
	// capability's, instances.
	removals     map[string]int64
	byService    map[string]map[string]int64
	byCapability map[string]map[string]int64
	// routed holds the removals of the routes' inputs (records with a manifest or a public
	// path): all a routes answer lists, since a routes view holds those alone
	routed     map[string]int64
	allRouted  []apiv1.Removal // routed sorted, made once per change of it
	removalsOf string
	// order holds the removals in the order they were made, for ageRemovals.
	order []removalAt
	// allRemoved is removals sorted: what an answer about every service lists, made once
	// per change of removals (nil: to be made again) and shared by the answers, which only
	// read it.
	allRemoved []apiv1.Removal
}

// GatewayAck is a gateway's last acknowledgement: its table reflects Revision of Epoch.
type GatewayAck struct {
	GatewayID string    `json:"gateway_id"`
	Epoch     string    `json:"registry_epoch"`
	Revision  int64     `json:"revision"`
	Seen      time.Time `json:"seen"`
}

// AckSharer is a Store that keeps the gateways' acknowledgements where every replica sees
// them (the etcd store): each under a lease of ttl renewed by the gateway's next ack, so a
// gateway that stops acknowledging drops out by itself. Without one, each replica keeps the
// acknowledgements it receives.
type AckSharer interface {
	PutAck(ctx context.Context, ack GatewayAck, ttl time.Duration) error
	// Acks returns the acknowledgements of the live gateways.
	Acks() []GatewayAck
}

type withdrawalKey struct {
	instance   string
	generation int64
}

type withdrawal struct {
	epoch    string
	revision int64
	at       time.Time
}

func (d *drain) recordWithdrawal(id string, generation int64, epoch string, revision int64, now time.Time, keep time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.withdrawals == nil {
		d.withdrawals = map[withdrawalKey]withdrawal{}
	}
	if len(d.withdrawals) >= maxWithdrawals {
		for k, w := range d.withdrawals {
			if now.Sub(w.at) > keep {
				delete(d.withdrawals, k)
			}
		}
		if len(d.withdrawals) >= maxWithdrawals {
			clear(d.withdrawals) // pathological churn: forget rather than grow
		}
	}
	d.withdrawals[withdrawalKey{id, generation}] = withdrawal{epoch: epoch, revision: revision, at: now}
}

// forgetRemovals releases the removals once the warm-up is over (the sweep calls it).
func (d *drain) forgetRemovals() {
	d.mu.Lock()
	d.removals, d.byService, d.byCapability, d.removalsOf, d.allRemoved = nil, nil, nil, "", nil
	d.routed, d.allRouted = nil, nil
	clear(d.order)
	d.order = nil
	d.mu.Unlock()
}

// Bounds of the warm-up's removals (drain.removed): an answer lists at most
// MaxRemovedPerAnswer, the newest, and a removal is listed for RemovalKeep (twice the
// default long-poll wait) after it was made. A consumer that polls merges each answer as it
// comes, and drops a removed instance
// from the first answer that lists it; one away for longer than RemovalKeep while the
// registry warms up keeps a removed instance until the warm-up ends (one lease TTL). An
// evacuation's 667 deregistrations a second would otherwise list some 1,300 removals in
// every answer about one service by the warm-up's end, more than the answer itself.
const (
	MaxRemovedPerAnswer = 1000
	RemovalKeep         = time.Minute
)

// removalAt is one removal in the order they were made, for their ageing out: its names, not
// its record, which would hold the incarnation's eligibility view until then (at 667
// removals a second, 200,000 of them: the registry's RSS grew by 400 MB in 5 minutes).
type removalAt struct {
	at           time.Time
	id, service  string
	capabilities []string // shared with the record's interned list
	generation   int64
	routed       bool
}

// recordRemoval remembers that the incarnation rec was removed at now during the warm-up of
// epoch.
func (d *drain) recordRemoval(rec *Record, epoch string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removalsOf != epoch {
		d.removals, d.byService, d.byCapability, d.removalsOf, d.allRemoved = map[string]int64{}, map[string]map[string]int64{}, map[string]map[string]int64{}, epoch, nil
		d.routed, d.allRouted = map[string]int64{}, nil
		d.order = nil
	}
	id, generation := rec.InstanceID, rec.Generation
	if g, ok := d.removals[id]; !ok || generation > g {
		d.removals[id] = generation
		d.allRemoved = nil
	}
	noteRemoval(d.byService, rec.ServiceName, id, generation)
	for _, c := range rec.Capabilities {
		noteRemoval(d.byCapability, c.CapabilityID, id, generation)
	}
	if rec.Routed() {
		d.routed[id] = max(d.routed[id], generation)
		d.allRouted = nil
	}
	d.order = append(d.order, removalAt{at: now, id: id, service: rec.ServiceName, capabilities: capabilityIDs(rec), generation: generation, routed: rec.Routed()})
}

// ageRemovals forgets the removals made RemovalKeep or longer before now (the sweep calls
// it during the warm-up).
func (d *drain) ageRemovals(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for n < len(d.order) && now.Sub(d.order[n].at) >= RemovalKeep {
		r := d.order[n]
		id := r.id
		if d.removals[id] == r.generation {
			delete(d.removals, id)
			d.allRemoved = nil
		}
		forgetRemoval(d.byService, r.service, id, r.generation)
		for _, c := range r.capabilities {
			forgetRemoval(d.byCapability, c, id, r.generation)
		}
		if r.routed && d.routed[id] == r.generation {
			delete(d.routed, id)
			d.allRouted = nil
		}
		n++
	}
	if n > 0 {
		clear(d.order[:n]) // the names they hold
		d.order = d.order[n:]
	}
}

// noteRemoval records generation of id among the removals of one service or capability.
func noteRemoval(m map[string]map[string]int64, name, id string, generation int64) {
	ids := m[name]
	if ids == nil {
		ids = map[string]int64{}
		m[name] = ids
	}
	ids[id] = max(ids[id], generation)
}

// forgetRemoval drops generation of id from the removals of one service or capability,
// unless a later one of the same instance replaced it.
func forgetRemoval(m map[string]map[string]int64, name, id string, generation int64) {
	ids := m[name]
	if ids[id] != generation {
		return
	}
	delete(ids, id)
	if len(ids) == 0 {
		delete(m, name)
	}
}

// removed returns the removals of epoch that an answer about service lists, or, for an
// answer about no service, about capability (every removal when both are ""), sorted by
// instance id, the newest MaxRemovedPerAnswer of them; nil once the warm-up is over. A
// consumer merges an answer into its view of the same query only, which holds the instances
// of that service or capability alone. The caller must not modify what it returns.
func (d *drain) removed(epoch string, complete bool, service, capability string) []apiv1.Removal {
	if complete {
		return nil // every discovery answer asks: a complete one takes no lock
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removalsOf != epoch {
		return nil
	}
	switch {
	case service != "":
		return sortedRemovals(d.byService[service])
	case capability != "":
		return sortedRemovals(d.byCapability[capability])
	}
	if d.allRemoved == nil {
		d.allRemoved = sortedRemovals(d.removals)
	}
	return d.allRemoved
}

// routedRemoved returns the removals of epoch of the routes' inputs: what a routes answer
// lists (nil once the warm-up is over).
func (d *drain) routedRemoved(epoch string, complete bool) []apiv1.Removal {
	if complete {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removalsOf != epoch {
		return nil
	}
	if d.allRouted == nil {
		d.allRouted = sortedRemovals(d.routed)
	}
	return d.allRouted
}

// sortedRemovals returns removals (instance id -> generation) sorted by instance id: the
// newest MaxRemovedPerAnswer of them (generations grow with time).
func sortedRemovals(removals map[string]int64) []apiv1.Removal {
	if len(removals) == 0 {
		return nil
	}
	out := make([]apiv1.Removal, 0, len(removals))
	for id, g := range removals {
		out = append(out, apiv1.Removal{InstanceID: id, Generation: g})
	}
	if len(out) > MaxRemovedPerAnswer {
		slices.SortFunc(out, func(a, b apiv1.Removal) int { return cmp.Compare(b.Generation, a.Generation) })
		out = out[:MaxRemovedPerAnswer]
	}
	slices.SortFunc(out, func(a, b apiv1.Removal) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	return out
}

// Ack records that gateway id's table reflects revision of epoch; it renews the gateway's
// place among the live ones for GatewayTTL, and says how often to acknowledge to keep it.
func (r *Registry) Ack(ctx context.Context, req *apiv1.AckRequest) (*apiv1.AckResponse, error) {
	if req.GatewayID == "" || len(req.GatewayID) > 253 || req.Revision < 0 {
		return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "gateway_id", Message: "a gateway id of 1-253 characters and a revision >= 0 are required"}})
	}
	if err := r.ack(ctx, req); err != nil {
		return nil, err
	}
	ttl := int64(r.cfg.GatewayTTL / time.Second)
	return &apiv1.AckResponse{GatewayTTLSeconds: ttl, AckIntervalSeconds: max(1, ttl/3)}, nil
}

func (r *Registry) ack(ctx context.Context, req *apiv1.AckRequest) error {
	now := r.cfg.Now()
	ack := GatewayAck{GatewayID: req.GatewayID, Epoch: req.RegistryEpoch, Revision: req.Revision, Seen: now.UTC()}
	if as, ok := r.store.(AckSharer); ok {
		if err := r.write(ctx, func(ctx context.Context) error { return as.PutAck(ctx, ack, r.cfg.GatewayTTL) }); err != nil {
			return fmt.Errorf("record the acknowledgement of gateway %q: %w", req.GatewayID, err)
		}
		return nil
	}
	d := &r.drain
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gateways == nil {
		d.gateways = map[string]GatewayAck{}
	}
	for id, g := range d.gateways { // forget gateways silent for a long time
		if now.Sub(g.Seen) > r.cfg.GatewayTTL {
			delete(d.gateways, id)
		}
	}
	d.gateways[req.GatewayID] = ack
	return nil
}

// liveGateways returns the acknowledgements of the gateways heard from within GatewayTTL.
func (r *Registry) liveGateways(now time.Time) []GatewayAck {
	if as, ok := r.store.(AckSharer); ok {
		return as.Acks()
	}
	d := &r.drain
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]GatewayAck, 0, len(d.gateways))
	for _, g := range d.gateways {
		if now.Sub(g.Seen) <= r.cfg.GatewayTTL {
			out = append(out, g)
		}
	}
	return out
}

// Withdrawal says whether every live gateway has applied the deregistration of the
// incarnation generation of instance id. A deregistration this replica does not remember (made
// through another replica, or before this one started) is taken to be at the current revision,
// which is at or past it: the answer may come later than it could, never too early.
func (r *Registry) Withdrawal(id string, generation int64) (*apiv1.WithdrawalResponse, error) {
	d := &r.drain
	d.mu.Lock()
	w, ok := d.withdrawals[withdrawalKey{id, generation}]
	d.mu.Unlock()
	if !ok {
		if rec, held := r.store.Get(id); held && rec.Generation <= generation {
			return nil, fmt.Errorf("instance %q generation %d is registered, not withdrawn: %w", id, generation, ErrInstanceNotFound)
		}
		st := r.State()
		w = withdrawal{epoch: st.Epoch, revision: st.Revision}
	}
	now := r.cfg.Now()
	resp := &apiv1.WithdrawalResponse{InstanceID: id, Generation: generation, Revision: w.revision, Pending: []string{}}
	for _, g := range r.liveGateways(now) {
		if g.Epoch != w.epoch || g.Revision < w.revision {
			resp.Pending = append(resp.Pending, g.GatewayID)
		}
	}
	slices.Sort(resp.Pending)
	resp.Acknowledged = len(resp.Pending) == 0
	if up := now.Sub(r.started); resp.Acknowledged && up < r.cfg.GatewayTTL {
		// A gateway that was live before this replica started may not have acknowledged yet:
		// "no gateway pending" proves nothing until every live one has had its chance.
		resp.Acknowledged = false
		resp.Reason = fmt.Sprintf("the registry started %s ago and may not have heard from every live gateway yet (it counts them after %s)",
			up.Round(time.Second), r.cfg.GatewayTTL)
	}
	return resp, nil
}
