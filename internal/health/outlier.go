package health

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// ReasonOutlierRelative: an instance failing clearly more than its peers of the same
// (capability, zone), pooled over every reporter (a relative outlier).
const ReasonOutlierRelative = "OUTLIER_RELATIVE"

// DefaultReporter is the reporter of an outcome that names none.
const DefaultReporter = "gw"

// outcomeRec is one reported window about an instance, kept for outlier_window: 24 bytes,
// so that 60,000 instances reported on by 20 reporters every 10 s hold 7.2 million of them
// in 170 MB. The window is exact (an outcome leaves it outlier_window after it came), which
// buckets of 10 s would not be; the cost of a judgment is the records in the window.
type outcomeRec struct {
	at       int64  // Unix nanoseconds
	reporter uint32 // an index into the engine's reporterNames
	ok, errs int32
	p99      float32 // the reporter's 99th percentile latency in ms (0: not sent)
}

// reporterNames interns the reporters of outcomes.
type reporterNames struct {
	names []string
	ids   map[string]uint32
}

// maxReporters bounds the reporters interned; past it new ones share the last index (their
// outcomes still count; only the leave-out-the-top-reporter test sees them as one). Every
// reporter is an authenticated identity the outcome rate limit holds, so this is a backstop.
const maxReporters = 1 << 16

func (r *reporterNames) index(name string) uint32 {
	if i, ok := r.ids[name]; ok {
		return i
	}
	if r.ids == nil {
		r.ids = map[string]uint32{}
	}
	if len(r.names) >= maxReporters {
		return uint32(len(r.names) - 1)
	}
	i := uint32(len(r.names))
	r.names = append(r.names, name)
	r.ids[name] = i
	return i
}

func (r *reporterNames) name(i uint32) string { return r.names[i] }

// window returns the pooled requests and errors about in over the window ending at now, and
// those of each reporter; it drops what has aged out.
func (e *Engine) window(in *instance, now time.Time) (n, errs int, byReporter map[uint32][2]int) {
	from := now.Add(-e.cfg.OutlierWindow).UnixNano()
	kept := in.outcomes[:0]
	for _, o := range in.outcomes {
		if o.at > from {
			kept = append(kept, o)
		}
	}
	clear(in.outcomes[len(kept):])
	in.outcomes = kept
	return e.windowAt(in, now)
}

// windowAt is window as of instant at, without dropping anything: the outcomes reported in
// (at - outlier_window, at].
func (e *Engine) windowAt(in *instance, at time.Time) (n, errs int, byReporter map[uint32][2]int) {
	from, to := at.Add(-e.cfg.OutlierWindow).UnixNano(), at.UnixNano()
	for _, o := range in.outcomes {
		if o.at <= from || o.at > to {
			continue
		}
		ok, bad := int(o.ok), int(o.errs)
		n += ok + bad
		errs += bad
		if byReporter == nil {
			byReporter = map[uint32][2]int{}
		}
		c := byReporter[o.reporter]
		byReporter[o.reporter] = [2]int{c[0] + ok + bad, c[1] + bad}
	}
	return n, errs, byReporter
}

// latencyAt is the highest 99th percentile latency reported about in in the window ending at
// at (0: none reported).
func (e *Engine) latencyAt(in *instance, at time.Time) float64 {
	from, to := at.Add(-e.cfg.OutlierWindow).UnixNano(), at.UnixNano()
	var p99 float32
	for _, o := range in.outcomes {
		if o.at > from && o.at <= to {
			p99 = max(p99, o.p99)
		}
	}
	return float64(p99)
}

// disputed reports whether an absolute-rule outcome from reporter is disputed: in the last
// outlier_window other reporters, pooled, saw at least outlier_min_requests requests at an
// error share under outlier_error_rate.
func (e *Engine) disputed(in *instance, reporter string, now time.Time) (bool, string) {
	_, _, by := e.window(in, now)
	n, errs, self := 0, 0, e.reporters.index(reporter)
	for r, c := range by {
		if r != self {
			n, errs = n+c[0], errs+c[1]
		}
	}
	if n >= e.cfg.OutlierMinRequests && float64(errs) < e.cfg.OutlierErrorRate*float64(n) {
		return true, fmt.Sprintf("other reporters saw %d errors in %d requests", errs, n)
	}
	return false, ""
}

// wilsonLower is the lower bound of the Wilson score interval of errs/n at z.
func wilsonLower(errs, n int, z float64) float64 {
	if n == 0 {
		return 0
	}
	p, nf := float64(errs)/float64(n), float64(n)
	z2 := z * z
	return (p + z2/(2*nf) - z*math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))) / (1 + z2/nf)
}

// medianWithout is the median of sorted without one element equal to x.
func medianWithout(sorted []float64, x float64) float64 {
	i := sort.SearchFloat64s(sorted, x)
	at := func(k int) float64 { // the k-th of sorted with element i left out
		if k >= i {
			return sorted[k+1]
		}
		return sorted[k]
	}
	n := len(sorted) - 1
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}

// median is the median of xs (sorted in place).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// relativelyWorse reports whether errs of n is an outlier against baseline: the Wilson lower
// bound clears both the absolute floor and the factor.
func (e *Engine) relativelyWorse(errs, n int, baseline float64) (bool, float64) {
	l := wilsonLower(errs, n, e.cfg.OutlierZ)
	return l > baseline+e.cfg.OutlierRelativeFloor && l > e.cfg.OutlierRelativeFactor*baseline, l
}

// withoutTop returns n and errs without the reporter that reported the most errors (of
// equal ones, the first by name), and its name.
func (e *Engine) withoutTop(n, errs int, by map[uint32][2]int) (int, int, string) {
	top, most := "", -1
	var c [2]int
	for r, x := range by {
		if name := e.reporters.name(r); x[1] > most || (x[1] == most && name < top) {
			top, most, c = name, x[1], x
		}
	}
	return n - c[0], errs - c[1], top
}

// corroborated applies the leave-one-out test to an outlier of n requests and errs errors
// against baseline: it still holds without the reporter that reported the most errors. The
// test applies only when the other reporters together reported outlier_min_volume requests;
// when they did not (one gateway, or one carrying nearly all the traffic), nobody contradicts
// that reporter and the pooled evidence stands alone, as a proxy's own outlier detection
// would. It returns what was left without the top reporter, and its name.
func (e *Engine) corroborated(n, errs int, by map[uint32][2]int, baseline float64) (ok bool, n2, e2 int, top string) {
	n2, e2, top = e.withoutTop(n, errs, by)
	if n2 < e.cfg.OutlierMinVolume {
		return true, n2, e2, top
	}
	ok, _ = e.relativelyWorse(e2, n2, baseline)
	return ok, n2, e2, top
}

// inRotationNow reports whether in is in rotation at now, as the engine judges it.
func (e *Engine) inRotationNow(in *instance, now time.Time) bool {
	return apiv1.InRotation(e.verdictOf(in, now).State)
}

// markCohorts marks in's (capability, zone) cohorts as reported on.
func (e *Engine) markCohorts(in *instance) {
	if e.dirtyCohorts == nil {
		e.dirtyCohorts = map[cohortKey]struct{}{}
	}
	for _, c := range in.Capabilities {
		e.dirtyCohorts[cohortKey{c, in.Zone}] = struct{}{}
	}
}

// judgeOutliers applies the relative-outlier rule at a Tick: to the cohorts reported on since
// the last one, and every relativeEvery to every cohort with outcomes in its window (windows
// age). A batch of outcomes costs one judgment a cohort, not one an outcome.
func (e *Engine) judgeOutliers(now time.Time) {
	e.capCounts = map[cohortKey][2]int{}
	defer func() { e.capCounts = nil }()
	if now.Sub(e.judgedRelative) >= relativeEvery {
		e.judgedRelative = now
		e.judgeReported(now)
		e.judgeZones(now)
		for in := range e.relOut {
			if !e.relativelyEjected(in, now) {
				delete(e.relOut, in)
			}
		}
		clear(e.dirtyCohorts)
		return
	}
	for k := range e.dirtyCohorts {
		e.judgeCohort(k.capability, k.zone, now)
	}
	clear(e.dirtyCohorts)
}

// TakeEjected returns the instances ejected as relative outliers since the last call: a
// cohort's judgment at a Tick changes verdicts the owner has not asked about.
func (e *Engine) TakeEjected() []string {
	out := e.relEjected
	e.relEjected = nil
	return out
}

// member is one comparable instance of a cohort: its pooled window.
type member struct {
	in       *instance
	n, errs  int
	reporter map[uint32][2]int
}

// judgeCohort applies the relative-outlier rule to one (capability, zone).
func (e *Engine) judgeCohort(capability, zone string, now time.Time) {
	var ms []member
	for _, o := range e.cohort(capability, zone) {
		if !o.present || o.draining || !e.inRotationNow(o, now) {
			continue
		}
		n, errs, by := e.window(o, now)
		if n >= e.cfg.OutlierMinVolume {
			ms = append(ms, member{o, n, errs, by})
		}
	}
	// the median of the others' shares, from the sorted shares of all: O(m log m) a cohort
	sorted := make([]float64, len(ms))
	for i, m := range ms {
		sorted[i] = float64(m.errs) / float64(m.n)
	}
	sort.Float64s(sorted)
	e.keepShares(cohortKey{capability, zone}, now, sorted) // for explanations until the next judgment
	e.judgeLatency(ms, capability, zone, now)
	if len(ms) < 2 {
		return
	}
	for _, m := range ms {
		baseline := medianWithout(sorted, float64(m.errs)/float64(m.n))
		worse, l := e.relativelyWorse(m.errs, m.n, baseline)
		if !worse {
			continue
		}
		still, n2, e2, top := e.corroborated(m.n, m.errs, m.reporter, baseline)
		if !still {
			continue // one reporter's broken path: not a reason to take it from everyone
		}
		in := m.in
		if !in.admitted || !in.troubles().ejectUntil.IsZero() || e.ejectionCapped(in, now) {
			continue
		}
		t := in.trouble()
		t.ejections++
		e.ejected++
		t.ejectUntil = now.Add(time.Duration(t.ejections) * e.cfg.EjectionBase)
		e.countEjection(in)
		reporters := make([]string, 0, len(m.reporter))
		for r := range m.reporter {
			reporters = append(reporters, e.reporters.name(r))
		}
		slices.Sort(reporters)
		e.relEjected = append(e.relEjected, in.ID)
		if e.relOut == nil {
			e.relOut = map[*instance]struct{}{}
		}
		e.relOut[in] = struct{}{}
		e.addCause(in, now, ReasonOutlierRelative, fmt.Sprintf("%d errors in %d requests over %s (lower bound %.4f at z %g) against its peers' median %.4f; reporters %s (without %s: %d in %d); ejection %d until %s",
			m.errs, m.n, e.cfg.OutlierWindow, l, e.cfg.OutlierZ, baseline, strings.Join(reporters, ", "), top, e2, n2, t.ejections, t.ejectUntil.UTC().Format(time.RFC3339)))
	}
}

// cohortKey names a (capability, zone) cohort.
type cohortKey struct{ capability, zone string }

// cohort returns the present instances of one (capability, zone), in id order, from the
// index Declare and Forget keep: it costs the cohort, not the fleet.
func (e *Engine) cohort(capability, zone string) []*instance {
	set := e.cohorts[cohortKey{capability, zone}]
	out := make([]*instance, 0, len(set))
	for in := range set {
		if in.present {
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b *instance) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// indexCohorts files in under the cohorts of its (capability, zone) groups, leaving those of
// what it declared before (old).
func (e *Engine) indexCohorts(in *instance, old *Instance) {
	if e.cohorts == nil {
		e.cohorts = map[cohortKey]map[*instance]struct{}{}
	}
	if old != nil {
		for _, c := range old.Capabilities {
			k := cohortKey{c, old.Zone}
			delete(e.cohorts[k], in)
			if len(e.cohorts[k]) == 0 {
				delete(e.cohorts, k)
			}
		}
	}
	for _, c := range in.Capabilities {
		k := cohortKey{c, in.Zone}
		if e.cohorts[k] == nil {
			e.cohorts[k] = map[*instance]struct{}{}
		}
		e.cohorts[k][in] = struct{}{}
	}
}

// ZoneOutliers returns the zones of capability that are zone outliers at now, sorted: the
// relative test applied to each zone's pooled outcomes against the median share of the other
// zones (a capability needs instances in two zones at least).
func (e *Engine) ZoneOutliers(capability string, now time.Time) []string {
	out := []string{}
	for _, z := range e.zoneFigures(capability, e.zonesOf()[capability], now) {
		if z.Outlier {
			out = append(out, z.Zone)
		}
	}
	return out
}

// zonesOf returns the zones of each capability, from the cohort index.
func (e *Engine) zonesOf() map[string][]string {
	out := map[string][]string{}
	for k := range e.cohorts {
		out[k.capability] = append(out[k.capability], k.zone)
	}
	return out
}

// zoneFigures returns each zone of capability with its pooled window, in zone order, and
// which are zone outliers: a zone with outlier_min_volume requests whose Wilson lower bound
// clears the median share of the other such zones by the floor and the factor, with and
// without its top reporter. It costs the capability's instances.
func (e *Engine) zoneFigures(capability string, zones []string, now time.Time) []apiv1.ZoneOutlier {
	if len(zones) < 2 {
		return nil
	}
	type zoneWindow struct {
		apiv1.ZoneOutlier
		by map[uint32][2]int
	}
	ws := make([]*zoneWindow, 0, len(zones))
	for _, zone := range zones {
		z := &zoneWindow{ZoneOutlier: apiv1.ZoneOutlier{CapabilityID: capability, Zone: zone}, by: map[uint32][2]int{}}
		for in := range e.cohorts[cohortKey{capability, zone}] {
			if !in.present || in.draining {
				continue
			}
			n, errs, by := e.windowAt(in, now)
			z.Requests, z.Errors = z.Requests+n, z.Errors+errs
			for r, c := range by {
				x := z.by[r]
				z.by[r] = [2]int{x[0] + c[0], x[1] + c[1]}
			}
		}
		if z.Requests > 0 {
			z.ErrorShare = float64(z.Errors) / float64(z.Requests)
		}
		ws = append(ws, z)
	}
	slices.SortFunc(ws, func(a, b *zoneWindow) int { return cmp.Compare(a.Zone, b.Zone) })
	out := make([]apiv1.ZoneOutlier, 0, len(ws))
	for _, z := range ws {
		var shares []float64
		for _, o := range ws {
			if o != z && o.Requests >= e.cfg.OutlierMinVolume {
				shares = append(shares, o.ErrorShare)
			}
		}
		if z.Requests >= e.cfg.OutlierMinVolume && len(shares) > 0 {
			z.Baseline = median(shares)
			z.OtherZones = len(shares)
			worse, l := e.relativelyWorse(z.Errors, z.Requests, z.Baseline)
			z.LowerBound = l
			if worse {
				z.Outlier, _, _, _ = e.corroborated(z.Requests, z.Errors, z.by, z.Baseline)
			}
		}
		out = append(out, z.ZoneOutlier)
	}
	return out
}

// judgeZones applies the zone test to every capability with outcomes in the window ending
// at now, keeps the outliers it finds (OutlierZones) and records the zones that became or
// stopped being outliers (TakeZoneChanges).
func (e *Engine) judgeZones(now time.Time) {
	reported := map[string]bool{}
	for k, set := range e.cohorts {
		if reported[k.capability] {
			continue
		}
		for in := range set {
			if len(in.outcomes) > 0 {
				reported[k.capability] = true
				break
			}
		}
	}
	zones := e.zonesOf()
	next := map[cohortKey]apiv1.ZoneOutlier{}
	for c := range reported {
		for _, z := range e.zoneFigures(c, zones[c], now) {
			if z.Outlier {
				next[cohortKey{c, z.Zone}] = z
			}
		}
	}
	for k, z := range next {
		if _, was := e.zoneOutliers[k]; !was {
			e.zoneChanges = append(e.zoneChanges, ZoneChange{At: now, Outlier: true, Figures: z})
		}
	}
	for k, z := range e.zoneOutliers {
		if _, still := next[k]; !still {
			z.Outlier = false
			e.zoneChanges = append(e.zoneChanges, ZoneChange{At: now, Outlier: false, Figures: z})
		}
	}
	e.zoneOutliers = next
}

// ZoneChange is a zone of a capability that became a zone outlier (Outlier) or stopped being
// one, with the figures of the judgment (the last ones it was an outlier on, when it stopped).
type ZoneChange struct {
	At      time.Time
	Outlier bool
	Figures apiv1.ZoneOutlier
}

// TakeZoneChanges returns the zone outlier changes since the last call, in (capability,
// zone) order within one judgment.
func (e *Engine) TakeZoneChanges() []ZoneChange {
	out := e.zoneChanges
	e.zoneChanges = nil
	slices.SortStableFunc(out, func(a, b ZoneChange) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Figures.CapabilityID, b.Figures.CapabilityID), cmp.Compare(a.Figures.Zone, b.Figures.Zone))
	})
	return out
}

// OutlierZones returns the zone outliers of the last judgment (at most relativeEvery old),
// in (capability, zone) order.
func (e *Engine) OutlierZones() []apiv1.ZoneOutlier {
	out := make([]apiv1.ZoneOutlier, 0, len(e.zoneOutliers))
	for _, z := range e.zoneOutliers {
		out = append(out, z)
	}
	slices.SortFunc(out, func(a, b apiv1.ZoneOutlier) int {
		return cmp.Or(cmp.Compare(a.CapabilityID, b.CapabilityID), cmp.Compare(a.Zone, b.Zone))
	})
	return out
}

// relativeEvery is how often Tick judges every cohort with reported outcomes (each outcome
// judges its own cohorts at once).
const relativeEvery = 10 * time.Second

// judgeReported judges the cohorts of every instance with outcomes in its window.
func (e *Engine) judgeReported(now time.Time) {
	seen := map[cohortKey]bool{}
	for _, in := range e.instances {
		if len(in.outcomes) == 0 || !in.present {
			continue
		}
		for _, c := range in.Capabilities {
			k := cohortKey{c, in.Zone}
			if !seen[k] {
				seen[k] = true
				e.judgeCohort(c, in.Zone, now)
			}
		}
	}
}

// ZoneOutliers returns the zones of capability that are zone outliers at now (Engine.ZoneOutliers).
func (m *Monitor) ZoneOutliers(capability string, now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engine.ZoneOutliers(capability, now)
}

// Dispute is an outcome ignored because other reporters saw the instance healthy.
type Dispute struct {
	At         time.Time
	InstanceID string
	Reporter   string
	Detail     string
}

// TakeDisputes returns the disputed outcomes since the last call.
func (e *Engine) TakeDisputes() []Dispute {
	d := e.disputes
	e.disputes = nil
	return d
}

// OutcomeWindow returns what reporters saw of in over the window ending at now and the
// baseline of each of its cohorts; nil when nothing was reported. It costs its cohorts.
func (e *Engine) outcomeWindow(in *instance, now time.Time) *apiv1.OutcomeWindow {
	if in == nil {
		return nil
	}
	n, errs, by := e.windowAt(in, now)
	if n == 0 {
		return nil
	}
	w := &apiv1.OutcomeWindow{WindowSeconds: int(e.cfg.OutlierWindow / time.Second), Requests: n, Errors: errs,
		ErrorShare: float64(errs) / float64(n), LatencyMsP99: e.latencyAt(in, now),
		Reporters: make([]apiv1.ReporterOutcome, 0, len(by)), Cohorts: make([]apiv1.CohortBaseline, 0, len(in.Capabilities))}
	for r, c := range by {
		w.Reporters = append(w.Reporters, apiv1.ReporterOutcome{Reporter: e.reporters.name(r), Requests: c[0], Errors: c[1]})
	}
	slices.SortFunc(w.Reporters, func(a, b apiv1.ReporterOutcome) int { return cmp.Compare(a.Reporter, b.Reporter) })
	comparable := !in.draining && e.inRotationNow(in, now) && n >= e.cfg.OutlierMinVolume
	for _, c := range in.Capabilities {
		sorted := e.sharesOf(cohortKey{c, in.Zone}, now)
		cb := apiv1.CohortBaseline{CapabilityID: c, Zone: in.Zone, Comparable: len(sorted)}
		var m float64
		switch i := sort.SearchFloat64s(sorted, w.ErrorShare); {
		case comparable && i < len(sorted) && sorted[i] == w.ErrorShare: // itself among them
			cb.Comparable--
			if cb.Comparable > 0 {
				m = medianWithout(sorted, w.ErrorShare)
				cb.Baseline = &m
			}
		case len(sorted) > 0:
			m = median(slices.Clone(sorted))
			cb.Baseline = &m
		}
		w.Cohorts = append(w.Cohorts, cb)
	}
	return w
}

// cohortShares are the sorted error shares of a cohort's comparable instances, as judged at.
type cohortShares struct {
	at     time.Time
	sorted []float64
}

// sharesOf returns the sorted error shares of the comparable instances of cohort k: those of
// its last judgment when it is at most relativeEvery old, else counted now (and kept). An
// explanation, or a catalog listing a hundred instances of one cohort, costs the cohort once
// in relativeEvery, not once an instance.
func (e *Engine) sharesOf(k cohortKey, now time.Time) []float64 {
	if cs, ok := e.shares[k]; ok && !now.Before(cs.at) && now.Sub(cs.at) <= relativeEvery {
		return cs.sorted
	}
	var sorted []float64
	for _, o := range e.cohort(k.capability, k.zone) {
		if o.draining || !e.inRotationNow(o, now) {
			continue
		}
		if on, oe, _ := e.windowAt(o, now); on >= e.cfg.OutlierMinVolume {
			sorted = append(sorted, float64(oe)/float64(on))
		}
	}
	sort.Float64s(sorted)
	e.keepShares(k, now, sorted)
	return sorted
}

// keepShares keeps the sorted shares of cohort k as of now.
func (e *Engine) keepShares(k cohortKey, now time.Time, sorted []float64) {
	if e.shares == nil {
		e.shares = map[cohortKey]cohortShares{}
	}
	e.shares[k] = cohortShares{at: now, sorted: sorted}
}

// relativelyEjected reports whether in is ejected at now as a relative outlier.
func (e *Engine) relativelyEjected(in *instance, now time.Time) bool {
	_, cause := in.causes[ReasonOutlierRelative]
	return cause && in.present && now.Before(in.troubles().ejectUntil)
}

// OutlierInstances counts the instances ejected at now as relative outliers, by (capability,
// zone): only the cohorts with one.
func (e *Engine) OutlierInstances(now time.Time) map[[2]string]int {
	out := map[[2]string]int{}
	for in := range e.relOut {
		if e.relativelyEjected(in, now) {
			for _, c := range in.Capabilities {
				out[[2]string{c, in.Zone}]++
			}
		}
	}
	return out
}

// ejectionCapped reports whether ejecting in would eject more than max_ejection_percent of
// the non-draining instances of one of its (capability, zone) groups. Within one judgment of
// relative outliers (e.capCounts set) each group is counted once and kept up to date as the
// judgment ejects, so that a judgment costs its groups, not its groups times its ejections.
func (e *Engine) ejectionCapped(in *instance, now time.Time) bool {
	for _, c := range in.Capabilities {
		members, ejected := e.groupCounts(cohortKey{c, in.Zone}, now)
		if (ejected+1)*100 > e.cfg.MaxEjectionPercent*members { // in itself, if ejected
			return true
		}
	}
	return false
}

// groupCounts returns the non-draining members of a group and how many of them are ejected
// at now.
func (e *Engine) groupCounts(k cohortKey, now time.Time) (members, ejected int) {
	if c, ok := e.capCounts[k]; ok {
		return c[0], c[1]
	}
	for o := range e.cohorts[k] { // the group's members, not the fleet
		if !o.present || o.draining {
			continue
		}
		members++
		if now.Before(o.troubles().ejectUntil) {
			ejected++
		}
	}
	if e.capCounts != nil {
		e.capCounts[k] = [2]int{members, ejected}
	}
	return members, ejected
}

// countEjection keeps a judgment's group counts in step with an ejection of in.
func (e *Engine) countEjection(in *instance) {
	for _, c := range in.Capabilities {
		if x, ok := e.capCounts[cohortKey{c, in.Zone}]; ok {
			e.capCounts[cohortKey{c, in.Zone}] = [2]int{x[0], x[1] + 1}
		}
	}
}
