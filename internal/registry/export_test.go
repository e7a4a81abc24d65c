package registry

// WalkFleetAtNextSweep makes the next sweep hand the whole fleet to the eligibility monitor,
// as a replica over a shared store does whenever the store's revision moved.
func (r *Registry) WalkFleetAtNextSweep() { r.reconcile.Store(true) }

// LimitRunAddresses makes SortEntries remember at most n capability addresses until the
// test ends.
func LimitRunAddresses(t interface{ Cleanup(func()) }, n int) {
	prev := maxRunAddresses
	maxRunAddresses = n
	t.Cleanup(func() { maxRunAddresses = prev })
}
