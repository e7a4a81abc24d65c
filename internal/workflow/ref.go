package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Roots of a reference.
const (
	RootInput   = "input"
	RootContext = "context"
	RootSteps   = "steps"
	RootLoop    = "loop"
)

// MaxReferenceLength bounds the text between ${ and }.
const MaxReferenceLength = 512

// Ref is one ${…} reference: its root and the path below it. For RootSteps, Step is the step
// id (the "output" segment is checked and dropped); for RootContext, Path[0] is the key; for
// RootLoop, Path[0] is "item" or "index".
type Ref struct {
	Root string
	Step string
	Path []string
	// Text is the reference as written, without ${ and }.
	Text string
}

// Key is the context key a RootContext reference reads ("" otherwise).
func (r Ref) Key() string {
	if r.Root == RootContext && len(r.Path) > 0 {
		return r.Path[0]
	}
	return ""
}

// errUnclosed: a string opens a reference it does not close.
var errUnclosed = errors.New("a ${ without its closing }")

// ParseRefs returns the references in s, in order, and whether s is exactly one reference
// (which is replaced by the value itself, of any type, instead of its text).
func ParseRefs(s string) (refs []Ref, whole bool, err error) {
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i+2:], '}')
		if j < 0 {
			return nil, false, errUnclosed
		}
		text := rest[i+2 : i+2+j]
		r, err := parseRef(text)
		if err != nil {
			return nil, false, err
		}
		refs = append(refs, r)
		rest = rest[i+2+j+1:]
	}
	whole = len(refs) == 1 && strings.HasPrefix(s, "${") && strings.HasSuffix(s, "}") && strings.Count(s, "${") == 1
	return refs, whole, nil
}

func parseRef(text string) (Ref, error) {
	r := Ref{Text: text}
	if text == "" || len(text) > MaxReferenceLength {
		return r, fmt.Errorf("${%s}: a reference names input, context.KEY, steps.ID.output or loop.item/loop.index", text)
	}
	parts := strings.Split(text, ".")
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " ${}\t\n") {
			return r, fmt.Errorf("${%s}: a reference is a dotted path of names and indexes", text)
		}
	}
	r.Root = parts[0]
	switch r.Root {
	case RootInput:
		r.Path = parts[1:]
	case RootContext:
		if len(parts) < 2 {
			return r, fmt.Errorf("${%s}: name the context key (context.KEY)", text)
		}
		if !contextKeyRe.MatchString(parts[1]) {
			return r, fmt.Errorf("${%s}: context key %q must match ^[a-z][a-z0-9_]{0,62}$", text, parts[1])
		}
		r.Path = parts[1:]
	case RootSteps:
		if len(parts) < 3 || parts[2] != "output" {
			return r, fmt.Errorf("${%s}: a step reference is steps.ID.output…", text)
		}
		r.Step, r.Path = parts[1], parts[3:]
	case RootLoop:
		if len(parts) < 2 || (parts[1] != "item" && parts[1] != "index") || (parts[1] == "index" && len(parts) > 2) {
			return r, fmt.Errorf("${%s}: inside a loop, ${loop.item…} and ${loop.index}", text)
		}
		r.Path = parts[1:]
	default:
		return r, fmt.Errorf("${%s}: unknown root %q (input, context, steps, loop)", text, r.Root)
	}
	return r, nil
}

// lookup walks path down v: object members by name, list elements by index.
func lookup(v any, path []string) (any, bool) {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[p]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// ReferenceError is a reference that names nothing at run time (REFERENCE_NOT_FOUND).
type ReferenceError struct {
	Ref Ref
	Why string
}

func (e *ReferenceError) Error() string { return fmt.Sprintf("${%s}: %s", e.Ref.Text, e.Why) }

// CodeReferenceNotFound is the run-time code of a reference to a missing path.
const CodeReferenceNotFound = "REFERENCE_NOT_FOUND"

// Substitute returns v (plain JSON values) with every reference in its strings replaced as
// the scope sees it: a string that is exactly one reference by the value, one with text
// around a reference by the value's text. Maps and lists are copied, never changed.
func Substitute(v any, sc *Scope) (any, error) {
	switch x := v.(type) {
	case string:
		if !strings.Contains(x, "${") {
			return x, nil
		}
		refs, whole, err := ParseRefs(x)
		if err != nil {
			return nil, err
		}
		if whole {
			return sc.Resolve(refs[0])
		}
		var b strings.Builder
		rest := x
		for _, r := range refs {
			i := strings.Index(rest, "${")
			j := strings.IndexByte(rest[i:], '}')
			b.WriteString(rest[:i])
			val, err := sc.Resolve(r)
			if err != nil {
				return nil, err
			}
			if s, ok := val.(string); ok {
				b.WriteString(s)
			} else {
				t, _ := json.Marshal(val)
				b.Write(t)
			}
			rest = rest[i+j+1:]
		}
		b.WriteString(rest)
		return b.String(), nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			s, err := Substitute(e, sc)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			s, err := Substitute(e, sc)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	default:
		return v, nil
	}
}
