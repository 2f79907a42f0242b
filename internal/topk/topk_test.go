package topk

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// What a heap of k keeps is the first k of the stream sorted, ties
// included, and what leaves it is every other item, once.
func TestHeapKeepsTheFirstK(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, tc := range []struct{ n, k int }{{0, 3}, {5, 0}, {1, 1}, {3, 5}, {5, 5}, {6, 5}, {1000, 1}, {1000, 37}, {1000, 999}} {
		t.Run(fmt.Sprintf("n=%d,k=%d", tc.n, tc.k), func(t *testing.T) {
			items := make([]int, tc.n)
			for i := range items {
				items[i] = rng.IntN(20) // many ties
			}
			h := New(tc.k, cmp.Compare[int], nil)
			var left []int
			for _, x := range items {
				if out, ok := h.Push(x); ok {
					left = append(left, out)
				}
			}
			want := slices.Sorted(slices.Values(items))
			keep := min(tc.k, tc.n)
			if got := h.Sorted(); !slices.Equal(got, want[:keep]) {
				t.Fatalf("kept %v, want %v", got, want[:keep])
			}
			if slices.Sort(left); !slices.Equal(left, want[keep:]) {
				t.Fatalf("left %v, want %v", left, want[keep:])
			}
		})
	}
}
