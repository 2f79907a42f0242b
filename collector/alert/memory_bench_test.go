package alert

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkAlertEvaluatorReads measures what the alert leader costs
// PostgreSQL per 1,000 reports its own writer stores (healthy reports of
// 1,000 nodes, five roots each, committed in batches of 500 as the writer
// does), in one database and one run:
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench AlertEvaluatorReads -benchtime 5x ./collector/alert/
//
// "writes only" stores the reports with no evaluator (the anchor);
// "memory" is the leader taking them from the hand-over; "database" is the
// hand-over turned off (no room), so every report is read back as before
// it. db_rows is reports read back; pg_blocks and pg_tuples are
// pg_stat_database's buffer accesses and tuples returned and fetched;
// wm_blocks the buffer accesses of the watermark upserts; all per 1,000
// reports.
func BenchmarkAlertEvaluatorReads(b *testing.B) {
	const nodes, batch = 1000, 500
	ctx := context.Background()
	db := pgcluster.Database(b)
	st, err := store.Open(ctx, db, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ids := make([]int32, nodes)
	var metricIDs map[string]int32
	roots := []string{"tcp_reset", "tcp_retrans", "udp_drop", "dns_fail", "conn_fail"}
	for i := range ids {
		if ids[i], err = st.UpsertNode(ctx, store.Node{Name: fmt.Sprintf("n%04d", i), InstanceID: 1, IntervalMS: 10_000}); err != nil {
			b.Fatal(err)
		}
		var defs []store.MetricDef
		for _, p := range roots {
			defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "1/s", Kind: store.KindRate})
		}
		if metricIDs, err = st.UpsertDefinitions(ctx, ids[i], defs); err != nil {
			b.Fatal(err)
		}
	}
	seq := uint64(0)
	clock := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	// round stores one report per node and hands each batch to svc.
	round := func(svc *Service) {
		seq++
		clock = clock.Add(10 * time.Second)
		reports := make([]store.Report, 0, nodes)
		for _, id := range ids {
			r := store.Report{NodeID: id, InstanceID: 1, Seq: seq, Time: clock, Received: clock, IntervalMS: 10_000}
			for _, p := range roots {
				r.Samples = append(r.Samples, store.Sample{MetricID: metricIDs[p], Path: p, Value: 1, State: store.StateOK})
			}
			reports = append(reports, r)
		}
		for i := 0; i < len(reports); i += batch {
			part := reports[i:min(i+batch, len(reports))]
			if _, err := st.WriteReports(ctx, part); err != nil {
				b.Fatal(err)
			}
			if svc != nil {
				svc.OnStored(part)
			}
		}
	}
	for _, mode := range []string{"writes only", "memory", "database"} {
		b.Run(mode, func(b *testing.B) {
			var svc *Service
			var m *telemetry.Metrics
			if mode != "writes only" {
				cfg := DefaultConfig()
				cfg.ExternalURL, cfg.LeaderRetry = "http://nbs", 100*time.Millisecond
				m = telemetry.New()
				if svc, err = New(st, cfg, slog.New(slog.DiscardHandler), m); err != nil {
					b.Fatal(err)
				}
				if mode == "database" {
					svc.handover.maxReports = 0
				}
				runCtx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { svc.Run(runCtx); close(done) }()
				defer func() { cancel(); <-done }()
				for !svc.Leading() {
					time.Sleep(10 * time.Millisecond)
				}
				round(svc) // the first cycle's sweep reads every node once
				waitRead(b, m, float64(nodes))
			}
			read := func() float64 {
				if m == nil {
					return 0
				}
				return readTotal(b, m, "memory") + readTotal(b, m, "database")
			}
			rows0, read0 := 0.0, read()
			if m != nil {
				rows0 = readTotal(b, m, "database")
			}
			blocks0, tuples0, wm0 := dbStats(b, st.Pool())
			b.ResetTimer()
			for range b.N {
				round(svc)
				if svc != nil {
					waitRead(b, m, read0+float64(nodes))
					read0 += nodes
				}
			}
			b.StopTimer()
			blocks, tuples, wm := dbStats(b, st.Pool())
			per := float64(b.N*nodes) / 1000
			if m != nil {
				b.ReportMetric((readTotal(b, m, "database")-rows0)/per, "db_rows/1k")
			}
			b.ReportMetric((blocks-blocks0)/per, "pg_blocks/1k")
			b.ReportMetric((tuples-tuples0)/per, "pg_tuples/1k")
			b.ReportMetric((wm-wm0)/per, "wm_blocks/1k")
		})
	}
}

func readTotal(b *testing.B, m *telemetry.Metrics, source string) float64 {
	return scrape(b, m)[fmt.Sprintf(`nbs_collector_alert_reports_read_total{source="%s"}`, source)]
}

// waitRead waits until the evaluator has read want reports in all.
func waitRead(b *testing.B, m *telemetry.Metrics, want float64) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for readTotal(b, m, "memory")+readTotal(b, m, "database") < want {
		if time.Now().After(deadline) {
			b.Fatalf("evaluator read %v reports, want %v", readTotal(b, m, "memory")+readTotal(b, m, "database"), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dbStats is the database's buffer accesses and tuples returned and
// fetched so far, and the buffer accesses of alert_watermarks (table and
// index), after the other backends have flushed their statistics (they do
// at most once a second).
func dbStats(b *testing.B, pool *pgxpool.Pool) (blocks, tuples, watermarks float64) {
	b.Helper()
	time.Sleep(1500 * time.Millisecond)
	if err := pool.QueryRow(context.Background(), `SELECT d.blks_hit + d.blks_read, d.tup_returned + d.tup_fetched,
			coalesce(w.heap_blks_hit + w.heap_blks_read + w.idx_blks_hit + w.idx_blks_read, 0)
		FROM pg_stat_database d, pg_statio_user_tables w
		WHERE d.datname = current_database() AND w.relname = 'alert_watermarks'`).Scan(&blocks, &tuples, &watermarks); err != nil {
		b.Fatal(err)
	}
	return blocks, tuples, watermarks
}
