package store

import (
	"cmp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// queueCounters sums each node's and metric's increases over the batch's
// new reports, in node then metric order (the order rows are locked in),
// leaving out resends, quiet counters, samples without a value and gauges.
func TestQueueCountersSumsInKeyOrder(t *testing.T) {
	c := func(id int32, v float64) Sample { return Sample{MetricID: id, Value: v, Counter: true} }
	reports := []Report{
		{NodeID: 7, InstanceID: 1, Seq: 1, Samples: []Sample{c(3, 1), c(-2, 4), c(9, 0), {MetricID: 5, Value: 8}}},
		{NodeID: -1, InstanceID: 1, Seq: 1, Samples: []Sample{c(3, 2)}},
		{NodeID: 7, InstanceID: 1, Seq: 2, Samples: []Sample{c(3, 0.5), {MetricID: 4, Value: 1, Counter: true, NoValue: true}}},
		{NodeID: 7, InstanceID: 1, Seq: 3, Samples: []Sample{c(3, 100)}}, // a resend
		{NodeID: 2, InstanceID: 1, Seq: 1, Samples: []Sample{c(1<<30, 1), c(1, 1)}},
	}
	inserted := map[ReportKey]bool{}
	for _, r := range reports[:4] {
		inserted[r.Key()] = r.Seq != 3
	}
	inserted[reports[4].Key()] = true
	var batch pgx.Batch
	queueCounters(&batch, reports, inserted)
	if len(batch.QueuedQueries) != 1 {
		t.Fatalf("%d statements queued, want 1", len(batch.QueuedQueries))
	}
	args := batch.QueuedQueries[0].Arguments
	nodes, metrics, vals := args[0].([]int32), args[1].([]int32), args[2].([]float64)
	type row struct {
		node, metric int32
		v            float64
	}
	var got []row
	for i := range nodes {
		got = append(got, row{nodes[i], metrics[i], vals[i]})
	}
	want := []row{{-1, 3, 2}, {2, 1, 1}, {2, 1 << 30, 1}, {7, -2, 4}, {7, 3, 1.5}}
	if !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}

	var none pgx.Batch
	queueCounters(&none, reports[3:4], map[ReportKey]bool{})
	if len(none.QueuedQueries) != 0 {
		t.Errorf("a batch of resends queued %d statements, want none", len(none.QueuedQueries))
	}
}

// counterKey sorts as node, then metric, each a signed int32, and gives
// both back.
func TestCounterKeyOrder(t *testing.T) {
	ids := []int32{-1 << 31, -7, -1, 0, 1, 7, 1<<31 - 1}
	type pair struct{ node, metric int32 }
	var pairs []pair
	for _, n := range ids {
		for _, m := range ids {
			pairs = append(pairs, pair{n, m})
		}
	}
	byKey := slices.Clone(pairs)
	slices.SortFunc(byKey, func(a, b pair) int { return cmp.Compare(counterKey(a.node, a.metric), counterKey(b.node, b.metric)) })
	if !slices.Equal(byKey, pairs) {
		t.Errorf("sorted by counterKey: %v, want %v", byKey, pairs)
	}
	for _, p := range pairs {
		if n, m := (counterInc{key: counterKey(p.node, p.metric)}).ids(); n != p.node || m != p.metric {
			t.Errorf("counterKey(%d, %d) gives back %d, %d", p.node, p.metric, n, m)
		}
	}
}
