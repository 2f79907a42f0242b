package report

// Histograms: percentiles of merged log-linear bucket counts, in the
// metric's unit, and the series points they fall into.

import (
	"math"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// scale turns a histogram's recorded value into its unit.
func (d *data) scale(path string) float64 {
	if def, ok := d.defs[path]; ok && def.Scale > 0 {
		return def.Scale
	}
	return 1
}

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func quantile(h *loglinear.Dense, q, scale float64) *float64 {
	if h == nil || h.Count == 0 {
		return nil
	}
	return num(h.Quantile(q) / scale)
}

func hmax(h *loglinear.Dense, scale float64) *float64 {
	if h == nil || h.Count == 0 {
		return nil
	}
	return num(h.Max() / scale)
}

// merge folds a row into a histogram it allocates on first use. Dense
// histograms: a month of rows is folded with an addition per bucket, where
// sparse maps made merging most of a report's time (BENCHMARKS.md).
func merge(into **loglinear.Dense, r store.HistogramRow) {
	if *into == nil {
		*into = new(loglinear.Dense)
	}
	r.AddTo(*into)
}

// points folds rows into one histogram per series point, reusing one
// histogram, and calls fn with each point's (empty when no row falls in it).
func points(rows []store.HistogramRow, from time.Time, step time.Duration, n int, fn func(i int, h *loglinear.Dense)) {
	bySlot := make([][]store.HistogramRow, n)
	for _, r := range rows {
		if i := slot(r.TS, from, step); i >= 0 && i < n {
			bySlot[i] = append(bySlot[i], r)
		}
	}
	h := new(loglinear.Dense)
	for i, rs := range bySlot {
		h.Reset()
		for _, r := range rs {
			r.AddTo(h)
		}
		fn(i, h)
	}
}

// slot is a series point's index; points without data stay null.
func slot(t, from time.Time, step time.Duration) int { return int(t.Sub(from) / step) }
