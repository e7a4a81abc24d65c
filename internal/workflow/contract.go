package workflow

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// Diagnostic codes of the contract layer (docs/reference/workflows.md).
const (
	CodeYAMLSyntax               = "YAML_SYNTAX"
	CodeYAMLLimit                = "YAML_LIMIT"
	CodeMissingField             = "MISSING_FIELD"
	CodeInvalidValue             = "INVALID_VALUE"
	CodeUnknownField             = "UNKNOWN_FIELD"
	CodeDuplicateStepID          = "DUPLICATE_STEP_ID"
	CodeUnsupportedStepVersion   = "UNSUPPORTED_STEP_VERSION"
	CodeFieldRequiresStepVersion = "FIELD_REQUIRES_STEP_VERSION"
	CodeStepVersionNotString     = "STEP_VERSION_NOT_STRING"
	CodeInvalidCapabilityID      = "INVALID_CAPABILITY_ID"
	CodeInvalidVersionConstraint = "INVALID_VERSION_CONSTRAINT"
	CodeUnknownStepReference     = "UNKNOWN_STEP_REFERENCE"
	// Context, set, loop, parallel and scope isolation.
	CodeNestingTooDeep        = "NESTING_TOO_DEEP"
	CodeInvalidReference      = "INVALID_REFERENCE"
	CodeLoopReferenceOutside  = "LOOP_REFERENCE_OUTSIDE_LOOP"
	CodeUnknownBranch         = "UNKNOWN_BRANCH"
	CodeInvalidAggregate      = "INVALID_AGGREGATE"
	CodeExportKeyNeverSet     = "EXPORT_KEY_NEVER_SET"
	CodeOutputKeyNeverSet     = "OUTPUT_KEY_NEVER_SET"
	CodeScopeLeak             = "SCOPE_LEAK"
	CodeParallelWriteConflict = "PARALLEL_WRITE_CONFLICT"
	CodeScopeFieldIgnored     = "SCOPE_FIELD_IGNORED"
	CodeInvalidScopeMode      = "INVALID_SCOPE_MODE"
)

// Step types.
const (
	TypeServiceCall = "service_call"
	TypeSet         = "set"
	TypeLoop        = "loop"
	TypeParallel    = "parallel"
)

// Bounds of loops, parallel steps and nesting.
const (
	MaxNesting           = 8
	DefaultMaxIterations = 1000
	MaxIterationsLimit   = 100000
	MinBranches          = 2
	MaxBranches          = 32
)

// Aggregates of an outputs_map entry.
const (
	AggregateCollect = "collect"
	AggregateFirst   = "first"
	AggregateLast    = "last"
	AggregateMerge   = "merge"
)

// MaxSteps bounds a workflow.
const MaxSteps = 500

// DefaultStepTimeout is a step's timeout when it names none.
const DefaultStepTimeout = 30 * time.Second

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	stepIDRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
)

// Workflow is a parsed workflow. Only a workflow without contract errors is complete.
type Workflow struct {
	Name        string
	Description string
	// Triggers are http and/or schedule; Schedule is the schedule expression and Sched the
	// parsed one (nil when it does not parse).
	Triggers []string
	Schedule string
	Sched    *Schedule
	// ProviderStrict is the workflow's validation.provider_strict, when it sets one.
	ProviderStrict *bool
	// Scope is the workflow's own scope mode ("" when it names none: the orchestrator's
	// default applies).
	Scope Mode
	Steps []Step
	// Output is the workflow's declared output: a value whose references are resolved
	// against the run's final context (HasOutput says it was declared). Without one a run's
	// output is its last step's.
	Output    any
	HasOutput bool

	tree *node
	all  []*Step // every step, nested ones included, in document order
}

// All returns every step of the workflow, nested ones included, in document order; a
// step's Flat is its index here.
func (w *Workflow) All() []*Step { return w.all }

// Step is one step of a workflow.
type Step struct {
	// Index is the step's place in its list; Flat its place in Workflow.All; Path its
	// diagnostic path ("steps[2].branches[1].steps[0]").
	Index int
	Flat  int
	Path  string
	ID    string
	Type  string
	// service_call.
	StepVersion string
	Capability  CapabilityRef
	// Request is the step's request mapping as JSON (payload_from and headers included),
	// its references unresolved.
	Request     json.RawMessage
	PayloadFrom string
	Timeout     time.Duration
	// MaxStale bounds how old a last-known-good discovery view may resolve the step while
	// the registry is unreachable (service_call; 0: the orchestrator's --max-stale, by
	// default no bound). Past it the step uses the static capabilities, or fails with 503
	// STALE_VIEW_EXPIRED.
	MaxStale time.Duration
	// Output, when set, is the context key the step's output is written to.
	Output string
	// set: the keys and values written, in order.
	Set []SetEntry
	// loop: the list to iterate (a reference, usually), its bound, what a strict iteration
	// exports, and the body.
	ForEach       any
	MaxIterations int
	ExportKeys    []string
	Steps         []Step
	// parallel: the branches and what a strict parent receives.
	Branches   []Branch
	OutputsMap []OutputEntry

	node *node
	refs []refUse // the references in its own fields (not its body's)
}

// SetEntry is one key of a set step.
type SetEntry struct {
	Key   string
	Value any
}

// Branch is one branch of a parallel step.
type Branch struct {
	ID    string
	Path  string
	Steps []Step
}

// OutputEntry is one entry of a parallel step's outputs_map: the parent's Key receives the
// branch's From key (Branch set) or the Aggregate of every branch's.
type OutputEntry struct {
	Key       string
	Branch    string
	From      string
	Aggregate string
	path      string
	pos       Pos
}

// refUse is one reference in a step's fields, with where it was written.
type refUse struct {
	ref  Ref
	path string
	pos  Pos
}

// CapabilityRef is what a service_call step needs.
type CapabilityRef struct {
	ID         string
	Provider   string
	Constraint string
}

// Parse reads a workflow and checks the contract layer, with legacy as the scope mode of a
// workflow that names none. It always returns a Workflow (as far as it could be read) and
// every contract diagnostic, sorted by position.
func Parse(src []byte) (*Workflow, []apiv1.Diagnostic) { return ParseWith(src, ModeLegacy) }

// ParseWith is Parse with defaultMode as the scope mode of a workflow that names none (the
// orchestrator's --scope-mode).
func ParseWith(src []byte, defaultMode Mode) (*Workflow, []apiv1.Diagnostic) {
	c := &checker{}
	w := &Workflow{}
	root, at, err := parseTree(src)
	var le *errYAMLLimit
	switch {
	case errors.As(err, &le):
		c.add(apiv1.SeverityError, CodeYAMLLimit, "", at, "refused: %s (limits: depth %d, indentation %d, aliases %d expanding to %d nodes)",
			le.msg, MaxYAMLDepth, MaxYAMLIndent, MaxYAMLAliases, MaxYAMLExpansion)
		return w, c.ds
	case err != nil:
		c.add(apiv1.SeverityError, CodeYAMLSyntax, "", at, "not valid YAML: %s", firstLine(err.Error()))
		return w, c.ds
	}
	if root.kind != kindMap {
		c.add(apiv1.SeverityError, CodeYAMLSyntax, "", root.pos, "the document must be a mapping, got %s", root.describe())
		return w, c.ds
	}
	w.tree = root
	c.workflow(w, root)
	c.analyze(w, w.Mode(defaultMode))
	sortDiagnostics(c.ds)
	return w, c.ds
}

// Mode is the workflow's scope mode: its own, else defaultMode (else legacy).
func (w *Workflow) Mode(defaultMode Mode) Mode {
	switch {
	case w.Scope != "":
		return w.Scope
	case defaultMode != "":
		return defaultMode
	}
	return ModeLegacy
}

func sortDiagnostics(ds []apiv1.Diagnostic) {
	slices.SortStableFunc(ds, func(a, b apiv1.Diagnostic) int {
		if x := cmp.Compare(a.Line, b.Line); x != 0 {
			return x
		}
		return cmp.Compare(a.Column, b.Column)
	})
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// checker collects diagnostics.
type checker struct {
	ds []apiv1.Diagnostic
}

func (c *checker) add(sev, code, path string, at Pos, format string, args ...any) {
	c.ds = append(c.ds, apiv1.Diagnostic{Severity: sev, Code: code, Message: fmt.Sprintf(format, args...), Path: path, Line: at.Line, Column: at.Column})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// fields checks a mapping's keys: unknown ones are warnings.
func (c *checker) unknown(n *node, path string, known ...string) {
	for _, f := range n.fields {
		if !slices.Contains(known, f.key) {
			c.add(apiv1.SeverityWarning, CodeUnknownField, join(path, f.key), f.keyPos, "unknown field %q is ignored", f.key)
		}
	}
}

// str reads a required or optional string field; ok is false when it is absent or invalid.
func (c *checker) str(parent *node, path, key string, required bool) (string, *node, bool) {
	v, _, present := parent.get(key)
	p := join(path, key)
	switch {
	case !present || v.kind == kindNull:
		if required {
			c.add(apiv1.SeverityError, CodeMissingField, p, parent.pos, "%s is required", p)
		}
		return "", v, false
	case v.kind != kindScalar:
		c.add(apiv1.SeverityError, CodeInvalidValue, p, v.pos, "%s must be a string, got %s", p, v.describe())
		return "", v, false
	}
	return v.text, v, true
}

func (c *checker) workflow(w *Workflow, root *node) {
	c.unknown(root, "", "name", "description", "invocation", "validation", "scope", "steps", "output")
	if sc, sn, ok := c.str(root, "", "scope", false); ok {
		if m, err := ParseMode(sc); err != nil || sc == "" {
			c.add(apiv1.SeverityError, CodeInvalidScopeMode, "scope", sn.pos, "scope %q: want legacy or strict", sc)
		} else {
			w.Scope = m
		}
	}
	if name, n, ok := c.str(root, "", "name", true); ok {
		if !nameRe.MatchString(name) {
			c.add(apiv1.SeverityError, CodeInvalidValue, "name", n.pos, "name %q must be a DNS label (lower-case letters, digits and '-', 1-63 characters)", name)
		}
		w.Name = name
	}
	w.Description, _, _ = c.str(root, "", "description", false)
	c.invocation(w, root)
	if v, _, ok := root.get("validation"); ok && v.kind != kindNull {
		if v.kind != kindMap {
			c.add(apiv1.SeverityError, CodeInvalidValue, "validation", v.pos, "validation must be a mapping, got %s", v.describe())
		} else {
			c.unknown(v, "validation", "provider_strict")
			if ps, _, ok := v.get("provider_strict"); ok {
				if ps.kind != kindScalar || ps.typ != "bool" {
					c.add(apiv1.SeverityError, CodeInvalidValue, "validation.provider_strict", ps.pos, "provider_strict must be true or false")
				} else {
					b := ps.text == "true"
					w.ProviderStrict = &b
				}
			}
		}
	}
	c.steps(w, root)
	if out, _, ok := root.get("output"); ok {
		w.Output, w.HasOutput = toAny(out), true
		c.collectRefs(&Step{}, out, "output") // the references must parse; they are resolved when the run ends
	}
}

func (c *checker) invocation(w *Workflow, root *node) {
	inv, _, ok := root.get("invocation")
	if !ok || inv.kind == kindNull {
		c.add(apiv1.SeverityError, CodeMissingField, "invocation", root.pos, "invocation is required")
		return
	}
	if inv.kind != kindMap {
		c.add(apiv1.SeverityError, CodeInvalidValue, "invocation", inv.pos, "invocation must be a mapping, got %s", inv.describe())
		return
	}
	c.unknown(inv, "invocation", "type", "schedule")
	t, _, ok := inv.get("type")
	switch {
	case !ok || t.kind == kindNull:
		c.add(apiv1.SeverityError, CodeMissingField, "invocation.type", inv.pos, "invocation.type is required")
	case t.kind == kindScalar:
		w.Triggers = c.triggers(w.Triggers, t, "invocation.type")
	case t.kind == kindSeq:
		if len(t.items) == 0 {
			c.add(apiv1.SeverityError, CodeInvalidValue, "invocation.type", t.pos, "invocation.type must name at least one of http, schedule")
		}
		for i, it := range t.items {
			w.Triggers = c.triggers(w.Triggers, it, fmt.Sprintf("invocation.type[%d]", i))
		}
	default:
		c.add(apiv1.SeverityError, CodeInvalidValue, "invocation.type", t.pos, "invocation.type must be http, schedule or a list of them")
	}
	sched, sn, ok := c.str(inv, "invocation", "schedule", slices.Contains(w.Triggers, "schedule"))
	if ok {
		parsed, err := ParseSchedule(sched)
		if err != nil {
			c.add(apiv1.SeverityError, CodeInvalidValue, "invocation.schedule", sn.pos, "%v", err)
		}
		w.Schedule, w.Sched = sched, parsed
	}
}

func (c *checker) triggers(out []string, n *node, path string) []string {
	if n.kind != kindScalar || (n.text != "http" && n.text != "schedule") {
		c.add(apiv1.SeverityError, CodeInvalidValue, path, n.pos, "trigger must be http or schedule, got %q", n.text)
		return out
	}
	if slices.Contains(out, n.text) {
		c.add(apiv1.SeverityWarning, CodeInvalidValue, path, n.pos, "trigger %s is listed twice", n.text)
		return out
	}
	return append(out, n.text)
}

func (c *checker) steps(w *Workflow, root *node) {
	seen := map[string]bool{}
	w.Steps = c.stepList(w, root, "", seen, 0)
	w.all = w.all[:0]
	index(w, w.Steps)
}

// index lists every step of steps, nested ones included, in document order in w.all.
func index(w *Workflow, steps []Step) {
	for i := range steps {
		st := &steps[i]
		st.Flat = len(w.all)
		w.all = append(w.all, st)
		index(w, st.Steps)
		for j := range st.Branches {
			index(w, st.Branches[j].Steps)
		}
	}
}

// stepList reads the steps list under parent (the workflow, a loop or a branch) at nesting
// depth, registering every id in seen (ids are unique across the workflow).
func (c *checker) stepList(w *Workflow, parent *node, path string, seen map[string]bool, depth int) []Step {
	s, _, ok := parent.get("steps")
	p := join(path, "steps")
	switch {
	case !ok || s.kind == kindNull:
		c.add(apiv1.SeverityError, CodeMissingField, p, parent.pos, "%s is required", p)
		return nil
	case s.kind != kindSeq:
		c.add(apiv1.SeverityError, CodeInvalidValue, p, s.pos, "%s must be a list, got %s", p, s.describe())
		return nil
	case len(s.items) == 0 || len(s.items) > MaxSteps:
		c.add(apiv1.SeverityError, CodeInvalidValue, p, s.pos, "a steps list has 1 to %d steps, this one %d", MaxSteps, len(s.items))
		if len(s.items) == 0 {
			return nil
		}
	}
	items := s.items
	if len(items) > MaxSteps {
		items = items[:MaxSteps] // reported above; the rest is not read (bounded work)
	}
	var out []Step
	for i, it := range items {
		sp := fmt.Sprintf("%s[%d]", p, i)
		if it.kind != kindMap {
			c.add(apiv1.SeverityError, CodeInvalidValue, sp, it.pos, "a step must be a mapping, got %s", it.describe())
			continue
		}
		out = append(out, c.step(w, it, sp, i, seen, depth))
	}
	return out
}

// claimID checks a step or branch id and registers it.
func (c *checker) claimID(n *node, path, what string, seen map[string]bool) string {
	id, idn, ok := c.str(n, path, "id", true)
	if !ok {
		return ""
	}
	switch {
	case !stepIDRe.MatchString(id):
		c.add(apiv1.SeverityError, CodeInvalidValue, path+".id", idn.pos, "%s id %q must match ^[a-z][a-z0-9_]{0,62}$", what, id)
	case seen[id]:
		c.add(apiv1.SeverityError, CodeDuplicateStepID, path+".id", idn.pos, "%s id %q is used by an earlier step or branch (ids are unique in the workflow)", what, id)
	}
	seen[id] = true
	return id
}

func (c *checker) step(w *Workflow, n *node, path string, index int, seen map[string]bool, depth int) Step {
	st := Step{Index: index, Path: path, StepVersion: "1.0", Timeout: DefaultStepTimeout, node: n}
	st.ID = c.claimID(n, path, "step", seen)
	if t, tn, ok := c.str(n, path, "type", true); ok {
		switch t {
		case TypeServiceCall, TypeSet, TypeLoop, TypeParallel:
		default:
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".type", tn.pos, "step type %q is not supported (service_call, set, loop, parallel)", t)
		}
		st.Type = t
	}
	switch st.Type {
	case TypeSet:
		c.unknown(n, path, "id", "type", "set")
		c.setStep(&st, n, path)
	case TypeLoop:
		c.unknown(n, path, "id", "type", "for_each", "max_iterations", "export_context_keys", "steps")
		c.loopStep(w, &st, n, path, seen, depth)
	case TypeParallel:
		c.unknown(n, path, "id", "type", "branches", "outputs_map")
		c.parallelStep(w, &st, n, path, seen, depth)
	default:
		c.unknown(n, path, "id", "type", "step_version", "capability", "request", "timeout", "output", "max_stale")
		c.serviceCall(&st, n, path)
	}
	return st
}

func (c *checker) serviceCall(st *Step, n *node, path string) {
	if v, _, ok := n.get("step_version"); ok && v.kind != kindNull {
		switch {
		case v.kind != kindScalar:
			c.add(apiv1.SeverityError, CodeUnsupportedStepVersion, path+".step_version", v.pos, "step_version must be \"1.0\" or \"1.1\"")
		default:
			if v.typ != "str" {
				c.add(apiv1.SeverityWarning, CodeStepVersionNotString, path+".step_version", v.pos,
					"step_version %s is a YAML number; write it as a string (\"%s\"): 1.10 and 1.1 are the same number", v.text, v.text)
			}
			if v.text != "1.0" && v.text != "1.1" {
				c.add(apiv1.SeverityError, CodeUnsupportedStepVersion, path+".step_version", v.pos, "step_version %q is not supported (1.0, 1.1)", v.text)
			} else {
				st.StepVersion = v.text
			}
		}
	}
	if st.Type == TypeServiceCall || st.Type == "" { // an unknown type was reported: its capability is not asked for
		c.capability(st, n, path)
	}
	c.request(st, n, path)
	if to, ton, ok := c.str(n, path, "timeout", false); ok {
		d, err := time.ParseDuration(to)
		if err != nil || d <= 0 {
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".timeout", ton.pos, "timeout %q is not a positive duration like 10s", to)
		} else {
			st.Timeout = d
		}
	}
	if key, kn, ok := c.str(n, path, "output", false); ok {
		if c.contextKey(key, path+".output", kn.pos) {
			st.Output = key
		}
	}
	if ms, msn, ok := c.str(n, path, "max_stale", false); ok {
		if d, err := apiv1.ParseMaxStale(ms); err != nil {
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".max_stale", msn.pos, "%v", err)
		} else {
			st.MaxStale = d
		}
	}
}

// contextKey checks a context key's pattern.
func (c *checker) contextKey(key, path string, at Pos) bool {
	if !contextKeyRe.MatchString(key) {
		c.add(apiv1.SeverityError, CodeInvalidValue, path, at, "context key %q must match ^[a-z][a-z0-9_]{0,62}$", key)
		return false
	}
	return true
}

// collectRefs records every reference in the strings under n (at path) on st, and reports
// the ones that do not parse.
func (c *checker) collectRefs(st *Step, n *node, path string) {
	switch n.kind {
	case kindScalar:
		if n.typ != "str" || !strings.Contains(n.text, "${") {
			return
		}
		refs, _, err := ParseRefs(n.text)
		if errors.Is(err, errUnclosed) {
			c.add(apiv1.SeverityError, CodeInvalidReference, path, n.pos, "%q: %v", n.text, err)
			return
		}
		if err != nil {
			c.add(apiv1.SeverityError, CodeInvalidReference, path, n.pos, "%v", err)
			return
		}
		for _, r := range refs {
			st.refs = append(st.refs, refUse{ref: r, path: path, pos: n.pos})
		}
	case kindMap:
		for _, f := range n.fields {
			c.collectRefs(st, f.value, join(path, f.key))
		}
	case kindSeq:
		for i, it := range n.items {
			c.collectRefs(st, it, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func (c *checker) setStep(st *Step, n *node, path string) {
	v, _, ok := n.get("set")
	p := path + ".set"
	switch {
	case !ok || v.kind == kindNull:
		c.add(apiv1.SeverityError, CodeMissingField, p, n.pos, "%s is required for a set step", p)
		return
	case v.kind != kindMap || len(v.fields) == 0:
		c.add(apiv1.SeverityError, CodeInvalidValue, p, v.pos, "set must be a mapping of context keys to values, got %s", v.describe())
		return
	}
	for _, f := range v.fields {
		if c.contextKey(f.key, join(p, f.key), f.keyPos) {
			st.Set = append(st.Set, SetEntry{Key: f.key, Value: toAny(f.value)})
		}
		c.collectRefs(st, f.value, join(p, f.key))
	}
}

func (c *checker) loopStep(w *Workflow, st *Step, n *node, path string, seen map[string]bool, depth int) {
	st.MaxIterations = DefaultMaxIterations
	if fe, _, ok := n.get("for_each"); !ok || fe.kind == kindNull {
		c.add(apiv1.SeverityError, CodeMissingField, path+".for_each", n.pos, "%s.for_each is required for a loop step", path)
	} else {
		switch {
		case fe.kind == kindSeq:
		case fe.kind == kindScalar && fe.typ == "str" && strings.Contains(fe.text, "${"):
		default:
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".for_each", fe.pos, "for_each must be a list or a reference to one, got %s", fe.describe())
		}
		st.ForEach = toAny(fe)
		c.collectRefs(st, fe, path+".for_each")
	}
	if mi, _, ok := n.get("max_iterations"); ok && mi.kind != kindNull {
		v, err := strconv.Atoi(mi.text)
		if mi.kind != kindScalar || mi.typ != "int" || err != nil || v < 1 || v > MaxIterationsLimit {
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".max_iterations", mi.pos, "max_iterations must be an integer from 1 to %d", MaxIterationsLimit)
		} else {
			st.MaxIterations = v
		}
	}
	if ek, _, ok := n.get("export_context_keys"); ok && ek.kind != kindNull {
		if ek.kind != kindSeq {
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".export_context_keys", ek.pos, "export_context_keys must be a list of context keys")
		} else {
			for i, it := range ek.items {
				ip := fmt.Sprintf("%s.export_context_keys[%d]", path, i)
				if it.kind != kindScalar {
					c.add(apiv1.SeverityError, CodeInvalidValue, ip, it.pos, "a context key must be a string")
					continue
				}
				if c.contextKey(it.text, ip, it.pos) {
					st.ExportKeys = append(st.ExportKeys, it.text)
				}
			}
		}
	}
	if depth+1 > MaxNesting {
		c.add(apiv1.SeverityError, CodeNestingTooDeep, path, n.pos, "loop and parallel steps nest at most %d deep", MaxNesting)
		return
	}
	st.Steps = c.stepList(w, n, path, seen, depth+1)
}

func (c *checker) parallelStep(w *Workflow, st *Step, n *node, path string, seen map[string]bool, depth int) {
	b, _, ok := n.get("branches")
	bp := path + ".branches"
	switch {
	case !ok || b.kind == kindNull:
		c.add(apiv1.SeverityError, CodeMissingField, bp, n.pos, "%s is required for a parallel step", bp)
	case b.kind != kindSeq:
		c.add(apiv1.SeverityError, CodeInvalidValue, bp, b.pos, "branches must be a list, got %s", b.describe())
	case len(b.items) < MinBranches || len(b.items) > MaxBranches:
		c.add(apiv1.SeverityError, CodeInvalidValue, bp, b.pos, "a parallel step has %d to %d branches, this one %d", MinBranches, MaxBranches, len(b.items))
	}
	if depth+1 > MaxNesting {
		c.add(apiv1.SeverityError, CodeNestingTooDeep, path, n.pos, "loop and parallel steps nest at most %d deep", MaxNesting)
		return
	}
	if ok && b.kind == kindSeq {
		for i, it := range b.items {
			ip := fmt.Sprintf("%s[%d]", bp, i)
			if it.kind != kindMap {
				c.add(apiv1.SeverityError, CodeInvalidValue, ip, it.pos, "a branch must be a mapping with id and steps, got %s", it.describe())
				continue
			}
			c.unknown(it, ip, "id", "steps")
			br := Branch{Path: ip, ID: c.claimID(it, ip, "branch", seen)}
			br.Steps = c.stepList(w, it, ip, seen, depth+1)
			st.Branches = append(st.Branches, br)
		}
	}
	om, _, ok := n.get("outputs_map")
	if !ok || om.kind == kindNull {
		return
	}
	op := path + ".outputs_map"
	if om.kind != kindMap {
		c.add(apiv1.SeverityError, CodeInvalidValue, op, om.pos, "outputs_map must be a mapping of context keys to {branch, key} or {key, aggregate}")
		return
	}
	for _, f := range om.fields {
		ep := join(op, f.key)
		if !c.contextKey(f.key, ep, f.keyPos) {
			continue
		}
		if f.value.kind != kindMap {
			c.add(apiv1.SeverityError, CodeInvalidValue, ep, f.value.pos, "an outputs_map entry is {branch, key} or {key, aggregate}")
			continue
		}
		c.unknown(f.value, ep, "branch", "key", "aggregate")
		e := OutputEntry{Key: f.key, path: ep, pos: f.value.pos}
		from, fn, fok := c.str(f.value, ep, "key", true)
		if fok && c.contextKey(from, ep+".key", fn.pos) {
			e.From = from
		}
		br, brn, hasBranch := c.str(f.value, ep, "branch", false)
		ag, agn, hasAgg := c.str(f.value, ep, "aggregate", false)
		switch {
		case hasBranch && hasAgg:
			c.add(apiv1.SeverityError, CodeInvalidAggregate, ep, f.value.pos, "an entry has branch or aggregate, not both")
		case !hasBranch && !hasAgg:
			c.add(apiv1.SeverityError, CodeInvalidAggregate, ep, f.value.pos, "an entry names a branch or an aggregate (collect, first, last, merge)")
		case hasAgg && ag != AggregateCollect && ag != AggregateFirst && ag != AggregateLast && ag != AggregateMerge:
			c.add(apiv1.SeverityError, CodeInvalidAggregate, ep+".aggregate", agn.pos, "aggregate %q is not one of collect, first, last, merge", ag)
		case hasBranch && !slices.ContainsFunc(st.Branches, func(b Branch) bool { return b.ID == br }):
			c.add(apiv1.SeverityError, CodeUnknownBranch, ep+".branch", brn.pos, "branch %q is not one of this step's branches", br)
		default:
			e.Branch, e.Aggregate = br, ag
		}
		st.OutputsMap = append(st.OutputsMap, e)
	}
}

func (c *checker) capability(st *Step, n *node, path string) {
	cp, _, ok := n.get("capability")
	p := path + ".capability"
	if !ok || cp.kind == kindNull {
		c.add(apiv1.SeverityError, CodeMissingField, p, n.pos, "%s is required for a service_call step", p)
		return
	}
	if cp.kind != kindMap {
		c.add(apiv1.SeverityError, CodeInvalidValue, p, cp.pos, "capability must be a mapping, got %s", cp.describe())
		return
	}
	c.unknown(cp, p, "id", "provider", "capability_version", "version")
	if id, idn, ok := c.str(cp, p, "id", true); ok {
		if !apiv1.IsCapabilityID(id) {
			c.add(apiv1.SeverityError, CodeInvalidCapabilityID, p+".id", idn.pos, "capability id %q must be dotted lower-case words, like messaging.publish", id)
		}
		st.Capability.ID = id
	}
	if prov, pn, ok := c.str(cp, p, "provider", false); ok {
		if !nameRe.MatchString(prov) {
			c.add(apiv1.SeverityError, CodeInvalidValue, p+".provider", pn.pos, "provider %q must be a DNS label", prov)
		}
		st.Capability.Provider = prov
	}
	key := "capability_version"
	if _, _, has := cp.get("capability_version"); !has {
		key = "version"
	} else if _, vpos, both := cp.get("version"); both {
		c.add(apiv1.SeverityError, CodeInvalidValue, p+".version", vpos, "give capability_version or its alias version, not both")
	}
	st.Capability.Constraint = ">=0.0.0"
	if v, _, present := cp.get(key); present && v.kind == kindScalar {
		if _, err := registry.ParseConstraint(v.text); err != nil {
			c.add(apiv1.SeverityError, CodeInvalidVersionConstraint, p+"."+key, v.pos, "%q is not a version constraint (like \">=1.0 <2.0\")", v.text)
		} else {
			st.Capability.Constraint = v.text
		}
	} else if present && v.kind != kindNull {
		c.add(apiv1.SeverityError, CodeInvalidVersionConstraint, p+"."+key, v.pos, "the version constraint must be a string, got %s", v.describe())
	}
}

func (c *checker) request(st *Step, n *node, path string) {
	rq, _, ok := n.get("request")
	p := path + ".request"
	if !ok || rq.kind == kindNull {
		st.Request = json.RawMessage(`{}`)
		return
	}
	if rq.kind != kindMap {
		c.add(apiv1.SeverityError, CodeInvalidValue, p, rq.pos, "request must be a mapping, got %s", rq.describe())
		return
	}
	c.unknown(rq, p, "destination", "payload", "headers", "payload_from")
	if d, _, ok := rq.get("destination"); ok && (d.kind != kindScalar || d.typ != "str") {
		c.add(apiv1.SeverityError, CodeInvalidValue, p+".destination", d.pos, "destination must be a string, got %s", d.describe())
	}
	if h, hpos, ok := rq.get("headers"); ok {
		if st.StepVersion == "1.0" {
			c.add(apiv1.SeverityError, CodeFieldRequiresStepVersion, p+".headers", hpos, "request.headers needs step_version \"1.1\" (this step is %s)", st.StepVersion)
		}
		if h.kind != kindMap {
			c.add(apiv1.SeverityError, CodeInvalidValue, p+".headers", h.pos, "headers must be a mapping of strings, got %s", h.describe())
		} else {
			for _, f := range h.fields {
				if f.value.kind != kindScalar {
					c.add(apiv1.SeverityError, CodeInvalidValue, p+".headers."+f.key, f.value.pos, "header %s must be a string", f.key)
				}
			}
		}
	}
	if pf, pfpos, ok := rq.get("payload_from"); ok {
		if st.StepVersion == "1.0" {
			c.add(apiv1.SeverityError, CodeFieldRequiresStepVersion, p+".payload_from", pfpos, "request.payload_from needs step_version \"1.1\" (this step is %s)", st.StepVersion)
		}
		if pf.kind != kindScalar {
			c.add(apiv1.SeverityError, CodeInvalidValue, p+".payload_from", pf.pos, "payload_from must be previous, input or an earlier step's id")
		} else {
			st.PayloadFrom = pf.text // which step it names is checked with the scopes (analyze)
		}
	}
	for _, f := range rq.fields {
		if f.key != "payload_from" {
			c.collectRefs(st, f.value, join(p, f.key))
		}
	}
	st.Request, _ = json.Marshal(toAny(rq))
}

// toAny turns a node into plain Go values for JSON.
func toAny(n *node) any {
	switch n.kind {
	case kindMap:
		m := make(map[string]any, len(n.fields))
		for _, f := range n.fields {
			m[f.key] = toAny(f.value)
		}
		return m
	case kindSeq:
		out := make([]any, len(n.items))
		for i, it := range n.items {
			out[i] = toAny(it)
		}
		return out
	case kindScalar:
		switch n.typ {
		case "int":
			if v, err := strconv.ParseInt(n.text, 0, 64); err == nil {
				return v
			}
		case "float":
			if v, err := strconv.ParseFloat(n.text, 64); err == nil {
				return v
			}
		case "bool":
			return n.text == "true"
		}
		return n.text
	}
	return nil
}

// Locate returns the position of the node a dotted path names ("steps[0].request.headers.x"),
// or of its nearest existing ancestor.
func (w *Workflow) Locate(path string) Pos {
	n := w.tree
	if n == nil {
		return Pos{1, 1}
	}
	at := n.pos
	for _, part := range splitPath(path) {
		var next *node
		var pos Pos
		if idx, ok := part.index(); ok {
			if n.kind == kindSeq && idx >= 0 && idx < len(n.items) {
				next, pos = n.items[idx], n.items[idx].pos
			}
		} else if v, _, ok := n.get(part.name); ok {
			next, pos = v, v.pos
		}
		if next == nil {
			return at
		}
		n, at = next, pos
	}
	return at
}

type pathPart struct {
	name string
	idx  int
	isIx bool
}

func (p pathPart) index() (int, bool) { return p.idx, p.isIx }

// splitPath splits "steps[0].request.headers" into steps, [0], request, headers.
func splitPath(path string) []pathPart {
	var out []pathPart
	for _, seg := range strings.Split(path, ".") {
		for seg != "" {
			i := strings.IndexByte(seg, '[')
			if i < 0 {
				out = append(out, pathPart{name: seg})
				break
			}
			if i > 0 {
				out = append(out, pathPart{name: seg[:i]})
			}
			j := strings.IndexByte(seg[i:], ']')
			if j < 0 {
				out = append(out, pathPart{name: seg[i:]})
				break
			}
			n, err := strconv.Atoi(seg[i+1 : i+j])
			if err == nil {
				out = append(out, pathPart{idx: n, isIx: true})
			}
			seg = seg[i+j+1:]
		}
	}
	return out
}
