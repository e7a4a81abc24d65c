package apiv1

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unknownFieldsTree is UnknownFields the obvious way — decode to a tree, walk it along the
// type — kept to check the scanning one against.
func unknownFieldsTree(raw []byte, into any) []Warning {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	var out []Warning
	walkTree(doc, reflect.TypeOf(into), "", &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func walkTree(v any, t reflect.Type, path string, out *[]Warning) {
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
				ft, known = foldedField(fields, []byte(k)) // encoding/json matches names case-insensitively
			}
			if !known {
				*out = append(*out, Warning{Code: CodeUnknownField, Path: p,
					Message: "not a field of this request: ignored (a misspelling?)"})
				continue
			}
			walkTree(obj[k], ft, p, out)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range arr {
			walkTree(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", out)
		}
	}
}

// FuzzUnknownFieldsAgreesWithTheTree checks the scanning walk against the tree walk.
func FuzzUnknownFieldsAgreesWithTheTree(f *testing.F) {
	f.Add([]byte(`{"instance_id":"a","zoen":"a","capabilities":[{"provder":"x","metadata":{"y":1}},{}],"manifest":{"routes":[{"methdos":[],"path":"/x"}],"health":null}}`))
	f.Add([]byte(`{"Instance_ID":"a","ca\u0070abilities":[{"pro\"v":1}], "x": [1, {"a": "}]"}]}`))
	f.Add([]byte(`[1,{"a":null}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := UnknownFields(raw, &RegisterRequest{})
		want := unknownFieldsTree(raw, &RegisterRequest{})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s (-tree +scan):\n%s", raw, diff)
		}
	})
}
