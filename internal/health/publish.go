package health

import "time"

// What the monitor tells of each publication (OnPublish): the instances whose published
// verdict changed since the previous one, so that the registry wakes the long polls of
// their services alone.

// maxTouched bounds the instances one publication names (OnPublish): past it, it says that
// every answer may have changed. A sweep during an evacuation reweighs thousands of slow
// starts at once (667 new instances a second ramp in tenths over 30 s: some 6,700 weight
// steps a second); with 4,096 every sweep woke every long poll of the fleet.
const maxTouched = 1 << 16

// firstAsDerived reports whether nv, v's first verdict, is the one discovery answered for
// it before the monitor held it (Reader.First at its registration).
func (m *Monitor) firstAsDerived(v *view, nv Verdict) bool {
	if m.onPublish == nil || v.in == nil {
		return false
	}
	state, weight := (Reader{m}).First(v.in.Service, v.in.Probe, time.Unix(0, v.in.registeredAt))
	return state == nv.State && weight == nv.Weight
}

// touch notes that v's published verdict changed, for the next publication's OnPublish.
func (m *Monitor) touch(v *view) {
	if m.onPublish == nil || m.touchedAll {
		return
	}
	if len(m.touched) == maxTouched {
		m.touched, m.touchedAll = m.touched[:0], true
		return
	}
	m.touched = append(m.touched, v.in.Instance)
}

// publish advances the revision and wakes the watchers when something changed.
func (m *Monitor) publish(changed bool) {
	if !changed {
		return
	}
	m.rev++
	if !m.withdrawnAt.IsZero() {
		if m.onWithdrawal != nil {
			m.onWithdrawal(m.rev, m.withdrawnAt)
		}
		m.withdrawnAt = time.Time{}
	}
	if m.onPublish != nil {
		m.onPublish(m.rev, m.touched, m.touchedAll)
		clear(m.touched) // the strings they hold
		m.touched, m.touchedAll = m.touched[:0], false
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// OnPublish has fn called at every move of the monitor's revision, under the monitor's lock
// (fn must be quick and must not call the monitor), with the new revision and the instances
// whose published verdict changed since the previous move, or all true when every answer may
// have changed (a panic flag moved, or too many instances to name). The registry wakes the
// long polls of those instances' services from it. fn must not keep touched.
func (m *Monitor) OnPublish(fn func(rev int64, touched []Instance, all bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onPublish = fn
}

// OnWithdrawalPublished has fn called, under the monitor's lock (fn must be quick), at every
// publication that carries a withdrawal verdict (an instance in rotation turned withdrawn),
// with its revision and the instant of its first such verdict: the registry times from it
// until each watcher is answered (meshflows_withdrawal_propagation_seconds).
func (m *Monitor) OnWithdrawalPublished(fn func(rev int64, verdictAt time.Time)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onWithdrawal = fn
}
