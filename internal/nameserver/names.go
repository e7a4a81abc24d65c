package nameserver

import (
	"errors"
	"strconv"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// The kinds of name the server answers.
const (
	kindCapability = "cap"
	kindService    = "svc"
	kindInstance   = "inst"
)

// name is a parsed query name.
type name struct {
	kind string
	// capability names: the capability id, and optionally one provider and one major version
	capability string
	provider   string
	major      int // -1: any
	// svc and inst names
	id string
}

// errNotOurs: the name is not under the domain, or no form of ours.
var errNotOurs = errors.New("no such name")

// parseName reads a query name (lower-cased, fully qualified) under domain (lower-cased,
// fully qualified):
//
//	<capability-id>.cap.<domain>             _<provider>.<capability-id>.cap.<domain>
//	v<major>.<capability-id>.cap.<domain>    _<provider>.v<major>.<capability-id>.cap.<domain>
//	<service-name>.svc.<domain>              <instance-id>.inst.<domain>
func parseName(q, domain string) (name, error) {
	rest, ok := strings.CutSuffix(q, "."+domain)
	if !ok || rest == "" {
		return name{}, errNotOurs
	}
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return name{}, errNotOurs
	}
	head, kind := rest[:dot], rest[dot+1:]
	switch kind {
	case kindService, kindInstance:
		if head == "" || strings.Contains(head, ".") {
			return name{}, errNotOurs
		}
		return name{kind: kind, id: head, major: -1}, nil
	case kindCapability:
	default:
		return name{}, errNotOurs
	}
	n := name{kind: kindCapability, major: -1}
	if p, after, ok := strings.Cut(head, "."); ok && strings.HasPrefix(p, "_") {
		n.provider, head = p[1:], after
		if n.provider == "" {
			return name{}, errNotOurs
		}
	}
	if v, after, ok := strings.Cut(head, "."); ok && len(v) > 1 && v[0] == 'v' {
		if m, err := strconv.Atoi(v[1:]); err == nil && m >= 0 && strconv.Itoa(m) == v[1:] {
			n.major, head = m, after
		}
	}
	if !apiv1.IsCapabilityID(head) {
		return name{}, errNotOurs
	}
	n.capability = head
	return n, nil
}
