package etcdstore

import "sync"

// ownWrites holds what this replica is writing under some keys until its watch brings each
// write back, so that the replica takes the value as it wrote it instead of decoding its own
// JSON again: the batches of the shared journal, and the elected replica's verdicts (one
// per instance and change of state). A write is held from before it is sent, since
// the watch may bring it back before the call returns, and is taken only for the very value
// written: another write of the key (another replica's, or an earlier one of this replica's)
// is decoded as usual. What a failed write or a resync leaves is dropped; the zero value is
// ready to use.
type ownWrites[T any] struct {
	mu sync.Mutex
	m  map[string]ownWrite[T]
}

// ownWrite is one write held: the value sent, and what it decodes to.
type ownWrite[T any] struct {
	val string
	v   T
}

// hold holds v, sent as val under key.
func (o *ownWrites[T]) hold(key, val string, v T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]ownWrite[T])
	}
	o.m[key] = ownWrite[T]{val: val, v: v}
}

// take returns what this replica wrote under key, if val is the value it sent, and stops
// holding it.
func (o *ownWrites[T]) take(key string, val []byte) (T, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.m[key]
	if !ok || w.val != string(val) {
		var zero T
		return zero, false // a later write of ours stays held
	}
	delete(o.m, key)
	return w.v, true
}

// forget stops holding the writes under keys (they failed: if etcd wrote them after all,
// the watch decodes them).
func (o *ownWrites[T]) forget(keys ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		delete(o.m, k)
	}
}

// reset drops everything held (a resync decoded the complete view; the broken watch may
// never bring some writes back).
func (o *ownWrites[T]) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.m)
}

// len returns how many writes are held.
func (o *ownWrites[T]) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}
