package apiv1

import "testing"

// TestPlainEndpoint: the common forms of an endpoint take the short path, and what it does
// not take is left to url.Parse's check, which decides as before.
func TestPlainEndpoint(t *testing.T) {
	tests := []struct {
		endpoint string
		plain    bool
		problem  bool // endpointProblem refuses it
	}{
		{"http://egress-jms:8080", true, false},
		{"https://10.0.0.1:8443", true, false},
		{"http://svc.ns.svc.cluster.local/api/v1_x/~u", true, false},
		{"http://h", true, false},
		{"http://h/", true, false},
		{"HTTP://h", false, false},                                     // upper-case scheme: url.Parse's check takes it
		{"http://[::1]:80", false, false},                              // IPv6: url.Parse's check takes it
		{"http://h:/x", false, false},                                  // an empty port: url.Parse takes it
		{"http://h/a?b=c", false, true},                                // a query: an endpoint is an origin and a path prefix
		{"http://127.0.0.1:7601/v1/workflows/rec/run?x=", false, true}, // a query aiming at another path
		{"http://h/a?", false, true},                                   // an empty query
		{"http://h/a#f", false, true},                                  // a fragment
		{"http://h#", false, true},                                     // an empty fragment
		{"http://h/prefix/v2", true, false},
		{"http://h/a%20b", false, false}, // an escape: url.Parse takes it
		{"http://u:p@h", false, true},    // user info
		{"http://", false, true},         // no host
		{"http://:80", false, true},      // no host name
		{"ftp://h", false, true},         // scheme
		{"http://h/a b", false, true},    // white space
		{"http://h:8x", false, true},     // a port that is not one
		{"http//h", false, true},         // not absolute
		{"", false, true},                // missing
		{"http://h\n", false, true},      // a control byte
		{"https://h:99999999999/p", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			if got := plainEndpoint(tt.endpoint); got != tt.plain {
				t.Errorf("plainEndpoint(%q) = %v, want %v", tt.endpoint, got, tt.plain)
			}
			if got := endpointProblem(tt.endpoint); (got != "") != tt.problem {
				t.Errorf("endpointProblem(%q) = %q, want a problem: %v", tt.endpoint, got, tt.problem)
			}
		})
	}
}

// FuzzPlainEndpoint: whatever the short path takes, url.Parse's check takes too, so the
// short path never lets through an endpoint the registry used to refuse.
func FuzzPlainEndpoint(f *testing.F) {
	for _, s := range []string{"http://egress-jms:8080", "https://10.0.0.1:8443/x/y", "http://h:/", "http://h..-/~", "https://a:0", "http://u@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if plainEndpoint(s) {
			if p := parsedEndpointProblem(s); p != "" {
				t.Fatalf("plainEndpoint(%q) took it, url.Parse's check says %s", s, p)
			}
		}
	})
}

// BenchmarkEndpointProblem: the check of a registration's endpoint, by the short path and by
// url.Parse's.
func BenchmarkEndpointProblem(b *testing.B) {
	const endpoint = "http://egress-jms-7c9f5d8c4f-9x2kq.egress.svc:8080"
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if endpointProblem(endpoint) != "" {
				b.Fatal("refused")
			}
		}
	})
	b.Run("parsed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if parsedEndpointProblem(endpoint) != "" {
				b.Fatal("refused")
			}
		}
	})
}
