package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/outcome"
	"github.com/meshflows/meshflows/internal/workflow"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// StaticCapability is a capability the orchestrator may use when the registry has never
// answered (--static-capabilities).
type StaticCapability struct {
	CapabilityID string          `json:"capability_id" yaml:"capability_id"`
	Provider     string          `json:"provider" yaml:"provider"`
	Version      string          `json:"version" yaml:"version"`
	Endpoint     string          `json:"endpoint" yaml:"endpoint"`
	Metadata     json.RawMessage `json:"metadata,omitempty" yaml:"-"`
}

// candidate is an instance a step may be sent to.
type candidate struct {
	instance, endpoint string
	region             string // a peer region's instance (Config.Regions); empty: home's
	rank               apiv1.Rank
	static             bool // from the static fallback: no registry incarnation to report on
}

// execute runs w's steps with input, on the scopes of w's mode.
func (o *Orchestrator) execute(ctx context.Context, w *workflow.Workflow, runID, trigger string, input json.RawMessage) *apiv1.Run {
	start := o.cfg.Now()
	run := &apiv1.Run{RunID: runID, Workflow: w.Name, Trigger: trigger, Status: apiv1.RunSucceeded, StartedAt: start.UTC(), Output: json.RawMessage("null")}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	var in any
	json.Unmarshal(input, &in) // the run endpoint checked it is JSON
	sc := workflow.NewScope(w.Mode(o.cfg.ScopeMode), in)
	ex := &executor{o: o, w: w, runID: runID, input: in, budget: newBudget(o.cfg.MaxRunRecordBytes)}
	if o.cfg.Tracing.On() {
		ex.tracer = o.cfg.Tracing.Tracer
		var span trace.Span
		ctx, span = ex.tracer.Start(ctx, "workflow.run "+w.Name, trace.WithAttributes(attribute.String("meshflows.workflow", w.Name),
			attribute.String("meshflows.run_id", runID), attribute.String("meshflows.trigger", trigger), attribute.String("meshflows.scope_mode", string(sc.Mode()))))
		run.TraceID = span.SpanContext().TraceID().String()
		defer func() {
			span.SetAttributes(attribute.String("meshflows.status", run.Status))
			if run.Status != apiv1.RunSucceeded {
				span.SetStatus(codes.Error, run.Status+" "+run.Note)
			}
			span.End()
		}()
	}
	var last any
	var failed bool
	run.Steps, last, failed = ex.steps(ctx, sc, w.Steps)
	var c *cancelled
	var tl *tooLong
	switch cause := context.Cause(ctx); {
	case failed && errors.As(cause, &c):
		run.Status, run.Note = apiv1.RunCancelled, "cancelled: "+c.why
	case failed && errors.As(cause, &tl):
		run.Status, run.Note = apiv1.RunFailed, tl.Error()
	case failed:
		run.Status = apiv1.RunFailed
	case w.HasOutput:
		v, err := workflow.Substitute(w.Output, sc)
		if err != nil {
			run.Status, run.Note = apiv1.RunFailed, fmt.Sprintf("the workflow's output: %v", err)
			break
		}
		if b, err := json.Marshal(v); err == nil {
			run.Output = b
		}
	default:
		if b, err := json.Marshal(last); err == nil {
			run.Output = b
		}
	}
	run.Context = sc.Context()
	run.Truncated = ex.budget.truncated.Load()
	run.DurationMS = ms(o.cfg.Now().Sub(start))
	o.metrics.ran(run)
	return run
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// executor runs one run's steps.
type executor struct {
	o      *Orchestrator
	w      *workflow.Workflow
	runID  string
	input  any
	budget *budget      // of the run's record
	tracer trace.Tracer // nil: not traced
}

// steps runs a list of steps on sc in order; a failed step skips the rest. It returns the
// steps' records, the last step's output (a loop's or parallel step's is the object of the
// context keys it hands back), and whether a step failed.
func (ex *executor) steps(ctx context.Context, sc *workflow.Scope, steps []workflow.Step) ([]apiv1.StepRun, any, bool) {
	out := make([]apiv1.StepRun, len(steps))
	previous := ex.input // what payload_from: previous takes: the last service_call or set output
	var last any
	failed := false
	for i := range steps {
		st := &steps[i]
		sr := &out[i]
		sr.StepID = st.ID
		if failed {
			sr.Status = apiv1.StepSkipped
			continue
		}
		t0 := ex.o.cfg.Now()
		var res any
		var err error
		if se := stopped(ctx, st); se != nil { // a cancelled run starts no further step
			err = se
		} else {
			sctx, end := ex.stepSpan(ctx, st)
			res, err = ex.step(sctx, sc, st, previous, sr)
			end(err)
		}
		sr.DurationMS = ms(ex.o.cfg.Now().Sub(t0))
		if err != nil {
			var ae *apiv1.Error
			if !errors.As(err, &ae) {
				ae = apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "%v", err)
			}
			sr.Status, sr.Error, failed = apiv1.RunFailed, ae, true
			if se := stopped(ctx, st); se != nil { // the step failed because the run ended
				sr.Status, sr.Error = apiv1.StepCancelled, se
			}
			continue
		}
		sr.Status = apiv1.RunSucceeded
		if st.Type == workflow.TypeLoop || st.Type == workflow.TypeParallel {
			last = handedBack(sc, st)
		}
		if res != nil || st.Type == workflow.TypeServiceCall || st.Type == workflow.TypeSet {
			sr.Output, _ = json.Marshal(res)
			previous, last = res, res
			if len(sr.Output) > ex.budget.maxOutput {
				sr.OutputOmittedBytes, sr.Output = len(sr.Output), nil
				ex.budget.truncated.Store(true)
			}
		}
	}
	for i := range out {
		ex.budget.spend(stepCost(&out[i]))
	}
	return out, last, failed
}

// handedBack is a loop's or parallel step's output: the context keys it hands back to its
// scope (export_context_keys, outputs_map) with their values after it, those it set.
func handedBack(sc *workflow.Scope, st *workflow.Step) map[string]any {
	out := map[string]any{}
	keys := st.ExportKeys
	for _, e := range st.OutputsMap {
		keys = append(keys[:len(keys):len(keys)], e.Key)
	}
	for _, k := range keys {
		if v, ok := sc.Get(k); ok {
			out[k] = v
		}
	}
	return out
}

// stopped is the error of a step whose run was cancelled or ran out of time, or nil.
func stopped(ctx context.Context, st *workflow.Step) *apiv1.Error {
	var c *cancelled
	var tl *tooLong
	switch cause := context.Cause(ctx); {
	case errors.As(cause, &c):
		return apiv1.Errorf(http.StatusConflict, apiv1.CodeCancelled, "step %s: cancelled: %s", st.ID, c.why)
	case errors.As(cause, &tl):
		return apiv1.Errorf(http.StatusGatewayTimeout, apiv1.CodeDeadlineExceeded, "step %s: stopped: %s", st.ID, tl.Error())
	}
	return nil
}

// referenceFailed is a reference that names nothing at run time, as the step's error.
func referenceFailed(st *workflow.Step, err error) error {
	return apiv1.Errorf(http.StatusUnprocessableEntity, workflow.CodeReferenceNotFound, "step %s: %v", st.ID, err)
}

// step runs one step of any type on sc; sr receives the nested records of a loop or a
// parallel step. It returns the step's output (nil for loop and parallel steps).
func (ex *executor) step(ctx context.Context, sc *workflow.Scope, st *workflow.Step, previous any, sr *apiv1.StepRun) (any, error) {
	switch st.Type {
	case workflow.TypeSet:
		set := make(map[string]any, len(st.Set))
		for _, e := range st.Set {
			v, err := workflow.Substitute(e.Value, sc)
			if err != nil {
				return nil, referenceFailed(st, err)
			}
			sc.Set(e.Key, v)
			set[e.Key] = v
		}
		sc.SetOutput(st.ID, set)
		return set, nil
	case workflow.TypeLoop:
		return nil, ex.loop(ctx, sc, st, sr)
	case workflow.TypeParallel:
		return nil, ex.parallel(ctx, sc, st, sr)
	}
	req, payload, err := ex.request(sc, st, previous)
	if err != nil {
		return nil, referenceFailed(st, err)
	}
	out, inst, source, err := ex.o.step(ctx, ex.w, st, ex.runID, req, payload)
	sr.InstanceID, sr.Source = inst, source
	if err != nil {
		return nil, err
	}
	var v any
	if len(out) > 0 {
		json.Unmarshal(out, &v)
	}
	sc.SetOutput(st.ID, v)
	if st.Output != "" {
		sc.Set(st.Output, v)
	}
	return v, nil
}

// request is a service_call's request with its references resolved, and its payload:
// payload_from when set, else request.payload.
func (ex *executor) request(sc *workflow.Scope, st *workflow.Step, previous any) (json.RawMessage, json.RawMessage, error) {
	var rq any
	json.Unmarshal(st.Request, &rq)
	rq, err := workflow.Substitute(rq, sc)
	if err != nil {
		return nil, nil, err
	}
	var payload any
	switch st.PayloadFrom {
	case "input":
		payload = ex.input
	case "previous":
		payload = previous
	case "":
		if m, ok := rq.(map[string]any); ok {
			payload = m["payload"]
		}
	default:
		v, ok := sc.Output(st.PayloadFrom)
		if !ok {
			return nil, nil, fmt.Errorf("payload_from %q: that step has no output visible here", st.PayloadFrom)
		}
		payload = v
	}
	req, _ := json.Marshal(rq)
	p, _ := json.Marshal(payload)
	return req, p, nil
}

// loop runs a loop step's iterations one after another, each on its own scope.
func (ex *executor) loop(ctx context.Context, sc *workflow.Scope, st *workflow.Step, sr *apiv1.StepRun) error {
	v, err := workflow.Substitute(st.ForEach, sc)
	if err != nil {
		return referenceFailed(st, err)
	}
	items, ok := v.([]any)
	switch {
	case !ok:
		return apiv1.Errorf(http.StatusUnprocessableEntity, apiv1.CodeInvalidRequest, "step %s: for_each is not a list at run time (got %s)", st.ID, kindOf(v))
	case len(items) > st.MaxIterations:
		return apiv1.Errorf(http.StatusUnprocessableEntity, apiv1.CodeInvalidRequest, "step %s: for_each has %d elements, more than max_iterations %d", st.ID, len(items), st.MaxIterations)
	}
	kept := &iterations{b: ex.budget}
	defer kept.done(sr)
	for i, item := range items {
		if err := ctx.Err(); err != nil {
			return apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "step %s: stopped: %v", st.ID, err)
		}
		it := sc.Iteration(i, item)
		ictx, end := ex.iterationSpan(ctx, st, i, it.Mode())
		steps, _, failed := ex.steps(ictx, it, st.Steps)
		end(failedErr(failed))
		rec := apiv1.IterationRun{Index: i, Status: apiv1.RunSucceeded, Steps: steps}
		ex.budget.spend(48)
		if failed {
			rec.Status = apiv1.RunFailed
			kept.add(rec)
			it.Close()
			return apiv1.Errorf(http.StatusUnprocessableEntity, apiv1.CodeUnavailable, "step %s: iteration %d failed", st.ID, i)
		}
		it.Export(st.ExportKeys)
		it.Close()
		kept.add(rec)
	}
	return nil
}

// parallel runs a parallel step's branches concurrently (at most MaxParallel at once), each
// on its own scope; the first failure cancels the others. On success a strict parent
// receives what outputs_map takes.
func (ex *executor) parallel(ctx context.Context, sc *workflow.Scope, st *workflow.Step, sr *apiv1.StepRun) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	scopes := make([]*workflow.Scope, len(st.Branches))
	sr.Branches = make([]apiv1.BranchRun, len(st.Branches))
	sem := make(chan struct{}, ex.o.cfg.MaxParallel)
	var wg sync.WaitGroup
	var first atomic.Int32 // the branch that failed first, which cancelled the others
	first.Store(-1)
	for i := range st.Branches {
		b := &st.Branches[i]
		scopes[i] = sc.Branch()
		sr.Branches[i] = apiv1.BranchRun{BranchID: b.ID, Status: apiv1.StepCancelled, Steps: []apiv1.StepRun{}}
		// Slots are taken in branch order: with MaxParallel 1 the branches run one after
		// another, in order.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			continue // cancelled before it started
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			bctx, end := ex.branchSpan(ctx, st, b, scopes[i].Mode())
			steps, _, failed := ex.steps(bctx, scopes[i], b.Steps)
			end(failedErr(failed))
			sr.Branches[i].Steps = steps
			sr.Branches[i].Status = apiv1.RunSucceeded
			if failed {
				sr.Branches[i].Status = apiv1.RunFailed
				if first.CompareAndSwap(-1, int32(i)) {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if f := first.Load(); f >= 0 {
		for i := range sr.Branches {
			if int32(i) != f && sr.Branches[i].Status == apiv1.RunFailed {
				sr.Branches[i].Status = apiv1.StepCancelled // it failed because it was cancelled
			}
		}
		for _, b := range scopes {
			b.Close()
		}
		return apiv1.Errorf(http.StatusUnprocessableEntity, apiv1.CodeUnavailable, "step %s: branch %s failed; the others were cancelled", st.ID, st.Branches[f].ID)
	}
	if sc.Mode() == workflow.ModeStrict {
		workflow.ApplyOutputs(sc, st.OutputsMap, st.Branches, scopes, false)
	}
	for _, b := range scopes {
		b.Close()
	}
	return nil
}

// kindOf names a JSON value's kind for a message.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// step resolves and invokes one step, failing over to the next candidate only when the
// connection failed before the request was sent.
func (o *Orchestrator) step(ctx context.Context, w *workflow.Workflow, st *workflow.Step, runID string, request, payload json.RawMessage) (json.RawMessage, string, string, error) {
	cands, source, err := o.candidates(ctx, st)
	if err != nil {
		return nil, "", source, err
	}
	req := &apiv1.InvokeRequest{WorkflowName: w.Name, RunID: runID, StepID: st.ID, StepVersion: st.StepVersion,
		Request: request, Payload: payload}
	var lastErr error
	for _, c := range cands {
		began := time.Now()
		out, err := o.tracedInvoke(ctx, st, c, req)
		o.recordOutcome(ctx, c, err, time.Since(began))
		if err == nil {
			return out, c.instance, source, nil
		}
		lastErr = err
		if !dialFailure(err) {
			return nil, c.instance, source, err
		}
		if !c.static {
			// gone while the registry was down? then no answer of a restarted registry
			// will remove it, and the view drops it now
			o.discoveryOf(c.region).Unreachable(c.instance)
		}
	}
	return nil, "", source, fmt.Errorf("every candidate for %s was unreachable: %w", st.Capability.ID, lastErr)
}

// Sources of a step's candidates (apiv1.StepRun.Source).
const (
	SourceRegistry = "registry"
	SourceSnapshot = "snapshot"
	SourceStatic   = "static"
)

func dialFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (o *Orchestrator) invoke(ctx context.Context, st *workflow.Step, c candidate, req *apiv1.InvokeRequest) (json.RawMessage, error) {
	pc, err := client.New(client.Config{Registries: []string{c.endpoint}, HTTPClient: o.cfg.Client, Timeout: st.Timeout})
	if err != nil {
		return nil, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "step %s: %s: %v", st.ID, c.instance, err)
	}
	ir, err := pc.Invoke(ctx, st.Capability.ID, req)
	switch {
	case err == nil:
		return ir.Output, nil
	case errors.Is(err, context.DeadlineExceeded):
		return nil, apiv1.Errorf(http.StatusGatewayTimeout, apiv1.CodeUnavailable, "step %s: no answer from %s within %s", st.ID, c.instance, st.Timeout)
	case errors.Is(err, client.ErrDecode):
		return nil, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "step %s: %s answered no invoke result: %v", st.ID, c.instance, err)
	default:
		return nil, err // an error answer, or a transport failure (a dial failure moves to the next candidate)
	}
}

// candidates resolves a step: through discovery (instances in rotation, or all of the step's
// pool when fewer than the panic threshold of it are in rotation, or all of a group the
// registry says is in panic), or the static capabilities whenever discovery has no view of
// the capability within the step's max_stale (never answered, or the last-known-good view
// too old); in order metadata.priority desc, capability_version desc, registration order.
// It says where they came from (SourceRegistry, SourceSnapshot, SourceStatic).
func (o *Orchestrator) candidates(ctx context.Context, st *workflow.Step) ([]candidate, string, error) {
	cons, err := semver.NewConstraint(st.Capability.Constraint)
	if err != nil {
		return nil, "", apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "step %s: %v", st.ID, err)
	}
	var out []candidate
	source := SourceRegistry
	// Every candidate, in rotation or not: panic is judged on this step's own pool (the
	// capability, provider and constraint it names), as Envoy judges it per cluster.
	read := o.cfg.Discovery.Capabilities
	if o.cfg.Regions != nil {
		read = o.cfg.Regions.Capabilities
	}
	res, err := read(ctx, discovery.Query{CapabilityID: st.Capability.ID, Provider: st.Capability.Provider,
		Version: st.Capability.Constraint, IncludeAll: true, MaxStale: st.MaxStale})
	var region string // a peer's answer
	if err == nil && o.cfg.Regions != nil && res.Region != o.cfg.Regions.Order()[0] {
		region = res.Region
	}
	var ue *discovery.UnavailableError
	unavailable := errors.As(err, &ue)
	static := o.staticFor(st, cons)
	switch {
	case err == nil:
		if res.Source == discovery.SourceSnapshot {
			source = SourceSnapshot
		}
		// Incarnations never admitted (unknown) are no members of the pool and no candidates
		// beside members that were admitted; a pool of nothing else is a new service's, all of
		// it a candidate (the panic rule).
		var pool apiv1.Pool
		for _, e := range res.Entries {
			if !e.Excluded {
				pool.Add(e.Eligibility, e.Panic)
			}
		}
		newPool, poolPanic := pool.New(), pool.Panic(o.cfg.PanicThreshold)
		for _, e := range res.Entries {
			inRot := e.Eligibility == "" || e.Panic || apiv1.InRotation(e.Eligibility)
			switch {
			case e.Excluded:
				continue // an operator forced it out: no candidate, even in panic
			case inRot:
			case e.Eligibility == apiv1.EligibilityEvacuated:
				continue // its zone is evacuated: no candidate, even in panic
			case e.Eligibility == apiv1.EligibilityUnknown && !newPool:
				continue // never admitted, beside members that were
			case !poolPanic:
				continue // out of rotation, in a pool with enough in rotation
			}
			v, _ := semver.NewVersion(e.CapabilityVersion)
			p, _ := apiv1.Priority(e.Metadata)
			out = append(out, candidate{instance: e.InstanceID, endpoint: e.Endpoint, region: region, rank: apiv1.Rank{Priority: p, Version: v, Generation: e.Generation}})
		}
	case unavailable && len(static) > 0:
		// no view within the step's bound: the static configuration (the plan's fallback),
		// whenever the registry cannot answer for the capability, not only before it first did
		out, source = static, SourceStatic
	case unavailable && ue.State == discovery.StateExpired:
		o.metrics.staleRefused.Inc()
		bound := "--max-stale"
		if ue.MaxStale > 0 {
			bound = "its max_stale " + ue.MaxStale.String()
		}
		e := apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeStaleViewExpired,
			"step %s: the last-known-good view of %s is %s old, past %s, and the registry does not answer (no static capability either)", st.ID, st.Capability.ID, ue.Age.Truncate(time.Second), bound)
		e.RetryAfter = 5
		return nil, source, e
	default:
		return nil, source, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "step %s: discovery unavailable: %v", st.ID, err)
	}
	if len(out) == 0 {
		return nil, source, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "step %s: no instance offers %s %s %s",
			st.ID, st.Capability.Provider, st.Capability.ID, st.Capability.Constraint)
	}
	slices.SortStableFunc(out, func(a, b candidate) int { return a.rank.Compare(b.rank) })
	return out, source, nil
}

// staticFor is the step's candidates among the static capabilities (--static-capabilities).
func (o *Orchestrator) staticFor(st *workflow.Step, cons *semver.Constraints) []candidate {
	var out []candidate
	for i, s := range o.cfg.Static {
		v, verr := semver.NewVersion(s.Version)
		if s.CapabilityID != st.Capability.ID || (st.Capability.Provider != "" && s.Provider != st.Capability.Provider) || verr != nil || !cons.Check(v) {
			continue
		}
		p, _ := apiv1.Priority(s.Metadata)
		out = append(out, candidate{instance: "static-" + strconv.Itoa(i), endpoint: s.Endpoint, rank: apiv1.Rank{Priority: p, Version: v, Generation: int64(i)}, static: true})
	}
	return out
}

// recordOutcome counts one call to c for the window's outcome report: a dial failure is a
// connect failure, an answer of 5xx, no answer in time or no invoke result an error, and
// anything else (a 4xx is the request's fault, not the instance's) an answer. A call ended
// by its run's cancellation or deadline says nothing of the instance and is not counted.
func (o *Orchestrator) recordOutcome(ctx context.Context, c candidate, err error, took time.Duration) {
	if c.static || c.rank.Generation < 1 || ctx.Err() != nil {
		return
	}
	var ae *apiv1.Error
	failed := err != nil && (!errors.As(err, &ae) || ae.Status >= 500)
	t := &o.outcomes
	if c.region != "" {
		t = o.peerOutcomes[c.region]
	}
	if t != nil {
		t.Record(outcome.Incarnation{ID: c.instance, Generation: c.rank.Generation}, dialFailure(err), failed, took)
	}
}

// discoveryOf is the client of region (home's: empty).
func (o *Orchestrator) discoveryOf(region string) *discovery.Client {
	if region != "" && o.cfg.Regions != nil {
		if c := o.cfg.Regions.Client(region); c != nil {
			return c
		}
	}
	return o.cfg.Discovery
}

// ReportOutcomes sends the window's per-instance outcomes of service_call steps to the
// registry and starts a new window (Run calls it every OutcomeWindow).
func (o *Orchestrator) ReportOutcomes(ctx context.Context) {
	err := o.reportTo(ctx, o.cfg.Discovery, o.outcomes.Take())
	for region, t := range o.peerOutcomes { // each region's instances to their own registry
		err = errors.Join(err, o.reportTo(ctx, o.discoveryOf(region), t.Take()))
	}
	switch {
	case err != nil && ctx.Err() == nil && !o.reportFailing:
		o.reportFailing = true
		o.cfg.Logger.Warn("outcome report failed; this window's evidence of the steps' instances is dropped (logged once until a report succeeds; the orchestrator's identity needs the gateway permission)",
			slog.Any("error", err))
	case err == nil && o.reportFailing:
		o.reportFailing = false
		o.cfg.Logger.Info("outcome reports succeed again")
	}
}

func (o *Orchestrator) reportTo(ctx context.Context, d *discovery.Client, out []apiv1.Outcome) error {
	var err error
	for len(out) > 0 && err == nil {
		n := min(len(out), apiv1.MaxOutcomes)
		err = d.ReportOutcomes(ctx, &apiv1.OutcomesRequest{GatewayID: o.cfg.ReporterID, Outcomes: out[:n]})
		out = out[n:]
	}
	return err
}

// reportOutcomes calls ReportOutcomes every OutcomeWindow until ctx ends.
func (o *Orchestrator) reportOutcomes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.cfg.After(o.cfg.OutcomeWindow):
			o.ReportOutcomes(ctx)
		}
	}
}

// ReadyPool is discovery.RegionsConfig's Ready for an orchestrator that reads include=all:
// a region's pool is ready when it has an instance in rotation and is not in panic by
// threshold (or by the registry's say).
func ReadyPool(threshold float64) func([]apiv1.CapabilityEntry) bool {
	return func(entries []apiv1.CapabilityEntry) bool {
		var pool apiv1.Pool
		in := false
		for _, e := range entries {
			if e.Excluded {
				continue
			}
			pool.Add(e.Eligibility, e.Panic)
			in = in || apiv1.InRotation(e.Eligibility)
		}
		return in && !pool.Panic(threshold)
	}
}
