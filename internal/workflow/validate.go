package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
)

// Codes of the resolution and provider layers (docs/reference/workflows.md).
const (
	CodeCapabilityUnavailable = "CAPABILITY_UNAVAILABLE"
	CodeDiscoveryUnavailable  = "DISCOVERY_UNAVAILABLE"
	CodeProviderUnreachable   = "PROVIDER_UNREACHABLE"
	CodeProviderTimeout       = "PROVIDER_TIMEOUT"
	CodeProviderRejected      = "PROVIDER_REJECTED"
)

// DefaultProviderTimeout bounds each provider's validation.
const DefaultProviderTimeout = 5 * time.Second

// DefaultMaxStepTimeout is the ceiling of a step's timeout (the orchestrator's
// --max-step-timeout).
const DefaultMaxStepTimeout = 5 * time.Minute

// Resolver answers capability queries (a *discovery.Client).
type Resolver interface {
	Capabilities(ctx context.Context, q discovery.Query) (*discovery.Result, error)
}

// Refresher is a Resolver that can ask the registry again whatever its cache says (a
// *discovery.Client): a step that resolves to nothing is asked once more before it is
// refused, so that an upload is judged against the registry as it is, not as it was up to a
// cache TTL ago.
type Refresher interface {
	Refresh(ctx context.Context, q discovery.Query) (*discovery.Result, error)
}

// RefreshTimeout bounds the second asking of a step that resolved to nothing.
const RefreshTimeout = 2 * time.Second

// Options configures Validate.
type Options struct {
	// Resolver, when set, runs the resolution and provider layers.
	Resolver Resolver
	// Client calls the providers' validate endpoints (default: a plain client).
	Client *http.Client
	// ProviderTimeout bounds each provider call (default 5 s); the calls run concurrently,
	// so a whole workflow waits at most one timeout.
	ProviderTimeout time.Duration
	// Strict is the default provider strictness; the workflow's validation.provider_strict
	// wins over it.
	Strict bool
	// ScopeMode is the scope mode of a workflow that names none (default legacy).
	ScopeMode Mode
	// MaxStepTimeout is the ceiling of a step's timeout (default 5 min): a step that asks
	// for more is a contract error, not an hour-long hang.
	MaxStepTimeout time.Duration
	// Now stamps validated_at and times provider calls (default time.Now).
	Now func() time.Time
	// ObserveProvider, when set, is told of every provider validation call: the capability,
	// the provider, the layer status it produced (passed, warning, failed, skipped) and how
	// long it took. The orchestrator turns it into a histogram.
	ObserveProvider func(capabilityID, provider, status string, d time.Duration)
}

// Validate runs every layer that opts allow on a workflow and returns the result object of
// docs/reference/api.md, diagnostics placed on their YAML lines.
func Validate(ctx context.Context, src []byte, opts Options) (*Workflow, *apiv1.ValidationResult) {
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.ProviderTimeout == 0 {
		opts.ProviderTimeout = DefaultProviderTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxStepTimeout == 0 {
		opts.MaxStepTimeout = DefaultMaxStepTimeout
	}
	w, contract := ParseWith(src, opts.ScopeMode)
	all := w.All()
	for _, st := range all {
		if st.Timeout > opts.MaxStepTimeout {
			pos := w.Locate(st.Path + ".timeout")
			contract = append(contract, apiv1.Diagnostic{Severity: apiv1.SeverityError, Code: CodeInvalidValue, Path: st.Path + ".timeout",
				Message: fmt.Sprintf("timeout %s is above the ceiling of %s (the orchestrator's --max-step-timeout)", st.Timeout, opts.MaxStepTimeout),
				Line:    pos.Line, Column: pos.Column})
		}
	}
	sortDiagnostics(contract)
	res := &apiv1.ValidationResult{Workflow: w.Name, ContractStatus: apiv1.StatusPassed, ProviderStatus: apiv1.StatusNotApplicable,
		ValidatedAt: opts.Now().UTC(), Diagnostics: []apiv1.Diagnostic{}, Steps: make([]apiv1.StepValidation, len(all))}
	for i, st := range all {
		res.Steps[i] = apiv1.StepValidation{StepID: st.ID, Path: st.Path, Contract: apiv1.LayerResult{Status: apiv1.StatusPassed, Diagnostics: []apiv1.Diagnostic{}},
			Provider: apiv1.LayerResult{Status: apiv1.StatusNotApplicable, Diagnostics: []apiv1.Diagnostic{}}}
	}
	// Contract diagnostics go to their step, the rest to the workflow.
	for _, d := range contract {
		if i, ok := stepOf(w, d.Path); ok {
			res.Steps[i].Contract.Diagnostics = append(res.Steps[i].Contract.Diagnostics, d)
			if d.Severity == apiv1.SeverityError {
				res.Steps[i].Contract.Status = apiv1.StatusFailed
			}
		} else {
			res.Diagnostics = append(res.Diagnostics, d)
		}
	}
	if HasErrors(contract) {
		res.ContractStatus = apiv1.StatusFailed
		return w, res
	}
	if opts.Resolver == nil {
		return w, res
	}
	strict := opts.Strict
	if w.ProviderStrict != nil {
		strict = *w.ProviderStrict
	}
	type job struct {
		step  *Step
		entry apiv1.CapabilityEntry
	}
	var jobs []job
	for i, st := range all {
		if st.Type != TypeServiceCall {
			continue
		}
		// Every registered provider counts for resolution, in rotation or not (the step's pool
		// is judged for panic when it runs); provider validation asks one in rotation first.
		q := discovery.Query{CapabilityID: st.Capability.ID, Provider: st.Capability.Provider, Version: st.Capability.Constraint, IncludeAll: true}
		r, err := opts.Resolver.Capabilities(ctx, q)
		if rf, ok := opts.Resolver.(Refresher); ok && err == nil && len(r.Entries) == 0 && r.Source != discovery.SourceFresh {
			rctx, cancel := context.WithTimeout(ctx, RefreshTimeout)
			if fresh, ferr := rf.Refresh(rctx, q); ferr == nil {
				r = fresh
			}
			cancel()
		}
		if err != nil {
			res.Diagnostics = append(res.Diagnostics, apiv1.Diagnostic{Severity: apiv1.SeverityWarning, Code: CodeDiscoveryUnavailable,
				Message: fmt.Sprintf("discovery unavailable, resolution and provider validation skipped: %v", err), Line: 1, Column: 1})
			return w, res
		}
		if len(r.Entries) == 0 {
			pos := w.Locate(st.Path + ".capability")
			d := apiv1.Diagnostic{Severity: apiv1.SeverityError, Code: CodeCapabilityUnavailable, Path: st.Path + ".capability",
				Message: unavailableMessage(ctx, opts.Resolver, st.Capability), Line: pos.Line, Column: pos.Column}
			if !r.Complete {
				// A registry still warming up after a restart may not know every provider yet.
				d.Severity = apiv1.SeverityWarning
				d.Message += " (the registry is still warming up after a restart; this may change)"
				res.Steps[i].Contract.Diagnostics = append(res.Steps[i].Contract.Diagnostics, d)
				continue
			}
			res.Steps[i].Contract.Diagnostics = append(res.Steps[i].Contract.Diagnostics, d)
			res.Steps[i].Contract.Status = apiv1.StatusFailed
			res.ContractStatus = apiv1.StatusFailed
			continue
		}
		pick := r.Entries[0]
		for _, e := range r.Entries {
			if e.Eligibility == "" || e.Panic || apiv1.InRotation(e.Eligibility) {
				pick = e
				break
			}
		}
		if supportsValidate(pick.Metadata) {
			jobs = append(jobs, job{step: st, entry: pick})
		}
	}
	if len(jobs) == 0 {
		return w, res
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			res.Steps[j.step.Flat].Provider = callProvider(ctx, opts, w, j.step, j.entry, strict)
		})
	}
	wg.Wait()
	res.ProviderStatus = worst(res.Steps)
	return w, res
}

// stepOf returns the flat index of the innermost step a diagnostic path is under.
func stepOf(w *Workflow, path string) (int, bool) {
	best, at := -1, -1
	for _, st := range w.All() {
		if strings.HasPrefix(path, st.Path) && (len(path) == len(st.Path) || path[len(st.Path)] == '.') && len(st.Path) > best {
			best, at = len(st.Path), st.Flat
		}
	}
	return at, at >= 0
}

// validatePath is where a provider validates a step of capabilityID: its
// metadata.validate_endpoint, a path under its endpoint (clean, absolute, no query), or the
// contract's default, /v1/capabilities/{id}/validate.
func validatePath(meta json.RawMessage, capabilityID string) string {
	var m struct {
		ValidateEndpoint string `json:"validate_endpoint"`
	}
	p := ""
	if json.Unmarshal(meta, &m) == nil {
		p = m.ValidateEndpoint
	}
	if p == "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "?#\\ ") || path.Clean(p) != p {
		return apiv1.ValidatePath(capabilityID)
	}
	return p
}

func supportsValidate(meta json.RawMessage) bool {
	var m struct {
		ValidateSupported bool `json:"validate_supported"`
	}
	return json.Unmarshal(meta, &m) == nil && m.ValidateSupported
}

// unavailableMessage says what a step requires and what the registry has instead.
func unavailableMessage(ctx context.Context, r Resolver, c CapabilityRef) string {
	want := strings.TrimSpace(c.Provider + " " + c.ID + " " + c.Constraint)
	all, err := r.Capabilities(ctx, discovery.Query{CapabilityID: c.ID, Provider: c.Provider, IncludeAll: true})
	if err != nil || len(all.Entries) == 0 {
		if c.Provider != "" {
			return fmt.Sprintf("workflow requires %s; registry has no %s provider of %s", want, c.Provider, c.ID)
		}
		return fmt.Sprintf("workflow requires %s; registry has no provider of %s", want, c.ID)
	}
	var versions []string
	for _, e := range all.Entries {
		v := e.CapabilityVersion
		if c.Provider == "" {
			v = e.Provider + " " + v
		}
		if !contains(versions, v) {
			versions = append(versions, v)
		}
	}
	only := ""
	if len(versions) == 1 {
		only = " only"
	}
	return fmt.Sprintf("workflow requires %s; registry has %s%s", want, strings.Join(versions, ", "), only)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// callProvider asks one provider to validate one step.
func callProvider(ctx context.Context, opts Options, w *Workflow, st *Step, e apiv1.CapabilityEntry, strict bool) (out apiv1.LayerResult) {
	if opts.ObserveProvider != nil {
		start := opts.Now()
		defer func() { opts.ObserveProvider(st.Capability.ID, e.Provider, out.Status, opts.Now().Sub(start)) }()
	}
	out = apiv1.LayerResult{Status: apiv1.StatusPassed, Diagnostics: []apiv1.Diagnostic{}}
	capPos := w.Locate(st.Path + ".capability")
	failure := func(code, format string, args ...any) apiv1.LayerResult {
		d := apiv1.Diagnostic{Severity: apiv1.SeverityError, Code: code, Message: fmt.Sprintf(format, args...),
			Path: st.Path + ".capability", Line: capPos.Line, Column: capPos.Column}
		out.Status = apiv1.StatusFailed
		if !strict {
			d.Severity = apiv1.SeverityWarning
			out.Status = apiv1.StatusSkipped
		}
		out.Diagnostics = append(out.Diagnostics, d)
		return out
	}
	pc, err := client.New(client.Config{Registries: []string{e.Endpoint}, HTTPClient: opts.Client, Timeout: opts.ProviderTimeout})
	if err != nil {
		return failure(CodeProviderUnreachable, "provider %s at %s: %v", e.InstanceID, e.Endpoint, err)
	}
	vr, err := pc.ValidateAt(ctx, validatePath(e.Metadata, st.Capability.ID), &apiv1.ValidateRequest{WorkflowName: w.Name, StepID: st.ID, StepVersion: st.StepVersion,
		CapabilityVersion: e.CapabilityVersion, Step: apiv1.StepSpec{Type: st.Type, Request: st.Request}})
	var ne net.Error
	var ae *apiv1.Error
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return failure(CodeProviderTimeout, "provider %s did not answer within %s", e.InstanceID, opts.ProviderTimeout)
	case errors.As(err, &ae) && strings.HasSuffix(ae.Message, client.RedirectRefused):
		return failure(CodeProviderUnreachable, "provider %s: %s", e.InstanceID, ae.Message)
	case errors.As(err, &ae):
		return failure(CodeProviderUnreachable, "provider %s answered %d and no validation result", e.InstanceID, ae.Status)
	case errors.Is(err, client.ErrDecode):
		return failure(CodeProviderUnreachable, "provider %s answered no validation result", e.InstanceID)
	default:
		return failure(CodeProviderUnreachable, "provider %s at %s is unreachable: %v", e.InstanceID, e.Endpoint, err)
	}
	for _, d := range vr.Diagnostics {
		path := st.Path
		if d.Path != "" {
			path += "." + d.Path
		}
		pos := w.Locate(path)
		d.Path, d.Line, d.Column = path, pos.Line, pos.Column
		if !strict && d.Severity == apiv1.SeverityError {
			d.Severity = apiv1.SeverityWarning
		}
		out.Diagnostics = append(out.Diagnostics, d)
	}
	if !vr.Valid {
		sev := apiv1.SeverityError
		if !strict {
			sev = apiv1.SeverityWarning
		}
		out.Diagnostics = append(out.Diagnostics, apiv1.Diagnostic{Severity: sev, Code: CodeProviderRejected,
			Message: fmt.Sprintf("provider %s (%s) rejected the step", e.InstanceID, e.Provider), Path: st.Path,
			Line: capPos.Line, Column: capPos.Column})
	}
	switch {
	case HasErrors(out.Diagnostics):
		out.Status = apiv1.StatusFailed
	case len(out.Diagnostics) > 0:
		out.Status = apiv1.StatusWarning
	}
	return out
}

// worst is the workflow's provider_status: failed > skipped > warning > passed.
func worst(steps []apiv1.StepValidation) string {
	rank := map[string]int{apiv1.StatusNotApplicable: 0, apiv1.StatusPassed: 1, apiv1.StatusWarning: 2, apiv1.StatusSkipped: 3, apiv1.StatusFailed: 4}
	out := apiv1.StatusNotApplicable
	for _, s := range steps {
		if rank[s.Provider.Status] > rank[out] {
			out = s.Provider.Status
		}
	}
	return out
}

// Diagnostics returns every diagnostic of a result, sorted by position.
func Diagnostics(r *apiv1.ValidationResult) []apiv1.Diagnostic {
	out := append([]apiv1.Diagnostic(nil), r.Diagnostics...)
	for _, s := range r.Steps {
		out = append(out, s.Contract.Diagnostics...)
		out = append(out, s.Provider.Diagnostics...)
	}
	sortDiagnostics(out)
	return out
}
