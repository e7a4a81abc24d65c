package apiv1

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
)

// Nearest returns the name of names within two edits of s, if one is: what a misspelt
// parameter or field probably meant.
func Nearest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (short names).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fieldNames returns the JSON names of the fields of struct type t (one level).
func fieldNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// RefuseUnknownFields is the 400 UNKNOWN_FIELD error for the members of the decoded JSON
// document raw that into does not define, each naming the nearest field it has; nil when
// there is none. Operator actions are read strictly: a misspelt field must never widen an
// action's effect (a misspelt capability_id evacuating every capability of a zone).
func RefuseUnknownFields(raw []byte, into any) error {
	ws := UnknownFieldsOfDecoded(raw, into)
	if len(ws) == 0 {
		return nil
	}
	known := fieldNames(reflect.TypeOf(into))
	e := Errorf(http.StatusBadRequest, CodeUnknownField, "unknown field %q: operator actions take only the fields they define", ws[0].Path)
	if len(ws) > 1 {
		e.Message = fmt.Sprintf("%d unknown fields: operator actions take only the fields they define", len(ws))
	}
	for _, w := range ws {
		msg := "not a field of this request"
		if near := Nearest(w.Path, known); near != "" {
			msg += fmt.Sprintf("; did you mean %q?", near)
		}
		e.Details = append(e.Details, Detail{Path: w.Path, Message: msg})
	}
	return e
}
