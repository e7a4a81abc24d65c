package journal

import (
	"encoding/json"
	"math"
	"testing"
)

func TestEncodeAttrsAsJSONMarshal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attrs  map[string]any
		direct bool // written as an Object, not by json.Marshal
	}{
		{"registration", map[string]any{"service_name": "egress-jms", "generation": int64(42), "endpoint": "http://10.0.0.7:8080", "capabilities": 3, "warm_up": true}, true},
		{"transition", map[string]any{"from": "in_rotation", "to": "ejected", "reasons": []string{"PROBE_FAILING", "LEASE_LATE"}}, true},
		{"no reasons", map[string]any{"from": "absent", "to": "pending", "reasons": []string(nil)}, true},
		{"empty reasons", map[string]any{"reasons": []string{}}, true},
		{"nil value", map[string]any{"x": nil}, true},
		{"extremes", map[string]any{"a": int64(math.MinInt64), "b": uint64(math.MaxUint64), "c": int32(-7), "d": false}, true},
		{"keys in byte order", map[string]any{"b": 1, "B": 2, "a_b": 3, "ab": 4, "": 5}, true},
		{"html", map[string]any{"message": "a < b && c > d"}, true},
		{"quote", map[string]any{"message": `say "hi"`}, true},
		{"newline", map[string]any{"message": "two\nlines"}, true},
		{"not ASCII", map[string]any{"zone": "zürich"}, true},
		{"escaped key", map[string]any{"a&b": 1}, false},
		{"escaped list item", map[string]any{"reasons": []string{"ok", "<no>"}}, true},
		{"float", map[string]any{"ratio": 0.25}, false},
		{"map", map[string]any{"nested": map[string]any{"a": 1}}, false},
		{"time-like struct", map[string]any{"at": struct{ X int }{1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, direct := appendAttrs(Object{}, tc.attrs)
			if direct != tc.direct {
				t.Errorf("written directly = %v, want %v", direct, tc.direct)
			}
			want, err := json.Marshal(tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got := encodeAttrs(tc.attrs); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// FuzzEncodeAttrs: whatever the attributes hold, encodeAttrs writes what json.Marshal writes.
func FuzzEncodeAttrs(f *testing.F) {
	f.Add("service_name", "egress-jms", "reasons", "PROBE_FAILING", int64(42), true)
	f.Add("a<b", "x\x00y", "", "é", int64(-1), false)
	f.Fuzz(func(t *testing.T, k1, v1, k2, item string, n int64, b bool) {
		attrs := map[string]any{k1: v1, k2: []string{item, v1}, "n": n, "b": b}
		want, err := json.Marshal(attrs)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeAttrs(attrs); string(got) != string(want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

// objectCase adds its attributes to an Object in their keys' byte order and returns the same
// attributes as a map.
func objectCase(n int64, s1, s2 string, b bool) (Object, map[string]any) {
	var buf [16]byte // outgrown by most cases: the object then moves to the heap
	o := NewObject(buf[:]).Int("a_count", n).Str("b_name", s1).Bool("c_flag", b).Str("d_text", s2)
	return o, map[string]any{"a_count": n, "b_name": s1, "c_flag": b, "d_text": s2}
}

// TestObjectIsMarshal: an Object writes the bytes json.Marshal writes for a map of the same
// attributes, strings to escape (quotes, HTML, control characters, invalid UTF-8) included.
func TestObjectIsMarshal(t *testing.T) {
	tests := []struct {
		name   string
		n      int64
		s1, s2 string
		b      bool
	}{
		{"plain", 42, "egress-jms", "http://10.0.0.7:8080", true},
		{"to escape", math.MinInt64, `a "quoted" \ name`, "x=1&y=<2>", false},
		{"control and invalid UTF-8", math.MaxInt64, "tab\there\n", "\xff\xfe é \u2028", true},
		{"empty", 0, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, m := objectCase(tt.n, tt.s1, tt.s2, tt.b)
			want, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := o.JSON(); string(got) != string(want) {
				t.Errorf("Object = %s\njson.Marshal = %s", got, want)
			}
		})
	}
	var empty Object
	if got := string(empty.JSON()); got != "{}" {
		t.Errorf("an empty Object = %s, want {}", got)
	}
}

func FuzzObject(f *testing.F) {
	f.Add(int64(7), "egress-jms", "http://10.0.0.7:8080", true)
	f.Add(int64(-1), "<&>", "\x00\"\\\xff", false)
	f.Fuzz(func(t *testing.T, n int64, s1, s2 string, b bool) {
		o, m := objectCase(n, s1, s2, b)
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.JSON(); string(got) != string(want) {
			t.Errorf("Object = %s\njson.Marshal = %s", got, want)
		}
	})
}
