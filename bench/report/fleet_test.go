package report

// BenchmarkReportFleet: the 30-day report of 1,000 and 10,000 nodes. The
// raw seed of bench/api took 42 minutes for 1,000 nodes; this one writes
// day rollups only, in SQL (generate_series over node_metrics, histograms
// from templates built with loglinear), so 10,000 nodes take minutes:
//
//	NBS_REQUIRE_PG=1 NBS_REPORT_NODES=1000,10000 go test -run '^$' -bench ReportFleet -benchtime 1x -timeout 120m ./bench/report/
//
// Each node has a busy node's tree: 185 metrics, 52 of them histograms,
// of which the report shows 20 (7 histograms: 2 ping targets' RTT and
// host delay, 3 TX stages); NBS_REPORT_BUSY=0 gives nodes only those 20.
// The period is 30 whole UTC days, so every read is of day rollups (a
// report ending mid-day also reads the hours at either end).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

const (
	fleetTargets = 50 // distinct ping targets in the fleet; each node pings 2
	templates    = 16 // day histograms per kind, picked by node, metric and day
)

// fleetDefs is node i's tree: the report's 20 metrics first, then (busy)
// the rest of a busy node's 185, which no section shows.
func fleetDefs(i int, busy bool) []store.MetricDef {
	defs := []store.MetricDef{
		{Path: "ping", Title: "Ping", Unit: "ms", Kind: store.KindGauge},
		{Path: "latency", Title: "Latency", Kind: store.KindGauge},
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
		{Path: "drops", Title: "Drops", Unit: "drops/s", Kind: store.KindRate},
		{Path: "sock", Title: "Sockets", Kind: store.KindGauge},
		{Path: "tcp_reset/sent/no_socket", Title: "No socket", Unit: "resets/s", Kind: store.KindRate},
		{Path: "drops/netfilter_drop", Title: "Netfilter", Unit: "drops/s", Kind: store.KindRate},
		{Path: "latency/retransmits", Title: "Retransmits", Unit: "segments/s", Kind: store.KindRate},
		{Path: "latency/rto", Title: "RTOs", Unit: "timeouts/s", Kind: store.KindRate},
	}
	for k := 1; k <= 2; k++ {
		p := fmt.Sprintf("ping/peer-%02d", (i+k*7)%fleetTargets)
		defs = append(defs,
			store.MetricDef{Path: p, Title: p, Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
			store.MetricDef{Path: p + "/host_delay", Title: "Host delay", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
			store.MetricDef{Path: p + "/sent", Title: "Sent", Unit: "probes/s", Kind: store.KindRate},
			store.MetricDef{Path: p + "/lost", Title: "Lost", Unit: "probes/s", Kind: store.KindRate})
	}
	for _, p := range txStages {
		defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "us", Kind: store.KindHistogram, Scale: 1e3, Quantile: 0.99})
	}
	if busy {
		for k := range 45 {
			p := fmt.Sprintf("sock/wait/%02d", k)
			defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "us", Kind: store.KindHistogram, Scale: 1e3, Quantile: 0.99})
		}
		for k := range 120 {
			p := fmt.Sprintf("sock/stat/%03d", k)
			defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "sockets", Kind: store.KindGauge})
		}
	}
	return defs
}

// seedFleetDays registers n nodes and writes their day rollups for
// [from, to) in SQL, 500 nodes a statement.
func seedFleetDays(b *testing.B, st *store.Store, n int, busy bool, from, to time.Time) []int32 {
	ctx := context.Background()
	pool := st.Pool()
	// Day histograms: 86,400 observations of a ping RTT or TX stage for
	// the report's (about 70 buckets), fewer buckets for the others.
	rng := rand.New(rand.NewPCG(9, 10))
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_templates (k integer PRIMARY KEY, count bigint, sum float8, bi integer[], bc bigint[])`); err != nil {
		b.Fatal(err)
	}
	for k := range 2 * templates {
		h := loglinear.New()
		for range 1440 {
			if k < templates {
				h.RecordN(uint64(float64(3e5+2e4*float64(k))*math.Exp(0.5*rng.NormFloat64())), 60)
			} else {
				h.RecordN(uint64(1e4*(1+rng.Float64()*0.3)), 60)
			}
		}
		var bi []int32
		var bc []int64
		for _, x := range h.Sorted() {
			bi, bc = append(bi, int32(x)), append(bc, int64(h.Counts[x]))
		}
		if _, err := pool.Exec(ctx, `INSERT INTO bench_templates VALUES ($1, $2, $3, $4, $5) ON CONFLICT (k) DO NOTHING`,
			k, int64(h.Count), h.Sum, bi, bc); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]int32, 0, n)
	start := time.Now()
	for i := range n {
		c := fmt.Sprintf("c%d", i%10)
		id, err := st.UpsertNode(ctx, store.Node{Name: fmt.Sprintf("fleet-%05d", i), Labels: map[string]string{"customer": c}, Tenant: c,
			InstanceID: 1, IntervalMS: intervalSec * 1000})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.UpsertDefinitions(ctx, id, fleetDefs(i, busy)); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	b.Logf("registered %d nodes with their definitions in %s", n, time.Since(start).Round(time.Second))
	start = time.Now()
	for c := range slices.Chunk(ids, 500) {
		// Counters per day: sum is the day's total (a whole count: agents send
		// counts per interval), one sample every 10 s;
		// a day in 50 of a metric has 10 minutes WARN.
		if _, err := pool.Exec(ctx, `
			INSERT INTO rollup_samples (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
			SELECT 86400, d, nm.node_id, nm.metric_id, 8640, CASE WHEN p.path LIKE '%/sent' THEN 86400 ELSE round(v * 8640) END, 0, v * 2,
				86400 - bad, bad, 0
			FROM node_metrics nm JOIN metric_defs md ON md.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
			CROSS JOIN generate_series($1::timestamptz, $2::timestamptz - interval '1 day', interval '1 day') d
			CROSS JOIN LATERAL (SELECT hashint8(nm.node_id::bigint * 1000003 + nm.metric_id * 7919 + extract(epoch FROM d)::bigint) AS h) x
			CROSS JOIN LATERAL (SELECT (x.h & 1023)::float8 / 1000 AS v, CASE WHEN x.h % 50 = 0 THEN 600 ELSE 0 END AS bad) y
			WHERE md.kind <> 3 AND nm.node_id = ANY($3)`, from, to, c); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO rollup_histograms (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
			SELECT 86400, d, nm.node_id, nm.metric_id, t.count, t.sum, t.bi, t.bc
			FROM node_metrics nm JOIN metric_defs md ON md.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
			CROSS JOIN generate_series($1::timestamptz, $2::timestamptz - interval '1 day', interval '1 day') d
			JOIN bench_templates t ON t.k = CASE WHEN p.path LIKE 'sock/%' THEN $4 ELSE 0 END
				+ (nm.node_id + nm.metric_id + extract(doy FROM d)::integer) % $4
			WHERE md.kind = 3 AND nm.node_id = ANY($3)`, from, to, c, templates); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("seeded %d days of day rollups of %d nodes in %s", int(to.Sub(from).Hours()/24), n, time.Since(start).Round(time.Second))
	for _, res := range []int32{store.RollupHour, store.RollupDay} {
		if err := st.SetFoldWatermark(ctx, res, to); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	// The per-scope day pre-aggregate, by the day fold's own code (the
	// seed wrote the day rollups without the fold).
	start = time.Now()
	if err := st.RebuildScopeDays(ctx, from, to); err != nil {
		b.Fatal(err)
	}
	days := int(to.Sub(from).Hours() / 24)
	b.Logf("built the scope pre-aggregate of %d days in %s (%s a day, the day fold's added cost)", days, time.Since(start).Round(time.Second),
		(time.Since(start) / time.Duration(days)).Round(time.Millisecond))
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return ids
}

// everyMetric is the store as the report read it before its metric
// filter: every rollup read of every metric.
type everyMetric struct{ *store.Store }

func (e everyMetric) ReadRollups(ctx context.Context, q store.RollupQuery) ([]store.SampleRow, []store.HistogramRow, error) {
	q.Match = nil
	return e.Store.ReadRollups(ctx, q)
}

// fetchDays runs a whole-day 30-day report's rollup reads, the period's
// and the previous one's day rollups of the report's metrics (metrics nil:
// every metric), rows fetched and not decoded.
func fetchDays(b *testing.B, st *store.Store, ids, metrics []int32, from, to time.Time) (rows int) {
	ctx := context.Background()
	for _, p := range [][2]time.Time{{from.Add(-to.Sub(from)), from}, {from, to}} {
		for _, q := range []string{
			`SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples
			WHERE res = 86400 AND node_id = ANY($1) AND ts >= $2 AND ts < $3 AND ($4::integer[] IS NULL OR metric_id = ANY($4))`,
			`SELECT node_id, metric_id, ts, count, sum, buckets FROM rollup_histograms
			WHERE res = 86400 AND node_id = ANY($1) AND ts >= $2 AND ts < $3 AND ($4::integer[] IS NULL OR metric_id = ANY($4))`,
		} {
			r, err := st.Pool().Query(ctx, q, ids, p[0], p[1], metrics)
			if err != nil {
				b.Fatal(err)
			}
			for r.Next() {
				rows++
			}
			r.Close()
			if err := r.Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	return rows
}

func BenchmarkReportFleet(b *testing.B) {
	sizes := []int{1000}
	if v := os.Getenv("NBS_REPORT_NODES"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				b.Fatalf("NBS_REPORT_NODES=%q: want node counts separated by commas", v)
			}
			sizes = append(sizes, n)
		}
	}
	busy := os.Getenv("NBS_REPORT_BUSY") != "0"
	for _, n := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchFleet(b, n, busy) })
	}
}

func benchFleet(b *testing.B, n int, busy bool) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	end := time.Now().UTC().Truncate(24 * time.Hour)
	from := end.Add(-30 * 24 * time.Hour)
	ids := seedFleetDays(b, st, n, busy, end.Add(-60*24*time.Hour), end)
	var sizes struct{ samples, hists string }
	if err := st.Pool().QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('rollup_samples')), pg_size_pretty(pg_total_relation_size('rollup_histograms'))`).
		Scan(&sizes.samples, &sizes.hists); err != nil {
		b.Fatal(err)
	}
	b.Logf("rollup_samples %s, rollup_histograms %s", sizes.samples, sizes.hists)

	staff := access.WithPrincipal(ctx, access.Principal{Name: "bench", Role: access.RoleViewer, Via: access.ViaToken})
	serve := func(svc *report.Service, target string) int {
		w := httptest.NewRecorder()
		svc.GetReport(w, httptest.NewRequest(http.MethodGet, target, nil).WithContext(staff))
		if w.Code != 200 {
			b.Fatalf("GET %s: %d %.300s", target, w.Code, w.Body.String())
		}
		return w.Body.Len()
	}
	svc := report.New(st, st.Pool(), slog.New(slog.DiscardHandler))
	q30 := fmt.Sprintf("/api/v1/reports?from=%d&to=%d", from.UnixMilli(), end.UnixMilli())
	runs := 3
	if n > 2000 {
		runs = 1
	}
	// The report's metric ids, for the reads-alone anchor.
	var shown []int32
	if err := st.Pool().QueryRow(ctx, `SELECT array_agg(id) FROM metric_paths WHERE path NOT LIKE 'sock/%'`).Scan(&shown); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("NBS_REPORT_EXPLAIN") != "" {
		explain(b, st, ids, shown, from, end)
	}
	var size, rows int
	b.ResetTimer()
	// NBS_REPORT_PPROF=file: a CPU profile of the JSON reports alone (the
	// collector's side; PostgreSQL's is in NBS_REPORT_EXPLAIN's plans).
	if f := os.Getenv("NBS_REPORT_PPROF"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		timeIt(b, runs, func() { serve(svc, q30) })
		pprof.StopCPUProfile()
		out.Close()
	}
	jsonP50 := timeIt(b, runs, func() { size = serve(svc, q30) })
	b.Logf("30-day report, %d nodes, JSON: p50 %s over %d runs, %d bytes", n, jsonP50.Round(time.Millisecond), runs, size)
	csvP50 := timeIt(b, runs, func() { size = serve(svc, q30+"&format=csv") })
	b.Logf("30-day report, %d nodes, CSV: p50 %s over %d runs, %d bytes", n, csvP50.Round(time.Millisecond), runs, size)
	custP50 := timeIt(b, runs, func() { size = serve(svc, q30+"&selector=customer%3Dc3") })
	b.Logf("30-day report, one customer (%d nodes), JSON: p50 %s", n/10, custP50.Round(time.Millisecond))
	// The same-run anchor for the per-node copy (migration 033): the days
	// marked as folded before it, so the per-node tables read the day
	// rollups; then marked back. Alternated, so a trend in the load cancels.
	withCopy := func(on bool) {
		if _, err := st.Pool().Exec(ctx, `UPDATE rollup_scope_nodes SET per_node = $1`, on); err != nil {
			b.Fatal(err)
		}
	}
	var noCopy, yesCopy []time.Duration
	for _, on := range []bool{false, true, true, false, false, true} {
		withCopy(on)
		t := timeIt(b, 1, func() { serve(svc, q30) })
		if on {
			yesCopy = append(yesCopy, t)
		} else {
			noCopy = append(noCopy, t)
		}
	}
	withCopy(true)
	b.Logf("30-day report, %d nodes, JSON, alternated: with the per-node copy %v, without (the day rollups) %v", n, yesCopy, noCopy)
	// The same-run anchor: the report read per node (as before the
	// pre-aggregate), computed without JSON, against the same computed
	// from the pre-aggregate; and the two must be the same report.
	var viaScope, perNode []byte
	compute := func(perNode bool) []byte {
		r, err := report.Compute(staff, st, report.Query{From: from, To: end, PerNode: perNode}, end)
		if err != nil {
			b.Fatal(err)
		}
		out, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	scopeT := timeIt(b, 1, func() { viaScope = compute(false) })
	nodeT := timeIt(b, 1, func() { perNode = compute(true) })
	b.Logf("30-day report, %d nodes, computed and marshalled: from the pre-aggregate %s, per node %s (1 run each); byte-equal: %v",
		n, scopeT.Round(time.Millisecond), nodeT.Round(time.Millisecond), bytes.Equal(viaScope, perNode))
	if !bytes.Equal(viaScope, perNode) {
		// Sums of fractional values (this seed's counters are) depend on
		// the order they are added in: day by day over the nodes here, node
		// by node over the days there. Anything but a number, or a number
		// off by more than float64 rounding, is a difference.
		n, worst, other := compareNumbers(viaScope, perNode)
		b.Logf("not byte-equal: %d numbers differ, by at most %.2g relative; other differences: %v", n, worst, other)
		if other != "" || worst > 1e-12 {
			_ = os.WriteFile("/tmp/report-scope.json", viaScope, 0o644)
			_ = os.WriteFile("/tmp/report-pernode.json", perNode, 0o644)
			b.Errorf("the report from the pre-aggregate differs from the per-node one (/tmp/report-scope.json, /tmp/report-pernode.json)")
		}
	}
	// The report's own reads one by one (the per-node tables' from the
	// fold's per-node copy, migration 033), and its definitions.
	perNodeMatch := func(p string) bool {
		return !strings.HasPrefix(p, "sock/") && (!strings.Contains(p, "/") || strings.HasPrefix(p, "ping/"))
	}
	var nrows int
	nodeSumsT := timeIt(b, runs, func() {
		r, ok, err := st.ReadNodePeriodSamples(ctx, store.NodePeriodQuery{NodeIDs: ids, From: from, To: end, Match: perNodeMatch})
		if err != nil || !ok {
			b.Fatalf("ReadNodePeriodSamples: ok %v, %v", ok, err)
		}
		nrows = len(r)
	})
	b.Logf("its per-node sums (ReadNodePeriodSamples): p50 %s, %d rows", nodeSumsT.Round(time.Millisecond), nrows)
	nodeHistT := timeIt(b, runs, func() {
		r, ok, err := st.ReadNodeDayHistograms(ctx, store.NodePeriodQuery{NodeIDs: ids, From: from, To: end, Match: perNodeMatch})
		if err != nil || !ok {
			b.Fatalf("ReadNodeDayHistograms: ok %v, %v", ok, err)
		}
		nrows = len(r)
	})
	b.Logf("its per-node ping histograms (ReadNodeDayHistograms): p50 %s, %d rows", nodeHistT.Round(time.Millisecond), nrows)
	defsT := timeIt(b, runs, func() {
		if _, err := st.DefinitionsOf(ctx, ids); err != nil {
			b.Fatal(err)
		}
	})
	b.Logf("its definitions (DefinitionsOf): p50 %s", defsT.Round(time.Millisecond))
	readP50 := timeIt(b, runs, func() { rows = fetchDays(b, st, ids, shown, from, end) })
	b.Logf("its rollup reads alone (the report's metrics, fetched, not decoded): p50 %s, %d rows", readP50.Round(time.Millisecond), rows)
	if busy {
		allP50 := timeIt(b, 1, func() { rows = fetchDays(b, st, ids, nil, from, end) })
		b.Logf("the same reads of every metric (what the report read before its filter): %s, %d rows", allP50.Round(time.Millisecond), rows)
		before := timeIt(b, 1, func() { serve(report.New(everyMetric{st}, st.Pool(), slog.New(slog.DiscardHandler)), q30) })
		b.Logf("30-day report, %d nodes, JSON, reading every metric (before the filter): %s (1 run)", n, before.Round(time.Millisecond))
	}
	ds := make([]time.Duration, 200)
	for i := range ds {
		t0 := time.Now()
		if _, err := st.Pool().Exec(ctx, `SELECT 1`); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	b.Logf("anchor: SELECT 1 through the same pool x200: p50 %s, p99 %s", ds[100], ds[197])
	b.ReportMetric(float64(jsonP50.Milliseconds()), "ms-p50-30d-json")
	b.ReportMetric(float64(readP50.Milliseconds()), "ms-p50-30d-reads")
}

// explain logs the plans of the report's day reads (NBS_REPORT_EXPLAIN=1).
func explain(b *testing.B, st *store.Store, ids, metrics []int32, from, to time.Time) {
	ctx := context.Background()
	for _, sel := range [][]int32{ids, ids[:len(ids)/10]} {
		for _, q := range []string{
			`SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples
			WHERE res = 86400 AND node_id = ANY($1) AND ts >= $2 AND ts < $3 AND ($4::integer[] IS NULL OR metric_id = ANY($4))`,
			`SELECT node_id, metric_id, ts, count, sum, buckets FROM rollup_histograms
			WHERE res = 86400 AND node_id = ANY($1) AND ts >= $2 AND ts < $3 AND metric_id = ANY($4)`,
		} {
			rows, err := st.Pool().Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, sel, from, to, metrics)
			if err != nil {
				b.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%d nodes:\n%s", len(sel), strings.Join(plan, "\n"))
		}
	}
}

// compareNumbers walks two JSON documents of the same shape: how many
// numbers differ, the largest relative difference, and the first
// difference that is not of a number ("" for none).
func compareNumbers(a, b []byte) (n int, worst float64, other string) {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return 0, 0, "not JSON"
	}
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		if other != "" {
			return
		}
		switch xv := x.(type) {
		case map[string]any:
			yv, ok := y.(map[string]any)
			if !ok || len(xv) != len(yv) {
				other = path
				return
			}
			for k := range xv {
				walk(path+"."+k, xv[k], yv[k])
			}
		case []any:
			yv, ok := y.([]any)
			if !ok || len(xv) != len(yv) {
				other = path
				return
			}
			for i := range xv {
				walk(fmt.Sprintf("%s[%d]", path, i), xv[i], yv[i])
			}
		case float64:
			yv, ok := y.(float64)
			if !ok {
				other = path
				return
			}
			if xv != yv {
				n++
				worst = max(worst, math.Abs(xv-yv)/max(math.Abs(xv), math.Abs(yv)))
			}
		default:
			if x != y {
				other = path
			}
		}
	}
	walk("", x, y)
	return n, worst, other
}
