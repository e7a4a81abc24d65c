// Package registry is the core of the MeshFlows registry: Register, Heartbeat, Deregister,
// Query and Wait over a Store it declares, with leases, generations, the registry epoch,
// the warm-up window after an empty start, eviction of expired leases and snapshots.
//
// The registry owns the rules (validation, lease arithmetic, fencing, what "complete"
// means); a Store owns the records, their indexes, the generation counter and the
// revision. memstore is the embedded default Store; storetest holds the behaviour every
// Store must show. HTTP lives in internal/server.
package registry
