package routing

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChunksCoverEveryIndexOnce(t *testing.T) {
	for _, tc := range []struct {
		name              string
		n, workers, least int
		want              [][2]int
	}{
		{"empty", 0, 2, 512, nil},
		{"too few for two", 600, 2, 512, [][2]int{{0, 600}}},
		{"two workers", 1024, 2, 512, [][2]int{{0, 512}, {512, 1024}}},
		{"uneven", 20001, 2, 512, [][2]int{{0, 10001}, {10001, 20001}}},
		{"more workers than work", 5, 8, 1, [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}},
		{"zero least", 4, 2, 0, [][2]int{{0, 2}, {2, 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]int
			for lo, hi := range chunks(tc.n, tc.workers, tc.least) {
				got = append(got, [2]int{lo, hi})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("chunks(%d, %d, %d) (-want +got):\n%s", tc.n, tc.workers, tc.least, diff)
			}
		})
	}
}
