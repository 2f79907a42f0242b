package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkCopyDirect times storing a healthy fleet's batch (4 samples a
// report, no histograms, no events) and leaving its pending keys: COPY
// straight into the tables (copyDirect, what a batch without resends
// takes) against COPY to staging tables and moving the new reports
// (writeStaged, what a batch with a resend takes, and every batch did
// before). Each round writes one batch each way, in alternating order, on
// one database, so the machine's load falls on both alike; the figure is
// their median time per batch and the ratio of the medians.
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench CopyDirect -benchtime 3s ./collector/store
func BenchmarkCopyDirect(b *testing.B) {
	const nodes, samples, batchSize = 100, 4, 500
	ctx := context.Background()
	st := openTest(b)
	var defs []MetricDef
	for m := range samples {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("r%d", m), Title: "m", Unit: "x/s", Kind: KindRate})
	}
	nodeIDs := make([]int32, nodes)
	var ids map[string]int32
	for i := range nodes {
		var err error
		if nodeIDs[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			b.Fatal(err)
		}
		if ids, err = st.UpsertDefinitions(ctx, nodeIDs[i], defs); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now().Add(-time.Hour)
	seq := uint64(0)
	next := func() []Report {
		batch := make([]Report, 0, batchSize)
		for len(batch) < batchSize {
			n := int(seq) % nodes
			r := Report{NodeID: nodeIDs[n], InstanceID: 1, Seq: seq, Time: start.Add(time.Duration(seq) * 10 * time.Millisecond), IntervalMS: 10000}
			for m := range samples {
				p := fmt.Sprintf("r%d", m)
				r.Samples = append(r.Samples, Sample{MetricID: ids[p], Path: p, Value: float64(m), State: StateOK})
			}
			batch = append(batch, r)
			seq++
		}
		return batch
	}
	write := func(direct bool) time.Duration {
		batch := next()
		// Each batch's own days: a run that starts within the hour before
		// midnight UTC writes past it.
		if err := st.ensurePartitions(ctx, batch); err != nil {
			b.Fatal(err)
		}
		rows, err := newCopyRows(batch)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		err = pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
			if direct {
				stored, err := copyDirect(ctx, tx, rows, new([]byte))
				if err == nil && !stored {
					err = fmt.Errorf("a new batch was refused")
				}
				return err
			}
			result := map[ReportKey]bool{}
			if err := st.writeStaged(ctx, tx, rows, result, new([]byte)); err != nil {
				return err
			}
			if len(result) != len(batch) {
				return fmt.Errorf("stored %d reports of %d", len(result), len(batch))
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var direct, staged []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			direct = append(direct, write(true))
			staged = append(staged, write(false))
		} else {
			staged = append(staged, write(false))
			direct = append(direct, write(true))
		}
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	var pending int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM rollup_pending`).Scan(&pending); err != nil {
		b.Fatal(err)
	}
	if pending != len(direct)*batchSize*2 {
		b.Fatalf("%d pending keys for %d reports", pending, len(direct)*batchSize*2)
	}
	md, ms := median(direct), median(staged)
	b.ReportMetric(float64(md.Microseconds())/1000, "direct-ms/batch")
	b.ReportMetric(float64(ms.Microseconds())/1000, "staged-ms/batch")
	b.ReportMetric(float64(ms)/float64(md), "staged/direct")
}
