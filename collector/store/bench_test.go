package store

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkWriteReports measures the ingest path (COPY into staging, dedup
// insert, latest merge) for batches of reports shaped like a fleet's: each
// report carries samplesPerReport samples. It reports samples/s and the
// bytes each sample costs on disk (heap + indexes of reports).
func BenchmarkWriteReports(b *testing.B) {
	for _, shape := range []struct{ nodes, samples, batch int }{
		{100, 4, 500},   // healthy fleet: roots only
		{100, 40, 500},  // a troubled fleet: roots and many children
		{100, 40, 50},   // small batches
		{100, 400, 100}, // full snapshots
	} {
		b.Run(fmt.Sprintf("nodes=%d/samples=%d/batch=%d", shape.nodes, shape.samples, shape.batch), func(b *testing.B) {
			benchWrite(b, shape.nodes, shape.samples, shape.batch)
		})
	}
}

func benchWrite(b *testing.B, nodes, samples, batchSize int) {
	ctx := context.Background()
	st, err := Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	nodeIDs := make([]int32, nodes)
	var defs []MetricDef
	for m := range samples {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("r%d", m), Title: "m", Unit: "x/s", Kind: KindRate})
	}
	var ids map[string]int32
	for i := range nodes {
		if nodeIDs[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			b.Fatal(err)
		}
		if ids, err = st.UpsertDefinitions(ctx, nodeIDs[i], defs); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now().Add(-time.Hour)
	seq := uint64(0)
	batch := make([]Report, 0, batchSize)
	b.ResetTimer()
	written := 0
	for i := 0; b.Loop(); i++ {
		batch = batch[:0]
		for len(batch) < batchSize {
			n := int(seq) % nodes
			if n == 0 {
				seq++
			}
			r := Report{NodeID: nodeIDs[n], InstanceID: 1, Seq: seq + uint64(n)<<32, Time: start.Add(time.Duration(seq) * 10 * time.Millisecond), IntervalMS: 10000}
			for m := range samples {
				p := fmt.Sprintf("r%d", m)
				r.Samples = append(r.Samples, Sample{MetricID: ids[p], Path: p, Value: float64(m), State: StateOK})
			}
			batch = append(batch, r)
			seq++
		}
		if _, err := st.WriteReports(ctx, batch); err != nil {
			b.Fatal(err)
		}
		written += len(batch) * samples
	}
	b.StopTimer()
	b.ReportMetric(float64(written)/b.Elapsed().Seconds(), "samples/s")
	var bytes int64
	if err := st.pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'reports'`).Scan(&bytes); err != nil {
		b.Fatal(err)
	}
	if written > 0 {
		b.ReportMetric(float64(bytes)/float64(written), "disk-B/sample")
	}
}
