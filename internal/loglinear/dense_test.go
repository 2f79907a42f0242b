package loglinear

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A Dense built from sparse histograms (as stored arrays, as maps, and by
// merging other Dense histograms) estimates exactly what the merged sparse
// Histogram estimates, and Reset leaves nothing behind for its next use.
func TestDenseMatchesHistogram(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		name  string
		parts int
		draw  func() uint64
	}{
		{"small exact values", 5, func() uint64 { return uint64(rng.IntN(16)) }},
		{"log-normal latencies", 40, func() uint64 { return uint64(math.Exp(rng.NormFloat64()*1.5 + 11)) }},
		{"wide range", 3, func() uint64 { return rng.Uint64() >> rng.IntN(64) }},
		{"one value", 2, func() uint64 { return 123456 }},
	}
	var reused Dense
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := New()
			var fromArrays, fromMaps, merged Dense
			reused.Reset()
			for range c.parts {
				h := New()
				for range 1 + rng.IntN(500) {
					h.Record(c.draw())
				}
				want.Merge(h)
				var idx []int32
				var cnt []int64
				for _, b := range h.Sorted() {
					idx, cnt = append(idx, int32(b)), append(cnt, int64(h.Counts[b]))
				}
				fromArrays.AddBuckets(idx, cnt, h.Count, h.Sum)
				fromMaps.AddHistogram(h)
				var one Dense
				one.AddHistogram(h)
				merged.Merge(&one)
				reused.AddBuckets(idx, cnt, h.Count, h.Sum)
			}
			for _, d := range []struct {
				how string
				h   *Dense
			}{{"arrays", &fromArrays}, {"maps", &fromMaps}, {"merged", &merged}, {"reused after Reset", &reused}} {
				if d.h.Count != want.Count || d.h.Sum != want.Sum {
					t.Errorf("%s: count %d sum %v, want %d %v", d.how, d.h.Count, d.h.Sum, want.Count, want.Sum)
				}
				for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1} {
					if got, w := d.h.Quantile(q), want.Quantile(q); got != w {
						t.Errorf("%s: q%v = %v, want %v", d.how, q, got, w)
					}
				}
				if got, w := d.h.Max(), want.Max(); got != w {
					t.Errorf("%s: max %v, want %v", d.how, got, w)
				}
				// Its buckets as stored: the merged sparse histogram's,
				// appended after what was there.
				idx, cnt := d.h.AppendBuckets([]int32{-1}, []int64{-1})
				if len(idx) != len(want.Counts)+1 || len(cnt) != len(idx) || idx[0] != -1 || cnt[0] != -1 {
					t.Fatalf("%s: %d buckets appended, want %d", d.how, len(idx)-1, len(want.Counts))
				}
				for i, b := range want.Sorted() {
					if idx[i+1] != int32(b) || cnt[i+1] != int64(want.Counts[b]) {
						t.Fatalf("%s: bucket %d: %d of %d, want %d of %d", d.how, i, cnt[i+1], idx[i+1], want.Counts[b], b)
					}
				}
			}
		})
	}
}

func TestDenseEmptyAndHostileBuckets(t *testing.T) {
	var d Dense
	if !math.IsNaN(d.Quantile(0.5)) || !math.IsNaN(d.Max()) {
		t.Error("an empty Dense must estimate NaN")
	}
	// Indexes past the layout, negative ones, non-positive counts and a
	// count array shorter than the indexes are skipped, not a panic.
	d.AddBuckets([]int32{-1, Buckets, 1 << 30, 20, 21}, []int64{5, 5, 5, 0, -3}, 0, 0)
	d.AddBuckets([]int32{30, 31}, []int64{2}, 2, 60)
	if got, want := d.Quantile(1), Midpoint(30); got != want {
		t.Errorf("q1 = %v, want bucket 30's midpoint %v", got, want)
	}
	d.Reset()
	if d.Count != 0 || !math.IsNaN(d.Max()) {
		t.Error("Reset left data behind")
	}
}
