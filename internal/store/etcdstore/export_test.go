package etcdstore

// OwnBatches returns how many batches of events s wrote that the watch has not brought back.
func OwnBatches(s *Store) int { return s.ownEvents.len() }

// HeldVerdicts returns how many verdicts s wrote that the watch has not brought back.
func HeldVerdicts(s *Store) int { return s.ownVerdicts.len() }
