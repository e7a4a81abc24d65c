// Package etcdstore is the registry.Store on etcd, for several stateless registry
// replicas. Each instance is a key under the prefix attached to an etcd lease of the lease
// TTL: a heartbeat is a lease keep-alive, the lease's expiry is the eviction, a generation is
// the etcd revision that wrote the record, and fencing is a comparison inside an etcd
// transaction. Every replica serves queries from a local index (storeindex.Index) kept current
// by a watch of the prefix, and resyncs a complete view after a compaction or a reconnect.
// One elected replica runs the singleton duties.
//
// Layout under the prefix: epoch (created once), instances/<id> (the record), health/<id>
// (self-reported health, on the same lease), leader (the election).
package etcdstore
