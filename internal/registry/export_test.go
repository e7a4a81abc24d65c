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

// TopicChanged reports whether t changed past index: a long poll on it at index would be
// answered now (WaitOn), without waiting for it.
func (r *Registry) TopicChanged(t Topic, index int64) bool {
	if !r.topics.attributed || t == (Topic{}) {
		return r.revision() > index
	}
	at, _, _ := r.topics.watch(t)
	return at > index
}

// ServiceTopic and CapabilityTopic name the topics of a query on one service, or on one
// capability and no service.
func ServiceTopic(name string) Topic    { return Topic{kind: 's', name: name} }
func CapabilityTopic(name string) Topic { return Topic{kind: 'c', name: name} }

// LimitChangeLog makes the change log of registries made from now on keep n changes until
// the test ends.
func LimitChangeLog(t interface{ Cleanup(func()) }, n int) {
	prev := maxLogged
	maxLogged = n
	t.Cleanup(func() { maxLogged = prev })
}
