package apiv1

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// CodeUnknownField is the code of a warning about a field the contract does not define.
const CodeUnknownField = "UNKNOWN_FIELD"

// Warning is something a request got away with but should not have: the request was
// accepted, and the warning says what was ignored.
type Warning struct {
	Code    string `json:"code"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// UnknownFields returns a warning for every object member of the JSON document raw that the
// type of into does not define (by its json tags, matched without regard to case as decoding
// does), with its path ("zoen", "capabilities[0].provder", "manifest.routes[1].methdos"),
// sorted. Members held as raw JSON or maps (metadata) are free-form and never reported. A
// document that is not valid JSON gives none: decoding reports that.
//
// It scans raw once, without building a tree: it runs on every registration.
func UnknownFields(raw []byte, into any) []Warning {
	if !json.Valid(raw) {
		return nil
	}
	return UnknownFieldsOfDecoded(raw, into)
}

// UnknownFieldsOfDecoded is UnknownFields for a document that has just been decoded into
// into without error (so it is valid JSON, and is not checked again).
func UnknownFieldsOfDecoded(raw []byte, into any) []Warning {
	var stack [8]segment // deep enough for every request type: no allocation for the path
	w := fieldWalker{s: scanner{b: raw}, path: stack[:0]}
	w.value(reflect.TypeOf(into))
	sort.SliceStable(w.out, func(i, j int) bool { return w.out[i].Path < w.out[j].Path })
	// a member written twice is one warning (decoding keeps the last)
	return slices.CompactFunc(w.out, func(a, b Warning) bool { return a.Path == b.Path })
}

// fieldWalker walks a valid JSON document along a Go type.
type fieldWalker struct {
	s    scanner
	path []segment // where the walk is, turned into a string only for a warning
	out  []Warning
}

// segment is one step of a path: an object member's name, or an array index.
type segment struct {
	name  []byte
	index int // -1 for a name
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

// value walks the value at the scanner's position as a t.
func (w *fieldWalker) value(t reflect.Type) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	w.s.space()
	switch {
	case t == nil || t == rawMessage:
		w.s.skip()
	case t.Kind() == reflect.Struct && w.s.peek() == '{':
		fields := jsonFields(t)
		w.s.i++ // {
		for w.s.space(); w.s.peek() != '}'; w.s.space() {
			name := w.s.key()
			ft, known := fields[string(name)]
			if !known {
				ft, known = foldedField(fields, name)
			}
			w.path = append(w.path, segment{name: name, index: -1})
			if known {
				w.value(ft)
			} else {
				w.out = append(w.out, Warning{Code: CodeUnknownField, Path: w.pathString(),
					Message: "not a field of this request: ignored (a misspelling?)"})
				w.s.skip()
			}
			w.path = w.path[:len(w.path)-1]
			w.s.space()
			if w.s.peek() == ',' {
				w.s.i++
			}
		}
		w.s.i++ // }
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && w.s.peek() == '[':
		w.s.i++ // [
		for n := 0; ; n++ {
			w.s.space()
			if w.s.peek() == ']' {
				break
			}
			w.path = append(w.path, segment{index: n})
			w.value(t.Elem())
			w.path = w.path[:len(w.path)-1]
			w.s.space()
			if w.s.peek() == ',' {
				w.s.i++
			}
		}
		w.s.i++ // ]
	default:
		w.s.skip() // a scalar, or a shape decoding refuses: not this walk's business
	}
}

func (w *fieldWalker) pathString() string {
	var b strings.Builder
	for _, seg := range w.path {
		if seg.index >= 0 {
			b.WriteString("[" + strconv.Itoa(seg.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(seg.name)
	}
	return b.String()
}

// scanner reads a document already known to be valid JSON.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// key reads an object member's name and the colon after it; a name written with escapes or
// with bytes that are not UTF-8 is decoded (a copy), any other is the document's own bytes.
func (s *scanner) key() []byte {
	start := s.i
	escaped := s.str()
	raw := s.b[start+1 : s.i-1]
	if escaped || !utf8.Valid(raw) { // as decoding reads it: escapes resolved, bad bytes U+FFFD
		var name string
		if json.Unmarshal(s.b[start:s.i], &name) == nil {
			raw = []byte(name)
		}
	}
	s.space()
	s.i++ // :
	return raw
}

// str skips a string at the position and reports whether it held an escape.
func (s *scanner) str() (escaped bool) {
	s.i++ // opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
			continue
		case '"':
			s.i++
			return escaped
		}
		s.i++
	}
	return escaped
}

// skip skips the value at the position, whatever it is.
func (s *scanner) skip() {
	s.space()
	switch s.peek() {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return
				}
			}
			s.i++
		}
	default: // a number, true, false, null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			s.i++
		}
	}
}

// foldedField finds the field name names when case is ignored, as decoding does.
func foldedField(fields map[string]reflect.Type, name []byte) (reflect.Type, bool) {
	for n, t := range fields {
		if strings.EqualFold(n, string(name)) {
			return t, true
		}
	}
	return nil, false
}

var fieldsCache sync.Map // reflect.Type -> map[string]reflect.Type

// jsonFields maps the JSON names of t's fields (embedded structs' included) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					fields[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	fieldsCache.Store(t, fields)
	return fields
}
