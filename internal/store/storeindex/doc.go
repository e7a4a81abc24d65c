// Package storeindex owns the in-memory index of registry records both stores serve
// queries from: records by instance id with two secondary indexes (service name, capability
// id), the sets of records the prober and the gateways' routes answer walk (those with a
// health probe; those with a manifest or a public path), the revision, and the channel that
// wakes watchers when it moves. The memory store is an Index with a generation counter and
// an epoch; the etcd store keeps one per replica, current with its watch.
package storeindex
