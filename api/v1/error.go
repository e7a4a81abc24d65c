package apiv1

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error codes of the error body (docs/reference/api.md, "Errors").
const (
	CodeInvalidJSON          = "INVALID_JSON"
	CodeInvalidRequest       = "INVALID_REQUEST"
	CodeUnauthenticated      = "UNAUTHENTICATED"
	CodeForbidden            = "FORBIDDEN"
	CodeInstanceNotFound     = "INSTANCE_NOT_FOUND"
	CodeNotFound             = "NOT_FOUND"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodeGenerationMismatch   = "GENERATION_MISMATCH"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeValidationFailed     = "VALIDATION_FAILED"
	CodeRateLimited          = "RATE_LIMITED"
	CodeUnavailable          = "UNAVAILABLE"
	CodeStoreUnavailable     = "STORE_UNAVAILABLE"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	CodeUnknownParameter     = "UNKNOWN_PARAMETER"
	CodeRequestTimeout       = "REQUEST_TIMEOUT"
	CodePageExpired          = "PAGE_EXPIRED"
	CodeStaleViewExpired     = "STALE_VIEW_EXPIRED"
	CodeNotConfigured        = "NOT_CONFIGURED"
	CodeInternal             = "INTERNAL"
	// CodeCancelled: a workflow step stopped because its run was cancelled.
	CodeCancelled = "CANCELLED"
	// CodeDeadlineExceeded: a workflow step stopped because its run passed the
	// orchestrator's --max-run-duration.
	CodeDeadlineExceeded = "DEADLINE_EXCEEDED"
)

// Detail is one per-field problem of a rejected request.
type Detail struct {
	// Path names the field, for example "capabilities[0].capability_version".
	Path string `json:"path"`
	// Message says what is wrong with it, in lower case.
	Message string `json:"message"`
}

// Error is the body of every non-2xx response, and the error type the SDKs return for one.
// Status is the HTTP status; it is not part of the JSON body.
type Error struct {
	Status  int      `json:"-"`
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Details []Detail `json:"details,omitempty"`
	// RetryAfter, when positive, is the seconds a 429 or 503 asks the caller to wait: the
	// Retry-After header, not part of the JSON body (the client SDK returns the header's
	// wait as a client.RetryAfterError).
	RetryAfter int `json:"-"`
}

// WithRetryAfter returns e asking the caller to wait d (rounded up to whole seconds, at
// least one) before trying again.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	e.RetryAfter = max(1, int((d+time.Second-1)/time.Second))
	return e
}

// Error implements error: the code, the message and every detail on one line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(strings.ToLower(e.Code))
	b.WriteString(": ")
	b.WriteString(e.Message)
	for i, d := range e.Details {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(d.Path)
		b.WriteString(": ")
		b.WriteString(d.Message)
	}
	return b.String()
}

// ErrorBody is the JSON envelope of an Error: {"error": {...}}.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Errorf returns an Error with the given status and code and a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidRequest returns the 400 INVALID_REQUEST error that carries every detail at once.
func InvalidRequest(details []Detail) *Error {
	msg := "the request has 1 problem"
	if len(details) != 1 {
		msg = fmt.Sprintf("the request has %d problems", len(details))
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: msg, Details: details}
}

// ErrorFromResponse turns a non-2xx answer into an *Error: the body's error when it has
// docs/reference/api.md's shape, otherwise one built from the status and the start of the body.
func ErrorFromResponse(status int, body []byte) *Error {
	var eb ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		eb.Error.Status = status
		return eb.Error
	}
	const maxBody = 200
	text := strings.TrimSpace(string(body))
	if len(text) > maxBody {
		text = text[:maxBody] + "…"
	}
	return &Error{Status: status, Code: codeForStatus(status), Message: fmt.Sprintf("status %d: %s", status, text)}
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidRequest
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusGone:
		return CodeGenerationMismatch
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusUnprocessableEntity:
		return CodeValidationFailed
	case http.StatusTooManyRequests:
		return CodeRateLimited
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	default:
		return CodeInternal
	}
}
