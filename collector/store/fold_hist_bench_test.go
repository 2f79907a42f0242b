package store

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// seedFullTrees stores what BenchmarkIngestVsCopy leaves the fold: nodes
// nodes' full trees (samples metrics and hists histograms of about 25
// buckets a report), perNode reports each, 4 s apart, stored as the write
// path stores them (a batch's reports in node order, its histograms after
// each report's row, batches in time order) with their pending keys.
func seedFullTrees(tb testing.TB, st *Store, nodes, perNode, samples, hists int, start time.Time) {
	tb.Helper()
	ctx := context.Background()
	if _, err := st.pool.Exec(ctx, `INSERT INTO nodes (name, instance_id, interval_ms) SELECT 'full-' || g, 1, 10000 FROM generate_series(1, $1) g`, nodes); err != nil {
		tb.Fatalf("seed nodes: %v", err)
	}
	if err := st.ensurePartitions(ctx, []Report{{Time: start}}); err != nil {
		tb.Fatal(err)
	}
	for k := range perNode {
		_, err := st.pool.Exec(ctx, `
WITH r AS (
	INSERT INTO reports (node_id, instance_id, seq, ts, interval_ms, snapshot, metric_ids, vals, states)
	SELECT n.id, 1, $2::bigint, $1::timestamptz + make_interval(secs => $2::int * 4 + n.id % 4 + 0.25), 4000, true,
		ARRAY(SELECT 1000 + g FROM generate_series(1, $3) g), ARRAY(SELECT (g * n.id) % 97 * 0.5 FROM generate_series(1, $3) g)::float8[],
		ARRAY(SELECT 1 + (g + n.id) % 2 FROM generate_series(1, $3) g)::smallint[]
	FROM (SELECT id FROM nodes WHERE name LIKE 'full-%') n
	ORDER BY 1
	RETURNING node_id, instance_id, seq, ts
), h AS (
	INSERT INTO histograms (node_id, instance_id, seq, ts, metric_id, count, sum, bucket_index, bucket_count)
	SELECT node_id, instance_id, seq, ts, m, 40, 4e7,
		ARRAY(SELECT 600 + (seq + m) % 13 + g FROM generate_series(0, 24) g),
		ARRAY(SELECT 1 + (g + m) % 3 FROM generate_series(0, 24) g)::bigint[]
	FROM r CROSS JOIN generate_series(1, $4) AS x(m) ORDER BY node_id, m
)
INSERT INTO rollup_pending (node_id, instance_id, seq, ts, hist_ids)
SELECT node_id, instance_id, seq, ts, ARRAY(SELECT generate_series(1, $4)) FROM r`,
			start, k, samples, hists)
		if err != nil {
			tb.Fatalf("seed reports: %v", err)
		}
	}
	if _, err := st.pool.Exec(ctx, `VACUUM ANALYZE reports, histograms, rollup_pending`); err != nil {
		tb.Fatal(err)
	}
}

// TestExplainFoldHistograms times ways of reading a fold chunk's
// histograms over BenchmarkIngestVsCopy's shape (seedFullTrees:
// NBS_FOLD_NODES nodes, default 800, NBS_FOLD_REPORTS reports each,
// default 23, 52 histograms a report), each merged as the fold merges
// them, with the backend's and this process's CPU time, and checks they
// merge to the same rows: the fold's read ("scan"), without Memoize, a
// probe a histogram as before ("probe"), through rollup_buckets()
// ("scan-fn"), and binned and concatenated in the query as before
// ("scan-concat"); NBS_FOLD_VARIANTS picks some. Then it explains the
// chunk's other statements (NBS_FOLD_UPSERT=1: its minutes' rows as
// upserts). A tool, not a check: run with NBS_FOLD_EXPLAIN=1.
func TestExplainFoldHistograms(t *testing.T) {
	if os.Getenv("NBS_FOLD_EXPLAIN") == "" {
		t.Skip("a measuring tool: NBS_FOLD_EXPLAIN=1")
	}
	ctx := context.Background()
	st := openTest(t)
	start := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	nodes, per := envInt("NBS_FOLD_NODES", 800), envInt("NBS_FOLD_REPORTS", 23)
	t0 := time.Now()
	seedFullTrees(t, st, nodes, per, 187, 52, start)
	t.Logf("seeded %d reports in %v", nodes*per, time.Since(t0))
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{`SET LOCAL work_mem = '64MB'; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off`, foldPendingDDL} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var n, seen int
	var last int32
	if err := tx.QueryRow(ctx, takePending, start.Add(time.Hour), 1<<30, 0).Scan(&n, &seen, &last); err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name, query, set string
	}{
		{"scan", foldPendingHistograms, `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = on`},
		{"scan-nomemo", foldPendingHistograms, `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = off`},
		{"probe", `
SELECT p.node_id, h.metric_id, date_bin('1 minute', p.ts, ` + epoch + `), h.count, h.sum, array_send(h.bucket_index) || array_send(h.bucket_count)
FROM fold_pending p CROSS JOIN LATERAL unnest(p.hist_ids) AS m(id)` + histProbe, `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = off`},
		{"scan-fn", strings.Replace(foldPendingHistograms, "p.ts, h.count, h.sum, h.bucket_index, h.bucket_count",
			"date_bin('1 minute', p.ts, "+epoch+"), h.count, h.sum, rollup_buckets(h.bucket_index, h.bucket_count)", 1), `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = off`},
		{"scan-concat", strings.Replace(foldPendingHistograms, "p.ts, h.count, h.sum, h.bucket_index, h.bucket_count",
			"date_bin('1 minute', p.ts, "+epoch+"), h.count, h.sum, array_send(h.bucket_index) || array_send(h.bucket_count)", 1), `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = on`},
	}
	if v := os.Getenv("NBS_FOLD_VARIANTS"); v != "" {
		variants = slices.DeleteFunc(variants, func(x struct{ name, query, set string }) bool {
			return !slices.Contains(strings.Split(v, ","), x.name)
		})
	}
	extra := []struct{ name, query, set string }{
		{"scan-count", "SELECT count(*) FROM (" + strings.Replace(foldPendingHistograms, "h.bucket_index, h.bucket_count\nFROM", "1\nFROM", 1) + ") x", `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = off`},
	}
	explain := func(q string, args ...any) {
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			t.Log(l)
		}
	}
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// CPU of the backend (PostgreSQL's side) and of this process (the
	// merge), which the machine's load does not inflate as it does the
	// wall time.
	cpu := func() (backend, self time.Duration) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ut+st) * 10 * time.Millisecond, time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var want map[histKey]mergedHist
	for round := range 3 {
		for _, v := range variants {
			if _, err := tx.Exec(ctx, v.set); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			b0, s0 := cpu()
			var m histMerge
			// The fold's own query returns a report's time and its arrays
			// (readReports); the others, a minute and one bytea.
			read := m.read
			if strings.HasPrefix(v.name, "scan") && v.name != "scan-fn" && v.name != "scan-concat" {
				read = m.readReports
			}
			if err := read(ctx, tx, v.query); err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			b1, s1 := cpu()
			t.Logf("round %d %s: %d reports, %d merged rows in %v (CPU: backend %v, merge %v)", round, v.name, n, len(m.out), time.Since(t0), b1-b0, s1-s0)
			got := map[histKey]mergedHist{}
			for _, h := range m.out {
				got[h.histKey] = h
			}
			if want == nil {
				want = got
				continue
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %d rows, want %d", v.name, len(got), len(want))
			}
			for k, h := range got {
				w := want[k]
				if w.count != h.count || w.sum != h.sum || len(w.idx) != len(h.idx) {
					t.Fatalf("%s: %+v, want %+v", v.name, h, w)
				}
			}
		}
	}
	for _, v := range append(variants, extra...) {
		t.Logf("%s:", v.name)
		if _, err := tx.Exec(ctx, v.set); err != nil {
			t.Fatal(err)
		}
		explain(v.query)
	}
	// The rest of the chunk's fold, as foldPending runs it.
	if _, err := tx.Exec(ctx, `SET LOCAL enable_hashjoin = off; SET LOCAL enable_memoize = on`); err != nil {
		t.Fatal(err)
	}
	var hists histMerge
	if err := hists.readReports(ctx, tx, foldPendingHistograms); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{rollupStagingDDL, `SET LOCAL enable_sort = off`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := hists.stage(ctx, tx, int32(RollupMinute)); err != nil {
		t.Fatal(err)
	}
	fresh := start.Add(-time.Hour)
	if os.Getenv("NBS_FOLD_UPSERT") != "" {
		fresh = start.Add(time.Hour)
	}
	samplesVariants := []struct{ name, query string }{
		{"samples", foldPendingSamples},
	}
	for i, v := range strings.Split(os.Getenv("NBS_FOLD_SAMPLES_VARIANTS"), ";;") {
		if v != "" {
			samplesVariants = append(samplesVariants, struct{ name, query string }{fmt.Sprintf("samples-%d", i), v})
		}
	}
	for round := range 2 {
		for _, v := range samplesVariants {
			if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			b0, _ := cpu()
			if _, err := tx.Exec(ctx, v.query, fresh, 0); err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			b1, _ := cpu()
			t.Logf("round %d %s: %v (CPU: backend %v)", round, v.name, time.Since(t0), b1-b0)
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
		}
	}
	t0 = time.Now()
	explain(foldPendingSamples, fresh, 0)
	t.Logf("samples: %v", time.Since(t0))

	t0 = time.Now()
	explain(foldPendingStagedHistograms, fresh, 0)
	t.Logf("histograms: %v", time.Since(t0))
}

// clusterCPU is the CPU time of every process of st's PostgreSQL server
// (the postmaster's children: backends, writers) so far.
func clusterCPU(tb testing.TB, st *Store) time.Duration {
	tb.Helper()
	var dir string
	if err := st.pool.QueryRow(context.Background(), `SHOW data_directory`).Scan(&dir); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(dir + "/postmaster.pid")
	if err != nil {
		tb.Fatal(err)
	}
	postmaster := strings.SplitN(string(b), "\n", 2)[0]
	procs, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var ticks int
	for _, p := range procs {
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // not a process, or gone
		}
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+2:]))
		if len(f) < 13 || (f[1] != postmaster && p.Name() != postmaster) {
			continue
		}
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		ticks += ut + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// selfCPU is this process's CPU time so far.
func selfCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFoldFullTrees folds what BenchmarkIngestVsCopy's drain folds
// (seedFullTrees: NBS_FOLD_NODES nodes, default 800, NBS_FOLD_REPORTS full
// trees each, default 23, over two minutes) NBS_FOLD_ROUNDS times (default
// 3, a fresh database each), and reports the CPU time PostgreSQL's
// processes and this one (the merge) spent on it: on a shared machine the
// wall time follows the load, the CPU time much less. The watermark is
// where migration 024 leaves it on a new database, inside the first
// minute (NBS_FOLD_ALIGNED=1: at its start, as a running fleet's folds
// leave it).
func BenchmarkFoldFullTrees(b *testing.B) {
	nodes, per, rounds := envInt("NBS_FOLD_NODES", 800), envInt("NBS_FOLD_REPORTS", 23), envInt("NBS_FOLD_ROUNDS", 3)
	ctx := context.Background()
	var pg, self, wall []time.Duration
	for range rounds {
		b.StopTimer()
		st := openTest(b)
		start := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
		watermark := start.Add(20 * time.Second)
		if os.Getenv("NBS_FOLD_ALIGNED") != "" {
			watermark = start
		}
		for res, at := range map[int32]time.Time{RollupMinute: watermark, RollupHour: start, RollupDay: start.Truncate(24 * time.Hour)} {
			if err := st.SetFoldWatermark(ctx, res, at); err != nil {
				b.Fatal(err)
			}
		}
		seedFullTrees(b, st, nodes, per, 187, 52, start)
		if _, err := st.pool.Exec(ctx, `CHECKPOINT`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		pg0, self0, t0 := clusterCPU(b, st), selfCPU(b), time.Now()
		r, err := st.FoldRollups(ctx, FoldOptions{Now: start.Add(time.Duration(per*4)*time.Second + time.Minute + MinuteGrace)})
		if err != nil {
			b.Fatal(err)
		}
		if r.Reports != nodes*per {
			b.Fatalf("folded %d reports, want %d", r.Reports, nodes*per)
		}
		wall = append(wall, time.Since(t0))
		pg = append(pg, clusterCPU(b, st)-pg0)
		self = append(self, selfCPU(b)-self0)
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	b.Logf("wall %v, PostgreSQL CPU %v, merge CPU %v", wall, pg, self)
	per1 := float64(nodes * per)
	b.ReportMetric(float64(median(wall).Microseconds())/1000/per1, "wall_ms/report")
	b.ReportMetric(float64(median(pg).Microseconds())/1000/per1, "pg_cpu_ms/report")
	b.ReportMetric(float64(median(self).Microseconds())/1000/per1, "merge_cpu_ms/report")
}
