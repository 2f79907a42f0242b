package flows

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// firstOf must give what sorting every edge and cutting the page gave,
// ties broken by key, for pages shorter, equal and longer than the edges.
func TestFirstOfEqualsSortedPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, limit int }{
		{0, 5}, {1, 1}, {3, 5}, {5, 5}, {6, 5}, {500, 1}, {2000, 500}, {2000, 1999}, {50, 0},
	} {
		t.Run(fmt.Sprintf("n=%d,limit=%d", tc.n, tc.limit), func(t *testing.T) {
			ks := make([]keyed, tc.n)
			for i := range ks {
				// Few distinct ranks and counts: most order comes from ties.
				ks[i] = keyed{k: cursor{R: rng.IntN(3), A: uint64(rng.IntN(4)), B: uint64(rng.IntN(2)), K: fmt.Sprintf("e%05d", rng.IntN(1e5))}}
			}
			want := slices.Clone(ks)
			slices.SortFunc(want, func(a, b keyed) int { return compareKeys(a.k, b.k) })
			wantMore := len(want) > tc.limit
			want = want[:min(tc.limit, len(want))]
			got, more := firstOf(slices.Values(ks), tc.limit)
			if more != wantMore {
				t.Errorf("more = %v, want %v", more, wantMore)
			}
			if len(got) != len(want) {
				t.Fatalf("%d edges, want %d", len(got), len(want))
			}
			for i := range got {
				if compareKeys(got[i].k, want[i].k) != 0 {
					t.Fatalf("edge %d: %+v, want %+v", i, got[i].k, want[i].k)
				}
			}
		})
	}
}
