package server

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/apijson"
)

// A registration's body went through encoding/json's reflection, after its validity pass,
// and then through a second walk looking for fields the contract does not define: together
// 12 % of the registry's CPU per registration under load. The usual body is read here
// directly, in one pass that also proves it holds no unknown field. Anything else goes
// through encoding/json and the unknown-field walk as before, so the accepted input, the
// errors, the warnings and the decoded request are the same either way
// (FuzzParseRegistration holds the direct reader to that). The answer is written directly
// too, byte for byte as encoding/json writes it (FuzzAppendRegisterAnswer).

// maxPlainDepth bounds the nesting of metadata the direct reader follows; deeper metadata
// is left to encoding/json.
const maxPlainDepth = 64

// parseRegistration reads a registration body of the usual form into req: the contract's
// fields other than manifest, each at most once, keys spelled exactly, strings without
// escapes, capabilities an array of objects of their five fields, metadata a JSON object
// (kept byte for byte, as json.RawMessage keeps it). It reports false, leaving req as it
// was, for anything else — another field, a key in other case, an escape, invalid UTF-8, a
// repeated key, null, a manifest — which encoding/json then reads. A body it accepts holds
// no field the contract does not define.
func parseRegistration(b []byte, req *apiv1.RegisterRequest) bool {
	p := plainReader{b: b}
	var (
		r    apiv1.RegisterRequest
		seen [6]bool
	)
	ok := p.object(func(key []byte) bool {
		switch string(key) { // a conversion in a switch does not allocate
		case "instance_id":
			return once(&seen[0]) && p.str(&r.InstanceID)
		case "service_name":
			return once(&seen[1]) && p.str(&r.ServiceName)
		case "service_version":
			return once(&seen[2]) && p.str(&r.ServiceVersion)
		case "endpoint":
			return once(&seen[3]) && p.str(&r.Endpoint)
		case "zone":
			return once(&seen[4]) && p.str(&r.Zone)
		case "capabilities":
			return once(&seen[5]) && p.capabilities(&r.Capabilities)
		}
		return false
	})
	if !ok || p.space() != len(b) {
		return false
	}
	*req = r
	return true
}

// once marks a key as seen, reporting false when it was already.
func once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

// plainReader reads the JSON forms parseRegistration accepts.
type plainReader struct {
	b []byte
	i int
}

// space skips JSON whitespace and returns the position reached.
func (p *plainReader) space() int {
	p.i = skipSpace(p.b, p.i)
	return p.i
}

// consume skips whitespace and then c, reporting whether c was there.
func (p *plainReader) consume(c byte) bool {
	if p.space() < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads an object whose keys are lowercase letters and underscores, calling member
// for each with the reader at its value; member reads the value or reports false.
func (p *plainReader) object(member func(key []byte) bool) bool {
	if !p.consume('{') {
		return false
	}
	if p.consume('}') {
		return true
	}
	for {
		if !p.consume('"') {
			return false
		}
		j := p.i
		for j < len(p.b) && (p.b[j] >= 'a' && p.b[j] <= 'z' || p.b[j] == '_') {
			j++
		}
		if j >= len(p.b) || p.b[j] != '"' {
			return false
		}
		key := p.b[p.i:j]
		p.i = j + 1
		if !p.consume(':') {
			return false
		}
		p.space()
		if !member(key) {
			return false
		}
		if p.consume('}') {
			return true
		}
		if !p.consume(',') {
			return false
		}
	}
}

// str reads a string without escapes or control characters, in valid UTF-8 (which
// encoding/json would decode to the same bytes), into s.
func (p *plainReader) str(s *string) bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	ascii := true
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			v := p.b[p.i+1 : j]
			if !ascii && !utf8.Valid(v) {
				return false
			}
			*s, p.i = string(v), j+1
			return true
		case c < 0x20 || c == '\\':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return false
}

// capabilities reads an array of capability objects into cs.
func (p *plainReader) capabilities(cs *[]apiv1.Capability) bool {
	if !p.consume('[') {
		return false
	}
	if p.consume(']') {
		*cs = []apiv1.Capability{} // encoding/json makes an empty array an empty, non-nil slice
		return true
	}
	list := make([]apiv1.Capability, 0, 2) // most providers declare one or two
	for {
		var (
			c    apiv1.Capability
			seen [5]bool
		)
		ok := p.object(func(key []byte) bool {
			switch string(key) {
			case "capability_id":
				return once(&seen[0]) && p.str(&c.CapabilityID)
			case "capability_version":
				return once(&seen[1]) && p.str(&c.CapabilityVersion)
			case "contract_schema_version":
				return once(&seen[2]) && p.str(&c.ContractSchemaVersion)
			case "provider":
				return once(&seen[3]) && p.str(&c.Provider)
			case "metadata":
				start := p.i
				if !once(&seen[4]) || p.i >= len(p.b) || p.b[p.i] != '{' || !p.value(0) {
					return false
				}
				c.Metadata = bytes.Clone(p.b[start:p.i]) // a copy, as json.RawMessage makes
				return true
			}
			return false
		})
		if !ok {
			return false
		}
		list = append(list, c)
		if p.consume(']') {
			*cs = list
			return true
		}
		if !p.consume(',') {
			return false
		}
	}
}

// value skips one JSON value at the reader's position, reporting false for anything
// encoding/json's scanner refuses and for nesting deeper than maxPlainDepth.
func (p *plainReader) value(depth int) bool {
	if depth > maxPlainDepth || p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; c {
	case '{', '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.i++
		if p.consume(end) {
			return true
		}
		for {
			p.space()
			if c == '{' && (!p.rawString() || !p.consume(':')) {
				return false
			}
			p.space()
			if !p.value(depth + 1) {
				return false
			}
			if p.consume(end) {
				return true
			}
			if !p.consume(',') {
				return false
			}
		}
	case '"':
		return p.rawString()
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	}
	return p.number()
}

// literal skips word.
func (p *plainReader) literal(word string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		return false
	}
	p.i += len(word)
	return true
}

// rawString skips a JSON string, escapes included.
func (p *plainReader) rawString() bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			j++
			if j >= len(p.b) {
				return false
			}
			switch p.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(p.b) {
					return false
				}
				for _, h := range p.b[j+1 : j+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		}
	}
	return false
}

// number skips a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *plainReader) number() bool {
	b, j := p.b, p.i
	digits := func() int {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case digits() == 0:
		return false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if digits() == 0 {
			return false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if digits() == 0 {
			return false
		}
	}
	p.i = j
	return true
}

// appendRegisterAnswer appends resp as httpapi.Marshal encodes it (one line of JSON and a
// newline), or reports false when resp holds what it leaves to encoding/json: warnings, or
// an epoch that needs escaping.
func appendRegisterAnswer(dst []byte, resp *apiv1.RegisterResponse) ([]byte, bool) {
	if len(resp.Warnings) > 0 || !apijson.Plain(resp.RegistryEpoch) {
		return dst, false
	}
	dst = append(dst, `{"accepted":`...)
	dst = strconv.AppendBool(dst, resp.Accepted)
	dst = append(dst, `,"lease_ttl_seconds":`...)
	dst = strconv.AppendInt(dst, resp.LeaseTTLSeconds, 10)
	dst = append(dst, `,"heartbeat_interval_seconds":`...)
	dst = strconv.AppendInt(dst, resp.HeartbeatIntervalSeconds, 10)
	dst = append(dst, `,"generation":`...)
	dst = strconv.AppendInt(dst, resp.Generation, 10)
	dst = append(dst, `,"registry_epoch":"`...)
	dst = append(dst, resp.RegistryEpoch...)
	return append(dst, "\"}\n"...), true
}
