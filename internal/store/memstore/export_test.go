package memstore

// QueuedLeases returns how many entries s's lease queue holds, stale ones included.
func QueuedLeases(s *Store) int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.leases.Len()
}
