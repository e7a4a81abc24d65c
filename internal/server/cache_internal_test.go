package server

import (
	"strings"
	"testing"
)

func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip", true},
		{"GZip", true},
		{"deflate, gzip", true},
		{"gzip, deflate, br", true},
		{" br ;q=1.0 , gzip ; q=0.5", true},
		{"gzip;q=0", false},
		{"gzip; q=0.000", false},
		{"gzip;q=1", true},
		{"gzip;q=oops", true}, // an unreadable weight is not a refusal
		{"identity", false},
		{"br, deflate", false},
		{"x-gzip", false},
		{"gzipped", false},
		{"*", false}, // only an explicit gzip is taken at its word
	} {
		t.Run(tc.header, func(t *testing.T) {
			if got := acceptsGzip(tc.header); got != tc.want {
				t.Errorf("acceptsGzip(%q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

// FuzzAcceptsGzip: Accept-Encoding is untrusted input; whatever it holds, reading it never
// panics, and a header that does not name gzip is never taken as accepting it.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0", "br;q=1, gzip ; q=0.5", ";;,,=", "gzip;q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if acceptsGzip(s) && !strings.Contains(strings.ToLower(s), "gzip") {
			t.Errorf("acceptsGzip(%q) = true without gzip in it", s)
		}
	})
}
