package workflow

import (
	"fmt"
	"maps"
	"regexp"
	"sync"
)

// Mode is a workflow's scope mode: how loop iterations and parallel branches share the
// context with the scope around them.
type Mode string

// The scope modes.
const (
	// ModeLegacy: iterations and branches read and write the enclosing context directly;
	// every write is visible to the parent and to later iterations (the default).
	ModeLegacy Mode = "legacy"
	// ModeStrict: each iteration and each branch runs on a deep copy of the enclosing context
	// taken when it starts; only export_context_keys (loops) and outputs_map (parallel) cross
	// back, and a step's output is not visible outside its loop or branch.
	ModeStrict Mode = "strict"
)

// ParseMode reads a scope mode; "" is legacy.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeLegacy:
		return ModeLegacy, nil
	case ModeStrict:
		return ModeStrict, nil
	}
	return "", fmt.Errorf("scope mode %q: want legacy or strict", s)
}

var contextKeyRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Scope is what the steps of one scope see and write: the context, the outputs of the steps
// that ran, the run's input and, in a loop body, the current item and index. The
// orchestrator runs steps on Scopes and the validator walks them with stand-in values, so
// what a reference can see is decided by this one type in both. A Scope is safe for
// concurrent use by the branches of a parallel step.
type Scope struct {
	mode   Mode
	parent *Scope
	input  any

	ctx *contextMap // legacy children share their parent's; strict ones own a snapshot

	mu      sync.Mutex
	outputs map[string]any  // outputs of the steps run in this scope
	wrote   map[string]bool // keys this scope wrote (exports pick from them)

	inLoop bool
	item   any
	index  int
}

type contextMap struct {
	mu sync.Mutex
	m  map[string]any
}

// NewScope is a run's top scope: an empty context and the run's input.
func NewScope(mode Mode, input any) *Scope {
	return &Scope{mode: mode, input: input, ctx: &contextMap{m: map[string]any{}}, outputs: map[string]any{}, wrote: map[string]bool{}}
}

// Mode is the scope's mode.
func (s *Scope) Mode() Mode { return s.mode }

func (s *Scope) child() *Scope {
	c := &Scope{mode: s.mode, parent: s, input: s.input, outputs: map[string]any{}, wrote: map[string]bool{},
		inLoop: s.inLoop, item: s.item, index: s.index}
	if s.mode == ModeStrict {
		s.ctx.mu.Lock()
		c.ctx = &contextMap{m: DeepCopy(s.ctx.m).(map[string]any)}
		s.ctx.mu.Unlock()
	} else {
		c.ctx = s.ctx
	}
	return c
}

// Iteration is the scope of one loop iteration over item at index.
func (s *Scope) Iteration(index int, item any) *Scope {
	c := s.child()
	c.inLoop, c.item, c.index = true, item, index
	return c
}

// Branch is the scope of one branch of a parallel step.
func (s *Scope) Branch() *Scope { return s.child() }

// Set writes a context key.
func (s *Scope) Set(key string, v any) {
	s.ctx.mu.Lock()
	s.ctx.m[key] = v
	s.ctx.mu.Unlock()
	s.mu.Lock()
	s.wrote[key] = true
	s.mu.Unlock()
}

// Get reads a context key as this scope sees it.
func (s *Scope) Get(key string) (any, bool) {
	s.ctx.mu.Lock()
	defer s.ctx.mu.Unlock()
	v, ok := s.ctx.m[key]
	return v, ok
}

// Wrote reports whether this scope wrote key.
func (s *Scope) Wrote(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wrote[key]
}

// SetOutput records the output of step id.
func (s *Scope) SetOutput(id string, v any) {
	s.mu.Lock()
	s.outputs[id] = v
	s.mu.Unlock()
}

// Output returns the output of step id if it is visible here: run in this scope or an
// enclosing one (and, in legacy mode, in a finished inner scope; see Close).
func (s *Scope) Output(id string) (any, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		sc.mu.Lock()
		v, ok := sc.outputs[id]
		sc.mu.Unlock()
		if ok {
			return v, true
		}
	}
	return nil, false
}

// Export copies into the parent the keys of keys this scope wrote: a strict loop
// iteration's export_context_keys. In legacy mode the parent saw every write already.
func (s *Scope) Export(keys []string) {
	if s.mode != ModeStrict || s.parent == nil {
		return
	}
	for _, k := range keys {
		if s.Wrote(k) {
			v, _ := s.Get(k)
			s.parent.Set(k, DeepCopy(v))
		}
	}
}

// Close ends an inner scope. In legacy mode its steps' outputs become visible to the parent
// (the last iteration's win); in strict mode nothing crosses.
func (s *Scope) Close() {
	if s.mode != ModeLegacy || s.parent == nil {
		return
	}
	s.mu.Lock()
	outs := maps.Clone(s.outputs)
	wrote := maps.Clone(s.wrote)
	s.mu.Unlock()
	s.parent.mu.Lock()
	maps.Copy(s.parent.outputs, outs)
	maps.Copy(s.parent.wrote, wrote)
	s.parent.mu.Unlock()
}

// Context returns a copy of the context as this scope sees it.
func (s *Scope) Context() map[string]any {
	s.ctx.mu.Lock()
	defer s.ctx.mu.Unlock()
	return DeepCopy(s.ctx.m).(map[string]any)
}

// Resolve returns the value a reference names as this scope sees it, or a *ReferenceError.
func (s *Scope) Resolve(r Ref) (any, error) {
	var base any
	path := r.Path
	switch r.Root {
	case RootInput:
		base = s.input
	case RootContext:
		v, ok := s.Get(r.Path[0])
		if !ok {
			return nil, &ReferenceError{Ref: r, Why: fmt.Sprintf("context key %q is not set in this scope", r.Path[0])}
		}
		base, path = v, r.Path[1:]
	case RootSteps:
		v, ok := s.Output(r.Step)
		if !ok {
			return nil, &ReferenceError{Ref: r, Why: fmt.Sprintf("step %q has no output visible here", r.Step)}
		}
		base = v
	case RootLoop:
		if !s.inLoop {
			return nil, &ReferenceError{Ref: r, Why: "not inside a loop"}
		}
		if r.Path[0] == "index" {
			return s.index, nil
		}
		base, path = s.item, r.Path[1:]
	}
	v, ok := lookup(base, path)
	if !ok {
		return nil, &ReferenceError{Ref: r, Why: "no such path"}
	}
	return v, nil
}

// DeepCopy copies plain JSON values (objects, lists, scalars) all the way down.
func DeepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = DeepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = DeepCopy(e)
		}
		return out
	default:
		return v
	}
}
