package flowmap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// BenchmarkFlowEdgesHOT measures what flow_edges' fillfactor (migration
// 031) changes in PostgreSQL's work for the same ingest, in one run, in
// figures the machine's load does not move: how many of the hour and day
// rows' updates were HOT (no primary key entry), the WAL written and the
// primary key's size; and the wall time beside them. Two databases, one
// set back to the fillfactor before the migration (100):
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench FlowEdgesHOT -benchtime 1x ./bench/flowmap/
//
// The fleet is BenchmarkFlowMap's (NBS_FLOWMAP_NODES, default here 20,
// and NBS_FLOWMAP_MINUTES, 5).
func BenchmarkFlowEdgesHOT(b *testing.B) {
	nodes, minutes := envInt("NBS_FLOWMAP_NODES", 20), envInt("NBS_FLOWMAP_MINUTES", 5)
	const owners, fanout = 50, 10
	ctx := context.Background()
	for b.Loop() {
		for _, ff := range []int{100, 70} {
			st := storetest.Open(b)
			if _, err := st.Pool().Exec(ctx, fmt.Sprintf(`ALTER TABLE flow_edges SET (fillfactor = %d)`, ff)); err != nil {
				b.Fatal(err)
			}
			ids := benchFleet(ctx, b, st, nodes)
			total := nodes * owners
			owner, addr := benchOwner, benchAddr
			edgesOf := make([][]store.FlowEdge, nodes)
			for g := range total {
				for k := range fanout {
					p := (g + (k+1)*owners*7 + 1) % total
					c := store.FlowCounters{Opened: 5, Closed: 5, BytesSent: 40000, BytesRecv: 900000, RTT: map[int32]uint64{300: 3, 310: 1}}
					edgesOf[g/owners] = append(edgesOf[g/owners], store.FlowEdge{Local: owner(g), Role: store.FlowClient, LocalAddr: addr(g), PeerAddr: addr(p), PeerPort: 8080, FlowCounters: c})
					edgesOf[p/owners] = append(edgesOf[p/owners], store.FlowEdge{Local: owner(p), Role: store.FlowServer, LocalAddr: addr(p), LocalPort: 8080, PeerAddr: addr(g), FlowCounters: c})
				}
			}
			var lsn0 string
			if err := st.Pool().QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn0); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now().UTC().Truncate(time.Hour)
			var written int
			start := time.Now()
			for m := range minutes {
				for n0 := 0; n0 < nodes; n0 += 10 {
					var batch []store.Report
					for n := n0; n < min(n0+10, nodes); n++ {
						batch = append(batch, store.Report{NodeID: ids[n], InstanceID: 1, Seq: uint64(m + 1), Time: t0.Add(time.Duration(m)*time.Minute + 30*time.Second), IntervalMS: 60000, Flows: edgesOf[n]})
						written += len(edgesOf[n])
					}
					if _, err := st.WriteReports(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			wall := time.Since(start)
			var upd, hot, wal, pk int64
			// The statistics of this backend's and the writers' transactions
			// reach pg_stat_user_tables within a second or so.
			for range 50 {
				if err := st.Pool().QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd, pg_current_wal_lsn() - $1::pg_lsn, pg_relation_size('flow_edges_pkey')
FROM pg_stat_user_tables WHERE relname = 'flow_edges'`, lsn0).Scan(&upd, &hot, &wal, &pk); err != nil {
					b.Fatal(err)
				}
				if upd > 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			b.Logf("fillfactor %d: %d edges in %s (%.0f edges/s); updates %d, HOT %d (%.0f%%); WAL %.1f MB (%.0f B an edge); primary key %.1f MB",
				ff, written, wall.Round(time.Millisecond), float64(written)/wall.Seconds(), upd, hot, 100*float64(hot)/float64(max(upd, 1)),
				float64(wal)/1e6, float64(wal)/float64(written), float64(pk)/1e6)
			b.ReportMetric(100*float64(hot)/float64(max(upd, 1)), fmt.Sprintf("hot_pct_ff%d", ff))
			b.ReportMetric(float64(wal)/float64(written), fmt.Sprintf("wal_B/edge_ff%d", ff))
		}
	}
}
