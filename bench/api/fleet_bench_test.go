package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// BenchmarkFleet measures the fleet page (GET /fleet) at 10,000 nodes
// (NBS_API_FLEET_NODES), beside the route it replaces (GET /nodes, every
// node with its roots) and a SELECT 1 anchor, in the same run:
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./bench/api/
//
// Every node is registered with the busy tree (185 metrics) as
// BenchmarkAPI's are, and has two reports through store.WriteReports: a
// snapshot of its whole tree (so node_latest holds every metric, as on a
// fleet that has run 5 minutes) and then a report shaped as usual (roots;
// a troubled node's tcp_reset branch, every 20th). The fleet page reads
// none of the history BenchmarkAPI seeds, so none is seeded. It also
// measures what the summary's trigger (migration 018) costs the write
// path: the same reports with it on and off, alternating.
func BenchmarkFleet(b *testing.B) {
	ctx := context.Background()
	n := envInt(b, "NBS_API_FLEET_NODES", 10000)
	st, err := store.Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Now().Truncate(time.Second)
	start := time.Now()
	f, err := register(ctx, st, seedConfig{Nodes: n}, now)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("registered %d nodes in %s", n, time.Since(start).Round(time.Second))

	writeRound := func(t time.Time, snapshot bool) (time.Duration, int) {
		return f.writeRound(ctx, b, st, t, snapshot, func(_ int, at time.Time) uint64 { return seq(at) }), len(f.ids)
	}
	start = time.Now()
	writeRound(now.Add(-4*interval), true)
	writeRound(now.Add(-3*interval), false)
	b.Logf("wrote a snapshot and a report of every node in %s", time.Since(start).Round(time.Second))

	// The trigger's cost: rounds of the usual report with it off and on, in
	// the order off on on off off on so that a trend in the load cancels.
	trigger := func(on bool) {
		verb := "DISABLE"
		if on {
			verb = "ENABLE"
		}
		if _, err := st.Pool().Exec(ctx, `ALTER TABLE node_latest `+verb+` TRIGGER node_latest_roots`); err != nil {
			b.Fatal(err)
		}
	}
	var with, without time.Duration
	for k, on := range []bool{false, true, true, false, false, true} {
		trigger(on)
		took, reports := writeRound(now.Add(time.Duration(k-2)*interval), false)
		if on {
			with += took
		} else {
			without += took
		}
		b.Logf("ingest, trigger on=%v: %d reports in %s (%.0f reports/s)", on, reports, took.Round(time.Millisecond), float64(reports)/took.Seconds())
	}
	trigger(true)
	b.ReportMetric(float64(3*n)/with.Seconds(), "ingest-with-summary-reports/s")
	b.ReportMetric(float64(3*n)/without.Seconds(), "ingest-without-summary-reports/s")
	b.Logf("ingest with the summary trigger: %.0f reports/s, without: %.0f (ratio %.2f)", float64(3*n)/with.Seconds(),
		float64(3*n)/without.Seconds(), without.Seconds()/with.Seconds())
	// Rows written with the trigger off have no summary: bring them back.
	if _, err := st.Pool().Exec(ctx, `UPDATE node_latest SET metrics = metrics`); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}

	// NBS_API_FLEET_EXPLAIN=1: the plan of the page's read of every node.
	if os.Getenv("NBS_API_FLEET_EXPLAIN") != "" {
		// As the store reads it, and by the key of node_latest, a probe a
		// node (hash and merge joins off), each three times, the last warm.
		for _, probe := range []bool{false, true, false, true} {
			for range 3 {
				tx, err := st.Pool().Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if probe {
					if _, err := tx.Exec(ctx, `SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off`); err != nil {
						b.Fatal(err)
					}
				}
				rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) SELECT n.id, n.name, l.ts, coalesce(l.interval_ms, 0), coalesce(l.worst, 0)::smallint
					FROM nodes n LEFT JOIN node_latest l ON l.node_id = n.id WHERE n.retired_at IS NULL`)
				if err != nil {
					b.Fatal(err)
				}
				plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					b.Fatal(err)
				}
				_ = tx.Rollback(ctx)
				b.Logf("the fleet page's read of every node (probes %v):\n%s", probe, strings.Join(plan, "\n"))
			}
		}
		var sizes string
		if err := st.Pool().QueryRow(ctx, `SELECT format('nodes %s, node_latest %s (heap %s)', pg_size_pretty(pg_total_relation_size('nodes')),
			pg_size_pretty(pg_total_relation_size('node_latest')), pg_size_pretty(pg_relation_size('node_latest')))`).Scan(&sizes); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s", sizes)
	}
	srv, token := server(b, st)
	client := srv.Client()
	get := func(path string, q url.Values) func() error {
		u := srv.URL + "/api/v1" + path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		return func() error {
			req, err := http.NewRequest(http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %d %.300s", u, resp.StatusCode, body)
			}
			return nil
		}
	}
	report := func(name string, t timings) {
		b.ReportMetric(ms(t.q(0.5)), name+"-p50-ms")
		b.ReportMetric(ms(t.q(0.99)), name+"-p99-ms")
		b.Logf("%-34s p50 %8.2f ms  p99 %8.2f ms  (%d requests)", name, ms(t.q(0.5)), ms(t.q(0.99)), len(t))
	}
	b.ResetTimer()
	report("anchor-select-1", run(b, 200, func() error {
		var one int
		return st.Pool().QueryRow(ctx, `SELECT 1`).Scan(&one)
	}))
	report("fleet-page-worst-first", run(b, 200, get("/fleet", nil)))
	report("fleet-page-by-name-offset-5000", run(b, 200, get("/fleet", url.Values{"sort": {"name"}, "offset": {fmt.Sprint(n / 2)}})))
	report("fleet-page-crit-warn", run(b, 200, get("/fleet", url.Values{"state": {"warn", "crit"}})))
	report("fleet-page-name-and-label", run(b, 200, get("/fleet", url.Values{"q": {"node-01"}, "label": {"rack=r10"}})))
	report("fleet-page-500-by-last-seen", run(b, 50, get("/fleet", url.Values{"sort": {"last_seen"}, "limit": {"500"}})))
	// The page's store reads one by one: the summary of every node (with
	// the page's roots and raised metrics), and definitions.
	var page store.FleetPage
	report("fleet-store-summary", run(b, 200, func() (err error) {
		page, err = st.Fleet(ctx, store.All{}, store.FleetQuery{Limit: 100, Now: time.Now(), StaleAfter: 3})
		return err
	}))
	var ids []int32
	for _, e := range page.Entries {
		ids = append(ids, e.Node.ID)
	}
	report("fleet-store-definitions", run(b, 200, func() error {
		_, err := st.PathDefinitionsOf(ctx, ids, append(slices.Clone(f.roots), f.troubled...))
		return err
	}))
	customer := access.Principal{Name: "c3", Role: access.RoleCustomer, Via: access.ViaToken, Selector: access.Selector{"customer": "c3"}}
	report("fleet-store-customer-c3", run(b, 200, func() error {
		_, err := st.Fleet(ctx, customer, store.FleetQuery{Limit: 100, Now: time.Now(), StaleAfter: 3})
		return err
	}))
	report("nodes-every-node-with-roots", run(b, 10, get("/nodes", nil)))
	// The Prometheus scrape of the same fleet (issue 28's goal: under 1 s),
	// and its size, in the text format and gzipped as Prometheus asks.
	report("export-scrape-every-node", run(b, 20, get("/export/metrics", nil)))
	for _, gz := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/export/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := srv.Client().Transport.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		b.Logf("export scrape (gzip %v): %d bytes, %d lines", gz, len(body), bytes.Count(body, []byte("\n")))
		b.ReportMetric(float64(len(body)), fmt.Sprintf("export-bytes-gzip-%v", gz))
	}
	report("export-store-read", run(b, 20, func() error {
		_, err := st.ExportNodes(ctx, store.All{}, time.Now().Add(-5*time.Minute))
		return err
	}))
}
