package store

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// foldBacklog seeds what the minute fold finds at 30,000 nodes: a fleet
// of healthy nodes reporting their 5 roots every 10 s, 5% of them
// troubled (states other than OK, and 2 histograms a report of about 15
// buckets), stored as the write path stores them (reports, histograms,
// rollup_pending) in the order they arrive (by time, nodes interleaved).
type foldBacklog struct {
	st    *Store
	nodes int
	seq   int64
}

const (
	backlogRoots     = 5
	backlogTroubled  = 20 // one node in
	backlogPerMinute = 6  // reports a node sends a minute
)

func newFoldBacklog(tb testing.TB, st *Store, nodes int) *foldBacklog {
	tb.Helper()
	ctx := context.Background()
	if _, err := st.pool.Exec(ctx, `INSERT INTO nodes (name, instance_id, interval_ms) SELECT 'backlog-' || g, 1, 10000 FROM generate_series(1, $1) g`, nodes); err != nil {
		tb.Fatalf("seed nodes: %v", err)
	}
	return &foldBacklog{st: st, nodes: nodes}
}

// minute stores every node's reports of the minute at m (and makes its
// partitions).
func (f *foldBacklog) minute(tb testing.TB, m time.Time) {
	tb.Helper()
	ctx := context.Background()
	if err := f.st.ensurePartitions(ctx, []Report{{Time: m}}); err != nil {
		tb.Fatal(err)
	}
	seq := f.seq
	f.seq += backlogPerMinute
	// Metric ids: roots 1–5, histograms 6 and 7.
	_, err := f.st.pool.Exec(ctx, `
WITH r AS (
	INSERT INTO reports (node_id, instance_id, seq, ts, interval_ms, snapshot, metric_ids, vals, states)
	SELECT n.id, 1, $2 + k, $1::timestamptz + make_interval(secs => k * 10 + n.id % 10 + 0.25), 10000, false,
		'{1,2,3,4,5}', ARRAY[k, n.id % 7, 0.5 * k, 1e6 + n.id, 3]::float8[],
		CASE WHEN n.id % $3 = 0 THEN '{1,2,3,1,2}' ELSE '{1,1,1,1,1}' END::smallint[]
	FROM generate_series(0, $4 - 1) k CROSS JOIN (SELECT id FROM nodes WHERE name LIKE 'backlog-%') n
	ORDER BY 4, 1
	RETURNING node_id, instance_id, seq, ts
), h AS (
	INSERT INTO histograms (node_id, instance_id, seq, ts, metric_id, count, sum, bucket_index, bucket_count)
	SELECT node_id, instance_id, seq, ts, m, 150, 1.5e8,
		ARRAY(SELECT 300 + (seq + m + g) % 40 + g * 2 FROM generate_series(0, 14) g),
		ARRAY(SELECT 10::bigint FROM generate_series(0, 14) g)
	FROM r CROSS JOIN (VALUES (6), (7)) AS x(m) WHERE node_id % $3 = 0
)
INSERT INTO rollup_pending (node_id, instance_id, seq, ts, hist_ids)
SELECT node_id, instance_id, seq, ts, CASE WHEN node_id % $3 = 0 THEN '{6,7}'::integer[] END FROM r`,
		m, seq, backlogTroubled, backlogPerMinute)
	if err != nil {
		tb.Fatalf("seed a minute of reports: %v", err)
	}
	if _, err := f.st.pool.Exec(ctx, `ANALYZE reports, histograms, rollup_pending`); err != nil {
		tb.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestExplainFoldPending prints EXPLAIN (ANALYZE, BUFFERS) of the minute
// fold's statements, with the fold's settings, over a minute of
// NBS_FOLD_NODES nodes (default 30,000) after the minute before was
// folded: the first chunk of NBS_FOLD_LIMIT reports (default the fold's).
// NBS_FOLD_PLAIN=1 also explains its samples as upserts against plain
// inserts. A tool, not a check: run with NBS_FOLD_EXPLAIN=1.
func TestExplainFoldPending(t *testing.T) {
	if os.Getenv("NBS_FOLD_EXPLAIN") == "" {
		t.Skip("a measuring tool: NBS_FOLD_EXPLAIN=1")
	}
	ctx := context.Background()
	st := openTest(t)
	f := newFoldBacklog(t, st, envInt("NBS_FOLD_NODES", 30000))
	m := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	f.minute(t, m.Add(-time.Minute))
	f.minute(t, m)
	// The minute before: folded, as the fold's steady state finds it.
	if err := st.SetFoldWatermark(ctx, RollupMinute, m.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := foldPending(ctx, st.pool, m, foldCursor{fresh: m.Add(-time.Minute)}, 1<<30, new(histMerge)); err != nil {
		t.Fatal(err)
	}
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	explain := func(q string, args ...any) {
		start := time.Now()
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var out string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			out += line + "\n"
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%v\n%s\n%s", time.Since(start), q, out)
	}
	// The fold's settings (foldPending).
	for _, q := range []string{`SET LOCAL work_mem = '64MB'; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off`, foldPendingDDL} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	explain(takePending, m.Add(time.Minute), envInt("NBS_FOLD_LIMIT", defaultReportsPerFold), 0)
	explain(lockFoldNodes)
	explain(foldPendingHistograms)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = off`); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("NBS_FOLD_PLAIN") != "" {
		// The same rows as upserts and as plain inserts, twice each,
		// undone.
		for range 2 {
			for _, fresh := range []any{pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}, m} {
				if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
					t.Fatal(err)
				}
				explain(foldPendingSamples, fresh, 0)
				if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	explain(foldPendingSamples, m, 0)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = on`); err != nil {
		t.Fatal(err)
	}
	explain(markLateHours)
}

// legacyFoldPending is the minute fold as it was before it took whole
// node-minutes (BenchmarkFoldPending's anchor, same run): pending keys in
// heap order, so each chunk of a fleet's minute held about one report of
// every node and every chunk after the first updated the rows the first
// inserted; and the rollup tables' foreign keys to nodes checked per row.
func legacyFoldPending(ctx context.Context, st *Store, before time.Time, limit int) (int, error) {
	const take = `
WITH d AS (
	DELETE FROM rollup_pending WHERE ctid = ANY(ARRAY(SELECT ctid FROM rollup_pending WHERE ts < $1 LIMIT $2))
	RETURNING node_id, instance_id, seq, ts, hist_ids
)
INSERT INTO fold_pending SELECT * FROM d`
	const samples = `
INSERT INTO rollup_samples AS r (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
SELECT 60, b, node_id, m, count(*), sum(v), min(v), max(v),
	coalesce(sum(secs) FILTER (WHERE s = 1), 0), coalesce(sum(secs) FILTER (WHERE s = 2), 0), coalesce(sum(secs) FILTER (WHERE s = 3), 0)
FROM (
	SELECT p.node_id, date_bin('1 minute', p.ts, ` + epoch + `) AS b, u.m, u.v, u.s, rp.interval_ms::float8 / 1000 AS secs
	FROM fold_pending p JOIN reports rp USING (node_id, instance_id, seq, ts)
	CROSS JOIN LATERAL unnest(rp.metric_ids, rp.vals, rp.states) AS u(m, v, s)
	WHERE u.m IS NOT NULL AND u.s IS NOT NULL AND u.v IS NOT NULL AND u.v NOT IN ('NaN', 'Infinity', '-Infinity')
) x
GROUP BY node_id, b, m
ORDER BY node_id, b, m` + addRollupSamples
	const hists = `
SELECT p.node_id, h.metric_id, date_bin('1 minute', p.ts, ` + epoch + `), h.count, h.sum, rollup_buckets(h.bucket_index, h.bucket_count)
FROM fold_pending p CROSS JOIN LATERAL unnest(p.hist_ids) AS m(id)
JOIN histograms h ON h.node_id = p.node_id AND h.metric_id = m.id AND h.ts = p.ts AND h.instance_id = p.instance_id AND h.seq = p.seq`
	const late = `
INSERT INTO rollup_dirty (res, ts)
SELECT DISTINCT 3600, date_bin('1 hour', ts, ` + epoch + `) FROM fold_pending
WHERE ts < (SELECT through FROM rollup_folds WHERE res = 3600)`
	total := 0
	for {
		var n int
		err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS fold_pending (
	node_id integer, instance_id bigint, seq bigint, ts timestamptz, hist_ids integer[]) ON COMMIT DELETE ROWS`); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, take, before, limit)
			if err != nil {
				return err
			}
			if n = int(tag.RowsAffected()); n == 0 {
				return nil
			}
			if _, err := tx.Exec(ctx, samples); err != nil {
				return err
			}
			var part rollupRows
			if err := part.readHistograms(ctx, tx, nil, hists); err != nil {
				return err
			}
			if len(part.hists) > 0 {
				if _, err := tx.Exec(ctx, rollupStagingDDL); err != nil {
					return err
				}
				r := NewRollups()
				for _, h := range mergeHistograms(part.hists) {
					r.Histograms[RollupKey{h.NodeID, h.metricID, RollupMinute, h.TS.Unix()}] = h.histogram()
				}
				if err := copyRollupHistograms(ctx, tx, r); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, mergeRollupHistograms); err != nil {
					return err
				}
			}
			_, err = tx.Exec(ctx, late)
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("legacy fold: %w", err)
		}
		if n < limit {
			return total, nil
		}
	}
}

// BenchmarkFoldPending times the minute fold of a fleet's minute
// (NBS_FOLD_NODES nodes, default 30,000: roots only, 5% troubled with
// histograms, foldBacklog) against the fold as it was before
// (legacyFoldPending, on a database with the rollups' foreign keys to
// nodes as they were), NBS_FOLD_ROUNDS rounds (default 3) alternating
// which goes first: the figures are the medians, per report.
func BenchmarkFoldPending(b *testing.B) {
	nodes := envInt("NBS_FOLD_NODES", 30000)
	rounds := envInt("NBS_FOLD_ROUNDS", 3)
	ctx := context.Background()
	type variant struct {
		name string
		st   *Store
		f    *foldBacklog
		fold func(before time.Time) (int, error)
		took []time.Duration
	}
	legacy := &variant{name: "before", st: openTest(b)}
	current := &variant{name: "after", st: openTest(b)}
	for _, table := range []string{"rollup_samples", "rollup_histograms"} {
		if _, err := legacy.st.pool.Exec(ctx, `ALTER TABLE `+table+` DROP CONSTRAINT IF EXISTS `+table+`_node_id_fkey, 
			ADD CONSTRAINT `+table+`_node_id_fkey FOREIGN KEY (node_id) REFERENCES nodes (id) ON DELETE CASCADE`); err != nil {
			b.Fatal(err)
		}
	}
	legacy.fold = func(before time.Time) (int, error) {
		return legacyFoldPending(ctx, legacy.st, before, defaultReportsPerFold)
	}
	current.fold = func(before time.Time) (int, error) {
		r, err := current.st.FoldRollups(ctx, FoldOptions{Now: before.Add(MinuteGrace)})
		return r.Reports, err
	}
	start := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	for _, v := range []*variant{legacy, current} {
		v.f = newFoldBacklog(b, v.st, nodes)
		// The minutes' hour is open and no day closes: this times the
		// minute fold alone.
		if err := v.st.SetFoldWatermark(ctx, RollupHour, start); err != nil {
			b.Fatal(err)
		}
		if err := v.st.SetFoldWatermark(ctx, RollupDay, start.Truncate(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for r := range rounds + 1 {
		m := start.Add(time.Duration(r) * time.Minute)
		order := []*variant{legacy, current}
		if r%2 == 1 {
			order = []*variant{current, legacy}
		}
		for _, v := range order {
			b.StopTimer()
			v.f.minute(b, m)
			b.StartTimer()
			t0 := time.Now()
			n, err := v.fold(m.Add(time.Minute))
			took := time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			if want := nodes * backlogPerMinute; n != want {
				b.Fatalf("%s: folded %d reports, want %d", v.name, n, want)
			}
			if r > 0 { // the first round warms up
				v.took = append(v.took, took)
			}
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	reports := float64(nodes * backlogPerMinute)
	for _, v := range []*variant{legacy, current} {
		b.Logf("%s: %v", v.name, v.took)
		b.ReportMetric(float64(median(v.took).Microseconds())/reports, v.name+"_µs/report")
	}
	b.ReportMetric(float64(median(legacy.took))/float64(median(current.took)), "before/after")
	// Both folded the same minutes into the same rows.
	for _, q := range []string{
		`SELECT count(*), sum(n), sum(sum), sum(min), sum(max), sum(ok_s), sum(warn_s), sum(crit_s) FROM rollup_samples`,
		`SELECT count(*), sum(count), sum(sum), sum(cardinality(bucket_index)), sum((SELECT sum(c) FROM unnest(bucket_count) c)) FROM rollup_histograms`,
	} {
		var a, c []any
		for _, v := range []struct {
			st  *Store
			out *[]any
		}{{legacy.st, &a}, {current.st, &c}} {
			rows, err := v.st.pool.Query(ctx, q)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				if *v.out, err = rows.Values(); err != nil {
					b.Fatal(err)
				}
			}
			rows.Close()
		}
		if fmt.Sprint(a) != fmt.Sprint(c) {
			b.Fatalf("%s: before %v, after %v", q, a, c)
		}
	}
}
