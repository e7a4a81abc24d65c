package routing

import (
	"slices"
	"strings"
	"testing"
)

// FuzzAppendSegments: a path splits into what strings.Split gives, after what the buffer
// held.
func FuzzAppendSegments(f *testing.F) {
	for _, p := range []string{"", "a", "a/b", "a/b/", "/", "//", "svc-1/items/42", strings.Repeat("x/", 20)} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		got := appendSegments([]string{"held"}, path)
		if want := append([]string{"held"}, strings.Split(path, "/")...); !slices.Equal(got, want) {
			t.Fatalf("appendSegments(%q) = %q, want %q", path, got, want)
		}
	})
}
