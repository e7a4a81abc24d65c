package routing

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// TestSlotsTableGrows: slotsOf's table starts at the size the claims call for; static
// routes on top of them make it grow, and every key is still found once, in key order.
func TestSlotsTableGrows(t *testing.T) {
	var statics []staticClaim
	var want []string
	seed := maphash.MakeSeed()
	for i := range 1000 {
		key := fmt.Sprintf("/s/%d", i)
		statics = append(statics, staticClaim{route: StaticRoute{Path: key, Methods: []string{"GET"}, Upstream: "http://s"}, key: key, hash: maphash.String(seed, key)})
		want = append(want, key)
	}
	slices.Sort(want)
	for _, shards := range []int{1, 3} {
		var got []string
		for sh := range shards {
			for _, sl := range slotsOf(nil, append(statics, statics[:10]...), sh, shards, &grouping{}) { // ten keys twice
				got = append(got, sl.key)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%d shards: %d keys, want %d, each once", shards, len(got), len(want))
		}
	}
}

// FuzzSortSlots: sorting by the keys' first 16 bytes, then the keys, is sorting by the keys.
func FuzzSortSlots(f *testing.F) {
	f.Add("/a/b/c/d/e/f/g/h/i,/a/b/c/d/e/f/g/h,/a/b/c/d/e/f/g/h/j,/a\x00,/a,/", uint64(1))
	f.Fuzz(func(t *testing.T, list string, seed uint64) {
		keys := strings.Split(list, ",")
		r := rand.New(rand.NewPCG(seed, seed))
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		slots := make([]*slot, len(keys))
		for i, k := range keys {
			slots[i] = &slot{key: k}
		}
		_, _, sorted := sortSlots(slots, nil, nil, nil)
		slices.Sort(keys)
		for i, sl := range sorted {
			if sl.key != keys[i] {
				t.Fatalf("position %d: %q, want %q", i, sl.key, keys[i])
			}
		}
	})
}

// FuzzSharedSegments compares the count of leading segments two path keys share, taken on
// their text, with the count taken on their parsed segments.
func FuzzSharedSegments(f *testing.F) {
	for _, c := range [][2]string{{"/a/b", "/a/bc"}, {"/a/{x}", "/a/{y...}"}, {"/a/{x}/c", "/a/{y}/c/d"}, {"/", "/a"}, {"/ab", "/a"}, {"/a/b", "/a/b"}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, pa, pb string) {
		a, errA := apiv1.ParsePath(pa)
		b, errB := apiv1.ParsePath(pb)
		if errA != nil || errB != nil {
			return
		}
		want := 0
		for want < min(len(a), len(b)) && a[want].Kind == b[want].Kind && (a[want].Kind != apiv1.Literal || a[want].Value == b[want].Value) {
			want++
		}
		if got := sharedSegments(Key(a), Key(b)); got != want {
			t.Fatalf("sharedSegments(%q, %q) = %d, want %d", Key(a), Key(b), got, want)
		}
	})
}

// TestRouteKeysAgreeWithKey: the batched keys of a manifest's routes are Key of each route.
func TestRouteKeysAgreeWithKey(t *testing.T) {
	routes := []apiv1.ManifestRoute{{Path: "/"}, {Path: "/a/b"}, {Path: "/a/{id}"}, {Path: "/a/{id}/c/{rest...}"}, {Path: "/x"}, {Path: "/{k}"}}
	infos := make([]apiv1.RouteInfo, len(routes))
	for i, r := range routes {
		segs, err := apiv1.ParsePath(r.Path)
		if err != nil {
			t.Fatal(err)
		}
		infos[i] = apiv1.RouteInfo{Segments: segs}
	}
	keys := newRouteKeys(routes, infos)
	for i := range routes {
		if k, want := keys.next(routes[i].Path, infos[i].Segments), Key(infos[i].Segments); k != want {
			t.Errorf("route %q: batched key %q, Key %q", routes[i].Path, k, want)
		}
	}
}
