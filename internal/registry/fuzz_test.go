package registry_test

import (
	"errors"
	"net/url"
	"testing"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
)

// FuzzParseQuery feeds arbitrary version constraints and minimum versions through the
// discovery query parser: it never panics, a rejection is INVALID_REQUEST naming the
// parameter, and an accepted query can be matched against any valid version.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{">=1.0 <2.0", ">=1.0, <2.0", "1.x || >=3.0", "~1.2", "^0.0.1", ">=1.0-0", "=1.0.0", "!=1.2.3", "*", "1.2 - 1.4.5", "|| ||", ">= <"} {
		f.Add(s, "1.0")
	}
	f.Add("", "v1")
	versions := []*semver.Version{semver.MustParse("0.0.0"), semver.MustParse("1.2.3"), semver.MustParse("2.0.0-rc.1"), semver.MustParse("18446744073709551615.0.0")}
	f.Fuzz(func(t *testing.T, constraint, minVersion string) {
		q, err := registry.ParseQuery(url.Values{"version": {constraint}, "min_version": {minVersion}})
		if err != nil {
			var ae *apiv1.Error
			if !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidRequest || len(ae.Details) == 0 {
				t.Fatalf("ParseQuery(%q, %q) = %v, want INVALID_REQUEST", constraint, minVersion, err)
			}
			return
		}
		rec := &registry.Record{ServiceName: "svc"}
		for _, v := range versions {
			q.Matches(rec, &registry.Capability{Version: v})
		}
	})
}
