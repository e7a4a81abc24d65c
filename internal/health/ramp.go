package health

import (
	"time"
)

// The ramps of slow start: weighed again without the engine while only the weight moves
// (reweigh), each service's at its own slot of the ramp step (nextSlot), the slots passed
// between sweeps advanced (Advance).

// Advance applies what time has brought since the last sweep (the ramps due at the slots
// passed, first verdicts, ejections and quarantines ending) and republishes what changed,
// without reconciling with the fleet or sampling the timeline. The registry calls it
// between its sweeps, at every slot of RampStep (RampSlots), so that the fleet's ramps move a
// slot of its services at a time: with every instance of a 60,000-instance fleet under an
// evacuation's churn ramping at once, a sweep answered about every long poll of the fleet
// in one burst, and a change landing in it waited for the burst.
//
// A replica that follows another's verdicts does nothing here: it weighs the slow starts it
// follows at the ramp clock the elected replica publishes, each service's at its own slot of
// that clock (rampClockOf), so that a clock moved by a slot of the step moves the ramps of a
// slot of services there too.
func (m *Monitor) Advance(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.following {
		return
	}
	m.tickAndPublish(now, false)
}

// nextSlot returns when v, ramping at n, is next weighed: the first instant after n of its
// service's slot (the instants k × RampStep/RampSlots with k mod RampSlots its phase), or n (the next
// sweep) when ramps are not slotted (RampStep is negative).
func (m *Monitor) nextSlot(v *view, n int64) int64 {
	w := m.due.width
	if w == 0 {
		return n
	}
	k := n/w + 1
	k += (int64(v.phase) - k%rampSlots + rampSlots) % rampSlots
	if v.rampUntil > n && v.rampUntil < v.rampFrom+int64(m.cfg.Engine.SlowStart) {
		// something other than the ramp's end falls due before the slot (silence, the
		// lease's end): judged then. The ramp's end itself waits for the slot.
		return min(k*w, v.rampUntil)
	}
	return k * w
}

// rampClockOf is the instant a follower weighs the slow starts of a service in slot phase at:
// the last instant of that slot (see nextSlot) at or before the elected replica's ramp
// clock, which weighed that slot by then (it publishes the instant of the sweep or Advance
// it weighed at, TakeRampMoved). Every replica derives it from the one clock, so they answer
// the same ramp at one revision; unslotted, it is the clock.
func (m *Monitor) rampClockOf(phase uint8) time.Time {
	return rampClockOf(m.due.width, m.rampClock, phase)
}

// rampClockOf is the last instant of slot phase, for slots width nanoseconds apart (0: not
// slotted), at or before clock.
func rampClockOf(width int64, clock time.Time, phase uint8) time.Time {
	n := clock.UnixNano()
	if width == 0 || clock.IsZero() || n < 0 {
		return clock
	}
	k := n / width
	k -= (k%rampSlots - int64(phase) + rampSlots) % rampSlots
	return time.Unix(0, k*width).UTC()
}

// rampPhase is the ramp slot of a service's instances (see MonitorConfig.RampStep).
func rampPhase(service string) uint8 {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(service); i++ {
		h = (h ^ uint32(service[i])) * 16777619
	}
	return uint8(h % rampSlots)
}

// reweigh is refreshVerdict for a view the sweep found due. Its ramp fields come from its
// last judgment by the engine, which saw every piece of evidence about it (evidence that
// can change its verdict zeroes rampUntil: apply): a view ramping until past now has nothing
// but its weight to change, and that is weighed from the view's first cache line alone.
// After a registry restart a million views are in slow start and due at every sweep;
// judging each through the engine read its record too, and the sweep took 235 ms. The
// caller records now as judgedAt.
func (m *Monitor) reweigh(v *view, now time.Time) bool {
	n := now.UnixNano()
	if m.following || n >= v.rampUntil || n < v.rampFrom {
		return m.refreshVerdict(v, now)
	}
	w := min(int32(m.engine.rampWeight(time.Duration(n-v.rampFrom))), int32(v.rampCap))
	v.nextDue = m.nextSlot(v, n)
	m.schedule(v)
	switch {
	case w == v.weight:
		return false
	case m.changedIDs != nil:
		// a replica that shares verdicts: setVerdict tells what the others must hear
		nv := v.verdict()
		nv.Weight = int(w)
		return m.setVerdict(v, nv, now)
	}
	v.weight = w
	m.touch(v)
	return true
}
