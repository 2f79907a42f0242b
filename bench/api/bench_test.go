// Package api measures the collector's read API at fleet scale: the fleet
// page, a node's tree, a metric's series over an hour, a day and 30 days,
// a node's evidence and the 30-day customer report, over 1,000 nodes and
// 30 days of data, each served by the real HTTP handler (chi router,
// access with an admin token, JSON) on loopback; the write path's rate as
// the stored data grows; and bytes per sample on disk:
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./bench/api/
//
// 30 days of 1,000 nodes at the 10 s interval are 259M reports and, with
// the snapshot histograms, about 9 GB a day: more than this machine's disk
// and hours of writing. What is seeded instead, and why it still answers
// the question:
//
//   - Every node is registered with the store's registration calls
//     (UpsertNode, UpsertDefinitions, MarkDefinitions) and the tree a busy
//     agent announces (bench/loadgen's: 185 metrics, 52 of them histograms).
//   - Raw reports of every node for the newest NBS_API_RAW_HOURS (6), at
//     10 s, shaped as bench/loadgen's: roots only when healthy, the
//     tcp_reset branch (WARN) and 5 pieces of evidence every interval on a
//     troubled node (every 20th), the whole tree with histograms every 5
//     minutes. Their hour and day rollups are folded by the write path's
//     own code (store.Rollups) and merged by store.SeedRollups.
//   - The first NBS_API_DEEP_NODES (4) nodes — the ones whose tree, series
//     and evidence are measured — have raw reports for all NBS_API_DAYS
//     (30) days, with hour and day rollups, and minute rollups for the
//     newest 2 days. Every per-node read (tree, series, evidence) ranges
//     over one node's rows through an index that leads with the node, so
//     these nodes see what every node of a fleet with 30 days of raw data
//     would; what the other nodes lack only makes the indexes shallower and
//     the data set fit in memory (read the figures as warm-cache ones).
//   - Older history of every node — back 2 × NBS_API_DAYS, the report's
//     period and the previous period it compares with — as day rollups (and
//     the hours of a partial day as hour rollups) with the aggregates
//     report-shaped reports would have made, through store.SeedRollups.
//     No minute rollups for it (reports over 2 days do not read them).
//   - The last minutes up to now are written by store.WriteReports, the
//     collector's write path, so the newest values, the recent window and
//     the minute rollups are the write path's own; those writes are the
//     ingest figures, timed at three sizes of stored data.
package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	collectorapi "github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/nodeconfig"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// noStreams: no agent is connected to the benchmark's handler.
type noStreams struct{}

func (noStreams) Connected(string) bool { return false }

// server is the collector's HTTP surface over st, as collector/app puts it
// together for the routes measured here, behind token access.
func server(tb testing.TB, st *store.Store) (*httptest.Server, string) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	acc, err := access.New(st.Pool(), access.Config{Mode: access.ModeToken}, log)
	if err != nil {
		tb.Fatal(err)
	}
	admin := access.WithPrincipal(ctx, access.Principal{Name: "bench", Role: access.RoleAdmin, Via: access.ViaCLI})
	token, _, err := acc.CreateToken(admin, access.NewToken{Name: "bench", Role: access.RoleAdmin})
	if err != nil {
		tb.Fatal(err)
	}
	configs := nodeconfig.New(st, log)
	a := collectorapi.New(st, noStreams{}, nil, log, telemetry.New())
	a.SetThresholds(configs)
	h := a.Handler(collectorapi.Routes(collectorapi.Parts{Nodes: a, NodeConfig: configs, Access: acc,
		Reports: report.New(st, st.Pool(), log)}), acc)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = access.ConnContext
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv, token
}

// timings is a set of durations of one request or query.
type timings []time.Duration

func (t timings) q(p float64) time.Duration {
	s := slices.Clone(t)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// run times fn n times after one untimed call (the first call of a route
// pays for prepared statements and cold pages once).
func run(tb testing.TB, n int, fn func() error) timings {
	if err := fn(); err != nil {
		tb.Fatal(err)
	}
	out := make(timings, n)
	for i := range out {
		start := time.Now()
		if err := fn(); err != nil {
			tb.Fatal(err)
		}
		out[i] = time.Since(start)
	}
	return out
}

func BenchmarkAPI(b *testing.B) {
	ctx := context.Background()
	cfg := seedConfig{
		Nodes:    envInt(b, "NBS_API_NODES", 1000),
		Deep:     envInt(b, "NBS_API_DEEP_NODES", 1),
		Days:     envInt(b, "NBS_API_DAYS", 30),
		RawHours: envInt(b, "NBS_API_RAW_HOURS", 2),
		MinuteOf: day,
	}
	cfg.Deep = min(cfg.Deep, cfg.Nodes-1)
	st, err := store.Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	f, ing := seed(b, st, cfg, true)
	srv, token := server(b, st)
	client := srv.Client()
	get := func(path string, q url.Values) func() error {
		u := srv.URL + "/api/v1" + path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		return func() error {
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
	b.ResetTimer()

	anchor := run(b, 200, func() error {
		var one int
		return st.Pool().QueryRow(ctx, `SELECT 1`).Scan(&one)
	})
	report := func(name string, t timings) {
		b.ReportMetric(ms(t.q(0.5)), name+"-p50-ms")
		b.ReportMetric(ms(t.q(0.99)), name+"-p99-ms")
		b.Logf("%-34s p50 %8.2f ms  p99 %8.2f ms  (%d requests)", name, ms(t.q(0.5)), ms(t.q(0.99)), len(t))
	}
	report("anchor-select-1", anchor)

	troubled, healthy := f.names[0], f.names[min(1, len(f.names)-1)]
	now := time.Now()
	ts := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	report("fleet", run(b, 200, get("/nodes", nil)))
	report("fleet-store-reads", run(b, 200, func() error {
		if _, err := st.NodesIn(ctx, store.All{}); err != nil {
			return err
		}
		if _, err := st.RootDefinitionsIn(ctx, store.All{}); err != nil {
			return err
		}
		_, err := st.LatestRootsIn(ctx, store.All{})
		return err
	}))
	// What the fleet view read before it read only its roots (every
	// metric's newest value, root definitions filtered by path): the same
	// run's "before".
	report("fleet-store-reads-before", run(b, 50, func() error {
		if _, err := st.NodesIn(ctx, store.All{}); err != nil {
			return err
		}
		rows, err := st.Pool().Query(ctx, `
			SELECT nm.node_id, p.path, m.title, m.unit, m.kind, m.description, m.default_threshold
			FROM node_metrics nm JOIN metric_defs m ON m.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
			WHERE strpos(p.path, '/') = 0 ORDER BY nm.node_id, p.path`)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = st.LatestAll(ctx)
		return err
	}))
	for _, n := range []string{troubled, healthy} {
		kind := map[bool]string{true: "troubled", false: "healthy"}[n == troubled]
		report("tree-"+kind, run(b, 200, get("/nodes/"+n+"/tree", nil)))
		id := f.ids[slices.Index(f.names, n)]
		report("tree-"+kind+"-store-reads", run(b, 200, func() error {
			if _, err := st.Definitions(ctx, id); err != nil {
				return err
			}
			if _, _, err := st.Latest(ctx, id); err != nil {
				return err
			}
			_, err := st.RecentByMetric(ctx, id, time.Now().Add(-5*time.Minute))
			return err
		}))
	}
	report("tree-troubled-window-24h", run(b, 50, get("/nodes/"+troubled+"/tree", url.Values{"window": {"24h"}})))
	// The steps the UI asks for (web/src/timerange.ts stepFor, 300 points).
	for _, s := range []struct {
		name string
		span time.Duration
		step string
		n    int
	}{
		{"1h", time.Hour, "15s", 200},
		{"1d", day, "300s", 100},
		{"30d", 30 * day, "10800s", 50},
	} {
		for _, m := range []string{"tcp_reset", "ping/peer-0"} {
			q := url.Values{"metric": {m}, "from": {ts(now.Add(-s.span))}, "to": {ts(now)}, "step": {s.step}}
			report("series-"+s.name+"-"+m, run(b, s.n, get("/nodes/"+healthy+"/series", q)))
			// What the handler read before steps of whole minutes and
			// hours came from rollups: every raw report of the range.
			step, err := time.ParseDuration(s.step)
			if err != nil {
				b.Fatal(err)
			}
			id := f.ids[slices.Index(f.names, healthy)]
			report("series-"+s.name+"-"+m+"-raw-reads", run(b, max(s.n/10, 3), func() error {
				if _, err := st.Series(ctx, id, m, now.Add(-s.span), now, step); err != nil {
					return err
				}
				if f.kinds[m] != store.KindHistogram {
					return nil
				}
				_, err := st.HistogramSeries(ctx, id, m, now.Add(-s.span), now, step)
				return err
			}))
		}
	}
	report("events", run(b, 200, get("/nodes/"+troubled+"/events", url.Values{"metric": {"tcp_reset"}})))
	report("events-store-reads", run(b, 200, func() error {
		_, err := st.Events(ctx, f.ids[0], "tcp_reset", now.Add(-time.Hour), now, 100)
		return err
	}))
	// Whole UTC days: what is seeded for every node (day rollups).
	to := now.UTC().Truncate(day)
	rq := url.Values{"from": {ts(to.Add(-30 * day))}, "to": {ts(to)}}
	report("report-30d", run(b, 3, get("/reports", rq)))
	b.StopTimer()
	diskPerSample(b, st)
	for _, r := range ing {
		b.ReportMetric(r.rate, fmt.Sprintf("ingest-reports/s-at-%.1fGB", float64(r.stored)/1e9))
	}
}

// ingestRate is the write path's rate at a size of stored data.
type ingestRate struct {
	stored int64 // database size before the writes, bytes
	rate   float64
}

// diskPerSample reports the disk bytes of the raw tables (heap, indexes,
// TOAST of every day partition) per sample and per histogram they hold,
// and of the rollup tables per row.
func diskPerSample(b *testing.B, st *store.Store) {
	ctx := context.Background()
	size := func(parent string) float64 {
		var n int64
		if err := st.Pool().QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_inherits i
			JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = $1`, parent).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return float64(n)
	}
	count := func(q string) float64 {
		var n int64
		if err := st.Pool().QueryRow(ctx, q).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return float64(n)
	}
	reports, samples := count(`SELECT count(*) FROM reports`), count(`SELECT coalesce(sum(cardinality(metric_ids)), 0) FROM reports`)
	hists, events := count(`SELECT count(*) FROM histograms`), count(`SELECT count(*) FROM events`)
	rb, hb, eb := size("reports"), size("histograms"), size("events")
	b.ReportMetric(rb/samples, "disk-B/sample")
	b.ReportMetric(hb/hists, "disk-B/histogram")
	b.Logf("disk: reports %.2f GB for %.0f reports, %.0f samples: %.1f B/sample; histograms %.2f GB for %.0f: %.0f B each; events %.2f GB for %.0f: %.0f B each",
		rb/1e9, reports, samples, rb/samples, hb/1e9, hists, hb/hists, eb/1e9, events, eb/max(events, 1))
	for _, t := range []string{"rollup_samples", "rollup_histograms"} {
		var bytes, rows int64
		if err := st.Pool().QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), (SELECT count(*) FROM `+t+`)`, t).Scan(&bytes, &rows); err != nil {
			b.Fatal(err)
		}
		b.Logf("disk: %s %.2f GB for %d rows: %.0f B each", t, float64(bytes)/1e9, rows, float64(bytes)/float64(max(rows, 1)))
	}
}
