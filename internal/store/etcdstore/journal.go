package etcdstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshflows/meshflows/internal/journal"
)

// The shared event journal: each batch of events a replica publishes is one key under
// PREFIX/events/<replica>/<n>.<count>, its value the JSON array of the batch's events. An
// event's number is the revision etcd wrote its batch at times eventsPerRevision, plus its
// place in the batch, so that every replica's journal holds the same sequence. A batch was a
// transaction of one key per event until etcd's share of a registration showed what that
// cost: etcd 3.4 copies the index of its not yet committed writes for every read view it
// opens (each lease grant opens one), so every key written makes each grant that follows
// dearer. A key holding one event as a JSON object (the earlier form; its seq field is its
// place in its transaction) is still read.

// eventsPerRevision spaces the numbers of consecutive revisions: more than a batch holds.
const eventsPerRevision = 1024

// PublishEvents stores events for every replica as one key, all or none (journal.Store).
func (s *Store) PublishEvents(ctx context.Context, es []journal.Stored) error {
	if len(es) >= eventsPerRevision {
		return fmt.Errorf("%d events in one write: at most %d", len(es), eventsPerRevision-1)
	}
	val := make([]byte, 0, 512*len(es))
	val = append(val, '[')
	for i, e := range es {
		e.Seq = 0 // numbered by its place in the batch, when read
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if i > 0 {
			val = append(val, ',')
		}
		val = append(val, b...)
	}
	val = append(val, ']')
	key := s.key("events/", s.cfg.ReplicaID, "/", fmt.Sprintf("%016d.%d", s.eventSeq.Add(1), len(es)))
	sval := string(val)
	s.ownEvents.hold(key, sval, slices.Clone(es)) // until the watch brings it back
	if _, err := s.cfg.Client.Put(ctx, key, sval); err != nil {
		s.ownEvents.forget(key)
		return fmt.Errorf("etcd put events: %w", err)
	}
	return nil
}

// eventsIn returns how many events the key of a batch says it holds: one for a key of the
// earlier form, which holds one.
func eventsIn(key []byte) int {
	k := key[bytes.LastIndexByte(key, '/')+1:]
	i := bytes.LastIndexByte(k, '.')
	if i < 0 {
		return 1
	}
	n, err := strconv.Atoi(string(k[i+1:]))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// PruneEvents deletes the oldest stored batches, keeping the newest that hold at least keep
// events (journal.Store): at most a batch less one (99) more than keep.
func (s *Store) PruneEvents(ctx context.Context, keep int) error {
	resp, err := s.cfg.Client.Get(ctx, s.key("events/"), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend))
	if err != nil {
		return fmt.Errorf("etcd list events: %w", err)
	}
	var old []*mvccpb.KeyValue
	held := 0
	for i, kv := range resp.Kvs {
		if held >= keep {
			old = resp.Kvs[i:]
			break
		}
		held += eventsIn(kv.Key)
	}
	for start := 0; start < len(old); start += maxTxnOps {
		var ops []clientv3.Op
		for _, kv := range old[start:min(start+maxTxnOps, len(old))] {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
		if _, err := s.cfg.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcd delete old events: %w", err)
		}
	}
	return nil
}

// OnEvent hands every stored event to fn — those already stored at once, oldest first, then
// each new one as the watch sees it — numbered with the revision it was written at.
func (s *Store) OnEvent(ctx context.Context, fn func(journal.Stored)) error {
	s.onEvent.Store(&fn)
	resp, err := s.cfg.Client.Get(ctx, s.key("events/"), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcd read events: %w", err)
	}
	s.replayEvents(resp.Kvs)
	return nil
}

// replayEvents hands stored events to the callback, oldest first: by revision, and within
// one by key (a batch's keys grow with its order).
func (s *Store) replayEvents(kvs []*mvccpb.KeyValue) {
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int {
		return cmp.Or(cmp.Compare(a.ModRevision, b.ModRevision), bytes.Compare(a.Key, b.Key))
	})
	for _, kv := range kvs {
		s.event(kv)
	}
}

// event decodes one stored batch (or a single event of the earlier form) and hands its
// events to the callback, in order; a batch this replica wrote is taken as it was written.
func (s *Store) event(kv *mvccpb.KeyValue) {
	es, mine := s.ownEvents.take(string(kv.Key), kv.Value)
	fn := s.onEvent.Load()
	if fn == nil {
		return
	}
	base := kv.ModRevision * eventsPerRevision
	if mine {
		for i := range es {
			es[i].Seq = base + int64(i)
			(*fn)(es[i])
		}
		return
	}
	if v := bytes.TrimLeft(kv.Value, " \t\r\n"); len(v) > 0 && v[0] == '[' {
		var es []journal.Stored // their attributes stay JSON, as the journal keeps them
		if err := json.Unmarshal(kv.Value, &es); err != nil || len(es) >= eventsPerRevision {
			s.cfg.Logger.Warn("unreadable events in etcd", slog.String("key", string(kv.Key)))
			return
		}
		for i := range es {
			es[i].Seq = base + int64(i)
			(*fn)(es[i])
		}
		return
	}
	var e journal.Stored
	if err := json.Unmarshal(kv.Value, &e); err != nil || e.Seq < 0 || e.Seq >= eventsPerRevision {
		s.cfg.Logger.Warn("unreadable event in etcd", slog.String("key", string(kv.Key)))
		return
	}
	e.Seq += base
	(*fn)(e)
}
