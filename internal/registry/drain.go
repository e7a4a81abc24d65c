package registry

import (
	"fmt"
	"slices"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// maxWithdrawals bounds the deregistrations remembered for the drain handshake.
const maxWithdrawals = 10000

// drain is the registry's half of the drain handshake: gateways report the revision their
// table reflects; a deregistered incarnation is acknowledged once every live gateway (one
// heard from within a lease TTL) has applied a revision at or past its withdrawal.
type drain struct {
	mu          sync.Mutex
	gateways    map[string]gatewayAck
	withdrawals map[withdrawalKey]withdrawal
}

type gatewayAck struct {
	epoch    string
	revision int64
	seen     time.Time
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

// Ack records that gateway id's table reflects revision of epoch.
func (r *Registry) Ack(req *apiv1.AckRequest) error {
	if req.GatewayID == "" || len(req.GatewayID) > 253 || req.Revision < 0 {
		return apiv1.InvalidRequest([]apiv1.Detail{{Path: "gateway_id", Message: "a gateway id of 1-253 characters and a revision >= 0 are required"}})
	}
	d := &r.drain
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gateways == nil {
		d.gateways = map[string]gatewayAck{}
	}
	now := r.cfg.Now()
	for id, g := range d.gateways { // forget gateways silent for a long time
		if now.Sub(g.seen) > 10*r.cfg.LeaseTTL {
			delete(d.gateways, id)
		}
	}
	d.gateways[req.GatewayID] = gatewayAck{epoch: req.RegistryEpoch, revision: req.Revision, seen: now}
	return nil
}

// Withdrawal says whether every live gateway has applied the deregistration of the
// incarnation generation of instance id.
func (r *Registry) Withdrawal(id string, generation int64) (*apiv1.WithdrawalResponse, error) {
	d := &r.drain
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.withdrawals[withdrawalKey{id, generation}]
	if !ok {
		return nil, fmt.Errorf("no deregistration of instance %q generation %d is remembered: %w", id, generation, ErrInstanceNotFound)
	}
	now := r.cfg.Now()
	resp := &apiv1.WithdrawalResponse{InstanceID: id, Generation: generation, Revision: w.revision, Pending: []string{}}
	for gid, g := range d.gateways {
		if now.Sub(g.seen) > r.cfg.LeaseTTL {
			continue // not live: nothing to wait for
		}
		if g.epoch != w.epoch || g.revision < w.revision {
			resp.Pending = append(resp.Pending, gid)
		}
	}
	slices.Sort(resp.Pending)
	resp.Acknowledged = len(resp.Pending) == 0
	return resp, nil
}
