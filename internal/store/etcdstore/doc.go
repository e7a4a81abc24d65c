// Package etcdstore is the registry.Store on etcd, for several stateless registry
// replicas. Each instance is a key under the prefix attached to an etcd lease of the lease
// TTL: a heartbeat is a lease keep-alive, the lease's expiry is the eviction, a generation is
// the etcd revision that wrote the record, and fencing is a comparison inside an etcd
// transaction. Every replica serves queries from a local index (storeindex.Index) kept current
// by a watch of the prefix, and resyncs a complete view after a compaction or a reconnect.
// One elected replica runs the singleton duties.
//
// Layout under the prefix: epoch (created once), instances/<id> (the record), health/<id>
// (self-reported health once a heartbeat changed it, on the same lease; until then the
// record's), leader (the election), verdicts/<id> (the elected replica's verdict, on the
// instance's lease, once it differs from what every replica derives: the first verdict, and
// the serving a slow start ends in at the ramp clock), gateways/<id> (a gateway's drain
// acknowledgement, on its own lease), outcomes/<gateway id> (outcomes forwarded to the
// elected replica, on the gateway's acknowledgement lease, else on one of their own), rampclock (the instant at which every replica weighs the slow starts),
// events/<replica>/<n>.<count>
// (a batch of the shared event journal).
// etcdstore.go holds the records and the watch, commit.go the batched registrations,
// renew.go the lease renewals, shared.go the verdicts, the ramp clock, outcomes and
// acknowledgements, and journal.go the event journal.
package etcdstore
