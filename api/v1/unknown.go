package apiv1

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
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
// type of into does not define (by its json tags), with its path ("zoen",
// "capabilities[0].provder", "manifest.routes[1].methdos"), sorted. Members held as raw JSON
// or maps (metadata) are free-form and never reported. A document that is not valid JSON
// gives none: decoding reports that.
func UnknownFields(raw []byte, into any) []Warning {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	var out []Warning
	walkUnknown(doc, reflect.TypeOf(into), "", &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

func walkUnknown(v any, t reflect.Type, path string, out *[]Warning) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessage {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			ft, known := fields[k]
			if !known {
				ft, known = foldedField(fields, k) // encoding/json matches names case-insensitively
			}
			if !known {
				*out = append(*out, Warning{Code: CodeUnknownField, Path: p,
					Message: "not a field of this request: ignored (a misspelling?)"})
				continue
			}
			walkUnknown(obj[k], ft, p, out)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range arr {
			walkUnknown(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", out)
		}
	}
}

// foldedField finds the field k names when case is ignored, as decoding does.
func foldedField(fields map[string]reflect.Type, k string) (reflect.Type, bool) {
	for name, t := range fields {
		if strings.EqualFold(name, k) {
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
