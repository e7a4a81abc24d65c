package apiv1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Limits of a registration (docs/reference/api.md, "POST /v1/services/register").
const (
	MaxInstanceIDLen = 253
	MaxCapabilities  = 64
	MaxMetadataBytes = 16 << 10
)

var validHealthValues = map[string]bool{"": true, HealthOK: true, HealthDegraded: true, HealthFailing: true, HealthNotReady: true}

// Validate checks every shape and value rule of a registration and returns nil, or an
// *Error with code INVALID_REQUEST and one Detail per problem, all of them at once.
func (r *RegisterRequest) Validate() error {
	var ds []Detail
	add := func(path, format string, args ...any) {
		ds = append(ds, Detail{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if msg := InstanceIDProblem(r.InstanceID); msg != "" {
		add("instance_id", "%s", msg)
	}
	if !isDNSLabel(r.ServiceName) {
		add("service_name", "not a DNS label (lower-case letters, digits and '-', 1-63 chars): %q", r.ServiceName)
	}
	if !IsSemver(r.ServiceVersion) {
		add("service_version", "not a semantic version: %q", r.ServiceVersion)
	}
	if msg := endpointProblem(r.Endpoint); msg != "" {
		add("endpoint", "%s", msg)
	}
	if r.Zone != "" && !isDNSLabel(r.Zone) {
		add("zone", "not a DNS label: %q", r.Zone)
	}
	if !validHealthValues[r.Health] {
		add("health", "must be ok, degraded, failing or not_ready, got %q", r.Health)
	}
	if r.Team != "" && !isDNSLabel(r.Team) {
		add("team", "not a DNS label (lower-case letters, digits and '-', 1-63 chars): %q", r.Team)
	}
	if r.Readiness != "" && r.Readiness != ReadinessRuntime {
		add("readiness", "must be runtime or left out (the registry says probe or none itself), got %q", r.Readiness)
	}
	switch n := len(r.Capabilities); {
	case n == 0:
		add("capabilities", "at least one capability is required")
	case n > MaxCapabilities:
		add("capabilities", "%d capabilities, at most %d allowed", n, MaxCapabilities)
	}
	for i, c := range r.Capabilities {
		// The path is built only for a problem: this loop is on the registration hot path.
		at := func(field string) string { return fmt.Sprintf("capabilities[%d]%s", i, field) }
		if !IsCapabilityID(c.CapabilityID) {
			add(at(".capability_id"), "not a dotted capability id like messaging.publish: %q", c.CapabilityID)
		}
		if !IsSemver(c.CapabilityVersion) {
			add(at(".capability_version"), "not a semantic version: %q", c.CapabilityVersion)
		}
		if !isSchemaVersion(c.ContractSchemaVersion) {
			add(at(".contract_schema_version"), "not MAJOR.MINOR: %q", c.ContractSchemaVersion)
		}
		if !isDNSLabel(c.Provider) {
			add(at(".provider"), "not a DNS label: %q", c.Provider)
		}
		if m := bytes.TrimSpace(c.Metadata); len(m) > 0 && !bytes.Equal(m, []byte("null")) {
			switch {
			case m[0] != '{':
				add(at(".metadata"), "must be a JSON object")
			case len(m) > MaxMetadataBytes:
				add(at(".metadata"), "%d bytes encoded, at most %d allowed", len(m), MaxMetadataBytes)
			default:
				if bytes.Contains(m, []byte(`"priority"`)) { // skip the decode on the hot path otherwise
					if _, err := Priority(m); err != nil { // it orders candidates: a string or a fraction was silently read as 0
						add(at(".metadata.priority"), "%v", err)
					}
				}
				if bytes.Contains(m, []byte(`"public_paths"`)) {
					paths, err := c.PublicPaths()
					if err != nil {
						add(at(".metadata.public_paths"), "must be a list of paths: %v", err)
					}
					for j, p := range paths {
						if _, err := ParsePath(p); err != nil {
							add(at(fmt.Sprintf(".metadata.public_paths[%d]", j)), "%v", err)
						}
					}
				}
			}
		}
		// At most 64 entries: a quadratic scan beats building a map on every registration.
		for j, d := range r.Capabilities[:i] {
			if d.CapabilityID == c.CapabilityID && d.Provider == c.Provider && d.CapabilityVersion == c.CapabilityVersion {
				add(at(""), "duplicates capabilities[%d] (same capability_id, provider and capability_version)", j)
				break
			}
		}
	}
	if m := r.Manifest; m != nil {
		for _, p := range m.Problems() {
			add("manifest."+p.Path, "%s (%s)", p.Message, p.Code)
		}
		if m.Service.Name != r.ServiceName {
			add("manifest.service.name", "%q does not equal service_name %q", m.Service.Name, r.ServiceName)
		}
		if m.Service.Instance != r.InstanceID {
			add("manifest.service.instance", "%q does not equal instance_id %q", m.Service.Instance, r.InstanceID)
		}
	}
	if len(ds) > 0 {
		return InvalidRequest(ds)
	}
	return nil
}

// PublicPaths returns the capability's metadata.public_paths (nil when it declares none), or
// an error when the member is not a list of strings.
func (c Capability) PublicPaths() ([]string, error) {
	m := bytes.TrimSpace(c.Metadata)
	if len(m) == 0 || !bytes.Contains(m, []byte(`"public_paths"`)) {
		return nil, nil
	}
	var meta struct {
		PublicPaths json.RawMessage `json:"public_paths"`
	}
	if err := json.Unmarshal(m, &meta); err != nil || meta.PublicPaths == nil || string(meta.PublicPaths) == "null" {
		return nil, nil
	}
	var paths []string
	if err := json.Unmarshal(meta.PublicPaths, &paths); err != nil {
		return nil, fmt.Errorf("got %s", meta.PublicPaths)
	}
	return paths, nil
}

// Validate checks a heartbeat body.
func (h *HeartbeatRequest) Validate() error {
	var ds []Detail
	if h.Generation < 1 {
		ds = append(ds, Detail{Path: "generation", Message: fmt.Sprintf("must be the generation the registration returned (>= 1), got %d", h.Generation)})
	}
	if !validHealthValues[h.Health] {
		ds = append(ds, Detail{Path: "health", Message: fmt.Sprintf("must be ok, degraded, failing or not_ready, got %q", h.Health)})
	}
	if len(ds) > 0 {
		return InvalidRequest(ds)
	}
	return nil
}

// MaxOutcomes bounds the outcomes of one POST /v1/outcomes.
const MaxOutcomes = 1000

// MaxOutcomeCount bounds each count of one outcome; MaxOutcomeLatencyMs its latency (a day).
const (
	MaxOutcomeCount     = 1_000_000_000
	MaxOutcomeLatencyMs = 86_400_000
)

// Validate checks an outcomes body: every problem at once.
func (o *OutcomesRequest) Validate() error {
	var ds []Detail
	if o.GatewayID == "" {
		ds = append(ds, Detail{Path: "gateway_id", Message: "is required"})
	}
	if len(o.Outcomes) > MaxOutcomes {
		ds = append(ds, Detail{Path: "outcomes", Message: fmt.Sprintf("at most %d per request, got %d", MaxOutcomes, len(o.Outcomes))})
	}
	for i, x := range o.Outcomes {
		p := fmt.Sprintf("outcomes[%d]", i)
		if msg := InstanceIDProblem(x.InstanceID); msg != "" {
			ds = append(ds, Detail{Path: p + ".instance_id", Message: msg})
		}
		if x.Generation < 1 {
			ds = append(ds, Detail{Path: p + ".generation", Message: fmt.Sprintf("must be >= 1, got %d", x.Generation)})
		}
		if x.OK < 0 || x.Errors < 0 || x.ConnectFailures < 0 {
			ds = append(ds, Detail{Path: p, Message: "ok, errors and connect_failures must not be negative"})
		}
		if x.OK > MaxOutcomeCount || x.Errors > MaxOutcomeCount || x.ConnectFailures > MaxOutcomeCount {
			ds = append(ds, Detail{Path: p, Message: fmt.Sprintf("ok, errors and connect_failures must be at most %d each (one reporting window of one instance)", MaxOutcomeCount)})
		}
		if x.LatencyMsP99 < 0 || x.LatencyMsP99 > MaxOutcomeLatencyMs || x.LatencyMsP99 != x.LatencyMsP99 {
			ds = append(ds, Detail{Path: p + ".latency_ms_p99", Message: fmt.Sprintf("must be within 0..%d milliseconds, got %v", MaxOutcomeLatencyMs, x.LatencyMsP99)})
		}
	}
	if len(ds) > 0 {
		return InvalidRequest(ds)
	}
	return nil
}

// InstanceIDProblem says what is wrong with an instance id, or "" when it is valid:
// 1-253 characters of [A-Za-z0-9._:-].
func InstanceIDProblem(id string) string {
	if id == "" || len(id) > MaxInstanceIDLen {
		return fmt.Sprintf("must be 1-%d characters, got %d", MaxInstanceIDLen, len(id))
	}
	if id == "." || id == ".." {
		return fmt.Sprintf("%q is not an instance id: it would name a path segment, not an instance", id)
	}
	for i, c := range id { // by character: a message names 'é', not the byte 'Ã'
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Sprintf("character %q at offset %d is not one of [A-Za-z0-9._:-]", c, i)
		}
	}
	return ""
}

// IsCapabilityID reports whether s is a dotted capability id:
// ^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$ (checked by hand: it is on the registration hot path).
func IsCapabilityID(s string) bool {
	dots, start := 0, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if start {
				return false
			}
			dots, start = dots+1, true
		case c >= 'a' && c <= 'z':
			start = false
		case c >= '0' && c <= '9' || c == '_':
			if start {
				return false
			}
		default:
			return false
		}
	}
	return dots > 0 && !start
}

// isSchemaVersion reports whether s is MAJOR.MINOR without leading zeros.
func isSchemaVersion(s string) bool {
	major, minor, ok := strings.Cut(s, ".")
	return ok && isNumber(major) && isNumber(minor)
}

func isNumber(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isDNSLabel reports whether s matches ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// EndpointProblem returns why s is not an endpoint — scheme://host[:port] with an optional
// path prefix, http or https, no query, fragment or user info — or "".
func EndpointProblem(s string) string { return endpointProblem(s) }

func endpointProblem(s string) string {
	if s == "" {
		return "is required"
	}
	if plainEndpoint(s) {
		return ""
	}
	return parsedEndpointProblem(s)
}

// parsedEndpointProblem is endpointProblem of a non-empty endpoint by url.Parse.
func parsedEndpointProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("scheme must be http or https: %q", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("has no host: %q", s)
	case u.User != nil:
		return "must not carry user info"
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(s, "?"):
		return fmt.Sprintf("must not carry a query: an endpoint is scheme://host[:port] with an optional path prefix: %q", s)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return fmt.Sprintf("must not carry a fragment: an endpoint is scheme://host[:port] with an optional path prefix: %q", s)
	case strings.ContainsAny(s, " \t\r\n"):
		return "must not contain white space"
	}
	return ""
}

// plainEndpoint reports whether s has the form nearly every endpoint has — "http://" or
// "https://", a host of letters, digits, dots and dashes, an optional port of digits, an
// optional path of letters, digits, "/", ".", "_", "~" and "-" — which url.Parse takes and
// every check of endpointProblem passes. A registration so skips url.Parse, 3 % of its CPU;
// anything else gets the whole check (FuzzPlainEndpoint holds the two together).
func plainEndpoint(s string) bool {
	rest, ok := strings.CutPrefix(s, "http://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "https://"); !ok {
			return false
		}
	}
	i := 0
	for i < len(rest) && (isAlnum(rest[i]) || rest[i] == '.' || rest[i] == '-') {
		i++
	}
	if i == 0 {
		return false // no host
	}
	if i < len(rest) && rest[i] == ':' {
		j := i + 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == i+1 {
			return false // an empty port: the whole check decides
		}
		i = j
	}
	if i == len(rest) {
		return true
	}
	if rest[i] != '/' {
		return false
	}
	for _, c := range []byte(rest[i:]) {
		if !isAlnum(c) && c != '/' && c != '.' && c != '_' && c != '~' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
