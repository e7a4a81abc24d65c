package routing

import (
	"encoding/json"
	"fmt"
)

// Case is a conformance case file (docs/reference/routing.md, "Case file").
type Case struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Static      []StaticRoute   `json:"static"`
	Policy      Policy          `json:"policy"`
	Manifests   []ManifestInput `json:"manifests"`
	Requests    []CaseRequest   `json:"requests"`
	Expect      *Canonical      `json:"expect,omitempty"`
}

// CaseRequest is a request of a case and, in a case file, what it must match.
type CaseRequest struct {
	Method string        `json:"method"`
	Path   string        `json:"path"`
	Expect *MatchOutcome `json:"expect,omitempty"`
}

// MatchOutcome is a request's result in the canonical form: {"pattern", "service"},
// {"pattern", "static": true}, {"status": 405, "allow": [...]} or {"status": 404}.
type MatchOutcome struct {
	Pattern string   `json:"pattern,omitempty"`
	Service string   `json:"service,omitempty"`
	Static  bool     `json:"static,omitempty"`
	Status  int      `json:"status,omitempty"`
	Allow   []string `json:"allow,omitempty"`
}

// RequestResult is one request of a derive output.
type RequestResult struct {
	Method string       `json:"method"`
	Path   string       `json:"path"`
	Result MatchOutcome `json:"result"`
}

// Output is what 'meshflows routes derive' prints for a case.
type Output struct {
	Canonical
	Requests []RequestResult `json:"requests"`
}

// ParseCase reads a case file.
func ParseCase(data []byte) (*Case, error) {
	var c Case
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("case: %w", err)
	}
	if err := ValidateStatic(c.Static); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	return &c, nil
}

// Outcome is the canonical form of a match.
func (m Match) Outcome() MatchOutcome {
	switch {
	case m.Entry == nil:
		return MatchOutcome{Status: m.Status, Allow: m.Allow}
	case m.Entry.Source == "static":
		return MatchOutcome{Pattern: m.Entry.Pattern, Static: true}
	default:
		return MatchOutcome{Pattern: m.Entry.Pattern, Service: m.Entry.Service}
	}
}

// Run derives the case's table and matches its requests.
func (c *Case) Run() Output {
	t := Derive(Input{Static: c.Static, Manifests: c.Manifests, Policy: c.Policy})
	out := Output{Canonical: t.Canonical(), Requests: []RequestResult{}}
	for _, r := range c.Requests {
		out.Requests = append(out.Requests, RequestResult{Method: r.Method, Path: r.Path, Result: t.Match(r.Method, r.Path).Outcome()})
	}
	return out
}
