package apiv1

import (
	"bytes"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// FARPVersion is the only manifest format version this contract knows.
const FARPVersion = "1.0"

// Manifest codes: a manifest that breaks any rule is rejected whole, with the code of the
// first rule it breaks, in this order (docs/reference/routing.md, "Manifest validation").
const (
	CodeUnsupportedVersion  = "UNSUPPORTED_VERSION"
	CodeInvalidService      = "INVALID_SERVICE"
	CodeInvalidHealth       = "INVALID_HEALTH"
	CodeInvalidRoute        = "INVALID_ROUTE"
	CodeInvalidCapabilities = "INVALID_CAPABILITIES"
	CodePathNotAuthorized   = "PATH_NOT_AUTHORIZED"
)

// Manifest is a FARP manifest: the routes and health check a service publishes.
type Manifest struct {
	FARP         string                `json:"farp"`
	Service      ManifestService       `json:"service"`
	Health       *ManifestHealth       `json:"health,omitempty"`
	Capabilities *ManifestCapabilities `json:"capabilities,omitempty"`
	Routes       []ManifestRoute       `json:"routes"`
}

// MaxBodyBytesLimit is the largest max_body_bytes a manifest may declare (1 TiB).
const MaxBodyBytesLimit = 1 << 40

// MaxSchemaRefLen bounds a route's schema reference.
const MaxSchemaRefLen = 2048

// ManifestCapabilities is what a service says about how it takes requests, for every route
// of its manifest.
type ManifestCapabilities struct {
	// MaxBodyBytes is the largest request body the service takes (an integer from 1 to
	// MaxBodyBytesLimit): the gateway answers 413 to a larger one without forwarding it.
	// Nil: the gateway's --max-body-bytes.
	MaxBodyBytes *Number `json:"max_body_bytes,omitempty"`
	// Streaming says the service reads request bodies as they arrive and may answer before
	// the end: the gateway then forwards a body as it comes instead of reading a small one
	// whole first.
	Streaming *bool `json:"streaming,omitempty"`
}

// ManifestService names the instance a manifest belongs to.
type ManifestService struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Version  string `json:"version"`
}

// ManifestHealth is the health check a service declares for the registry's prober.
type ManifestHealth struct {
	Path           string  `json:"path"`
	Interval       string  `json:"interval"`
	UnhealthyAfter *Number `json:"unhealthy_after,omitempty"`
}

// ManifestRoute is one path a service asks the gateways to route to it.
type ManifestRoute struct {
	Path       string   `json:"path"`
	Methods    []string `json:"methods"`
	Idempotent []string `json:"idempotent,omitempty"`
	// Weight is 0..1000; nil means 100.
	Weight *Number `json:"weight,omitempty"`
	// Schema references the route's request and response schema (an absolute http(s) URL, or
	// a path on the service starting with /, at most MaxSchemaRefLen bytes, an optional
	// #fragment): shown with the route, never fetched by the gateway.
	Schema string `json:"schema,omitempty"`
	// MaxStale bounds how old a last-known-good view the gateways may serve this route from
	// while the registry is unreachable ("30s"): an operation that needs prompt revocation
	// (a tenant boundary, an ownership grant) declares it, and past it the route answers
	// 503 STALE_VIEW_EXPIRED until the registry is back. Empty: no bound of its own (the
	// gateway's --max-stale and policy apply; by default, no bound at all).
	MaxStale string `json:"max_stale,omitempty"`
}

// MaxStaleBound bounds a declared max_stale.
const MaxStaleBound = 72 * time.Hour

// ParseMaxStale reads a max_stale value: a positive duration of at most MaxStaleBound; ""
// is 0 (none declared).
func ParseMaxStale(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxStaleBound {
		return 0, fmt.Errorf("max_stale %q: want a positive duration of at most %s, like 30s", s, MaxStaleBound)
	}
	return d, nil
}

// Number is a JSON value kept exactly as written, for fields the contract requires to be
// a JSON integer: a manifest with "weight": 1.5 or "weight": "100" must be rejected by the
// manifest rules (INVALID_ROUTE), not fail to decode as a whole.
type Number string

// Int returns a *Number holding n, for building manifests in Go.
func Int(n int64) *Number {
	v := Number(strconv.FormatInt(n, 10))
	return &v
}

// UnmarshalJSON keeps any JSON value as written; Int64 decides whether it is an integer.
func (n *Number) UnmarshalJSON(b []byte) error {
	*n = Number(bytes.TrimSpace(b))
	return nil
}

// MarshalJSON writes the value as it was read (or built by Int).
func (n Number) MarshalJSON() ([]byte, error) {
	if n == "" {
		return []byte("null"), nil
	}
	return []byte(n), nil
}

// Int64 returns the value when it is a JSON integer (no fraction, no exponent, no quotes).
func (n Number) Int64() (int64, bool) {
	s := string(n)
	for i := 0; i < len(s); i++ { // a fraction, an exponent or quotes: not a JSON integer
		if c := s[i]; c == '.' || c == 'e' || c == 'E' || c == '"' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// SegmentKind tells what a path segment matches.
type SegmentKind int

// Segment kinds, in order of decreasing specificity.
const (
	Literal  SegmentKind = iota // matches itself
	Param                       // {name}: exactly one segment
	Wildcard                    // {name...}: zero or more segments, last only
)

// Segment is one segment of a route path.
type Segment struct {
	Kind SegmentKind
	// Value is the literal text, or the parameter's name.
	Value string
}

// ParsePath splits a route path into segments and checks the path rules: it starts with
// "/", has no empty segment, does not end with "/" (other than "/" itself), and every
// {param} is well formed and unique, with a {rest...} wildcard only as the last segment.
// The path "/" has no segments.
func ParsePath(p string) ([]Segment, error) {
	if p == "/" {
		return nil, nil
	}
	return appendPath(make([]Segment, 0, strings.Count(p, "/")), p)
}

// appendPath appends the segments of p to dst, as ParsePath parses them, and returns the
// new segments (a slice of dst's array when it had room: every route of every manifest is
// parsed at each derivation). p is scanned once, byte by byte.
func appendPath(dst []Segment, p string) ([]Segment, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("path %q does not start with /", p)
	}
	if p == "/" {
		return nil, nil
	}
	start := len(dst)
	for i := 1; ; {
		j, braces, escaped := i, false, false
		for ; j < len(p) && p[j] != '/'; j++ {
			switch p[j] {
			case '{', '}':
				braces = true
			case '%':
				escaped = true
			}
		}
		s, last := p[i:j], j == len(p)
		if s == "" {
			if last {
				return nil, fmt.Errorf("path %q ends with /", p)
			}
			return nil, fmt.Errorf("path %q has an empty segment", p)
		}
		if !braces {
			if msg := dotSegment(s, escaped); msg != "" {
				return nil, fmt.Errorf("path %q: segment %q %s", p, s, msg)
			}
			dst = append(dst, Segment{Kind: Literal, Value: s})
		} else {
			if s[0] != '{' || s[len(s)-1] != '}' {
				return nil, fmt.Errorf("path %q: malformed parameter %q", p, s)
			}
			name, kind := s[1:len(s)-1], Param
			if n, ok := strings.CutSuffix(name, "..."); ok {
				name, kind = n, Wildcard
				if !last {
					return nil, fmt.Errorf("path %q: wildcard %q is not the last segment", p, s)
				}
			}
			if !isParamName(name) {
				return nil, fmt.Errorf("path %q: malformed parameter %q", p, s)
			}
			for _, prev := range dst[start:] {
				if prev.Kind != Literal && prev.Value == name {
					return nil, fmt.Errorf("path %q: parameter %q appears twice", p, name)
				}
			}
			dst = append(dst, Segment{Kind: kind, Value: name})
		}
		if last {
			return dst[start:len(dst):len(dst)], nil
		}
		i = j + 1
	}
}

// dotSegment says what is wrong with a literal segment that path cleaning would resolve away
// ("." or "..", written plainly or percent-encoded) or that decodes to more than one segment:
// a gateway could never route a request to it, and it could claim another service's path.
// Checked only when the segment is a dot or holds an escape (the common case costs nothing).
func dotSegment(s string, escaped bool) string {
	switch {
	case s == "." || s == "..":
		return "is resolved away by path cleaning: no request can reach it"
	case !escaped:
		return ""
	}
	d, err := url.PathUnescape(s)
	switch {
	case err != nil:
		return "has a malformed percent-escape"
	case d == "." || d == "..":
		return "is a percent-encoded dot segment: path cleaning resolves it away"
	case strings.Contains(d, "/"):
		return "holds an encoded /: it would be two segments"
	}
	return ""
}

func isParamName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// ManifestProblem is one broken manifest rule.
type ManifestProblem struct {
	Code    string
	Path    string // the field, relative to the manifest ("routes[1].methods[0]")
	Message string
}

// Methods is every method a route may list, in byte order; MethodIndex gives a method's
// place in it.
var Methods = [...]string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}

// MethodIndex returns the index of m in Methods, or -1.
func MethodIndex(m string) int {
	switch m {
	case "DELETE":
		return 0
	case "GET":
		return 1
	case "HEAD":
		return 2
	case "OPTIONS":
		return 3
	case "PATCH":
		return 4
	case "POST":
		return 5
	case "PUT":
		return 6
	}
	return -1
}

// RouteInfo is a manifest route's path, parsed once by Analyze.
type RouteInfo struct {
	Segments []Segment
}

// sameShape reports whether two parsed paths match the same requests: equal literals, and a
// parameter or a wildcard where the other has one (parameter names do not count). It is the
// equality of routing keys, which routing builds.
func sameShape(a, b []Segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Kind != b[i].Kind || a[i].Kind == Literal && a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}

// Problems checks the manifest rules that need no policy (every rule of
// docs/reference/routing.md but PATH_NOT_AUTHORIZED) and returns every problem found, in rule
// order: the first problem's Code is the manifest's rejection code.
func (m *Manifest) Problems() []ManifestProblem {
	ps, _ := m.Analyze()
	return ps
}

// Analyze is Problems that also returns each route's parsed path, so that a caller that
// goes on to use the routes (route derivation) parses each path once.
func (m *Manifest) Analyze() ([]ManifestProblem, []RouteInfo) {
	var ps []ManifestProblem
	add := func(code, path, format string, args ...any) {
		ps = append(ps, ManifestProblem{Code: code, Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if m.FARP != FARPVersion {
		add(CodeUnsupportedVersion, "farp", "farp version %q is not supported (want %q)", m.FARP, FARPVersion)
	}
	if !isDNSLabel(m.Service.Name) {
		add(CodeInvalidService, "service.name", "not a DNS label: %q", m.Service.Name)
	}
	if m.Service.Instance == "" {
		add(CodeInvalidService, "service.instance", "must not be empty")
	}
	if !IsSemver(m.Service.Version) {
		add(CodeInvalidService, "service.version", "not a semantic version: %q", m.Service.Version)
	}
	if h := m.Health; h != nil {
		if !strings.HasPrefix(h.Path, "/") {
			add(CodeInvalidHealth, "health.path", "must start with /: %q", h.Path)
		}
		if d, err := time.ParseDuration(h.Interval); err != nil || d <= 0 {
			add(CodeInvalidHealth, "health.interval", "not a positive duration: %q", h.Interval)
		}
		if h.UnhealthyAfter == nil {
			add(CodeInvalidHealth, "health.unhealthy_after", "is required")
		} else if v, ok := h.UnhealthyAfter.Int64(); !ok || v < 1 {
			add(CodeInvalidHealth, "health.unhealthy_after", "not an integer >= 1: %s", *h.UnhealthyAfter)
		}
	}
	if c := m.Capabilities; c != nil && c.MaxBodyBytes != nil {
		if v, ok := c.MaxBodyBytes.Int64(); !ok || v < 1 || v > MaxBodyBytesLimit {
			add(CodeInvalidCapabilities, "capabilities.max_body_bytes", "not an integer from 1 to %d: %s", int64(MaxBodyBytesLimit), *c.MaxBodyBytes)
		}
	}
	infos := make([]RouteInfo, len(m.Routes))
	// One array holds the segments of every route: one allocation per manifest.
	n := 0
	for i := range m.Routes {
		n += strings.Count(m.Routes[i].Path, "/")
	}
	segments := make([]Segment, 0, n)
	var pathErrs []error // per route, when some route's path is malformed
	for i := range m.Routes {
		segs, err := appendPath(segments, m.Routes[i].Path)
		if err != nil {
			if pathErrs == nil {
				pathErrs = make([]error, len(m.Routes))
			}
			pathErrs[i] = err
			continue
		}
		segments = segments[:len(segments)+len(segs)]
		infos[i] = RouteInfo{Segments: segs}
	}
	claimed := make([]uint8, len(m.Routes)) // per route: the methods it claims, as bits
	for i := range m.Routes {
		r := &m.Routes[i]
		// Field paths are built only for a problem: derivation analyses every manifest.
		at := func(field string, j int) string {
			if j < 0 {
				return "routes[" + strconv.Itoa(i) + "]." + field
			}
			return "routes[" + strconv.Itoa(i) + "]." + field + "[" + strconv.Itoa(j) + "]"
		}
		var err error
		if pathErrs != nil {
			err = pathErrs[i]
		}
		if err != nil {
			add(CodeInvalidRoute, at("path", -1), "%v", err)
		}
		if len(r.Methods) == 0 {
			add(CodeInvalidRoute, at("methods", -1), "must not be empty")
		}
		var listed uint8
		for j, meth := range r.Methods {
			mi := MethodIndex(meth)
			if mi < 0 {
				add(CodeInvalidRoute, at("methods", j), "method %q is not one of GET HEAD POST PUT PATCH DELETE OPTIONS", meth)
				continue
			}
			bit := uint8(1) << mi
			if listed&bit != 0 {
				add(CodeInvalidRoute, at("methods", j), "method %s is listed twice", meth)
				continue
			}
			listed |= bit
			if err != nil {
				continue
			}
			for k := range i {
				if claimed[k]&bit != 0 && sameShape(infos[k].Segments, infos[i].Segments) {
					add(CodeInvalidRoute, at("methods", j), "%s %s is already claimed by %q", meth, r.Path, m.Routes[k].Path)
					break
				}
			}
		}
		claimed[i] = listed
		for j, meth := range r.Idempotent {
			if mi := MethodIndex(meth); mi < 0 || listed&(1<<mi) == 0 {
				add(CodeInvalidRoute, at("idempotent", j), "method %q is not in methods", meth)
			}
		}
		if r.Weight != nil {
			if v, ok := r.Weight.Int64(); !ok || v < 0 || v > 1000 {
				add(CodeInvalidRoute, at("weight", -1), "not an integer in 0..1000: %s", *r.Weight)
			}
		}
		if r.Schema != "" {
			if msg := schemaRefProblem(r.Schema); msg != "" {
				add(CodeInvalidRoute, at("schema", -1), "%s", msg)
			}
		}
		if _, err := ParseMaxStale(r.MaxStale); err != nil {
			add(CodeInvalidRoute, at("max_stale", -1), "%v", err)
		}
	}
	return ps, infos
}

// schemaRefProblem says why s is not a schema reference: an absolute http(s) URL or a path
// starting with /, printable, without white space, at most MaxSchemaRefLen bytes.
func schemaRefProblem(s string) string {
	if len(s) > MaxSchemaRefLen {
		return fmt.Sprintf("a reference of %d bytes, at most %d allowed", len(s), MaxSchemaRefLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return fmt.Sprintf("must not hold white space or control bytes: %q", s)
		}
	}
	if strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "//") {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("not an absolute http(s) URL or a path starting with /: %q", s)
	}
	return ""
}

// MaxBodyBytesOr returns the declared max_body_bytes, or def when the manifest declares none
// (or an invalid one, which Analyze reports).
func (m *Manifest) MaxBodyBytesOr(def int64) int64 {
	if m.Capabilities == nil || m.Capabilities.MaxBodyBytes == nil {
		return def
	}
	if v, ok := m.Capabilities.MaxBodyBytes.Int64(); ok && v >= 1 && v <= MaxBodyBytesLimit {
		return v
	}
	return def
}

// IsStreaming reports whether the manifest declares capabilities.streaming: true.
func (m *Manifest) IsStreaming() bool {
	return m.Capabilities != nil && m.Capabilities.Streaming != nil && *m.Capabilities.Streaming
}

// WeightOr returns the route's weight, or def when it is omitted or invalid.
func (r ManifestRoute) WeightOr(def int) int {
	if r.Weight == nil {
		return def
	}
	if v, ok := r.Weight.Int64(); ok {
		return int(v)
	}
	return def
}

// IsSemver reports whether s is a semantic version 2.0.0 (no leading v, no leading zeros,
// optional pre-release and build metadata). It is checked by hand, without allocating,
// because every registration checks several.
func IsSemver(s string) bool {
	if len(s) > 256 {
		return false
	}
	core, build, hasBuild := strings.Cut(s, "+")
	if hasBuild && !dotIdentifiers(build, false) {
		return false
	}
	core, pre, hasPre := strings.Cut(core, "-")
	if hasPre && !dotIdentifiers(pre, true) {
		return false
	}
	major, rest, ok := strings.Cut(core, ".")
	if !ok {
		return false
	}
	minor, patch, ok := strings.Cut(rest, ".")
	return ok && isUint64(major) && isUint64(minor) && isUint64(patch)
}

// isUint64 is isNumber for a value that must also fit in 64 bits.
func isUint64(s string) bool {
	if !isNumber(s) {
		return false
	}
	if len(s) < 20 {
		return true
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// dotIdentifiers checks dot-separated identifiers of [0-9A-Za-z-]; pre-release numeric
// identifiers must not have leading zeros.
func dotIdentifiers(s string, prerelease bool) bool {
	for {
		id, rest, more := strings.Cut(s, ".")
		if id == "" {
			return false
		}
		numeric := true
		for i := 0; i < len(id); i++ {
			c := id[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-':
				numeric = false
			default:
				return false
			}
		}
		if prerelease && numeric && len(id) > 1 && id[0] == '0' {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}
