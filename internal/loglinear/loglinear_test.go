package loglinear

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestIndexBoundaries(t *testing.T) {
	cases := []struct {
		v    uint64
		want uint32
	}{
		{0, 0}, {1, 1}, {15, 15}, {16, 16}, {31, 31}, {32, 32}, {33, 32}, {34, 33},
		{63, 47}, {64, 48}, {math.MaxUint64, Buckets - 1},
	}
	for _, c := range cases {
		if got := Index(c.v); got != c.want {
			t.Errorf("Index(%d) = %d, want %d", c.v, got, c.want)
		}
	}
}

// Every bucket's range maps back to the bucket, buckets tile the number line
// without gaps, and no bucket is wider than 1/16 of its lower bound.
func TestBucketsTileAndAreNarrow(t *testing.T) {
	var next uint64
	for i := uint32(0); i < Buckets; i++ {
		lo, w := Lower(i), Width(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d (gap or overlap)", i, lo, next)
		}
		if Index(lo) != i || Index(lo+w-1) != i {
			t.Fatalf("bucket %d [%d, %d]: edges map to %d and %d", i, lo, lo+w-1, Index(lo), Index(lo+w-1))
		}
		if lo >= sub && float64(w)/float64(lo) > 1.0/sub+1e-12 {
			t.Fatalf("bucket %d is %d wide at %d: more than 1/%d", i, w, lo, sub)
		}
		next = lo + w
		if next == 0 { // wrapped past MaxUint64: the last bucket
			if i != Buckets-1 {
				t.Fatalf("values exhausted at bucket %d of %d", i, Buckets)
			}
			return
		}
	}
	t.Fatal("the buckets do not reach MaxUint64")
}

// Percentiles from buckets stay within the layout's relative error of the
// exact percentile, and merging equals recording everything in one.
func TestQuantileErrorAndMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var all []uint64
	a, b, both := New(), New(), New()
	for i := 0; i < 100000; i++ {
		v := uint64(math.Exp(rng.NormFloat64()*1.5+11)) + 1 // log-normal latencies around 60 µs
		all = append(all, v)
		both.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(b)
	if a.Count != both.Count || len(a.Counts) != len(both.Counts) {
		t.Fatalf("merged count %d/%d buckets, want %d/%d", a.Count, len(a.Counts), both.Count, len(both.Counts))
	}
	for i, n := range both.Counts {
		if a.Counts[i] != n {
			t.Fatalf("bucket %d: merged %d, want %d", i, a.Counts[i], n)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := float64(all[int(math.Ceil(q*float64(len(all))))-1])
		got := a.Quantile(q)
		if rel := math.Abs(got-exact) / exact; rel > 0.035 {
			t.Errorf("p%v: %v vs exact %v (%.2f%% off, want <= 3.5%%)", q*100, got, exact, rel*100)
		}
	}
	if !math.IsNaN(New().Quantile(0.5)) {
		t.Error("quantile of an empty histogram must be NaN")
	}
}

func BenchmarkIndex(b *testing.B) {
	var s uint32
	for i := 0; b.Loop(); i++ {
		s += Index(uint64(i) * 2654435761)
	}
	_ = s
}
