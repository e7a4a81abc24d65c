package etcdstore

// OwnBatches returns how many batches of events s wrote that the watch has not brought back.
func OwnBatches(s *Store) int {
	s.ownM.Lock()
	defer s.ownM.Unlock()
	return len(s.own)
}

// HeldVerdicts returns how many verdicts s wrote that the watch has not brought back.
func HeldVerdicts(s *Store) int {
	s.heldM.Lock()
	defer s.heldM.Unlock()
	return len(s.held)
}
