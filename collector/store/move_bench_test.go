package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkMoveStaged times the statement that stores a staged batch and
// leaves its pending keys, for a healthy fleet's batch (4 samples a
// report, no histograms, no events): the statement it takes (moveStaged
// without histograms) against the general one (the pending keys through
// the join and GROUP BY over the staged histograms, as every batch took
// before). Each round writes one batch by each, in alternating order, on
// one database, so the machine's load falls on both alike; the figure is
// their median time per batch and the ratio of the medians.
func BenchmarkMoveStaged(b *testing.B) {
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
	if err := st.ensurePartitions(ctx, next()); err != nil {
		b.Fatal(err)
	}
	seq = 0
	write := func(general bool) time.Duration {
		batch := next()
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, stagingDDL); err != nil {
				return err
			}
			hists, events, err := copyStaged(ctx, tx, batch)
			if err != nil {
				return err
			}
			if general {
				hists, events = true, true
			}
			tag, err := tx.Exec(ctx, moveStaged(hists, events))
			if err == nil && tag.RowsAffected() != int64(len(batch)) {
				err = fmt.Errorf("stored %d reports of %d", tag.RowsAffected(), len(batch))
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var own, general []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			own = append(own, write(false))
			general = append(general, write(true))
		} else {
			general = append(general, write(true))
			own = append(own, write(false))
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
	if pending != len(own)*batchSize*2 {
		b.Fatalf("%d pending keys for %d reports", pending, len(own)*batchSize*2)
	}
	mo, mg := median(own), median(general)
	b.ReportMetric(float64(mo.Microseconds())/1000, "no-hists-ms/batch")
	b.ReportMetric(float64(mg.Microseconds())/1000, "general-ms/batch")
	b.ReportMetric(float64(mg)/float64(mo), "general/no-hists")
}
