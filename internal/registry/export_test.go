package registry

// WalkFleetAtNextSweep makes the next sweep hand the whole fleet to the eligibility monitor,
// as a replica over a shared store does whenever the store's revision moved.
func (r *Registry) WalkFleetAtNextSweep() { r.reconcile.Store(true) }
