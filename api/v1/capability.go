package apiv1

import (
	"encoding/json"
	"time"
)

// Diagnostic severities.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
)

// Diagnostic is one finding of a validation, by a provider or by the orchestrator.
type Diagnostic struct {
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Message  string `json:"message"`
	// Path names the node the finding is about, e.g. "request.headers.content-type".
	Path string `json:"path,omitempty"`
	// Line and Column (1-based) place the node in the uploaded workflow text, when known.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
}

// StepSpec is the part of a workflow step a provider validates.
type StepSpec struct {
	Type    string          `json:"type"`
	Request json.RawMessage `json:"request,omitempty"`
}

// ValidateRequest is the body of POST /v1/capabilities/{capability_id}/validate.
type ValidateRequest struct {
	WorkflowName      string   `json:"workflow_name"`
	StepID            string   `json:"step_id"`
	StepVersion       string   `json:"step_version,omitempty"`
	CapabilityVersion string   `json:"capability_version,omitempty"`
	Step              StepSpec `json:"step"`
}

// ValidateResponse is a provider's verdict on a step.
type ValidateResponse struct {
	Valid       bool         `json:"valid"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// InvokeRequest is the body of POST /v1/capabilities/{capability_id}/invoke.
type InvokeRequest struct {
	WorkflowName string          `json:"workflow_name,omitempty"`
	RunID        string          `json:"run_id,omitempty"`
	StepID       string          `json:"step_id,omitempty"`
	StepVersion  string          `json:"step_version,omitempty"`
	Request      json.RawMessage `json:"request,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
}

// InvokeResponse is the 200 answer of an invocation.
type InvokeResponse struct {
	Output json.RawMessage `json:"output"`
}

// Validation statuses (docs/reference/api.md, "Validation result").
const (
	StatusPassed        = "passed"
	StatusWarning       = "warning"
	StatusFailed        = "failed"
	StatusSkipped       = "skipped"
	StatusNotApplicable = "not_applicable"
)

// LayerResult is one validation layer's verdict on a step.
type LayerResult struct {
	Status      string       `json:"status"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// StepValidation is a step's validation result.
type StepValidation struct {
	StepID string `json:"step_id"`
	// Path places the step in the workflow: "steps[2]" at the top, "steps[2].branches[1].steps[0]"
	// nested (every step is listed, nested ones after their parent).
	Path     string      `json:"path,omitempty"`
	Contract LayerResult `json:"contract"`
	Provider LayerResult `json:"provider"`
}

// ValidationResult is the result of validating a workflow (docs/reference/api.md).
type ValidationResult struct {
	Workflow       string    `json:"workflow"`
	File           string    `json:"file,omitempty"`
	ContractStatus string    `json:"contract_status"`
	ProviderStatus string    `json:"provider_status"`
	ValidatedAt    time.Time `json:"validated_at"`
	// Diagnostics about the workflow as a whole (not about one step).
	Diagnostics []Diagnostic     `json:"diagnostics"`
	Steps       []StepValidation `json:"steps"`
}
