package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/endpoint"
	"github.com/meshflows/meshflows/internal/outcome"
	"github.com/meshflows/meshflows/internal/report"
	"github.com/meshflows/meshflows/internal/tracing"
	"github.com/meshflows/meshflows/internal/workflow"
)

// Config configures an Orchestrator.
type Config struct {
	// Discovery resolves capabilities (and is invalidated by /v1/discovery/invalidate).
	Discovery *discovery.Client
	// Regions, when set, resolves steps region by region (home is Discovery's region):
	// home's candidates while home is on and its pool ready, else the next region's; each
	// candidate's outcomes go to its own region's registry.
	Regions *discovery.Regions
	// Static is the fallback when the registry has never answered.
	Static []StaticCapability
	// Dir, when set, persists workflows (NAME.yaml) and their state (NAME.json); they are
	// loaded and re-validated by Load.
	Dir string
	// Client calls providers (default: a plain client).
	Client *http.Client
	// Tracing, when on, makes a span of every run, step, loop iteration and parallel branch
	// and a client span of every service_call, propagated to the provider (traceparent); a
	// run's record carries its trace_id. Nil or off traces nothing.
	Tracing *tracing.Tracing
	// Endpoints is the address policy of the default Client: it does not connect to a
	// link-local or metadata address unless the policy allows its range.
	Endpoints endpoint.Policy
	// ProviderTimeout bounds each provider validation (default 5 s).
	ProviderTimeout time.Duration
	// Strict is the default provider strictness for workflows that do not set one.
	Strict bool
	// MaxRuns is how many runs per workflow the history keeps (default 100).
	MaxRuns int
	// TriggerWarning and TriggerCritical are the success-rate thresholds of the trigger
	// health (defaults 0.95 and 0.90): consoles draw them, and a workflow below the critical
	// one is named in the answer.
	TriggerWarning, TriggerCritical float64
	// Reporter, when set, tells the registry about validations, failed runs and workflows
	// whose success rate over the last 10 minutes is below TriggerCritical (a trigger
	// incident); the owner runs it.
	Reporter *report.Reporter
	// PanicThreshold: a step whose candidates have fewer than this share in rotation uses
	// all of them (default 0.5, as the registry's --panic-threshold).
	PanicThreshold float64
	// ScopeMode is the scope mode of workflows that name none (default legacy).
	ScopeMode workflow.Mode
	// MaxParallel bounds the branches of one parallel step that run at once (default 8).
	MaxParallel int
	// MaxConcurrentRuns bounds the runs of one workflow in progress at once (default 16),
	// MaxConcurrentRunsTotal those of all workflows (default 256): past them a run is
	// refused with 429 and Retry-After.
	MaxConcurrentRuns, MaxConcurrentRunsTotal int
	// MaxStepTimeout is the ceiling of a step's timeout, checked at upload (default 5 min).
	MaxStepTimeout time.Duration
	// MaxRunDuration ends a run that takes longer (default 30 min).
	MaxRunDuration time.Duration
	// MaxRunRecordBytes bounds one run's record (default 1 MiB): past it a loop's record
	// keeps its first iterations as far as the bound allows and its last 10, and says how
	// many it left out; an output over a sixteenth of it is left out.
	MaxRunRecordBytes int
	// MaxRunHistoryBytes bounds a workflow's run history in encoded bytes (default 32 MiB),
	// beside MaxRuns: the oldest runs go first.
	MaxRunHistoryBytes int
	// Authorizer authorises the API: reads need workflows:read, uploads, re-validation,
	// publishing and invalidation workflows:write, runs workflows:run. Nil leaves the API
	// open (meshflows dev, --insecure).
	Authorizer Authorizer
	// Registerer receives the orchestrator's metrics (none when nil).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
	// After is the scheduler's timer (default time.After); tests pair it with Now on a
	// fake clock.
	After func(time.Duration) <-chan time.Time
	// OutcomeWindow is how often Run reports what the service_call steps saw of each
	// instance (POST /v1/outcomes, as the gateways do: the registry pools both); default
	// 10 s, negative: never. The orchestrator's identity needs the gateway permission.
	OutcomeWindow time.Duration
	// RevalidateEvery is how often Run validates every published workflow again against its
	// providers (default 1 h; negative: never): a provider that changed its contract under a
	// published workflow is found before a run fails on it. The results land where an
	// upload's do (the validation console, the journal); a verdict that changed from passed
	// to failed raises the workflow's validation incident, and passing again clears it.
	RevalidateEvery time.Duration
	// ReporterID names the orchestrator as a reporter of outcomes in open mode (with a
	// credential the registry takes the caller's identity); default "orchestrator".
	ReporterID string
}

// Defaults of Config.
const (
	DefaultMaxParallel            = 8
	DefaultMaxConcurrentRuns      = 16
	DefaultMaxConcurrentRunsTotal = 256
	DefaultMaxRunDuration         = 30 * time.Minute
)

// Authorizer says whether a request may do perm: the caller's identity, or a 401 or 403
// *apiv1.Error.
type Authorizer interface {
	Authorize(r *http.Request, perm string) (string, error)
}

// Orchestrator holds workflows and runs them.
type Orchestrator struct {
	cfg     Config
	metrics *metrics

	wake chan struct{} // a schedule changed: the scheduler looks again

	mu        sync.Mutex
	workflows map[string]*entry
	active    int // runs in progress, of every workflow

	outcomes outcome.Tallies // what the steps saw of each instance in this window
	// peerOutcomes are the outcomes of the other regions' instances, by region (Regions)
	peerOutcomes map[string]*outcome.Tallies
	// reportFailing is set while outcome reports fail: the first failure and the recovery
	// are logged, not every window.
	reportFailing bool
}

// entry is a stored workflow: its latest revision, and the published one that runs.
type entry struct {
	latest    *revision
	published *revision             // nil: not published; the latest itself once that is published
	active    map[string]*activeRun // the runs in progress, by run id
	scheduled bool                  // a run the schedule started is in progress
	runs      []*apiv1.Run          // newest last, at most MaxRuns
	sizes     []int                 // the encoded size of each run, beside runs
	histBytes int                   // the sum of sizes
	stats     triggerStats          // the last 24 hours of runs in slices
	critical  bool                  // the trigger condition was last reported active
	nextRun   time.Time
}

// revision is one upload of a workflow.
type revision struct {
	number int
	src    []byte
	wf     *workflow.Workflow
	result *apiv1.ValidationResult
}

func (e *entry) summary(name string) apiv1.WorkflowSummary {
	s := apiv1.WorkflowSummary{Name: name, Published: e.published != nil, Revision: e.latest.number,
		ContractStatus: e.latest.result.ContractStatus, ProviderStatus: e.latest.result.ProviderStatus, ValidatedAt: e.latest.result.ValidatedAt}
	if e.published != nil {
		s.PublishedRevision = e.published.number
	}
	return s
}

// ErrValidationFailed: a workflow is blocked by validation (422).
var ErrValidationFailed = errors.New("validation failed")

// New returns an Orchestrator.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Discovery == nil {
		return nil, errors.New("orchestrator: no discovery client")
	}
	for i, sc := range cfg.Static {
		msg := cfg.Endpoints.Check(sc.Endpoint)
		if msg != "" {
			return nil, fmt.Errorf("orchestrator: static capability %d (%s): endpoint %s", i, sc.CapabilityID, msg)
		}
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: providerTransport(cfg.Endpoints)}
	}
	if cfg.Tracing.On() {
		c := *cfg.Client
		c.Transport = tracing.Transport(c.Transport)
		cfg.Client = &c
	}
	if cfg.MaxRuns == 0 {
		cfg.MaxRuns = 100
	}
	if cfg.PanicThreshold == 0 {
		cfg.PanicThreshold = 0.5
	}
	if cfg.TriggerWarning == 0 {
		cfg.TriggerWarning = DefaultTriggerWarning
	}
	if cfg.TriggerCritical == 0 {
		cfg.TriggerCritical = DefaultTriggerCritical
	}
	if cfg.TriggerCritical < 0 || cfg.TriggerCritical > cfg.TriggerWarning || cfg.TriggerWarning > 1 {
		return nil, fmt.Errorf("orchestrator: trigger thresholds: want 0 <= critical (%g) <= warning (%g) <= 1", cfg.TriggerCritical, cfg.TriggerWarning)
	}
	if cfg.MaxParallel == 0 {
		cfg.MaxParallel = DefaultMaxParallel
	}
	if cfg.MaxParallel < 0 {
		return nil, fmt.Errorf("orchestrator: max parallel %d is negative", cfg.MaxParallel)
	}
	orDefault(&cfg.OutcomeWindow, 10*time.Second)
	orDefault(&cfg.ReporterID, "orchestrator")
	orDefault(&cfg.RevalidateEvery, time.Hour)
	orDefault(&cfg.MaxConcurrentRuns, DefaultMaxConcurrentRuns)
	orDefault(&cfg.MaxConcurrentRunsTotal, DefaultMaxConcurrentRunsTotal)
	orDefault(&cfg.MaxStepTimeout, workflow.DefaultMaxStepTimeout)
	orDefault(&cfg.MaxRunDuration, DefaultMaxRunDuration)
	orDefault(&cfg.MaxRunRecordBytes, DefaultMaxRunRecordBytes)
	orDefault(&cfg.MaxRunHistoryBytes, DefaultMaxRunHistoryBytes)
	if cfg.MaxConcurrentRuns < 0 || cfg.MaxConcurrentRunsTotal < 0 || cfg.MaxStepTimeout < 0 || cfg.MaxRunDuration < 0 || cfg.MaxRunRecordBytes < 0 || cfg.MaxRunHistoryBytes < 0 {
		return nil, errors.New("orchestrator: the run bounds (concurrent runs, step timeout, run duration, record and history bytes) must be positive")
	}
	mode, err := workflow.ParseMode(string(cfg.ScopeMode))
	if err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	cfg.ScopeMode = mode
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	o := &Orchestrator{cfg: cfg, metrics: m, workflows: map[string]*entry{}, wake: make(chan struct{}, 1)}
	if cfg.Regions != nil {
		o.peerOutcomes = map[string]*outcome.Tallies{}
		for _, r := range cfg.Regions.Order()[1:] {
			o.peerOutcomes[r] = &outcome.Tallies{}
		}
	}
	cfg.Reporter.SetWorkflows(o.names) // a raised trigger names a workflow this orchestrator holds
	return o, nil
}

// names lists the workflows the orchestrator holds, sorted.
func (o *Orchestrator) names() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.workflows))
	for name := range o.workflows {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func (o *Orchestrator) validate(ctx context.Context, src []byte) (*workflow.Workflow, *apiv1.ValidationResult) {
	start := o.cfg.Now()
	w, r := workflow.Validate(ctx, src, workflow.Options{Resolver: o.cfg.Discovery, Client: o.cfg.Client,
		ProviderTimeout: o.cfg.ProviderTimeout, Strict: o.cfg.Strict, ScopeMode: o.cfg.ScopeMode, MaxStepTimeout: o.cfg.MaxStepTimeout,
		Now: o.cfg.Now, ObserveProvider: o.metrics.providerValidated})
	o.metrics.validated(r, o.cfg.Now().Sub(start))
	o.reportValidation(r)
	return w, r
}

// reportValidation tells the registry's journal a validation's result.
func (o *Orchestrator) reportValidation(r *apiv1.ValidationResult) {
	if o.cfg.Reporter == nil || r == nil || r.Workflow == "" {
		return
	}
	sev := apiv1.SeverityInfo
	switch {
	case r.ContractStatus == apiv1.StatusFailed || r.ProviderStatus == apiv1.StatusFailed:
		sev = apiv1.SeverityError
	case r.ContractStatus == apiv1.StatusWarning || r.ProviderStatus == apiv1.StatusWarning:
		sev = apiv1.SeverityWarning
	}
	o.cfg.Reporter.Event(apiv1.ReportedEvent{Type: apiv1.EventWorkflowValidation, Severity: sev, Subject: r.Workflow,
		Message: fmt.Sprintf("workflow %s validated: contract %s, providers %s", r.Workflow, r.ContractStatus, r.ProviderStatus),
		Attrs:   map[string]any{"contract_status": r.ContractStatus, "provider_status": r.ProviderStatus}})
}

// triggerWindow is how long a workflow's success rate must be below TriggerCritical for a
// trigger incident; triggerMinRuns the fewest runs in it that can raise one.
const (
	triggerWindow  = 10 * time.Minute
	triggerMinRuns = 3
)

// reportRun tells the registry about a failed run, and raises or clears the workflow's
// trigger incident. Called under o.mu.
func (o *Orchestrator) reportRun(name string, e *entry, run *apiv1.Run) {
	if o.cfg.Reporter == nil {
		return
	}
	if run.Status != apiv1.RunSucceeded {
		msg := fmt.Sprintf("workflow %s run %s %s (trigger %s)", name, run.RunID, run.Status, run.Trigger)
		for _, st := range run.Steps {
			if st.Error != nil {
				msg += fmt.Sprintf(": step %s: %s: %s", st.StepID, st.Error.Code, st.Error.Message)
				break
			}
		}
		o.cfg.Reporter.Event(apiv1.ReportedEvent{Type: apiv1.EventWorkflowRunFailed, Severity: apiv1.SeverityError, Subject: name,
			Message: truncate(msg, 1000), Attrs: runAttrs(run)})
	}
	rate, runs := e.stats.recent(o.cfg.Now(), triggerWindow)
	critical := runs >= triggerMinRuns && rate < o.cfg.TriggerCritical
	if critical == e.critical {
		return
	}
	e.critical = critical
	o.cfg.Reporter.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: name, Active: critical, TraceID: failedTrace(run),
		Summary: fmt.Sprintf("workflow %s: %.0f%% of its %d runs in the last %s succeeded, below the critical %.0f%%", name, 100*rate, runs, triggerWindow, 100*o.cfg.TriggerCritical)})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// blocked says why a validation result blocks upload or publication, or "".
func (o *Orchestrator) blocked(w *workflow.Workflow, r *apiv1.ValidationResult) string {
	strict := o.cfg.Strict
	if w.ProviderStrict != nil {
		strict = *w.ProviderStrict
	}
	switch {
	case r.ContractStatus == apiv1.StatusFailed:
		if d, ok := resolutionOnly(r); ok {
			return fmt.Sprintf("resolution validation failed: %s %s: %s", d.Path, d.Code, d.Message)
		}
		return "contract validation failed"
	case strict && (r.ProviderStatus == apiv1.StatusFailed || r.ProviderStatus == apiv1.StatusSkipped):
		return "provider validation failed (strict)"
	}
	return ""
}

// resolutionOnly returns the first error of a failed validation when every error is of the
// resolution layer (a capability no registered instance offers), so that the refusal names
// that layer rather than the contract.
func resolutionOnly(r *apiv1.ValidationResult) (apiv1.Diagnostic, bool) {
	var first apiv1.Diagnostic
	found := false
	check := func(ds []apiv1.Diagnostic) bool {
		for _, d := range ds {
			if d.Severity != apiv1.SeverityError {
				continue
			}
			if d.Code != workflow.CodeCapabilityUnavailable {
				return false
			}
			if !found {
				first, found = d, true
			}
		}
		return true
	}
	if !check(r.Diagnostics) {
		return first, false
	}
	for _, st := range r.Steps {
		if !check(st.Contract.Diagnostics) {
			return first, false
		}
	}
	return first, found
}

// BlockedError is a 422 VALIDATION_FAILED with the validation result.
type BlockedError struct {
	Reason string
	Result *apiv1.ValidationResult
}

func (e *BlockedError) Error() string { return e.Reason }

// Unwrap makes errors.Is(err, ErrValidationFailed) hold.
func (e *BlockedError) Unwrap() error { return ErrValidationFailed }

// Upload validates and stores a workflow (replacing one of the same name, which keeps its
// run history but must be published again).
func (o *Orchestrator) Upload(ctx context.Context, src []byte) (*apiv1.ValidationResult, error) {
	w, res := o.validate(ctx, src)
	if why := o.blocked(w, res); why != "" {
		return res, &BlockedError{Reason: why, Result: res}
	}
	o.mu.Lock()
	e := o.workflows[w.Name]
	if e == nil {
		e = &entry{latest: &revision{}}
		o.workflows[w.Name] = e
	}
	e.latest = &revision{number: e.latest.number + 1, src: src, wf: w, result: res} // the published one keeps running
	o.mu.Unlock()
	return res, o.persist(w.Name)
}

func (o *Orchestrator) get(name string) (*entry, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.workflows[name]
	if e == nil {
		return nil, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no workflow %q", name)
	}
	return e, nil
}

// Revalidate validates a stored workflow again and stores the result.
func (o *Orchestrator) Revalidate(ctx context.Context, name string) (*apiv1.ValidationResult, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	rev := e.latest
	o.mu.Unlock()
	w, res := o.validate(ctx, rev.src)
	o.mu.Lock()
	rev.wf, rev.result = w, res // the same revision, published or not
	o.mu.Unlock()
	return res, o.persist(name)
}

// Publish makes a workflow runnable; contract errors always block it, provider failures in
// strict mode.
func (o *Orchestrator) Publish(name string) (*apiv1.ValidationResult, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	rev := e.latest
	o.mu.Unlock()
	if why := o.blocked(rev.wf, rev.result); why != "" {
		return rev.result, &BlockedError{Reason: why, Result: rev.result}
	}
	o.mu.Lock()
	if e.published != rev {
		e.published, e.nextRun = rev, time.Time{}
	}
	o.mu.Unlock()
	o.wakeScheduler()
	return rev.result, o.persist(name)
}

// activeRun is a run in progress: what GET answers for it, and how to end it.
type activeRun struct {
	run    *apiv1.Run
	cancel context.CancelCauseFunc
}

// cancelled is the cause of a run ended by Cancel or by the deletion of its workflow.
type cancelled struct{ why string }

func (c *cancelled) Error() string { return c.why }

// tooLong is the cause of a run ended by MaxRunDuration.
type tooLong struct{ d time.Duration }

func (t *tooLong) Error() string {
	return fmt.Sprintf("the run took longer than %s (--max-run-duration)", t.d)
}

// RunNow runs a published workflow once. Runs of one workflow run concurrently up to
// MaxConcurrentRuns (and MaxConcurrentRunsTotal in all); past that a run is refused with
// 429. A run ends by MaxRunDuration, by Cancel, or when ctx ends.
func (o *Orchestrator) RunNow(ctx context.Context, name, trigger string, input json.RawMessage) (*apiv1.Run, error) {
	run, _, err := o.runNow(ctx, name, trigger, input)
	return run, err
}

// runNow is RunNow; for the scheduler it also says the run was not started because a
// scheduled one is still in progress (skipped).
func (o *Orchestrator) runNow(ctx context.Context, name, trigger string, input json.RawMessage) (*apiv1.Run, bool, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, false, err
	}
	runID := newRunID()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, o.cfg.MaxRunDuration, &tooLong{o.cfg.MaxRunDuration})
	defer stop()
	o.mu.Lock()
	pub := e.published
	switch {
	case o.workflows[name] != e:
		o.mu.Unlock()
		return nil, false, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no workflow %q", name)
	case pub == nil:
		o.mu.Unlock()
		return nil, false, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "workflow %q is not published", name)
	case trigger == TriggerSchedule && e.scheduled:
		o.mu.Unlock()
		return nil, true, nil
	case len(e.active) >= o.cfg.MaxConcurrentRuns:
		o.mu.Unlock()
		o.metrics.refused()
		return nil, false, apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
			"workflow %q has %d runs in progress, its bound (--max-concurrent-runs); try again shortly", name, len(e.active)).WithRetryAfter(RetryAfter)
	case o.active >= o.cfg.MaxConcurrentRunsTotal:
		o.mu.Unlock()
		o.metrics.refused()
		return nil, false, apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
			"%d runs in progress in all, the orchestrator's bound (--max-concurrent-runs-total); try again shortly", o.active).WithRetryAfter(RetryAfter)
	}
	start := o.cfg.Now()
	ar := &activeRun{run: &apiv1.Run{RunID: runID, Workflow: name, Trigger: trigger, Status: apiv1.RunRunning, StartedAt: start.UTC(),
		Steps: []apiv1.StepRun{}, Output: json.RawMessage("null")}, cancel: cancel}
	if e.active == nil {
		e.active = map[string]*activeRun{}
	}
	e.active[runID] = ar
	o.active++
	if trigger == TriggerSchedule {
		e.scheduled = true
	}
	o.mu.Unlock()

	run := o.execute(ctx, pub.wf, runID, trigger, input)

	o.mu.Lock()
	delete(e.active, runID)
	o.active--
	if trigger == TriggerSchedule {
		e.scheduled = false
	}
	kept := o.workflows[name] == e // deleted meanwhile: the record goes with the workflow
	var hw historyWrite
	if kept {
		hw = o.record(e, run)
		e.stats.record(run)
		o.reportRun(name, e, run)
	}
	o.mu.Unlock()
	if kept {
		o.persistRuns(name, hw)
	}
	attrs := []slog.Attr{slog.String("workflow", name), slog.String("run_id", run.RunID), slog.String("status", run.Status),
		slog.String("trigger", trigger), slog.Float64("duration_ms", run.DurationMS)}
	if run.TraceID != "" {
		attrs = append(attrs, slog.String("trace_id", run.TraceID)) // its span has ended: named here
	}
	o.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "workflow run", attrs...)
	o.saveDiscovery()
	return run, false, nil
}

// record adds a run to a workflow's history, which keeps the newest MaxRuns within
// MaxRunHistoryBytes (the newest run always), and returns what to write to Dir: the run
// encoded, and the runs that left the history. Called under o.mu.
func (o *Orchestrator) record(e *entry, run *apiv1.Run) historyWrite {
	b, err := json.Marshal(run)
	if err != nil {
		b = nil // a run is plain JSON values; kept in memory all the same
	}
	e.runs, e.sizes = append(e.runs, run), append(e.sizes, len(b))
	e.histBytes += len(b)
	hw := historyWrite{runID: run.RunID, data: b}
	drop := 0
	for len(e.runs)-drop > 1 && (len(e.runs)-drop > o.cfg.MaxRuns || e.histBytes > o.cfg.MaxRunHistoryBytes) {
		e.histBytes -= e.sizes[drop]
		hw.dropped = append(hw.dropped, e.runs[drop].RunID)
		drop++
	}
	if drop > 0 {
		e.runs, e.sizes = slices.Clone(e.runs[drop:]), slices.Clone(e.sizes[drop:])
	}
	return hw
}

// historyWrite is a change of a run history to write to Dir.
type historyWrite struct {
	runID   string
	data    []byte
	dropped []string
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// RetryAfter is the Retry-After of a refused run.
const RetryAfter = time.Second

// TriggerSchedule is the trigger of the runs the schedule starts.
const TriggerSchedule = "schedule"

// Cancel ends a run in progress: its context is cancelled with why, the step running says
// it was cancelled and the steps after it are skipped. A run that already ended is 409.
func (o *Orchestrator) Cancel(name, runID, why string) error {
	e, err := o.get(name)
	if err != nil {
		return err
	}
	o.mu.Lock()
	ar := e.active[runID]
	var ended bool
	for _, r := range e.runs {
		ended = ended || r.RunID == runID
	}
	o.mu.Unlock()
	switch {
	case ar != nil:
		ar.cancel(&cancelled{why})
		o.cfg.Logger.Info("workflow run cancelled", slog.String("workflow", name), slog.String("run_id", runID), slog.String("why", why))
		return nil
	case ended:
		return apiv1.Errorf(http.StatusConflict, apiv1.CodeInvalidRequest, "run %q of workflow %q has already ended", runID, name)
	}
	return apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "workflow %q has no run %q in progress or in its history", name, runID)
}

func newRunID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "run-" + hex.EncodeToString(b)
}

// Invalidate drops the discovery cache: the next resolution asks the registry.
func (o *Orchestrator) Invalidate() { o.cfg.Discovery.Invalidate() }

// List returns every workflow, by name.
func (o *Orchestrator) List() []apiv1.WorkflowSummary {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]apiv1.WorkflowSummary, 0, len(o.workflows))
	for name, e := range o.workflows {
		out = append(out, e.summary(name))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns one workflow.
func (o *Orchestrator) Get(name string) (*apiv1.WorkflowDetail, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return &apiv1.WorkflowDetail{WorkflowSummary: e.summary(name), YAML: string(e.latest.src),
		Triggers: e.latest.wf.Triggers, Schedule: e.latest.wf.Schedule, Validation: e.latest.result}, nil
}

// Validation returns a workflow's last validation result.
func (o *Orchestrator) Validation(name string) (*apiv1.ValidationResult, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return e.latest.result, nil
}

// Runs returns a workflow's recent runs, newest first.
func (o *Orchestrator) Runs(name string) (*apiv1.RunHistory, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	runs := slices.Clone(e.runs)
	inProgress := o.inProgress(e)
	o.mu.Unlock()
	slices.Reverse(runs)
	h := &apiv1.RunHistory{Workflow: name, Runs: append(inProgress, runs...)}
	var ok int
	ds := make([]float64, 0, len(runs))
	for _, r := range runs {
		if r.Status == apiv1.RunSkipped || r.Status == apiv1.RunMissed {
			continue // fires that did not run
		}
		if r.Status == apiv1.RunSucceeded {
			ok++
		}
		ds = append(ds, r.DurationMS)
	}
	if len(ds) > 0 {
		slices.Sort(ds)
		h.SuccessRate = float64(ok) / float64(len(ds))
		h.P95MS = ds[min(len(ds)-1, int(float64(len(ds))*0.95+0.999999)-1)]
	}
	return h, nil
}

// inProgress returns copies of a workflow's runs in progress, the newest first, each with its
// duration so far. Called under o.mu.
func (o *Orchestrator) inProgress(e *entry) []*apiv1.Run {
	out := make([]*apiv1.Run, 0, len(e.active))
	now := o.cfg.Now()
	for _, ar := range e.active {
		r := *ar.run
		r.DurationMS = ms(now.Sub(r.StartedAt))
		out = append(out, &r)
	}
	slices.SortFunc(out, func(a, b *apiv1.Run) int { return b.StartedAt.Compare(a.StartedAt) })
	return out
}

// Delete removes a workflow, its revisions and its run history (and its files in Dir). Its
// runs in progress are cancelled; their records are dropped.
func (o *Orchestrator) Delete(name string) error {
	o.mu.Lock()
	e, ok := o.workflows[name]
	delete(o.workflows, name)
	var running []*activeRun
	if ok {
		for _, ar := range e.active {
			running = append(running, ar)
		}
		if e.critical { // its trigger incident ends with it
			e.critical = false
			o.cfg.Reporter.Condition(apiv1.Condition{Kind: apiv1.IncidentTrigger, Subject: name, Active: false})
		}
	}
	o.mu.Unlock()
	if !ok {
		return apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no workflow %q", name)
	}
	for _, ar := range running {
		ar.cancel(&cancelled{fmt.Sprintf("workflow %s was deleted", name)})
	}
	o.wakeScheduler()
	if o.cfg.Dir == "" {
		return nil
	}
	var errs []error
	for _, f := range []string{name + ".yaml", name + ".json", name + publishedSuffix, name + runsSuffix} {
		if err := os.Remove(filepath.Join(o.cfg.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(o.cfg.Dir, name+runsDirSuffix)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// GetRun returns one run of a workflow from its history.
func (o *Orchestrator) GetRun(name, runID string) (*apiv1.Run, error) {
	e, err := o.get(name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range e.runs {
		if r.RunID == runID {
			return r, nil
		}
	}
	for _, r := range o.inProgress(e) {
		if r.RunID == runID {
			return r, nil
		}
	}
	return nil, apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "workflow %q has no run %q in its history (the last %d runs are kept)", name, runID, o.cfg.MaxRuns)
}

// providerTransport is http.DefaultTransport's settings, with a dialer that refuses what
// policy refuses, whatever name led to the address.
func providerTransport(policy endpoint.Policy) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // providers are called directly, never through $HTTP_PROXY
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: policy.Control}).DialContext
	return t
}
