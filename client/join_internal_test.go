package client

import (
	"net/url"
	"testing"
)

// TestJoinURL: a path goes under the base's path prefix, the query is the request's alone
// (the base's own query and fragment never reach the request), and a base without a path
// takes the fast path with the same result.
func TestJoinURL(t *testing.T) {
	q := url.Values{"generation": {"3"}}
	for _, tc := range []struct {
		base, path string
		query      url.Values
		want       string
	}{
		{"http://h:1", "/v1/services/a/heartbeat", nil, "http://h:1/v1/services/a/heartbeat"},
		{"http://h:1/", "/v1/x", q, "http://h:1/v1/x?generation=3"},
		{"https://h", "/v1/x%2Fy", nil, "https://h/v1/x%2Fy"},
		{"http://h:1/prefix", "/v1/x", q, "http://h:1/prefix/v1/x?generation=3"},
		{"http://h:1/prefix/", "/v1/x", nil, "http://h:1/prefix/v1/x"},
		{"http://h:1/run?x=", "/v1/x", nil, "http://h:1/run/v1/x"},
		{"http://h:1#f", "/v1/x", nil, "http://h:1/v1/x"},
	} {
		got, err := joinURL(tc.base, tc.path, tc.query)
		if err != nil || got != tc.want {
			t.Errorf("joinURL(%q, %q) = %q, %v; want %q", tc.base, tc.path, got, err, tc.want)
		}
	}
}

// BenchmarkJoinURL is the URL of every SDK request (a heartbeat's), on a base without a path.
func BenchmarkJoinURL(b *testing.B) {
	q := url.Values{"generation": {"3"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := joinURL("http://127.0.0.1:7400", "/v1/services/egress-jms-1/heartbeat", q); err != nil {
			b.Fatal(err)
		}
	}
}
