package store

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// histMerge, merging rows as they come, gives mergeHistograms' rows for
// whole-row reads: the same groups in the same order, the same buckets,
// counts and sums, also for rows whose buckets are out of order, repeated,
// empty or past the layout, and with a row's buckets reused after add.
// One histMerge serves every case, reset before each, as the minute fold
// keeps one from chunk to chunk.
func TestHistMergeIsMergeHistograms(t *testing.T) {
	m := new(histMerge)
	for _, tc := range []struct {
		name      string
		rows      int
		groups    int
		buckets   int
		malformed bool
		// In the minute fold's order: report by report (node, then
		// time), each report's metrics ascending, some left out.
		fold bool
	}{
		{"one group", 20, 1, 12, false, false},
		{"many groups, few rows each", 3000, 500, 16, false, false},
		{"growing past a row's room", 200, 3, 300, false, false},
		{"malformed buckets", 500, 40, 12, true, false},
		{"the fold's order", 3000, 0, 16, false, true},
		{"many groups again", 3000, 500, 16, false, false},
		{"growing past a row's room again", 200, 3, 300, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.rows)))
			var keys []histKey
			for len(keys) < tc.rows {
				if !tc.fold {
					g := rng.IntN(tc.groups)
					keys = append(keys, histKey{int32(g % 7), int32(g / 7), int64(60 * (g % 3))})
					continue
				}
				for node := int32(1); node <= 9 && len(keys) < tc.rows; node++ {
					for report := range 12 { // 6 a minute
						for metric := int32(1); metric <= 10; metric++ {
							if rng.IntN(5) > 0 || metric == 1 {
								keys = append(keys, histKey{node, metric + int32(rng.IntN(2)*10*(report%5/4)), int64(60 * (report / 6))})
							}
						}
					}
				}
			}
			var rows []HistogramRow
			m.reset()
			scratchIdx, scratchCnt := make([]int32, 0, 1024), make([]int64, 0, 1024)
			for _, k := range keys[:tc.rows] {
				r := HistogramRow{NodeID: k.node, metricID: k.metric, TS: time.Unix(k.ts, 0).UTC(),
					Count: uint64(rng.IntN(1000)), Sum: rng.Float64() * 1e6}
				base := int32(rng.IntN(200))
				for b := base; b < base+int32(tc.buckets) && b < loglinear.Buckets; b++ {
					if rng.IntN(3) == 0 {
						r.Index, r.Counts = append(r.Index, b), append(r.Counts, int64(1+rng.IntN(50)))
					}
				}
				if len(r.Index) == 0 {
					r.Index, r.Counts = []int32{base}, []int64{1}
				}
				if tc.malformed && rng.IntN(2) == 0 {
					switch rng.IntN(4) {
					case 0:
						r.Index[0], r.Index[len(r.Index)-1] = r.Index[len(r.Index)-1], r.Index[0]
					case 1:
						r.Index, r.Counts = append(r.Index, r.Index[0]), append(r.Counts, 5)
					case 2:
						r.Index, r.Counts = append(r.Index, loglinear.Buckets+3, -1), append(r.Counts, 7, 7)
					case 3:
						r.Counts[0] = 0
					}
				}
				rows = append(rows, r)
				// The row's buckets through a scratch that the next row
				// overwrites, as read does.
				scratchIdx, scratchCnt = append(scratchIdx[:0], r.Index...), append(scratchCnt[:0], r.Counts...)
				m.add(histKey{r.NodeID, r.metricID, r.TS.Unix()}, r.Count, r.Sum, scratchIdx, scratchCnt)
				clear(scratchIdx)
				clear(scratchCnt)
			}
			want := mergeHistograms(rows)
			if len(m.out) != len(want) {
				t.Fatalf("%d merged rows, want %d", len(m.out), len(want))
			}
			for i, w := range want {
				g := m.out[i]
				if g.node != w.NodeID || g.metric != w.metricID || g.ts != w.TS.Unix() || g.count != w.Count || g.sum != w.Sum {
					t.Fatalf("row %d: %+v, want node %d metric %d ts %d count %d sum %g", i, g.histKey, w.NodeID, w.metricID, w.TS.Unix(), w.Count, w.Sum)
				}
				if !slices.Equal(g.idx, w.Index) || !slices.Equal(g.cnt, w.Counts) {
					t.Fatalf("row %d: buckets %v %v, want %v %v", i, g.idx, g.cnt, w.Index, w.Counts)
				}
				if g.idx == nil || g.cnt == nil {
					t.Fatalf("row %d: nil buckets (the columns are NOT NULL)", i)
				}
			}
		})
	}
}
