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

// Diagnostic codes of the contract layer (docs/workflows.md).
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
	// Triggers are http and/or schedule; Schedule is the schedule expression.
	Triggers []string
	Schedule string
	// ProviderStrict is the workflow's validation.provider_strict, when it sets one.
	ProviderStrict *bool
	Steps          []Step

	tree *node
}

// Step is one step of a workflow.
type Step struct {
	Index       int
	ID          string
	Type        string
	StepVersion string
	Capability  CapabilityRef
	// Request is the step's request mapping as JSON (payload_from and headers included).
	Request     json.RawMessage
	PayloadFrom string
	Timeout     time.Duration
}

// CapabilityRef is what a service_call step needs.
type CapabilityRef struct {
	ID         string
	Provider   string
	Constraint string
}

// Parse reads a workflow and checks the contract layer. It always returns a Workflow (as
// far as it could be read) and every contract diagnostic, sorted by position.
func Parse(src []byte) (*Workflow, []apiv1.Diagnostic) {
	c := &checker{}
	w := &Workflow{}
	root, at, err := parseTree(src)
	var le *errYAMLLimit
	switch {
	case errors.As(err, &le):
		c.add(apiv1.SeverityError, CodeYAMLLimit, "", at, "refused before parsing: %s (limits: depth %d, indentation %d, aliases %d)",
			le.msg, MaxYAMLDepth, MaxYAMLIndent, MaxYAMLAliases)
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
	sortDiagnostics(c.ds)
	return w, c.ds
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
	c.unknown(root, "", "name", "description", "invocation", "validation", "steps")
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
		if err := CheckSchedule(sched); err != nil {
			c.add(apiv1.SeverityError, CodeInvalidValue, "invocation.schedule", sn.pos, "%v", err)
		}
		w.Schedule = sched
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
	s, _, ok := root.get("steps")
	switch {
	case !ok || s.kind == kindNull:
		c.add(apiv1.SeverityError, CodeMissingField, "steps", root.pos, "steps is required")
		return
	case s.kind != kindSeq:
		c.add(apiv1.SeverityError, CodeInvalidValue, "steps", s.pos, "steps must be a list, got %s", s.describe())
		return
	case len(s.items) == 0 || len(s.items) > MaxSteps:
		c.add(apiv1.SeverityError, CodeInvalidValue, "steps", s.pos, "a workflow has 1 to %d steps, this one %d", MaxSteps, len(s.items))
		if len(s.items) == 0 {
			return
		}
	}
	seen := map[string]bool{}
	for i, it := range s.items {
		path := fmt.Sprintf("steps[%d]", i)
		if it.kind != kindMap {
			c.add(apiv1.SeverityError, CodeInvalidValue, path, it.pos, "a step must be a mapping, got %s", it.describe())
			continue
		}
		st := c.step(it, path, i, seen)
		w.Steps = append(w.Steps, st)
		if st.ID != "" {
			seen[st.ID] = true
		}
	}
}

func (c *checker) step(n *node, path string, index int, earlier map[string]bool) Step {
	st := Step{Index: index, StepVersion: "1.0", Timeout: DefaultStepTimeout}
	c.unknown(n, path, "id", "type", "step_version", "capability", "request", "timeout")
	if id, idn, ok := c.str(n, path, "id", true); ok {
		switch {
		case !stepIDRe.MatchString(id):
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".id", idn.pos, "step id %q must match ^[a-z][a-z0-9_]{0,62}$", id)
		case earlier[id]:
			c.add(apiv1.SeverityError, CodeDuplicateStepID, path+".id", idn.pos, "step id %q is used by an earlier step", id)
		}
		st.ID = id
	}
	if t, tn, ok := c.str(n, path, "type", true); ok {
		if t != "service_call" {
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".type", tn.pos, "step type %q is not supported (service_call)", t)
		}
		st.Type = t
	}
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
	if st.Type == "service_call" || st.Type == "" {
		c.capability(&st, n, path)
	}
	c.request(&st, n, path, earlier)
	if to, ton, ok := c.str(n, path, "timeout", false); ok {
		d, err := time.ParseDuration(to)
		if err != nil || d <= 0 {
			c.add(apiv1.SeverityError, CodeInvalidValue, path+".timeout", ton.pos, "timeout %q is not a positive duration like 10s", to)
		} else {
			st.Timeout = d
		}
	}
	return st
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

func (c *checker) request(st *Step, n *node, path string, earlier map[string]bool) {
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
		switch {
		case pf.kind != kindScalar:
			c.add(apiv1.SeverityError, CodeInvalidValue, p+".payload_from", pf.pos, "payload_from must be previous, input or an earlier step's id")
		case pf.text == "previous" && st.Index == 0:
			c.add(apiv1.SeverityError, CodeUnknownStepReference, p+".payload_from", pf.pos, "payload_from: previous in the first step names no step")
		case pf.text == "previous" || pf.text == "input":
			st.PayloadFrom = pf.text
		case !earlier[pf.text]:
			c.add(apiv1.SeverityError, CodeUnknownStepReference, p+".payload_from", pf.pos, "payload_from %q names no earlier step", pf.text)
		default:
			st.PayloadFrom = pf.text
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
