package report

// Kernel latency: the TX stages and receive-stack latency, per series
// point.

import (
	"sort"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// kernelMetric reports whether a histogram is kernel latency: the TX
// stages and any receive-stack latency.
func kernelMetric(path string) bool {
	return strings.HasPrefix(path, "latency/tx/") || strings.HasPrefix(path, "latency/rx")
}

func (d *data) kernel(from, to time.Time, step time.Duration) []KernelLatency {
	fold := func(hists []store.HistogramRow) map[string]*loglinear.Dense {
		m := map[string]*loglinear.Dense{}
		for _, h := range hists {
			if kernelMetric(h.Path) {
				a := m[h.Path]
				merge(&a, h)
				m[h.Path] = a
			}
		}
		return m
	}
	cur, prev := fold(d.curH), fold(d.prevH)
	paths := make([]string, 0, len(cur))
	for p := range cur {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	n := int((to.Sub(from) + step - 1) / step)
	byPath := map[string][]store.HistogramRow{}
	for _, r := range d.serH {
		if kernelMetric(r.Path) {
			byPath[r.Path] = append(byPath[r.Path], r)
		}
	}
	out := []KernelLatency{}
	for _, p := range paths {
		h := cur[p]
		def := d.defs[p]
		// Reports show kernel latency in microseconds whatever the
		// catalogue's display unit: recorded values are nanoseconds.
		sc := 1e3
		title := def.Title
		if title == "" {
			title = p
		}
		k := KernelLatency{Metric: p, Title: title, Unit: "us",
			P50: quantile(h, 0.5, sc), P90: quantile(h, 0.9, sc), P99: quantile(h, 0.99, sc), Max: hmax(h, sc), Count: int64(h.Count)}
		if ph := prev[p]; ph != nil {
			c := int64(ph.Count)
			k.Previous = KernelPrevious{P50: quantile(ph, 0.5, sc), P99: quantile(ph, 0.99, sc), Count: &c}
		}
		k.Series = make([]KernelPoint, n)
		points(byPath[p], from, step, n, func(i int, h *loglinear.Dense) {
			k.Series[i] = KernelPoint{T: from.Add(time.Duration(i) * step), P50: quantile(h, 0.5, sc), P99: quantile(h, 0.99, sc)}
		})
		out = append(out, k)
	}
	return out
}
