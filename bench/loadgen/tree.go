package loadgen

import (
	"fmt"
	"math/rand/v2"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The shape of a simulated node's tree: the real agent's catalogue with as
// many reset reasons, drop reasons, ping targets and BPF programs as a busy
// production node shows, which comes to about 200 metrics.
const (
	simResetReasons  = 12
	simResetStates   = 5
	simDropReasons   = 24
	simPingTargets   = 8
	simBPFPrograms   = 8
	simEventsPerRoot = 5 // evidence events a troubled node sends per interval
)

// Tree is the metric tree every simulated node announces, with what a report
// of each kind carries.
type Tree struct {
	Defs []*nbsv1.MetricDefinition
	// Roots are the metrics every report carries.
	Roots []*nbsv1.MetricDefinition
	// Troubled is the subtree a troubled node streams every interval (a
	// reset storm's tcp_reset branch, as the real agent streams it).
	Troubled []*nbsv1.MetricDefinition
}

// NewTree builds the simulated tree from the agent's catalogue.
func NewTree() Tree {
	var ms []catalog.Metric
	ms = append(ms, catalog.TCPResetTree()...)
	for i := range simResetReasons {
		ms = append(ms, catalog.ResetSentReason(fmt.Sprintf("reason_%d", i)))
	}
	for i := range simResetStates {
		ms = append(ms, catalog.ResetReceivedState(fmt.Sprintf("state_%d", i)))
	}
	ms = append(ms, catalog.LatencyTree()...)
	ms = append(ms, catalog.LatencyTXTree()...)
	ms = append(ms, catalog.DropsTree()...)
	for i := range simDropReasons {
		ms = append(ms, catalog.DropReason(fmt.Sprintf("drop_reason_%d", i)))
	}
	ms = append(ms, catalog.PingTree()...)
	for i := range simPingTargets {
		name := fmt.Sprintf("peer-%d", i)
		ms = append(ms, catalog.PingTarget(catalog.PingTargetID(name), fmt.Sprintf("10.0.0.%d", i+1))...)
	}
	ms = append(ms, catalog.AgentTree()...)
	for i := range simBPFPrograms {
		ms = append(ms, catalog.AgentProgram(fmt.Sprintf("prog_%d", i))...)
	}
	var t Tree
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		d := m.Proto()
		t.Defs = append(t.Defs, d)
		if schema.Parent(m.ID) == "" {
			t.Roots = append(t.Roots, d)
		}
		if schema.Root(m.ID) == catalog.TCPReset {
			t.Troubled = append(t.Troubled, d)
		}
	}
	return t
}

// shapes are interval histograms of nanoseconds around a millisecond (a
// ping target's or a TX stage's), made once: building one per report
// would cost the simulator more than the collector spends on it.
type shape struct {
	index []uint32
	count []uint64
	n     uint64
	sum   float64
	h     *loglinear.Histogram
	q     map[float64]float64 // the quantiles the catalogue's headlines use
}

func newShapes(rng *rand.Rand, k int) []shape {
	out := make([]shape, k)
	for j := range out {
		h := loglinear.New()
		n := 20 + rng.IntN(40)
		for range n {
			h.Record(uint64(500_000 + rng.IntN(1_500_000)))
		}
		sh := shape{n: h.Count, sum: h.Sum, h: h, q: map[float64]float64{}}
		for _, q := range []float64{0.5, 0.9, 0.99} {
			sh.q[q] = h.Quantile(q)
		}
		for _, i := range h.Sorted() {
			sh.index = append(sh.index, i)
			sh.count = append(sh.count, h.Counts[i])
		}
		out[j] = sh
	}
	return out
}

// fill adds a sample (and, for a histogram, its buckets) of d to r: values
// of the right kind and plausible size, bad ones when troubled.
func fill(r *nbsv1.Report, d *nbsv1.MetricDefinition, troubled bool, rng *rand.Rand, shapes []shape) {
	state := nbsv1.State_STATE_OK
	if troubled {
		state = nbsv1.State_STATE_WARN
	}
	if d.Kind != nbsv1.MetricKind_METRIC_KIND_HISTOGRAM {
		v := rng.Float64() * 2
		if troubled {
			v = 50 + rng.Float64()*50
		}
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: d.Id, Value: v, State: state})
		return
	}
	sh := shapes[rng.IntN(len(shapes))]
	r.Histograms = append(r.Histograms, &nbsv1.Histogram{MetricId: d.Id, Count: sh.n, Sum: sh.sum,
		BucketIndex: sh.index, BucketCount: sh.count})
	q, scale := d.Quantile, d.Scale
	if q == 0 {
		q = 0.99
	}
	if scale == 0 {
		scale = 1
	}
	v, ok := sh.q[q]
	if !ok {
		v = sh.h.Quantile(q)
	}
	r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: d.Id, Value: v / scale, State: state})
}

// events are a troubled node's evidence for one interval.
func events(r *nbsv1.Report, now int64, rng *rand.Rand) {
	for i := range simEventsPerRoot {
		r.Events = append(r.Events, &nbsv1.Event{
			MetricId: catalog.TCPReset + "/sent/reason_0", TimeUnixNano: now - int64(i)*1e6,
			Fields: map[string]string{
				"direction": "sent", "reason": "reason_0", "state": "established",
				"src": fmt.Sprintf("10.0.0.1:%d", 1024+rng.IntN(60000)), "dst": "10.0.0.2:443",
			},
		})
	}
}
