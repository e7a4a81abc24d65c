package etcdstore

// What replicas share besides the records: the elected replica's verdicts, the outcomes
// gateways report to another replica, and the gateways' drain acknowledgements.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// gatewayAck is a live gateway's acknowledgement as the store holds it, with its lease.
type gatewayAck struct {
	ack   registry.GatewayAck
	lease clientv3.LeaseID
}

// verdict decodes a verdict key.
func (s *Store) verdict(kv *mvccpb.KeyValue) (registry.SharedVerdict, bool) {
	var v registry.SharedVerdict
	if err := json.Unmarshal(kv.Value, &v); err != nil || v.InstanceID == "" {
		s.cfg.Logger.Warn("unreadable verdict in etcd", slog.String("key", string(kv.Key)))
		return v, false
	}
	return v, true
}

// PublishVerdicts implements registry.VerdictSharer: each verdict is put under its
// instance's lease (it goes with the instance), a transaction per 128; each is held
// (ownWrites) until the watch brings it back.
func (s *Store) PublishVerdicts(ctx context.Context, vs []registry.SharedVerdict) error {
	ops := make([]clientv3.Op, 0, min(len(vs), maxTxnOps))
	keys := make([]string, 0, cap(ops))
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := s.cfg.Client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			s.ownVerdicts.forget(keys...)
			err = fmt.Errorf("etcd put verdicts: %w", err)
		}
		ops, keys = ops[:0], keys[:0]
		return err
	}
	for _, v := range vs {
		l, ok := s.leases.Load(v.InstanceID)
		if !ok {
			continue // gone meanwhile
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		key, val := s.key("verdicts/", v.InstanceID), string(b)
		v.Since = v.Since.Round(0) // as a decoded copy has it: no monotonic clock reading
		s.ownVerdicts.hold(key, val, v)
		keys = append(keys, key)
		ops = append(ops, clientv3.OpPut(key, val, clientv3.WithLease(l.(clientv3.LeaseID))))
		if len(ops) == maxTxnOps {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// rampClockKey holds the elected replica's ramp clock (registry.VerdictSharer): an instant,
// RFC 3339 with nanoseconds.
const rampClockKey = "rampclock"

// PublishRampClock implements registry.VerdictSharer: one key for the whole fleet,
// overwritten.
func (s *Store) PublishRampClock(ctx context.Context, t time.Time) error {
	if _, err := s.cfg.Client.Put(ctx, s.key(rampClockKey), t.UTC().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("etcd put the ramp clock: %w", err)
	}
	return nil
}

// RampClock implements registry.VerdictSharer: the ramp clock the store holds, zero before
// one was published.
func (s *Store) RampClock() time.Time {
	if t := s.rampClock.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// OnRampClock implements registry.VerdictSharer: fn receives every ramp clock the watch sees,
// and returns the instances whose answers it moved, which the clock's revision tells.
func (s *Store) OnRampClock(fn func(time.Time) []string) { s.onRampClock.Store(&fn) }

// readRampClock decodes the ramp clock's key.
func (s *Store) readRampClock(kv *mvccpb.KeyValue) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, string(kv.Value))
	if err != nil {
		s.cfg.Logger.Warn("unreadable ramp clock in etcd", slog.String("key", string(kv.Key)))
		return time.Time{}, false
	}
	return t, true
}

// SharedVerdict implements registry.VerdictSharer: the verdict the store holds on id.
func (s *Store) SharedVerdict(id string) (registry.SharedVerdict, bool) {
	s.verdictM.Lock()
	defer s.verdictM.Unlock()
	v, ok := s.verdicts[id]
	return v, ok
}

// outcomesTTL bounds how long a forwarded window outlives its gateway's acknowledgements:
// the key is a mailbox, of no use once the elected replica's watch has applied its put.
const outcomesTTL = 60 // seconds

// ForwardOutcomes implements registry.VerdictSharer: the gateway's window is put under a key
// of its own, which the elected replica's watch applies (each put is one event; the key is
// overwritten by the gateway's next window). The key goes with the gateway: it is put under
// the lease of the gateway's acknowledgement, or, before the first acknowledgement or once
// that lease has ended, under a lease of its own of outcomesTTL, so that a gateway that went
// away leaves nothing behind in etcd.
func (s *Store) ForwardOutcomes(ctx context.Context, req *apiv1.OutcomesRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	key, val := s.key("outcomes/", req.GatewayID), string(b)
	s.acksM.Lock()
	lease := s.acks[req.GatewayID].lease
	s.acksM.Unlock()
	if lease != 0 {
		_, err := s.cfg.Client.Put(ctx, key, val, clientv3.WithLease(lease))
		if err == nil {
			return nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcd put outcomes: %w", err)
		}
	}
	l, err := s.cfg.Client.Grant(ctx, outcomesTTL)
	if err != nil {
		return fmt.Errorf("etcd lease of the outcomes of gateway %q: %w", req.GatewayID, err)
	}
	if _, err := s.cfg.Client.Put(ctx, key, val, clientv3.WithLease(l.ID)); err != nil {
		return fmt.Errorf("etcd put outcomes: %w", err)
	}
	return nil
}

// gatewayAck decodes a gateway's acknowledgement key.
func (s *Store) gatewayAck(kv *mvccpb.KeyValue) (gatewayAck, bool) {
	var a registry.GatewayAck
	if err := json.Unmarshal(kv.Value, &a); err != nil || a.GatewayID == "" {
		s.cfg.Logger.Warn("unreadable gateway acknowledgement in etcd", slog.String("key", string(kv.Key)))
		return gatewayAck{}, false
	}
	return gatewayAck{ack: a, lease: clientv3.LeaseID(kv.Lease)}, true
}

// PutAck implements registry.AckSharer: the acknowledgement is put under the gateway's
// lease of ttl, renewed by each acknowledgement (a new lease when it has ended), so that a
// gateway that stops acknowledging drops out of every replica's view by itself.
func (s *Store) PutAck(ctx context.Context, ack registry.GatewayAck, ttl time.Duration) error {
	val, err := json.Marshal(ack)
	if err != nil {
		return err
	}
	s.acksM.Lock()
	lease := s.acks[ack.GatewayID].lease
	s.acksM.Unlock()
	if lease != 0 {
		if _, err := s.cfg.Client.KeepAliveOnce(ctx, lease); err != nil {
			if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("etcd keep-alive of gateway %q: %w", ack.GatewayID, err)
			}
			lease = 0
		}
	}
	if lease == 0 {
		l, err := s.cfg.Client.Grant(ctx, int64(math.Ceil(ttl.Seconds())))
		if err != nil {
			return fmt.Errorf("etcd lease of gateway %q: %w", ack.GatewayID, err)
		}
		lease = l.ID
	}
	if _, err := s.cfg.Client.Put(ctx, s.key("gateways/", ack.GatewayID), string(val), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("etcd put the acknowledgement of gateway %q: %w", ack.GatewayID, err)
	}
	s.acksM.Lock()
	s.acks[ack.GatewayID] = gatewayAck{ack: ack, lease: lease} // read your own writes
	s.acksM.Unlock()
	return nil
}

// Acks implements registry.AckSharer: the acknowledgements of the gateways whose lease lives.
func (s *Store) Acks() []registry.GatewayAck {
	s.acksM.Lock()
	defer s.acksM.Unlock()
	out := make([]registry.GatewayAck, 0, len(s.acks))
	for _, a := range s.acks {
		out = append(out, a.ack)
	}
	return out
}

// OnOutcomes implements registry.VerdictSharer: fn receives every forwarded window.
func (s *Store) OnOutcomes(fn func(*apiv1.OutcomesRequest)) { s.onOutcomes.Store(&fn) }

// OnVerdict implements registry.VerdictSharer: fn receives every verdict the watch sees.
func (s *Store) OnVerdict(fn func(registry.SharedVerdict)) { s.onVerdict.Store(&fn) }

// operatorsKey holds the operator actions (evacuations and overrides) every replica applies.
const operatorsKey = "operators"

// UpdateOperators implements registry.OperatorSharer: a read-modify-write of the one key,
// retried when another replica wrote it in between (a compare on its modification revision),
// so that concurrent actions on two replicas do not lose one another.
func (s *Store) UpdateOperators(ctx context.Context, update func(cur []byte) ([]byte, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key := s.key(operatorsKey)
	for attempt := 0; ; attempt++ {
		resp, err := s.cfg.Client.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("etcdstore: read the operator actions: %w", err)
		}
		var cur []byte
		var rev int64
		if len(resp.Kvs) > 0 {
			cur, rev = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		}
		next, err := update(cur)
		if err != nil {
			return err
		}
		txn, err := s.cfg.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(next))).Commit()
		if err != nil {
			return fmt.Errorf("etcdstore: put the operator actions: %w", err)
		}
		if txn.Succeeded {
			return nil
		}
		if attempt == 10 {
			return errors.New("etcdstore: the operator actions kept changing under this write (10 attempts)")
		}
	}
}

// Operators implements registry.OperatorSharer: the state the store holds (nil before any).
func (s *Store) Operators() []byte {
	if v := s.operators.Load(); v != nil {
		return *v
	}
	return nil
}

// OnOperators implements registry.OperatorSharer: fn receives every state the watch sees.
func (s *Store) OnOperators(fn func([]byte)) { s.onOperators.Store(&fn) }
