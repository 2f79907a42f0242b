package store

import (
	"bytes"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The reports, histograms and rollup_pending rows encoded straight from a
// batch are byte for byte what appendField writes for CopyRows' values
// (and, for rollup_pending, the sorted histogram ids, NULL without any),
// for the columns' types of the migrations and, through CopyRows, for
// others; and encoding them takes no allocation a row.
func TestCopySourcesAsCopyRows(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 456789123, time.FixedZone("x", 3600))
	batch := []Report{
		{NodeID: 7, InstanceID: math.MaxUint64, Seq: 1, Time: at, IntervalMS: 10000},
		{NodeID: -1, InstanceID: 3, Seq: 1 << 40, Time: at.Add(time.Second), IntervalMS: 1, Snapshot: true,
			Samples: []Sample{{MetricID: 4, Value: 2.5, State: StateWarn}, {MetricID: 9, Value: 1, NoValue: true, State: StateUnknown}},
			Histograms: []Histogram{
				{MetricID: 12, Count: 3, Sum: 0.5, BucketIndex: []int32{1, 9}, BucketCount: []int64{1, 2}},
				{MetricID: 5, Count: 1, BucketIndex: []int32{}, BucketCount: nil},
				{MetricID: 12, Count: 1 << 62, Sum: math.Inf(1), BucketIndex: []int32{3}, BucketCount: []int64{1 << 62}},
			}},
		{NodeID: 8, Seq: 2, Time: at, Samples: []Sample{}},
	}
	var wantReports, wantHists, wantPending anyRows
	for _, r := range batch {
		rep, hs, _, err := CopyRows(r)
		if err != nil {
			t.Fatal(err)
		}
		wantReports, wantHists = append(wantReports, rep), append(wantHists, hs...)
		var ids []int32
		for _, h := range r.Histograms {
			if !slices.Contains(ids, h.MetricID) {
				ids = append(ids, h.MetricID)
			}
		}
		slices.Sort(ids)
		wantPending = append(wantPending, []any{r.NodeID, int64(r.InstanceID), int64(r.Seq), r.Time, ids})
	}
	m := pgtype.NewMap()
	encodeInto := func(buf []byte, src copySource, oids []uint32) []byte {
		t.Helper()
		for i := range src.Len() {
			var err error
			if buf, err = src.appendRow(m, buf, i, oids); err != nil {
				t.Fatal(err)
			}
		}
		return buf
	}
	encode := func(src copySource, oids []uint32) []byte { return encodeInto([]byte("start"), src, oids) }
	other := func(oids []uint32) []uint32 { // node_id as int8: not the migrations' type
		o := slices.Clone(oids)
		o[0] = pgtype.Int8OID
		return o
	}
	for _, tc := range []struct {
		name      string
		got, want copySource
		oids      []uint32
	}{
		{"reports", reportRows(batch), wantReports, reportOIDs},
		{"histograms", newHistRows(batch), wantHists, histOIDs},
		{"rollup_pending", newPendingRows(batch), wantPending, pendingOIDs},
	} {
		for _, oids := range [][]uint32{tc.oids, other(tc.oids)} {
			if got, want := encode(tc.got, oids), encode(tc.want, oids); !bytes.Equal(got, want) || tc.got.Len() != tc.want.Len() {
				t.Errorf("%s (columns %v): %d rows encoded\n%x\nCopyRows' %d\n%x", tc.name, oids, tc.got.Len(), got, tc.want.Len(), want)
			}
		}
		buf := encode(tc.got, tc.oids)
		if allocs := testing.AllocsPerRun(50, func() { buf = encodeInto(buf[:0], tc.got, tc.oids) }); allocs > 0 {
			t.Errorf("%s: %.1f allocations to encode the rows", tc.name, allocs)
		}
	}
}

// queueCounters sums each node's and metric's increases over the new
// reports of a batch, in node and metric order, and leaves out what adds
// nothing (a resend, no value, zero, a gauge, an unknown metric).
func TestQueueCountersSums(t *testing.T) {
	rep := func(node int32, seq uint64, samples ...Sample) Report {
		return Report{NodeID: node, InstanceID: 1, Seq: seq, Samples: samples}
	}
	inc := func(metric int32, v float64) Sample { return Sample{MetricID: metric, Value: v, Counter: true} }
	batch := []Report{
		rep(9, 1, inc(3, 0.1), inc(1, 2), Sample{MetricID: 4, Value: 5}),                             // 4: a gauge
		rep(2, 1, inc(3, 1), inc(5, 0), Sample{MetricID: 6, Value: 7, Counter: true, NoValue: true}), // 5: zero, 6: no value
		rep(9, 2, inc(3, 0.2), inc(0, 4)),                                                            // 0: no metric
		rep(9, 3, inc(3, 100)),                                                                       // a resend
		rep(9, 4, inc(3, 0.7)),
	}
	inserted := map[ReportKey]bool{}
	for _, r := range batch {
		inserted[r.Key()] = r.Seq != 3
	}
	b := &pgx.Batch{}
	queueCounters(b, batch, inserted)
	if len(b.QueuedQueries) != 1 {
		t.Fatalf("%d statements queued, want 1", len(b.QueuedQueries))
	}
	args := b.QueuedQueries[0].Arguments
	wantNodes, wantMetrics, wantVals := []int32{2, 9, 9}, []int32{3, 1, 3}, []float64{1, 2, 0.1 + 0.2 + 0.7}
	if !reflect.DeepEqual(args, []any{wantNodes, wantMetrics, wantVals}) {
		t.Errorf("queued %v, want %v %v %v", args, wantNodes, wantMetrics, wantVals)
	}
	b = &pgx.Batch{}
	queueCounters(b, batch[3:4], inserted)
	if b.Len() != 0 {
		t.Errorf("a resend alone queued %v", b.QueuedQueries[0].Arguments)
	}
}
