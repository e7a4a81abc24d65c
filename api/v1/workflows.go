package apiv1

import (
	"encoding/json"
	"time"
)

// The orchestrator's answers (GET /v1/workflows…, runs).

// WorkflowSummary is one row of the workflow list.
type WorkflowSummary struct {
	Name      string `json:"name"`
	Published bool   `json:"published"`
	// Revision is the latest upload's number; PublishedRevision the one that runs (0: none).
	// Uploading a new revision leaves the published one running until it is published.
	Revision          int       `json:"revision"`
	PublishedRevision int       `json:"published_revision"`
	ContractStatus    string    `json:"contract_status"`
	ProviderStatus    string    `json:"provider_status"`
	ValidatedAt       time.Time `json:"validated_at"`
}

// WorkflowList is the answer of GET /v1/workflows.
type WorkflowList struct {
	Workflows []WorkflowSummary `json:"workflows"`
}

// WorkflowDetail is the answer of GET /v1/workflows/{name}: one workflow's latest revision
// with its source and last validation, and which revision is published.
type WorkflowDetail struct {
	WorkflowSummary
	YAML       string            `json:"yaml"`
	Triggers   []string          `json:"triggers"`
	Schedule   string            `json:"schedule,omitempty"`
	Validation *ValidationResult `json:"validation"`
}

// Run and step statuses.
const (
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	// RunRunning: a run in progress (listed before the history, and cancellable).
	RunRunning = "running"
	// RunCancelled: a run ended by POST .../runs/{id}/cancel or by its workflow's deletion.
	RunCancelled = "cancelled"
	// RunSkipped and RunMissed are scheduled fires that did not run: a scheduled run was
	// still in progress (skipped), or the orchestrator was busy or stopped at the time
	// (missed). Their Note says which fires.
	RunSkipped  = "skipped"
	RunMissed   = "missed"
	StepSkipped = "skipped"
	// StepCancelled: a branch stopped because a sibling branch failed, or a step stopped
	// because its run was cancelled.
	StepCancelled = "cancelled"
)

// Run is one execution of a workflow: the answer of POST /v1/workflows/{name}/run.
type Run struct {
	RunID      string          `json:"run_id"`
	Workflow   string          `json:"workflow"`
	Trigger    string          `json:"trigger"`
	Status     string          `json:"status"`
	StartedAt  time.Time       `json:"started_at"`
	DurationMS float64         `json:"duration_ms"`
	Steps      []StepRun       `json:"steps"`
	Output     json.RawMessage `json:"output"`
	// Context is the run's final top-level context.
	Context map[string]any `json:"context"`
	// Note says what a run's status alone does not: who cancelled it, which scheduled fires
	// were missed or skipped.
	Note string `json:"note,omitempty"`
	// Truncated says the record left details out to stay under the orchestrator's
	// --max-run-record-bytes (loops say how many iterations, steps how large an output).
	Truncated bool `json:"truncated,omitempty"`
	// TraceID is the run's trace (W3C, 32 hex digits) when the orchestrator traces.
	TraceID string `json:"trace_id,omitempty"`
}

// StepRun is one step of a run.
type StepRun struct {
	StepID     string `json:"step_id"`
	Status     string `json:"status"`
	InstanceID string `json:"instance_id,omitempty"`
	// Source says where a service_call step's candidates came from: "registry" (a fresh
	// or cached answer), "snapshot" (the last-known-good view, while the registry is away)
	// or "static" (the orchestrator's --static-capabilities, when no view within the step's
	// max_stale exists).
	Source     string          `json:"source,omitempty"`
	DurationMS float64         `json:"duration_ms"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      *Error          `json:"error,omitempty"`
	// Iterations are a loop step's iterations, in order; Branches a parallel step's
	// branches, in branch order.
	Iterations []IterationRun `json:"iterations,omitempty"`
	Branches   []BranchRun    `json:"branches,omitempty"`
	// IterationsTotal is how many iterations a loop ran, IterationsOmitted how many of them
	// the record leaves out (past the run record bound it keeps the first ones, as far as the
	// bound allows, and the last ones; Index says which each is).
	IterationsTotal   int `json:"iterations_total,omitempty"`
	IterationsOmitted int `json:"iterations_omitted,omitempty"`
	// OutputOmittedBytes is the size of an output too large for the record, left out.
	OutputOmittedBytes int `json:"output_omitted_bytes,omitempty"`
}

// IterationRun is one iteration of a loop step.
type IterationRun struct {
	Index  int       `json:"index"`
	Status string    `json:"status"`
	Steps  []StepRun `json:"steps"`
}

// BranchRun is one branch of a parallel step.
type BranchRun struct {
	BranchID string    `json:"branch_id"`
	Status   string    `json:"status"`
	Steps    []StepRun `json:"steps"`
}

// RunHistory is the answer of GET /v1/workflows/{name}/runs: the recent runs, newest first,
// with their success rate and 95th-percentile duration.
type RunHistory struct {
	Workflow    string  `json:"workflow"`
	Runs        []*Run  `json:"runs"`
	SuccessRate float64 `json:"success_rate"`
	P95MS       float64 `json:"p95_ms"`
}

// PathTriggerHealth is the orchestrator's per-workflow success rate and p95 over 24 hours.
const PathTriggerHealth = "/v1/triggers/health"

// TriggerSlice is one 5-minute slice of a workflow's runs.
type TriggerSlice struct {
	Start       time.Time `json:"start"`
	Runs        int       `json:"runs"`
	Succeeded   int       `json:"succeeded"`
	SuccessRate float64   `json:"success_rate"`
	// P95MS is the 95th percentile of the slice's run durations (to within 12 %: the upper
	// bound of a logarithmic bucket, at most the slowest run).
	P95MS float64 `json:"p95_ms"`
}

// TriggerHealth is one workflow's last 24 hours: slices without runs are left out.
type TriggerHealth struct {
	Workflow    string         `json:"workflow"`
	Runs        int            `json:"runs"`
	Succeeded   int            `json:"succeeded"`
	SuccessRate float64        `json:"success_rate"`
	P95MS       float64        `json:"p95_ms"`
	Slices      []TriggerSlice `json:"slices"`
}

// TriggerHealthResponse is the answer of GET /v1/triggers/health.
type TriggerHealthResponse struct {
	SliceSeconds int64 `json:"slice_seconds"`
	// Warning and Critical are the success-rate thresholds the orchestrator was configured
	// with (--trigger-warning, --trigger-critical).
	Warning   float64         `json:"warning"`
	Critical  float64         `json:"critical"`
	Workflows []TriggerHealth `json:"workflows"`
}
