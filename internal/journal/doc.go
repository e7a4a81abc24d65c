// Package journal owns the registry's event journal: a bounded, ordered ring of the events
// that change what consumers see (registrations, deregistrations, evictions, eligibility
// transitions, incidents, snapshots), each with a monotonic sequence number, queried by
// sequence, type, subject, severity and text, and waited on by long polls. When the ring
// wraps past a reader, the reader is told how many events it missed (a gap event): the
// journal drops nothing silently.
package journal
