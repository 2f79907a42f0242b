package store

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkReportsAfterSweep measures the alert leader's periodic sweep
// (every 10 s, every node) at fleet size, when the in-memory hand-over has
// kept every watermark current, so that nothing is newer: as the
// evaluator does it (NewestTimes, compared with the watermarks in Go), and
// as it did before (ReportsAfter with a cursor per node). NBS_SWEEP_NODES
// nodes (default 30,000). The anchor in the same run is what the hand-over
// removed: reading back 1,000 just-stored reports (one new report for each
// of 1,000 nodes), which a 30,000-node fleet at 10 s needed three times a
// second.
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench ReportsAfterSweep -benchtime 20x ./collector/store/
func BenchmarkReportsAfterSweep(b *testing.B) {
	nodes := 30_000
	if n, err := strconv.Atoi(os.Getenv("NBS_SWEEP_NODES")); err == nil && n >= 1000 {
		nodes = n
	}
	ctx := context.Background()
	st := openTest(b)
	rows, err := st.pool.Query(ctx, `INSERT INTO nodes (name, instance_id, interval_ms)
		SELECT 'sweep-' || g, 1, 10000 FROM generate_series(1, $1) g RETURNING id`, nodes)
	if err != nil {
		b.Fatal(err)
	}
	var ids []int32
	for rows.Next() {
		var id int32
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil {
		b.Fatal(rows.Err())
	}
	metric, err := st.UpsertDefinitions(ctx, ids[0], []MetricDef{{Path: "tcp_reset", Kind: KindRate}})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	// Two reports per node, 10 s apart, stored as the writer stores them.
	for seq := uint64(1); seq <= 2; seq++ {
		ts := t0.Add(time.Duration(seq) * 10 * time.Second)
		for i := 0; i < len(ids); i += 500 {
			var batch []Report
			for _, id := range ids[i:min(i+500, len(ids))] {
				batch = append(batch, Report{NodeID: id, InstanceID: 1, Seq: seq, Time: ts, Received: ts, IntervalMS: 10000,
					Samples: []Sample{{MetricID: metric["tcp_reset"], Path: "tcp_reset", Value: 1, State: StateOK}}})
			}
			if _, err := st.WriteReports(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := st.pool.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	cursors := func(n int, after time.Time) []ReportCursor {
		c := make([]ReportCursor, n)
		for i := range c {
			c[i] = ReportCursor{NodeID: ids[i], After: after, Lookback: 10 * time.Minute}
		}
		return c
	}
	b.Run("sweep by newest times", func(b *testing.B) {
		for b.Loop() {
			newest, err := st.NewestTimes(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			after := t0.Add(20 * time.Second)
			for _, id := range ids {
				if ts, ok := newest[id]; ok && ts.After(after) {
					n++
				}
			}
			if len(newest) != len(ids) || n != 0 {
				b.Fatalf("%d newest times, %d newer; want %d and none", len(newest), n, len(ids))
			}
		}
		b.ReportMetric(float64(len(ids)), "nodes")
	})
	for _, c := range []struct {
		name    string
		cursors []ReportCursor
		want    int
	}{
		{"anchor=read back 1,000 new reports", cursors(1000, t0.Add(10*time.Second)), 1000},
		{"sweep by a cursor per node", cursors(len(ids), t0.Add(20*time.Second)), 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				got, err := st.ReportsAfter(ctx, c.cursors)
				if err != nil {
					b.Fatal(err)
				}
				if len(got) != c.want {
					b.Fatalf("%d reports, want %d", len(got), c.want)
				}
			}
			b.ReportMetric(float64(len(c.cursors)), "nodes")
		})
	}
}
