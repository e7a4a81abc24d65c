package routing

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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

// RunIncremental derives the case's table through a Deriver — started from the static routes
// and policy alone, its manifests added one at a time in an order the seed shuffles, after
// churn random add-and-withdraw pairs of them — and matches its requests: the same Output as
// Run, when the incremental derivation is right.
func (c *Case) RunIncremental(seed uint64, churn int) (Output, error) {
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	d := NewDeriver(Input{Static: c.Static, Policy: c.Policy})
	order := rnd.Perm(len(c.Manifests))
	ids := map[string]int{}
	for _, mi := range c.Manifests {
		ids[ManifestID(mi)]++
	}
	for id, n := range ids {
		if n > 1 {
			return Output{}, fmt.Errorf("case %s: %d manifests of instance %q: an incremental derivation names a manifest by its instance", c.Name, n, id)
		}
	}
	for range churn {
		if len(c.Manifests) == 0 {
			break
		}
		mi := c.Manifests[rnd.IntN(len(c.Manifests))]
		d.Apply(Change{PutManifest: &mi})
		d.Apply(Change{DeleteManifest: ManifestID(mi)})
	}
	for _, i := range order {
		d.Apply(Change{PutManifest: &c.Manifests[i]})
	}
	t := d.Table()
	out := Output{Canonical: t.Canonical(), Requests: []RequestResult{}}
	for _, r := range c.Requests {
		out.Requests = append(out.Requests, RequestResult{Method: r.Method, Path: r.Path, Result: t.Match(r.Method, r.Path).Outcome()})
	}
	return out, nil
}
