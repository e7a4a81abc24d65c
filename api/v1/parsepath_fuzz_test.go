package apiv1

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzParsePath compares ParsePath with the plainer implementation it replaced (split, then
// a map of names): the same segments, or an error from both; and a path of literals only is
// its own key.
func FuzzParsePath(f *testing.F) {
	for _, p := range []string{"/", "/a", "/a/b/", "//a", "/a/{id}", "/a/{id}/{id}", "/a/{rest...}", "/a/{rest...}/b", "/{x", "/a/{}", "/a.b/./..", "/a.b/c", "/x/%2e%2E/y", "/x/%2Fy", "/x/%zz", "/x/%41", "a"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, gerr := ParsePath(p)
		want, werr := parsePathReference(p)
		if (gerr == nil) != (werr == nil) || !slices.Equal(got, want) {
			t.Fatalf("ParsePath(%q) = %v, %v; the reference says %v, %v", p, got, gerr, want, werr)
		}
		if gerr == nil && !strings.Contains(p, "{") && p != "/" {
			var b strings.Builder
			for _, s := range got {
				b.WriteString("/" + s.Value)
			}
			if b.String() != p {
				t.Fatalf("a path of literals %q parses to %v", p, got)
			}
		}
	})
}

func parsePathReference(p string) ([]Segment, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("path %q does not start with /", p)
	}
	if p == "/" {
		return nil, nil
	}
	parts := strings.Split(p[1:], "/")
	segs := make([]Segment, 0, len(parts))
	names := map[string]bool{}
	for i, s := range parts {
		if s == "" {
			if i == len(parts)-1 {
				return nil, fmt.Errorf("path %q ends with /", p)
			}
			return nil, fmt.Errorf("path %q has an empty segment", p)
		}
		if !strings.ContainsAny(s, "{}") {
			if d, err := url.PathUnescape(s); err != nil || d == "." || d == ".." || strings.Contains(d, "/") {
				return nil, fmt.Errorf("path %q: segment %q is a dot segment, or badly escaped", p, s)
			}
			segs = append(segs, Segment{Kind: Literal, Value: s})
			continue
		}
		if s[0] != '{' || s[len(s)-1] != '}' {
			return nil, fmt.Errorf("path %q: malformed parameter %q", p, s)
		}
		name, kind := s[1:len(s)-1], Param
		if rest, ok := strings.CutSuffix(name, "..."); ok {
			name, kind = rest, Wildcard
			if i != len(parts)-1 {
				return nil, fmt.Errorf("path %q: wildcard %q is not the last segment", p, s)
			}
		}
		if !isParamName(name) {
			return nil, fmt.Errorf("path %q: malformed parameter %q", p, s)
		}
		if names[name] {
			return nil, fmt.Errorf("path %q: parameter %q appears twice", p, name)
		}
		names[name] = true
		segs = append(segs, Segment{Kind: kind, Value: name})
	}
	return segs, nil
}
