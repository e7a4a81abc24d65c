package apiv1_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

func TestPriority(t *testing.T) {
	for _, tt := range []struct {
		meta string
		want int64
		bad  bool
	}{
		{``, 0, false},
		{`{}`, 0, false},
		{`{"priority": null}`, 0, false},
		{`{"priority": 7}`, 7, false},
		{`{"priority": -2, "public_paths": ["/x"]}`, -2, false},
		{`{"priority": "7"}`, 0, true},
		{`{"priority": 1.5}`, 0, true},
	} {
		got, err := apiv1.Priority(json.RawMessage(tt.meta))
		if got != tt.want || (err != nil) != tt.bad {
			t.Errorf("Priority(%s) = %d, %v; want %d, error %v", tt.meta, got, err, tt.want, tt.bad)
		}
	}
}

// TestRankOrder: priority descending, then version descending (pre-releases below their
// release, an unparsable version last), then generation ascending.
func TestRankOrder(t *testing.T) {
	v := func(s string) *semver.Version { return semver.MustParse(s) }
	ranks := map[string]apiv1.Rank{
		"p5":         {Priority: 5, Version: v("1.0.0"), Generation: 9},
		"v2":         {Version: v("2.0.0"), Generation: 8},
		"v2-rc":      {Version: v("2.0.0-rc.1"), Generation: 1},
		"v1.10 old":  {Version: v("1.10.0"), Generation: 2},
		"v1.10 new":  {Version: v("1.10.0"), Generation: 3},
		"v1.9":       {Version: v("1.9.0"), Generation: 1},
		"no version": {Generation: 0},
		"negative":   {Priority: -1, Version: v("9.0.0")},
	}
	want := []string{"p5", "v2", "v2-rc", "v1.10 old", "v1.10 new", "v1.9", "no version", "negative"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortStableFunc(got, func(a, b string) int { return ranks[a].Compare(ranks[b]) })
	if !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

// TestPool: the panic rule on a consumer's pool — never-admitted instances are no members
// unless the pool holds nothing else; draining and absent ones count for nothing; exactly
// half in rotation is not panic.
func TestPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		states  []string
		panic   bool
		newPool bool
		members int
	}{
		{"two serving, ten new", []string{"serving", "serving", "unknown", "unknown", "unknown", "unknown", "unknown", "unknown", "unknown", "unknown", "unknown", "unknown"}, false, false, 2},
		{"both failing beside new ones", []string{"withdrawn", "withdrawn", "unknown", "unknown"}, true, false, 2},
		{"a brand-new service", []string{"unknown", "unknown", "unknown"}, true, true, 0},
		{"exactly half", []string{"serving", "withdrawn", "draining", "absent"}, false, false, 2},
		{"under half", []string{"serving", "withdrawn", "quarantined"}, true, false, 3},
		{"no engine", []string{"", ""}, false, false, 2},
	} {
		var p apiv1.Pool
		for _, s := range tc.states {
			p.Add(s, false)
		}
		if p.Panic(0.5) != tc.panic || p.New() != tc.newPool || p.Members != tc.members {
			t.Errorf("%s: panic %v new %v members %d, want %v %v %d", tc.name, p.Panic(0.5), p.New(), p.Members, tc.panic, tc.newPool, tc.members)
		}
	}
	var p apiv1.Pool
	p.Add("withdrawn", true) // answered in panic by the registry: in rotation for the consumer
	if p.InRotation != 1 || p.Panic(0.5) {
		t.Errorf("an entry in the registry's panic: %+v", p)
	}
}
