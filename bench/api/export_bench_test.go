package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkExport measures the Prometheus scrape (GET /export/metrics) of a
// 10,000-node fleet (NBS_API_EXPORT_NODES) — roots, every 20th node's
// raised tcp_reset branch, the counters that moved — beside the fleet
// page (GET /fleet) and every node with its roots (GET /nodes) of the same
// fleet, and a SELECT 1 anchor, in the same run; then what a scrape every
// second costs the write path, rounds with and without it alternating:
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench Export -benchtime 1x -timeout 60m ./bench/api/
//
// The fleet is seeded as BenchmarkFleet's (the busy tree, a snapshot then
// usual reports), at the current time so it is inside the export window.
func BenchmarkExport(b *testing.B) {
	ctx := context.Background()
	n := envInt(b, "NBS_API_EXPORT_NODES", 10000)
	st, err := store.Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	start := time.Now()
	f, err := register(ctx, st, seedConfig{Nodes: n}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("registered %d nodes in %s", n, time.Since(start).Round(time.Second))
	// Rounds come faster than seq's 10 s steps: number each node's reports.
	seqs := map[int]uint64{}
	round := func(snapshot bool) time.Duration {
		return f.writeRound(ctx, b, st, time.Now(), snapshot, func(i int, at time.Time) uint64 {
			seqs[i]++
			return uint64(at.UnixNano()) + seqs[i]
		})
	}
	round(true)
	round(false)
	if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	srv, token := server(b, st)
	get := func(path string) func() error {
		return func() error {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v1"+path, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := srv.Client().Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK || len(body) == 0 {
				return fmt.Errorf("GET %s: %d, %d bytes %.300s", path, resp.StatusCode, len(body), body)
			}
			return nil
		}
	}
	report := func(name string, t timings) {
		b.ReportMetric(ms(t.q(0.5)), name+"-p50-ms")
		b.ReportMetric(ms(t.q(0.99)), name+"-p99-ms")
		fmt.Fprintf(os.Stderr, "%-30s p50 %8.2f ms  p99 %8.2f ms  (%d requests)\n", name, ms(t.q(0.5)), ms(t.q(0.99)), len(t))
	}
	b.ResetTimer()
	report("anchor-select-1", run(b, 100, func() error {
		var one int
		return st.Pool().QueryRow(ctx, `SELECT 1`).Scan(&one)
	}))
	// Every counter of the seed moved within the window (the snapshot
	// carried the whole busy tree): 87 counters a node.
	report("export-scrape-all-moved", run(b, 10, get("/export/metrics")))
	// Roots and raised children only, as on a fleet whose snapshot is
	// older than the window: the counters not moved since are left out.
	b.StopTimer()
	if _, err := st.Pool().Exec(ctx, `UPDATE export_counters SET updated = now() - interval '1 hour'`); err != nil {
		b.Fatal(err)
	}
	round(false)
	b.StartTimer()
	report("export-scrape", run(b, 20, get("/export/metrics")))
	report("fleet-page", run(b, 20, get("/fleet")))
	report("export-store-read", run(b, 20, func() error {
		_, err := st.ExportNodes(ctx, store.All{}, time.Now().Add(-5*time.Minute))
		return err
	}))
	report("nodes-every-node-with-roots", run(b, 5, get("/nodes")))
	// On a loaded machine the reads above outlast the window: report once
	// more so the scrape measured for its size holds the whole fleet.
	b.StopTimer()
	round(false)
	for _, gz := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/export/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(os.Stderr, "export scrape (gzip %v): %d bytes, %d lines\n", gz, len(body), bytes.Count(body, []byte("\n")))
		b.ReportMetric(float64(len(body)), fmt.Sprintf("export-bytes-gzip-%v", gz))
	}
	b.StopTimer()

	// A scrape every second against the write path: rounds of the usual
	// report with and without it, in the order off on on off off on.
	var with, without time.Duration
	for _, on := range []bool{false, true, true, false, false, true} {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		if on {
			wg.Go(func() {
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						if err := get("/export/metrics")(); err != nil {
							b.Error(err)
						}
					}
				}
			})
		}
		took := round(false)
		close(stop)
		wg.Wait()
		if on {
			with += took
		} else {
			without += took
		}
		fmt.Fprintf(os.Stderr, "ingest, scraping every second %v: %d reports in %s\n", on, n, took.Round(time.Millisecond))
	}
	b.ReportMetric(float64(3*n)/with.Seconds(), "ingest-scraped-reports/s")
	b.ReportMetric(float64(3*n)/without.Seconds(), "ingest-unscraped-reports/s")
	fmt.Fprintf(os.Stderr, "ingest while scraped every second: %.0f reports/s, without: %.0f (ratio %.2f)\n",
		float64(3*n)/with.Seconds(), float64(3*n)/without.Seconds(), with.Seconds()/without.Seconds())
}
