package journal

import (
	"encoding/json"
	"slices"
	"strconv"
)

// encodeAttrs returns attrs as JSON, as json.Marshal writes them. Events carry a few
// attributes of plain kinds, and json.Marshal's reflection and map sorting were a twentieth of
// a registration's CPU (two events each): those are written here directly, anything else by
// json.Marshal. A map JSON cannot encode gives an attrs_error attribute instead.
func encodeAttrs(attrs map[string]any) json.RawMessage {
	var scratch [512]byte
	if b, ok := appendAttrs(scratch[:0], attrs); ok {
		return append(json.RawMessage(nil), b...) // exactly sized: the journal keeps it
	}
	b, err := json.Marshal(attrs)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"attrs_error": err.Error()})
	}
	return b
}

// appendAttrs appends attrs as a JSON object, its keys in order, when every key and value is
// one it writes byte for byte as json.Marshal does: strings that need no escaping, integers,
// booleans, nil, and lists of such strings. It reports false for anything else.
func appendAttrs(dst []byte, attrs map[string]any) ([]byte, bool) {
	var keyArr [16]string
	keys := keyArr[:0]
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys) // json.Marshal's order: by bytes
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		if !plainJSON(k) {
			return dst, false
		}
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':')
		switch v := attrs[k].(type) {
		case string:
			if !plainJSON(v) {
				return dst, false
			}
			dst = append(dst, '"')
			dst = append(dst, v...)
			dst = append(dst, '"')
		case int:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case int32:
			dst = strconv.AppendInt(dst, int64(v), 10)
		case uint64:
			dst = strconv.AppendUint(dst, v, 10)
		case bool:
			dst = strconv.AppendBool(dst, v)
		case nil:
			dst = append(dst, "null"...)
		case []string:
			if v == nil {
				dst = append(dst, "null"...)
				break
			}
			dst = append(dst, '[')
			for j, s := range v {
				if !plainJSON(s) {
					return dst, false
				}
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, '"')
				dst = append(dst, s...)
				dst = append(dst, '"')
			}
			dst = append(dst, ']')
		default:
			return dst, false
		}
	}
	return append(dst, '}'), true
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
func (o Object) Str(k, v string) Object {
	b := o.key(k)
	if plainJSON(v) {
		b = append(b, '"')
		b = append(b, v...)
		return Object{b: append(b, '"')}
	}
	q, _ := json.Marshal(v) // escaped as json.Marshal escapes it in a map; a string always encodes
	return Object{b: append(b, q...)}
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
