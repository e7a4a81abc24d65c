package workflow

import (
	"fmt"
	"slices"
	"sort"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// marker is the stand-in value the analysis writes: what matters is whether a key or an
// output is visible, not its value.
type marker struct{}

// analyze checks what every reference can see, walking the steps on Scopes exactly as a run
// does (so the static rules and the run-time behaviour cannot drift), in the workflow's mode;
// in legacy mode it walks them once more in strict mode to warn about what works only in
// legacy. It also checks the loop and parallel fields that need the steps' writes.
func (c *checker) analyze(w *Workflow, mode Mode) {
	a := &analyzer{c: c, mode: mode, closedKeys: map[string]string{}, closedSteps: map[string]string{}}
	a.walk(NewScope(mode, marker{}), w.Steps)
	if mode == ModeLegacy {
		s := &analyzer{c: c, mode: ModeStrict, leaksOnly: true, closedKeys: map[string]string{}, closedSteps: map[string]string{}}
		s.walk(NewScope(ModeStrict, marker{}), w.Steps)
	}
	for _, st := range w.all {
		c.scopeFields(st, mode)
	}
}

type analyzer struct {
	c    *checker
	mode Mode
	// leaksOnly: the strict walk of a legacy workflow, which reports only what a scope
	// boundary hides, as warnings.
	leaksOnly bool
	// closedKeys and closedSteps: context keys written, and steps run, inside a loop or
	// branch that ended without handing them to the enclosing scope — the id of that
	// loop or parallel step.
	closedKeys  map[string]string
	closedSteps map[string]string
}

func (a *analyzer) walk(sc *Scope, steps []Step) {
	for i := range steps {
		st := &steps[i]
		for _, u := range st.refs {
			a.ref(sc, u)
		}
		a.payloadFrom(sc, steps, i)
		switch st.Type {
		case TypeSet:
			for _, e := range st.Set {
				sc.Set(e.Key, marker{})
			}
		case TypeLoop:
			it := sc.Iteration(0, marker{})
			a.walk(it, st.Steps)
			it.Export(st.ExportKeys)
			a.close(sc, it, st.ID)
		case TypeParallel:
			branches := make([]*Scope, len(st.Branches))
			for j := range st.Branches {
				branches[j] = sc.Branch()
				a.walk(branches[j], st.Branches[j].Steps)
			}
			if sc.Mode() == ModeStrict {
				ApplyOutputs(sc, st.OutputsMap, st.Branches, branches, true)
			}
			for _, b := range branches {
				a.close(sc, b, st.ID)
			}
		default:
			if st.ID != "" {
				sc.SetOutput(st.ID, marker{})
			}
			if st.Output != "" {
				sc.Set(st.Output, marker{})
			}
		}
	}
}

// close ends an inner scope and remembers what it kept from the enclosing one.
func (a *analyzer) close(parent, inner *Scope, owner string) {
	if parent.Mode() == ModeStrict {
		inner.mu.Lock()
		for k := range inner.wrote {
			if _, ok := parent.Get(k); !ok {
				a.closedKeys[k] = owner
			}
		}
		for id := range inner.outputs {
			a.closedSteps[id] = owner
		}
		inner.mu.Unlock()
	}
	inner.Close()
}

// ref checks one reference against what sc sees.
func (a *analyzer) ref(sc *Scope, u refUse) {
	r := u.ref
	switch r.Root {
	case RootLoop:
		if !sc.inLoop && !a.leaksOnly {
			a.c.add(apiv1.SeverityError, CodeLoopReferenceOutside, u.path, u.pos, "${%s} is outside every loop body", r.Text)
		}
	case RootSteps:
		if _, ok := sc.Output(r.Step); ok {
			return
		}
		a.hidden(u, a.closedSteps[r.Step], fmt.Sprintf("step %q", r.Step), CodeUnknownStepReference,
			fmt.Sprintf("${%s} names no step that runs earlier in this scope or an enclosing one", r.Text))
	case RootContext:
		if _, ok := sc.Get(r.Key()); ok {
			return
		}
		if owner, ok := a.closedKeys[r.Key()]; ok {
			a.hidden(u, owner, fmt.Sprintf("context key %q", r.Key()), CodeScopeLeak, "")
		}
	}
}

// hidden reports a reference to what a scope boundary hides (owner: the loop or parallel
// step it stayed in), or, without an owner, to nothing at all (code, message).
func (a *analyzer) hidden(u refUse, owner, what, code, message string) {
	switch {
	case owner != "" && a.leaksOnly && code == CodeScopeLeak:
		a.c.add(apiv1.SeverityWarning, CodeScopeLeak, u.path, u.pos,
			"${%s}: %s is written only inside %q and not exported: this works only in legacy scope mode", u.ref.Text, what, owner)
	case owner != "" && a.leaksOnly:
		a.c.add(apiv1.SeverityWarning, CodeScopeLeak, u.path, u.pos,
			"${%s}: %s ran inside %q: its output is visible after it only in legacy scope mode", u.ref.Text, what, owner)
	case owner != "" && code == CodeScopeLeak:
		a.c.add(apiv1.SeverityError, CodeScopeLeak, u.path, u.pos,
			"${%s}: %s is written only inside %q and not exported (strict scope: export it with export_context_keys or outputs_map)", u.ref.Text, what, owner)
	case owner != "":
		a.c.add(apiv1.SeverityError, code, u.path, u.pos, "${%s}: %s ran inside %q and is not visible outside it in strict scope mode", u.ref.Text, what, owner)
	case !a.leaksOnly && message != "":
		a.c.add(apiv1.SeverityError, code, u.path, u.pos, "%s", message)
	}
}

// payloadFrom checks a service_call's payload_from: previous names the step before it in
// its list, input is the run's input, anything else a step whose output is visible.
func (a *analyzer) payloadFrom(sc *Scope, steps []Step, i int) {
	st := &steps[i]
	if st.PayloadFrom == "" || a.leaksOnly {
		if st.PayloadFrom != "" && st.PayloadFrom != "previous" && st.PayloadFrom != "input" {
			if _, ok := sc.Output(st.PayloadFrom); !ok {
				if owner := a.closedSteps[st.PayloadFrom]; owner != "" {
					a.c.add(apiv1.SeverityWarning, CodeScopeLeak, st.Path+".request.payload_from", a.pos(st),
						"payload_from %q ran inside %q: this works only in legacy scope mode", st.PayloadFrom, owner)
				}
			}
		}
		return
	}
	at := st.Path + ".request.payload_from"
	switch st.PayloadFrom {
	case "input":
	case "previous":
		if i == 0 {
			a.c.add(apiv1.SeverityError, CodeUnknownStepReference, at, a.pos(st), "payload_from: previous in the first step names no step")
		}
	default:
		if _, ok := sc.Output(st.PayloadFrom); !ok {
			if owner := a.closedSteps[st.PayloadFrom]; owner != "" {
				a.c.add(apiv1.SeverityError, CodeUnknownStepReference, at, a.pos(st),
					"payload_from %q ran inside %q and is not visible outside it in strict scope mode", st.PayloadFrom, owner)
				return
			}
			a.c.add(apiv1.SeverityError, CodeUnknownStepReference, at, a.pos(st), "payload_from %q names no earlier step", st.PayloadFrom)
		}
	}
}

// pos is where a step's payload_from is written.
func (a *analyzer) pos(st *Step) Pos {
	if rq, _, ok := st.node.get("request"); ok {
		if pf, _, ok := rq.get("payload_from"); ok {
			return pf.pos
		}
	}
	return st.node.pos
}

// scopeFields checks a loop's exports and a parallel step's outputs_map against what their
// bodies write, and what legacy mode makes of them.
func (c *checker) scopeFields(st *Step, mode Mode) {
	switch st.Type {
	case TypeLoop:
		if len(st.ExportKeys) == 0 {
			return
		}
		if mode == ModeLegacy {
			c.add(apiv1.SeverityInfo, CodeScopeFieldIgnored, st.Path+".export_context_keys", c.fieldPos(st, "export_context_keys"),
				"export_context_keys takes effect in strict scope mode; in legacy mode every write is visible anyway")
		}
		w := writes(st.Steps)
		for i, k := range st.ExportKeys {
			if !w[k] {
				c.add(apiv1.SeverityWarning, CodeExportKeyNeverSet, fmt.Sprintf("%s.export_context_keys[%d]", st.Path, i), c.fieldPos(st, "export_context_keys"),
					"no step of the loop body writes context key %q", k)
			}
		}
	case TypeParallel:
		if len(st.OutputsMap) > 0 && mode == ModeLegacy {
			c.add(apiv1.SeverityInfo, CodeScopeFieldIgnored, st.Path+".outputs_map", c.fieldPos(st, "outputs_map"),
				"outputs_map takes effect in strict scope mode; in legacy mode branches write the enclosing context directly")
		}
		byBranch := map[string]map[string]bool{}
		for _, b := range st.Branches {
			byBranch[b.ID] = writes(b.Steps)
		}
		for _, e := range st.OutputsMap {
			if e.From == "" || (e.Branch == "" && e.Aggregate == "") {
				continue
			}
			set := false
			for id, w := range byBranch {
				if (e.Branch == "" || e.Branch == id) && w[e.From] {
					set = true
				}
			}
			if !set {
				who := "any branch"
				if e.Branch != "" {
					who = "branch " + e.Branch
				}
				c.add(apiv1.SeverityWarning, CodeOutputKeyNeverSet, e.path, e.pos, "no step of %s writes context key %q", who, e.From)
			}
		}
		if mode == ModeLegacy {
			count := map[string][]string{}
			for _, b := range st.Branches {
				for k := range byBranch[b.ID] {
					count[k] = append(count[k], b.ID)
				}
			}
			keys := make([]string, 0, len(count))
			for k, bs := range count {
				if len(bs) > 1 {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				c.add(apiv1.SeverityWarning, CodeParallelWriteConflict, st.Path+".branches", c.fieldPos(st, "branches"),
					"branches %v all write context key %q: in legacy scope mode they race and the last writer wins", count[k], k)
			}
		}
	}
}

// fieldPos is where a step's field is written (the step's own position without it).
func (c *checker) fieldPos(st *Step, field string) Pos {
	if v, _, ok := st.node.get(field); ok {
		return v.pos
	}
	return st.node.pos
}

// writes returns every context key the steps, or any step nested in them, may write.
func writes(steps []Step) map[string]bool {
	out := map[string]bool{}
	var walk func([]Step)
	walk = func(steps []Step) {
		for i := range steps {
			st := &steps[i]
			if st.Output != "" {
				out[st.Output] = true
			}
			for _, e := range st.Set {
				out[e.Key] = true
			}
			for _, e := range st.OutputsMap {
				out[e.Key] = true
			}
			walk(st.Steps)
			for _, b := range st.Branches {
				walk(b.Steps)
			}
		}
	}
	walk(steps)
	return out
}

// ApplyOutputs writes into parent what a strict parallel step's outputs_map takes from its
// branches (scopes, in branch order): a branch's value of a key, or every branch's combined
// by the entry's aggregate. An entry whose key no branch set is left unset. With symbolic,
// the values are stand-ins (the validator's walk) and aggregates are not computed.
func ApplyOutputs(parent *Scope, entries []OutputEntry, branches []Branch, scopes []*Scope, symbolic bool) {
	for _, e := range entries {
		var vals []any
		for i, b := range branches {
			if (e.Branch != "" && b.ID != e.Branch) || !scopes[i].Wrote(e.From) {
				continue
			}
			v, _ := scopes[i].Get(e.From)
			vals = append(vals, v)
		}
		if len(vals) == 0 || e.From == "" {
			continue
		}
		if symbolic {
			parent.Set(e.Key, marker{})
			continue
		}
		var out any
		switch e.Aggregate {
		case "", AggregateFirst:
			out = vals[0]
		case AggregateLast:
			out = vals[len(vals)-1]
		case AggregateCollect:
			out = slices.Clone(vals)
		case AggregateMerge:
			m := map[string]any{}
			for _, v := range vals {
				if o, ok := v.(map[string]any); ok {
					for k, x := range o {
						m[k] = x
					}
				}
			}
			out = m
		}
		parent.Set(e.Key, DeepCopy(out))
	}
}
