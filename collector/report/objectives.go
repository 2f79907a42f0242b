package report

// Objectives: targets checked per hour, e.g. ping p99 < 5 ms.

import (
	"fmt"
	"math"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// Objective is a target a report checks per hour, e.g. ping p99 < 5 ms.
type Objective struct {
	Name string `json:"name"`
	// Metric is "ping" (every ping target's RTT) or a histogram's path.
	Metric   string  `json:"metric"`
	Quantile float64 `json:"quantile"`
	BelowMS  float64 `json:"below_ms"`
	Per      string  `json:"per"` // "hour"
}

// Validate checks an objective's fields.
func (o Objective) Validate() error {
	switch {
	case o.Name == "" || len(o.Name) > 200:
		return fmt.Errorf("objective name must be 1 to 200 bytes")
	case o.Metric == "" || len(o.Metric) > 256:
		return fmt.Errorf("objective %q: metric must be \"ping\" or a histogram path", o.Name)
	case !(o.Quantile > 0 && o.Quantile <= 1):
		return fmt.Errorf("objective %q: quantile %v must be in (0, 1]", o.Name, o.Quantile)
	case !(o.BelowMS > 0) || math.IsInf(o.BelowMS, 0):
		return fmt.Errorf("objective %q: below_ms must be a positive number", o.Name)
	case o.Per != "hour":
		return fmt.Errorf("objective %q: per must be \"hour\"", o.Name)
	}
	return nil
}

func objectiveMetrics(objs []Objective) func(string) bool {
	return func(path string) bool {
		for _, o := range objs {
			if o.Metric == path {
				return true
			}
			if t, child := pingTarget(path); o.Metric == "ping" && t != "" && child == "" {
				return true
			}
		}
		return false
	}
}

func (d *data) objectives(objs []Objective, from, to time.Time) []ObjectiveResult {
	out := []ObjectiveResult{}
	for _, o := range objs {
		var rows []store.HistogramRow
		scale := 1e6
		for _, h := range d.objH {
			t, child := pingTarget(h.Path)
			match := h.Path == o.Metric
			if o.Metric == "ping" {
				match = t != "" && child == "" && d.wanted(t)
			}
			if !match {
				continue
			}
			scale = d.scale(h.Path)
			rows = append(rows, h)
		}
		// A histogram metric's scale turns its values into its unit;
		// objectives are in ms, and only ms metrics (ping) have them in
		// that unit, so anything else is taken as nanoseconds.
		if o.Metric != "ping" && d.defs[o.Metric].Unit != "ms" {
			scale = 1e6
		}
		r := ObjectiveResult{Name: o.Name, Missed: []time.Time{}}
		met := 0
		first := from.Truncate(time.Hour)
		points(rows, first, time.Hour, int((to.Sub(first)+time.Hour-1)/time.Hour), func(i int, h *loglinear.Dense) {
			if h.Count == 0 {
				r.NoDataHours++
				return
			}
			r.Hours++
			if h.Quantile(o.Quantile)/scale < o.BelowMS {
				met++
			} else {
				r.Missed = append(r.Missed, first.Add(time.Duration(i)*time.Hour))
			}
		})
		if r.Hours > 0 {
			r.Attainment = num(float64(met) / float64(r.Hours))
		}
		out = append(out, r)
	}
	return out
}
