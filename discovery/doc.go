// Package discovery is the MeshFlows consumer SDK: a registry client with a per-consumer
// cache that is correct by default.
//
// Every view it serves is in one of five observable states: uninitialized (never answered),
// fresh, authoritative-empty (the registry said, completely, that nothing matches), stale
// (the registry cannot be reached; the last-known-good view is served, marked
// SourceSnapshot, within the stale allowance) and expired (beyond the allowance: a typed
// ErrUnavailable, never fabricated or empty endpoints). A timeout or a decode failure is
// never taken for an empty answer.
//
// Views are ordered by (registry epoch, revision): an older revision of the same epoch never
// replaces a newer view; an epoch change resets; an answer marked complete=false (a registry
// still warming up after a restart) is merged into the last-known-good view instead of
// replacing it, so a restarted, still-empty registry never empties its consumers. The price
// is that an instance whose provider died while the registry was down is kept too, until the
// warm-up ends: a consumer that cannot connect to it calls Unreachable, which drops an
// instance the view holds only from before the restart (never one the registry answers for).
//
//	c, _ := discovery.New(discovery.Config{Registries: []string{"http://127.0.0.1:7400"}})
//	res, err := c.Capabilities(ctx, discovery.Query{CapabilityID: "messaging.publish", Version: ">=1.0 <2.0"})
//	if errors.Is(err, discovery.ErrUnavailable) { … } // nothing usable: fail the call, do not guess
//	for _, e := range res.Entries { … }               // res.Source says fresh, cache or snapshot
//
// Watch keeps a view current with long polls, so that a change arrives well under a second
// after it happens. The package is public: it imports api/v1 and nothing of the server.
package discovery
