package apiv1

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"

	"github.com/Masterminds/semver/v3"
)

// The selection rules every consumer of a discovery answer shares — the registry ordering
// its answers, the orchestrator ordering a step's candidates, and any front end (DNS, xDS)
// handing instances out: which eligibility states are in rotation (InRotation), what
// metadata.priority is (Priority), and in which order candidates for one capability come
// (Rank). They live here, once.

// Priority returns metadata.priority, the integer that orders candidates (higher first): 0
// when the metadata has none, and an error when it has one that is not a JSON integer.
func Priority(metadata json.RawMessage) (int64, error) {
	var m struct {
		Priority json.RawMessage `json:"priority"`
	}
	if len(metadata) == 0 || json.Unmarshal(metadata, &m) != nil || m.Priority == nil || string(m.Priority) == "null" {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(m.Priority, &n); err != nil {
		return 0, fmt.Errorf("must be an integer, got %s", m.Priority)
	}
	return n, nil
}

// Rank is what orders the candidates for one capability: metadata.priority descending, then
// capability_version descending (semantic version precedence), then generation (registration
// order) ascending.
type Rank struct {
	Priority   int64
	Version    *semver.Version // nil (an unparsable version) sorts after every version
	Generation int64
}

// Compare is negative when a goes before b, positive when after, 0 when they tie.
func (a Rank) Compare(b Rank) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := CompareVersions(b.Version, a.Version); c != 0 {
		return c
	}
	return cmp.Compare(a.Generation, b.Generation)
}

// CompareVersions is semantic version precedence (nil lowest) with a fast path:
// (*semver.Version).Compare costs most of a sort, and only pre-releases need its full rules.
func CompareVersions(a, b *semver.Version) int {
	switch {
	case a == nil || b == nil:
		return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
	}
	if c := cmp.Compare(a.Major(), b.Major()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Minor(), b.Minor()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Patch(), b.Patch()); c != 0 {
		return c
	}
	if a.Prerelease() == "" && b.Prerelease() == "" {
		return 0
	}
	return a.Compare(b)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// HostPort splits an instance endpoint URL into host and port (80, or 443 for https, when
// the URL names none).
func HostPort(endpoint string) (host string, port uint16, ok bool) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return "", 0, false
	}
	ps := u.Port()
	if ps == "" {
		ps = "80"
		if u.Scheme == "https" {
			ps = "443"
		}
	}
	p, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return u.Hostname(), uint16(p), true
}
