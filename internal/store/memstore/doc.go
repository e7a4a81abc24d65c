// Package memstore is the embedded, in-process registry.Store: the default store of a
// single registry process and the fake every registry test runs on.
//
// Records live in a map with two indexes (by service name and by capability id); queries
// read the smaller candidate set. A heartbeat takes only a read lock and moves the lease
// with an atomic store; only visible changes (register, deregister, eviction, a change of
// self-reported health) take the write lock and advance the revision. The epoch is the
// time the store was created: every new store starts a new epoch.
package memstore
