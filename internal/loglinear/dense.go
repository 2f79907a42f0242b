package loglinear

import "math"

// Dense is a histogram held as an array of every bucket's count. Merging
// many sparse histograms into one (a report folds a month of rollup rows)
// costs an addition per bucket, where Histogram's map costs a hash write
// and its Quantile a sort. Its estimates are Histogram's, bucket for bucket.
// The zero value is empty; Reset empties it for reuse without clearing the
// untouched part of the array.
type Dense struct {
	Count  uint64
	Sum    float64
	lo, hi uint32 // the touched buckets are [lo, hi); empty when lo >= hi
	counts [Buckets]uint64
}

// Reset empties d.
func (d *Dense) Reset() {
	if d.lo < d.hi {
		clear(d.counts[d.lo:d.hi])
	}
	d.Count, d.Sum, d.lo, d.hi = 0, 0, 0, 0
}

func (d *Dense) touch(i uint32) {
	if d.lo >= d.hi {
		d.lo, d.hi = i, i+1
		return
	}
	d.lo, d.hi = min(d.lo, i), max(d.hi, i+1)
}

// AddBuckets adds stored bucket counts (index and count arrays of equal
// length) and their total count and sum. Indexes past the layout cannot be
// stored (ingest rejects them) and are skipped rather than trusted.
func (d *Dense) AddBuckets(idx []int32, cnt []int64, count uint64, sum float64) {
	for i, b := range idx {
		if i >= len(cnt) || b < 0 || b >= Buckets || cnt[i] <= 0 {
			continue
		}
		d.touch(uint32(b))
		d.counts[b] += uint64(cnt[i])
	}
	d.Count += count
	d.Sum += sum
}

// AddHistogram adds a sparse histogram.
func (d *Dense) AddHistogram(h *Histogram) {
	for b, n := range h.Counts {
		if b >= Buckets || n == 0 {
			continue
		}
		d.touch(b)
		d.counts[b] += n
	}
	d.Count += h.Count
	d.Sum += h.Sum
}

// Merge adds another dense histogram.
func (d *Dense) Merge(o *Dense) {
	if o.lo < o.hi {
		d.touch(o.lo)
		d.touch(o.hi - 1)
		for b := o.lo; b < o.hi; b++ {
			d.counts[b] += o.counts[b]
		}
	}
	d.Count += o.Count
	d.Sum += o.Sum
}

// Quantile estimates the q-quantile as Histogram.Quantile does; NaN when
// empty.
func (d *Dense) Quantile(q float64) float64 {
	if d.Count == 0 || d.lo >= d.hi {
		return math.NaN()
	}
	rank := rankOf(q, d.Count)
	var seen uint64
	last := d.lo
	for b := d.lo; b < d.hi; b++ {
		if d.counts[b] == 0 {
			continue
		}
		last = b
		seen += d.counts[b]
		if seen >= rank {
			return Midpoint(b)
		}
	}
	return Midpoint(last)
}

// Max is the upper edge of the highest non-empty bucket, as Histogram.Max;
// NaN when empty.
func (d *Dense) Max() float64 {
	if d.Count == 0 {
		return math.NaN()
	}
	for b := d.hi; b > d.lo; b-- {
		if d.counts[b-1] > 0 {
			return upper(b - 1)
		}
	}
	return math.NaN()
}

// AppendBuckets appends d's non-empty buckets, in index order, as stored
// (index and count arrays).
func (d *Dense) AppendBuckets(idx []int32, cnt []int64) ([]int32, []int64) {
	for b := d.lo; b < d.hi; b++ {
		if n := d.counts[b]; n > 0 {
			idx, cnt = append(idx, int32(b)), append(cnt, int64(n))
		}
	}
	return idx, cnt
}
