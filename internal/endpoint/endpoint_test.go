package endpoint_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/meshflows/meshflows/internal/endpoint"
)

func TestPolicyProblem(t *testing.T) {
	allowLinkLocal, err := endpoint.ParseAllow([]string{"169.254.10.0/24", "fe80::1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		endpoint string
		policy   endpoint.Policy
		refused  bool
	}{
		{"http://127.0.0.1:7601", endpoint.Policy{}, false},
		{"http://orders.internal:8080/prefix", endpoint.Policy{}, false},
		{"https://10.0.0.1:8443", endpoint.Policy{}, false},
		{"http://[::1]:80", endpoint.Policy{}, false},
		{"http://169.254.169.254/latest", endpoint.Policy{}, true},
		{"http://169.254.10.7:80", endpoint.Policy{}, true},
		{"http://169.254.10.7:80", allowLinkLocal, false},
		{"http://169.254.169.254/latest", allowLinkLocal, true}, // outside the allowed /24
		{"http://[fe80::1]:80", endpoint.Policy{}, true},
		{"http://[fe80::1]:80", allowLinkLocal, false},
		{"http://[fe80::2]:80", allowLinkLocal, true},
		{"http://[::ffff:169.254.169.254]:80", endpoint.Policy{}, true}, // IPv4-mapped
		{"http://[fd00:ec2::254]/latest", endpoint.Policy{}, true},
		{"http://100.100.100.200/latest", endpoint.Policy{}, true},
		{"http://100.100.100.201", endpoint.Policy{}, false},
		{"http://metadata.google.internal/computeMetadata/v1", endpoint.Policy{}, true},
		{"http://METADATA.google.internal./x", endpoint.Policy{}, true},
		{"http://2852039166/latest", endpoint.Policy{}, true},       // 169.254.169.254 as one number
		{"http://0xa9.254.169.254/latest", endpoint.Policy{}, true}, // hexadecimal
		{"http://169.254.169.254./latest", endpoint.Policy{}, true}, // a trailing dot
		{"http://svc-1.ns:80", endpoint.Policy{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			if got := tt.policy.Problem(tt.endpoint); (got != "") != tt.refused {
				t.Errorf("Problem(%q) = %q, want refused: %v", tt.endpoint, got, tt.refused)
			}
		})
	}
}

// TestControl: the dialer refuses the address a name resolved to, as it would the literal.
func TestControl(t *testing.T) {
	allow, err := endpoint.ParseAllow([]string{"169.254.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		address string
		policy  endpoint.Policy
		refused bool
	}{
		{"127.0.0.1:80", endpoint.Policy{}, false},
		{"169.254.169.254:80", endpoint.Policy{}, true},
		{"[fe80::1%eth0]:80", endpoint.Policy{}, true},
		{"169.254.169.254:80", allow, false},
		{"[::1]:443", endpoint.Policy{}, false},
	}
	for _, tt := range tests {
		err := tt.policy.Control("tcp", tt.address, nil)
		if (err != nil) != tt.refused {
			t.Errorf("Control(%q) = %v, want refused: %v", tt.address, err, tt.refused)
		}
		if err != nil && !errors.Is(err, endpoint.ErrRefused) {
			t.Errorf("Control(%q) = %v, want it to wrap ErrRefused", tt.address, err)
		}
	}
}

func TestParseAllow(t *testing.T) {
	p, err := endpoint.ParseAllow([]string{"169.254.1.9/16", " 10.1.2.3 ", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("10.1.2.3/32")}
	if len(p.Allow) != len(want) || p.Allow[0] != want[0] || p.Allow[1] != want[1] {
		t.Errorf("ParseAllow = %v, want %v", p.Allow, want)
	}
	if _, err := endpoint.ParseAllow([]string{"169.254/16"}); err == nil {
		t.Error("ParseAllow took 169.254/16")
	}
}
