package journal

import (
	"encoding/json"
	"slices"
	"strconv"
)

// encodeAttrs returns attrs as JSON, as json.Marshal writes them. Events carry a few
// attributes of plain kinds, and json.Marshal's reflection and map sorting were a twentieth of
// a registration's CPU (two events each): those are written here directly (an Object),
// anything else by json.Marshal. A map JSON cannot encode gives an attrs_error attribute
// instead.
func encodeAttrs(attrs map[string]any) json.RawMessage {
	var scratch [512]byte
	if o, ok := appendAttrs(NewObject(scratch[:]), attrs); ok {
		return o.JSON()
	}
	b, err := json.Marshal(attrs)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"attrs_error": err.Error()})
	}
	return b
}

// appendAttrs adds attrs to o, their keys in byte order, when every key is plain (plainJSON)
// and every value of a kind an Object writes: strings, integers, booleans, nil, and lists of
// strings. It reports false for anything else.
func appendAttrs(o Object, attrs map[string]any) (Object, bool) {
	var keyArr [16]string
	keys := keyArr[:0]
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys) // json.Marshal's order: by bytes
	for _, k := range keys {
		if !plainJSON(k) {
			return o, false
		}
		switch v := attrs[k].(type) {
		case string:
			o = o.Str(k, v)
		case int:
			o = o.Int(k, int64(v))
		case int64:
			o = o.Int(k, v)
		case int32:
			o = o.Int(k, int64(v))
		case uint64:
			o = Object{b: strconv.AppendUint(o.key(k), v, 10)}
		case bool:
			o = o.Bool(k, v)
		case nil:
			o = Object{b: append(o.key(k), "null"...)}
		case []string:
			o = o.strs(k, v)
		default:
			return o, false
		}
	}
	return o, true
}

// plainJSON reports whether json.Marshal writes s between quotes as it is: printable ASCII
// without a quote, a backslash or the characters it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Object writes an event's attributes as a JSON object while they are added, for the event
// the registry records with every registration: the bytes encodeAttrs writes for a map of the
// same attributes (json.Marshal's), without building the map, sorting its keys or boxing its
// values. Keys must be plain (plainJSON) and added in their byte order, as json.Marshal sorts
// a map's. Adding returns the Object grown, as append does (so that a buffer on the caller's
// stack stays there). The zero Object is empty; NewObject gives it room to write in.
type Object struct {
	b []byte
}

// NewObject returns an empty Object that writes in buf while the object fits (an array on the
// caller's stack: then nothing is allocated but the finished object).
func NewObject(buf []byte) Object { return Object{b: buf[:0]} }

func (o Object) key(k string) []byte {
	b := o.b
	if len(b) == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

// Str adds a string attribute.
func (o Object) Str(k, v string) Object { return Object{b: appendString(o.key(k), v)} }

// strs adds a list of strings (null when nil).
func (o Object) strs(k string, vs []string) Object {
	b := o.key(k)
	if vs == nil {
		return Object{b: append(b, "null"...)}
	}
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return Object{b: append(b, ']')}
}

// appendString appends v as json.Marshal writes a string: quoted, escaped when not plain.
func appendString(b []byte, v string) []byte {
	if plainJSON(v) {
		b = append(b, '"')
		b = append(b, v...)
		return append(b, '"')
	}
	q, _ := json.Marshal(v) // a string always encodes
	return append(b, q...)
}

// Int adds an integer attribute.
func (o Object) Int(k string, v int64) Object { return Object{b: strconv.AppendInt(o.key(k), v, 10)} }

// Bool adds a boolean attribute.
func (o Object) Bool(k string, v bool) Object { return Object{b: strconv.AppendBool(o.key(k), v)} }

// JSON returns the object, exactly sized (the journal keeps it): {} when nothing was added.
func (o Object) JSON() json.RawMessage {
	if len(o.b) == 0 {
		return json.RawMessage(`{}`)
	}
	out := make(json.RawMessage, len(o.b)+1)
	copy(out, o.b)
	out[len(o.b)] = '}'
	return out
}
