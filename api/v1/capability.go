package apiv1

import "encoding/json"

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
