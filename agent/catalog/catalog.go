// Package catalog is the single source of truth for what each metric is:
// its id path, title, unit, kind, the description an operator reads, and its
// default threshold. The collector and UI render whatever the agent
// announces from here, so a new metric needs no change anywhere else.
package catalog

import (
	"fmt"

	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

type Kind int

const (
	Rate      Kind = iota + 1 // a counter; reports carry its increase per interval
	Gauge                     // a level
	Histogram                 // a latency distribution
)

// Threshold levels compare against the headline value: per second for a
// rate, the level for a gauge.
type Threshold struct {
	Warn, Crit float64
	Below      bool   // raise when the value is at or below the levels
	Hold       uint32 // consecutive intervals before the state rises
	Baseline   uint32 // > 0: levels multiply the moving median of this many intervals
	// With Baseline: values below this absolute level are never raised, so
	// a multiple of a tiny baseline does not flag noise.
	Floor float64
}

// BaselineAdopt is how many baseline windows a breach must last before its
// level is accepted as the new baseline: 6 (30 minutes at the default 30
// intervals of 10 s). Until then a baseline threshold is judged against
// the median of the values from before the breach, which is what the
// collector's alert text states (collector/alert/describe.go); a
// permanent change (a peer moved farther away) alerts for that long, then
// is the normal, and the alert resolves. docs/thresholds.md.
const BaselineAdopt = 6

type Metric struct {
	ID          string
	Title       string
	Unit        string
	Kind        Kind
	Description string
	Threshold   *Threshold
	// Histograms: the headline value is this quantile (0.99 = p99) of the
	// interval's distribution, divided by Scale to be in Unit (recorded
	// nanoseconds / 1e6 = ms).
	Quantile float64
	Scale    float64
}

// Parent returns the id of the metric's parent, "" for a root.
func (m Metric) Parent() string { return schema.Parent(m.ID) }

func (t *Threshold) Proto() *nbsv1.Threshold {
	if t == nil {
		return nil
	}
	c := nbsv1.Comparison_COMPARISON_ABOVE
	if t.Below {
		c = nbsv1.Comparison_COMPARISON_BELOW
	}
	return &nbsv1.Threshold{Warn: t.Warn, Crit: t.Crit, Comparison: c, HoldIntervals: t.Hold, BaselineIntervals: t.Baseline, Floor: t.Floor}
}

// ThresholdFromProto converts an override pushed by the collector.
func ThresholdFromProto(p *nbsv1.Threshold) (Threshold, error) {
	t := Threshold{Warn: p.GetWarn(), Crit: p.GetCrit(), Hold: p.GetHoldIntervals(), Baseline: p.GetBaselineIntervals(), Floor: p.GetFloor()}
	switch p.GetComparison() {
	case nbsv1.Comparison_COMPARISON_ABOVE:
	case nbsv1.Comparison_COMPARISON_BELOW:
		t.Below = true
	default:
		return t, fmt.Errorf("threshold comparison %v is neither above nor below", p.GetComparison())
	}
	return t, nil
}

func (m Metric) Proto() *nbsv1.MetricDefinition {
	return &nbsv1.MetricDefinition{
		Id: m.ID, Title: m.Title, Unit: m.Unit, Kind: nbsv1.MetricKind(m.Kind),
		Description: m.Description, DefaultThreshold: m.Threshold.Proto(), Scale: m.Scale, Quantile: m.Quantile,
	}
}

// MetricSegment makes a kernel name (a device, a program's attach point)
// usable as one segment of a metric id (schema.Segment).
func MetricSegment(name string) string { return schema.Segment(name) }
