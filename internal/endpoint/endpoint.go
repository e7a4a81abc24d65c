// Package endpoint holds the address policy of provider endpoints: which hosts a
// registration may name and which addresses the gateway and the orchestrator may connect to.
//
// An endpoint is an origin (scheme://host[:port]) with an optional path prefix; apiv1
// checks that shape. This package adds what a shape cannot say: link-local addresses
// (169.254.0.0/16, fe80::/10) and the cloud metadata services (169.254.169.254,
// fd00:ec2::254, 100.100.100.200, metadata.google.internal) are refused unless an
// operator allows their range, so that no provider identity can aim the orchestrator or the
// gateway at the machine's credentials.
package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Refused are the ranges refused by default: link-local unicast of both families (the cloud
// metadata services of AWS, GCP, Azure and OpenStack answer at 169.254.169.254) and the
// metadata addresses outside it (AWS over IPv6, Alibaba Cloud).
var Refused = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
}

// refusedNames are host names of metadata services, refused whatever they resolve to.
var refusedNames = []string{"metadata.google.internal", "metadata.goog", "metadata", "instance-data"}

// ErrRefused is what a refused endpoint or connection wraps.
var ErrRefused = errors.New("address refused by the endpoint policy")

// Policy refuses the Refused ranges and the metadata names, except addresses inside Allow.
// The zero Policy is the default.
type Policy struct {
	// Allow are ranges an operator allows although Refused holds them
	// (--allow-endpoint-cidr).
	Allow []netip.Prefix
}

// ParseAllow parses the values of --allow-endpoint-cidr: CIDR prefixes, or single
// addresses (a /32 or /128).
func ParseAllow(values []string) (Policy, error) {
	var p Policy
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		pr, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return Policy{}, fmt.Errorf("--allow-endpoint-cidr %q: not a CIDR prefix or an address", v)
			}
			pr = netip.PrefixFrom(a, a.BitLen())
		}
		p.Allow = append(p.Allow, pr.Masked())
	}
	return p, nil
}

// AddrProblem returns why a connection to a is refused, or "".
func (p Policy) AddrProblem(a netip.Addr) string {
	a = a.Unmap().WithZone("") // Prefix.Contains never matches an address with a zone
	for _, pr := range p.Allow {
		if pr.Contains(a) {
			return ""
		}
	}
	for _, pr := range Refused {
		if pr.Contains(a) {
			if a.IsLinkLocalUnicast() {
				return fmt.Sprintf("%s is link-local (metadata services answer there); allow it with --allow-endpoint-cidr", a)
			}
			return fmt.Sprintf("%s is a cloud metadata address; allow it with --allow-endpoint-cidr", a)
		}
	}
	return ""
}

// HostProblem returns why an endpoint naming host (a name or an address literal, without
// port or brackets) is refused, or "". Names are not resolved here: Control refuses what a
// name resolves to when the gateway or the orchestrator connects.
func (p Policy) HostProblem(host string) string {
	if host == "" {
		return ""
	}
	// Only what may be an address literal is parsed as one: a registration checks its
	// endpoint, and a failed parse of a name costs an allocation.
	if c := host[0]; c >= '0' && c <= '9' || strings.IndexByte(host, ':') >= 0 {
		if a, err := netip.ParseAddr(host); err == nil {
			return p.AddrProblem(a)
		}
	}
	name := strings.TrimSuffix(host, ".")
	for _, n := range refusedNames {
		if len(name) == len(n) && strings.EqualFold(name, n) {
			return fmt.Sprintf("%s is a cloud metadata service", host)
		}
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last != "" && (len(last) > 1 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') || allDigits(last)) {
		// No top-level domain is numeric: this is an IPv4 address in a form a resolver may
		// take (2852039166, 0xa9.254.169.254, 169.254.169.254.), which hides its range.
		return fmt.Sprintf("%s is an IPv4 address in a non-canonical form; write it as a.b.c.d", host)
	}
	return ""
}

// Check returns why endpoint is not one a registration may name — its shape (apiv1's rules:
// an origin and a path prefix) or its address (the policy) — or "".
func (p Policy) Check(endpoint string) string {
	if msg := apiv1.EndpointProblem(endpoint); msg != "" {
		return msg
	}
	return p.Problem(endpoint)
}

// Problem returns why endpoint (already of the shape apiv1 validates) is refused, or "".
func (p Policy) Problem(endpoint string) string {
	return p.HostProblem(hostOf(endpoint))
}

// hostOf is the host of an endpoint, without brackets: cut by hand for the common forms (a
// registration checks every endpoint), by url.Parse otherwise.
func hostOf(endpoint string) string {
	if _, rest, ok := strings.Cut(endpoint, "://"); ok && !strings.ContainsAny(rest, "[@%") {
		if i := strings.IndexAny(rest, ":/"); i >= 0 {
			rest = rest[:i]
		}
		return rest
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// Control is a net.Dialer Control function that refuses to connect to an address the
// policy refuses, whatever name led there (a name that resolves to 169.254.169.254 is
// refused as the literal is).
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		host, _, serr := net.SplitHostPort(address)
		if serr != nil {
			return fmt.Errorf("dial %s: %w", address, serr)
		}
		if msg := p.HostProblem(host); msg != "" {
			return fmt.Errorf("dial %s %s: %w: %s", network, address, ErrRefused, msg)
		}
		return nil
	}
	if msg := p.AddrProblem(ap.Addr()); msg != "" {
		return fmt.Errorf("dial %s %s: %w: %s", network, address, ErrRefused, msg)
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
