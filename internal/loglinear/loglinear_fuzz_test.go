package loglinear

import (
	"encoding/binary"
	"math"
	"testing"
)

// fuzzHist reads (bucket index, count) pairs as a wire histogram would give
// them; indexes past the table are what a hostile agent may send.
func fuzzHist(data []byte) *Histogram {
	h := New()
	for len(data) >= 6 {
		i := binary.LittleEndian.Uint32(data) % (Buckets + 8)
		n := uint64(binary.LittleEndian.Uint16(data[4:]))
		data = data[6:]
		if i >= Buckets {
			continue // the collector refuses such indexes before they get here
		}
		h.AddBucket(i, n)
	}
	return h
}

// Percentiles over any merge of histograms are finite, ordered, within the
// recorded buckets, and NaN only when nothing was recorded.
func FuzzQuantiles(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 1, 0, 40, 0, 0, 0, 2, 0}, []byte{}, 0.5)
	f.Add([]byte{}, []byte{}, 0.99)
	f.Add([]byte{255, 3, 0, 0, 255, 255}, []byte{0, 0, 0, 0, 255, 255}, 1.0)
	f.Add([]byte{1, 0, 0, 0, 0, 0}, []byte{2, 0, 0, 0, 1, 0}, -1.0)
	f.Fuzz(func(t *testing.T, a, b []byte, q float64) {
		h, o := fuzzHist(a), fuzzHist(b)
		total := h.Count + o.Count
		h.Merge(o)
		if h.Count != total {
			t.Fatalf("merged count %d, want %d", h.Count, total)
		}
		var sum uint64
		for _, n := range h.Counts {
			sum += n
		}
		if sum != h.Count {
			t.Fatalf("bucket counts sum to %d, count is %d", sum, h.Count)
		}
		if h.Count == 0 {
			if !math.IsNaN(h.Quantile(0.5)) || !math.IsNaN(h.Max()) {
				t.Fatalf("empty histogram: quantile %v max %v, want NaN", h.Quantile(0.5), h.Max())
			}
			return
		}
		if math.IsNaN(q) || q < 0 || q > 1 {
			q = 0.5
		}
		idx := h.Sorted()
		lo, hi := float64(Lower(idx[0])), h.Max()
		p50, p90, p99, pq := h.Quantile(0.5), h.Quantile(0.9), h.Quantile(0.99), h.Quantile(q)
		for _, v := range []float64{p50, p90, p99, pq, hi} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
				t.Fatalf("quantile %v outside [%v, %v] for buckets %v", v, lo, hi, idx)
			}
		}
		if p50 > p90 || p90 > p99 {
			t.Fatalf("quantiles out of order: p50 %v p90 %v p99 %v", p50, p90, p99)
		}
	})
}

// Index and Lower agree for every value: v lies in its bucket.
func FuzzIndex(f *testing.F) {
	for _, v := range []uint64{0, 1, 15, 16, 17, 1000, 1 << 40, math.MaxUint64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) {
		i := Index(v)
		if i >= Buckets {
			t.Fatalf("Index(%d) = %d, past the %d buckets", v, i, Buckets)
		}
		if lo, w := Lower(i), Width(i); v < lo || v-lo >= w {
			t.Fatalf("Index(%d) = %d covers [%d, %d+%d)", v, i, lo, lo, w)
		}
	})
}
