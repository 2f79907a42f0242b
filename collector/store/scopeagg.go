package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// The per-scope day pre-aggregate (migration 020). A 30-day report of a
// whole fleet or of one tenant sums the same day rollups of every node
// for its fleet-wide numbers (the previous period, kernel latency,
// reliability, the availability timeline, the charts): 30 rows a metric
// a node. The day fold sums them once per scope instead, in the
// transaction that writes the day's rollups, so the sum is exactly what
// the day rollups hold: a late report re-marks its hour, the fold
// recomputes the day and with it this.
//
// A scope is FleetScope (every node) or one tenant: nodes.tenant of the
// node's row, so a node that changed tenant (a new row) counts for each
// tenant with the history of its row. Nodes without a tenant are in the
// fleet scope only.

// FleetScope is the scope of every node.
const FleetScope = ""

// scopeDayTables are what the day fold writes of a day beside its day
// rollups (migrations 020, 033), each keyed by day: replaced, aged out and
// forgotten together. rollup_scope_nodes comes last: forgetScopeDaysOf
// finds the days to forget in it.
var scopeDayTables = []string{"rollup_scope_samples", "rollup_scope_histograms", "rollup_node_day_samples", "rollup_node_day_histograms", "rollup_scope_nodes"}

// foldScopeDay recomputes the pre-aggregate of day from its day rollups,
// in tx (the day fold's, after the day's rollups are written).
func foldScopeDay(ctx context.Context, tx pgx.Tx, day time.Time) error {
	for _, t := range scopeDayTables {
		if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE day = $1`, day); err != nil {
			return fmt.Errorf("replace the scope pre-aggregate of %s: %w", day.UTC().Format(time.DateOnly), err)
		}
	}
	// By node: the rollups' key is (res, node_id, ts, metric_id), so a day
	// of every node is an index range per node, as the fold reads it (a day
	// alone would scan every day's rows).
	var nodes []int32
	if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM nodes`).Scan(&nodes); err != nil {
		return fmt.Errorf("list nodes for the scope pre-aggregate: %w", err)
	}
	// Every scope that exists gets its row, empty or not: a day without
	// one is a day not folded since the migration, which reads fall back
	// from (ReadScopeDays).
	if _, err := tx.Exec(ctx, `
		WITH ids AS (
			SELECT node_id FROM rollup_samples WHERE res = 86400 AND node_id = ANY($2) AND ts = $1
			UNION
			SELECT node_id FROM rollup_histograms WHERE res = 86400 AND node_id = ANY($2) AND ts = $1
		), t AS (SELECT ids.node_id, n.tenant FROM ids JOIN nodes n ON n.id = ids.node_id),
		scopes AS (SELECT '' AS scope UNION SELECT DISTINCT tenant FROM nodes WHERE tenant <> '')
		INSERT INTO rollup_scope_nodes (scope, day, node_ids, per_node)
		SELECT s.scope, $1, coalesce((SELECT array_agg(t.node_id ORDER BY t.node_id) FROM t WHERE s.scope = '' OR t.tenant = s.scope), '{}'), true
		FROM scopes s`, day, nodes); err != nil {
		return fmt.Errorf("fold the scope nodes of %s: %w", day.UTC().Format(time.DateOnly), err)
	}
	// One scan of the day's sample rollups for both the scope sums and
	// the per-node copy (a second scan of them was most of what the copy
	// cost the fold).
	if _, err := tx.Exec(ctx, `
		WITH d AS MATERIALIZED (
			SELECT r.node_id, r.metric_id, r.n, r.sum, r.min, r.max, r.ok_s, r.warn_s, r.crit_s, n.tenant
			FROM rollup_samples r JOIN nodes n ON n.id = r.node_id
			WHERE r.res = 86400 AND r.node_id = ANY($2) AND r.ts = $1
		), copy AS (
			INSERT INTO rollup_node_day_samples (day, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
			SELECT $1, d.node_id, d.metric_id, d.n, d.sum, d.min, d.max, d.ok_s, d.warn_s, d.crit_s
			FROM d JOIN metric_paths p ON p.id = d.metric_id
			WHERE `+nodeDayPathSQL+`
		)
		INSERT INTO rollup_scope_samples (scope, day, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
		SELECT CASE WHEN grouping(d.tenant) = 1 THEN '' ELSE d.tenant END, $1, d.metric_id,
			sum(d.n)::bigint, sum(d.sum), min(d.min), max(d.max), sum(d.ok_s), sum(d.warn_s), sum(d.crit_s)
		FROM d
		GROUP BY GROUPING SETS ((d.metric_id), (d.tenant, d.metric_id))
		HAVING grouping(d.tenant) = 1 OR d.tenant <> ''`, day, nodes); err != nil {
		return fmt.Errorf("fold the scope samples of %s: %w", day.UTC().Format(time.DateOnly), err)
	}
	return foldScopeHistograms(ctx, tx, day, nodes)
}

// NodeDayPath is whether the day fold copies a metric's day rollups per
// node (migration 033): the roots and every ping target's metrics, a
// superset of what a report's per-node tables read (report.perNodeMetric),
// by day first, so that what those tables read of a period is one index
// range of a few MB, not a few rows of every node's 185 a day scattered
// through the day rollups. nodeDayPathSQL says the same of p.path.
func NodeDayPath(path string) bool {
	return !strings.Contains(path, "/") || strings.HasPrefix(path, "ping/")
}

const nodeDayPathSQL = `(strpos(p.path, '/') = 0 OR starts_with(p.path, 'ping/'))`

// foldScopeHistograms merges the day's histogram rollups per scope and
// metric in Go, streaming (a day of 10,000 busy nodes is half a million
// rows), as the fold merges its own (unnest and GROUP BY in SQL were
// several times slower, BENCHMARKS.md).
func foldScopeHistograms(ctx context.Context, tx pgx.Tx, day time.Time, nodes []int32) error {
	// The same scan gives the per-node copy its rows (NodeDayPath).
	rows, err := tx.Query(ctx, `SELECT n.tenant, r.metric_id, r.count, r.sum, r.buckets, r.node_id, `+nodeDayPathSQL+`
		FROM rollup_histograms r JOIN nodes n ON n.id = r.node_id JOIN metric_paths p ON p.id = r.metric_id
		WHERE r.res = 86400 AND r.node_id = ANY($2) AND r.ts = $1`, day, nodes)
	if err != nil {
		return fmt.Errorf("read the day's histogram rollups for their scopes: %w", err)
	}
	type key struct {
		scope  string
		metric int32
	}
	acc := map[key]*loglinear.Histogram{}
	add := func(k key, idx []int32, cnt []int64, count uint64, sum float64) {
		h := acc[k]
		if h == nil {
			h = loglinear.New()
			acc[k] = h
		}
		for i, b := range idx {
			h.Counts[uint32(b)] += uint64(cnt[i])
		}
		h.Count += count
		h.Sum += sum
	}
	var arena bucketArena
	var tenant string
	var metric, node int32
	var count int64
	var sum float64
	var copied bool
	var perNode [][]any
	for rows.Next() {
		if err := rows.Scan(&tenant, &metric, &count, &sum, nil, &node, &copied); err != nil {
			rows.Close()
			return fmt.Errorf("scan histogram rollup: %w", err)
		}
		if copied {
			b, err := byteaOf(rows, 4)
			if err != nil {
				rows.Close()
				return fmt.Errorf("scan histogram rollup buckets: %w", err)
			}
			perNode = append(perNode, []any{day, node, metric, count, sum, slices.Clone(b)})
		}
		// Merged at once: the arena's slices are reused row after row.
		arena.idx, arena.cnt = arena.idx[:0], arena.cnt[:0]
		idx, cnt, err := arena.decode(rows, 4)
		if err != nil {
			rows.Close()
			return fmt.Errorf("scan histogram rollup buckets: %w", err)
		}
		add(key{FleetScope, metric}, idx, cnt, uint64(count), sum)
		if tenant != "" {
			add(key{tenant, metric}, idx, cnt, uint64(count), sum)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the day's histogram rollups for their scopes: %w", err)
	}
	keys := make([]key, 0, len(acc))
	for k := range acc {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.scope != b.scope {
			if a.scope < b.scope {
				return -1
			}
			return 1
		}
		return int(a.metric - b.metric)
	})
	src := make([][]any, 0, len(keys))
	for _, k := range keys {
		r := histogramRow(0, k.metric, "", day, acc[k])
		src = append(src, []any{k.scope, day, k.metric, int64(r.Count), r.Sum, r.Index, r.Counts})
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"rollup_scope_histograms"},
		[]string{"scope", "day", "metric_id", "count", "sum", "bucket_index", "bucket_count"}, pgx.CopyFromRows(src)); err != nil {
		return fmt.Errorf("write the scope histograms of %s: %w", day.UTC().Format(time.DateOnly), err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"rollup_node_day_histograms"},
		[]string{"day", "node_id", "metric_id", "count", "sum", "buckets"}, pgx.CopyFromRows(perNode)); err != nil {
		return fmt.Errorf("copy the per-node histograms of %s: %w", day.UTC().Format(time.DateOnly), err)
	}
	return nil
}

// ScopeDayQuery asks for the pre-aggregate of whole UTC days [From, To)
// of Scope, for a report of exactly the nodes NodeIDs.
type ScopeDayQuery struct {
	Scope    string
	NodeIDs  []int32
	From, To time.Time
	// Match, if set, keeps only the metrics it accepts (in SQL).
	Match func(path string) bool
}

// ReadScopeDays returns the pre-aggregated rows of q (NodeID 0, TS the
// day), and ok false, with no rows, when it cannot serve every day exactly
// as the day rollups of q.NodeIDs would: a day not folded yet or marked
// dirty (read from finer rollups), reports not folded yet in the range
// (read from their raw rows), a day with no pre-aggregate (folded before
// migration 020, or a tenant newer than the day), or a day that summed a
// node the report does not have (a retired or deleted node's history). The
// caller then reads the day rollups per node. The scope's own nodes that
// are in q.NodeIDs are in its sums by construction, so what is checked is
// only that it has no other.
func (s *Store) ReadScopeDays(ctx context.Context, q ScopeDayQuery) ([]SampleRow, []HistogramRow, bool, error) {
	if !q.From.Before(q.To) || !q.From.Equal(q.From.Truncate(24*time.Hour)) || !q.To.Equal(q.To.Truncate(24*time.Hour)) {
		return nil, nil, false, nil
	}
	paths, err := s.metricPaths(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	filter := RollupQuery{Match: q.Match}.metricFilter(paths)
	var out rollupRows
	ok := false
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		st, err := readFoldState(ctx, tx, q.From, q.To)
		if err != nil {
			return err
		}
		stored, srcs := foldedSources(RollupDay, q.From, q.To, st)
		if len(srcs) > 0 || len(stored) != 1 || !stored[0].from.Equal(q.From) || !stored[0].to.Equal(q.To) {
			return nil
		}
		var days, foreign int
		var pending bool
		if err := tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT node_ids <@ $4::integer[]),
			EXISTS (SELECT 1 FROM rollup_pending WHERE ts >= $2 AND ts < $3)
			FROM rollup_scope_nodes WHERE scope = $1 AND day >= $2 AND day < $3`,
			q.Scope, q.From, q.To, q.NodeIDs).Scan(&days, &foreign, &pending); err != nil {
			return fmt.Errorf("check the scope pre-aggregate: %w", err)
		}
		if pending || foreign > 0 || days != int(q.To.Sub(q.From)/(24*time.Hour)) {
			return nil
		}
		ok = true
		return out.read(ctx, tx, paths,
			`SELECT 0, metric_id, day, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_scope_samples
			WHERE scope = $1 AND day >= $2 AND day < $3 AND ($4::integer[] IS NULL OR metric_id = ANY($4))`,
			`SELECT 0, metric_id, day, count, sum, buckets FROM rollup_scope_histograms
			WHERE scope = $1 AND day >= $2 AND day < $3 AND ($4::integer[] IS NULL OR metric_id = ANY($4))`,
			q.Scope, q.From, q.To, filter)
	})
	if err != nil || !ok {
		return nil, nil, false, err
	}
	return out.samples, out.hists, true, nil
}

// NodePeriodQuery asks for per-node sums of whole UTC days [From, To).
type NodePeriodQuery struct {
	NodeIDs  []int32
	From, To time.Time
	Match    func(path string) bool
}

// ReadNodePeriodSamples returns one sample row per node and metric: the
// sum of its day rollups over [q.From, q.To), summed in SQL (TS is
// q.From), for the per-node tables of a report whose days ReadScopeDays
// served. ok is false, as there, when the day rollups alone are not what
// ReadRollups would read. The days the fold copied per node (migration
// 033) are read from the copy.
func (s *Store) ReadNodePeriodSamples(ctx context.Context, q NodePeriodQuery) ([]SampleRow, bool, error) {
	paths, err := s.metricPaths(ctx)
	if err != nil {
		return nil, false, err
	}
	filter := RollupQuery{Match: q.Match}.metricFilter(paths)
	var out rollupRows
	ok := false
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var copied bool
		var err error
		if ok, copied, err = nodePeriodServed(ctx, tx, q, paths); err != nil || !ok {
			return err
		}
		from := `rollup_samples WHERE res = 86400 AND ts >= $3 AND ts < $4`
		if copied {
			from = `rollup_node_day_samples WHERE day >= $3 AND day < $4`
		}
		return out.readSamples(ctx, tx, paths, `
			SELECT node_id, metric_id, $3::timestamptz, sum(n)::bigint, sum(sum), min(min), max(max), sum(ok_s), sum(warn_s), sum(crit_s)
			FROM `+from+` AND node_id = ANY($1) AND ($2::integer[] IS NULL OR metric_id = ANY($2))
			GROUP BY node_id, metric_id`, customPlan, q.NodeIDs, filter, q.From, q.To)
	})
	if err != nil || !ok {
		return nil, false, err
	}
	return out.samples, true, nil
}

// ReadNodeDayHistograms returns the day rollups of histograms over whole
// UTC days [q.From, q.To), a row per node, metric and day, as ReadRollups
// would, from the fold's per-node copy (migration 033). ok is false, with
// no rows, when the copy cannot serve them all: a day not folded, dirty or
// with reports pending, a day folded before the migration and not rebuilt
// since, or a metric q.Match accepts that is not copied (NodeDayPath).
func (s *Store) ReadNodeDayHistograms(ctx context.Context, q NodePeriodQuery) ([]HistogramRow, bool, error) {
	paths, err := s.metricPaths(ctx)
	if err != nil {
		return nil, false, err
	}
	filter := RollupQuery{Match: q.Match}.metricFilter(paths)
	var out rollupRows
	ok := false
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		served, copied, err := nodePeriodServed(ctx, tx, q, paths)
		if err != nil || !served || !copied {
			return err
		}
		ok = true
		return out.readHistograms(ctx, tx, paths, `
			SELECT node_id, metric_id, day, count, sum, buckets FROM rollup_node_day_histograms
			WHERE day >= $3 AND day < $4 AND node_id = ANY($1) AND ($2::integer[] IS NULL OR metric_id = ANY($2))`,
			customPlan, q.NodeIDs, filter, q.From, q.To)
	})
	if err != nil || !ok {
		return nil, false, err
	}
	return out.hists, true, nil
}

// customPlan plans a query for its arguments every time (an unnamed
// prepared statement): after five runs of a named one PostgreSQL may keep
// a generic plan, in which node_id = ANY($1) of 1,000 ids can be a filter
// that walks the array for every row, where the planned-for array is
// hashed or an index condition. In the report benchmark a 30-day report
// of 1,000 nodes now and then took 17-31 s instead of 3-5 s: a generic
// plan is the suspect this rules out.
const customPlan = pgx.QueryExecModeCacheDescribe

// nodePeriodServed says, in tx's snapshot, whether the day rollups alone
// are what ReadRollups would read of q's whole days (served: every day
// folded, none dirty, no report pending), and whether the fold's per-node
// copy holds them (copied: every day copied, every metric q.Match accepts
// a NodeDayPath).
func nodePeriodServed(ctx context.Context, tx pgx.Tx, q NodePeriodQuery, paths map[int32]string) (served, copied bool, err error) {
	if !q.From.Before(q.To) || !q.From.Equal(q.From.Truncate(24*time.Hour)) || !q.To.Equal(q.To.Truncate(24*time.Hour)) {
		return false, false, nil
	}
	st, err := readFoldState(ctx, tx, q.From, q.To)
	if err != nil {
		return false, false, err
	}
	stored, srcs := foldedSources(RollupDay, q.From, q.To, st)
	if len(srcs) > 0 || len(stored) != 1 || !stored[0].from.Equal(q.From) || !stored[0].to.Equal(q.To) {
		return false, false, nil
	}
	var pending bool
	var days int
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rollup_pending WHERE ts >= $1 AND ts < $2),
		(SELECT count(*) FROM rollup_scope_nodes WHERE scope = '' AND day >= $1 AND day < $2 AND per_node)`,
		q.From, q.To).Scan(&pending, &days); err != nil {
		return false, false, fmt.Errorf("check for unfolded reports: %w", err)
	}
	if pending {
		return false, false, nil
	}
	if days != int(q.To.Sub(q.From)/(24*time.Hour)) {
		return true, false, nil
	}
	for _, p := range paths {
		if (q.Match == nil || q.Match(p)) && !NodeDayPath(p) {
			return true, false, nil
		}
	}
	return true, true, nil
}

// RebuildScopeDays recomputes the pre-aggregate of the whole UTC days in
// [from, to) from their day rollups, a transaction a day: for day rollups
// written without the fold (backfills, benchmarks' seeds) and days folded
// before migration 020. Days the fold has not reached (rollup_folds) are
// left to it.
func (s *Store) RebuildScopeDays(ctx context.Context, from, to time.Time) error {
	for d := ceilTo(from, 24*time.Hour); d.Before(to); d = d.Add(24 * time.Hour) {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// The fold's lock: a day recomputed while the fold recomputes
			// it would interleave the two's deletes and inserts.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, foldLockID); err != nil {
				return fmt.Errorf("take the fold lock: %w", err)
			}
			return foldScopeDay(ctx, tx, d)
		})
		if err != nil {
			return fmt.Errorf("rebuild the scope pre-aggregate of %s: %w", d.UTC().Format(time.DateOnly), err)
		}
	}
	return nil
}

// deleteScopeDaysBefore is the pre-aggregate's part of day rollup
// retention (DeleteRollupsBefore).
func deleteScopeDaysBefore(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, cutoff time.Time) error {
	for _, t := range scopeDayTables {
		if _, err := db.Exec(ctx, `DELETE FROM `+t+` WHERE day < $1`, cutoff); err != nil {
			return fmt.Errorf("delete %s older than %s: %w", t, cutoff.Format(time.RFC3339), err)
		}
	}
	return nil
}

// ReadScopeDays is a heavy read: on the replica or the primary's read
// pool, as ReadRollups.
func (r *Reads) ReadScopeDays(ctx context.Context, q ScopeDayQuery) ([]SampleRow, []HistogramRow, bool, error) {
	type rows struct {
		s  []SampleRow
		h  []HistogramRow
		ok bool
	}
	v, err := heavyRead(ctx, r, "report's pre-aggregate", func(s *Store) (rows, error) {
		sr, hr, ok, err := s.ReadScopeDays(ctx, q)
		return rows{sr, hr, ok}, err
	})
	return v.s, v.h, v.ok, err
}

// ReadNodePeriodSamples is a heavy read, as ReadRollups.
func (r *Reads) ReadNodePeriodSamples(ctx context.Context, q NodePeriodQuery) ([]SampleRow, bool, error) {
	return heavyReadOK(ctx, r, "report's per-node sums", func(s *Store) ([]SampleRow, bool, error) { return s.ReadNodePeriodSamples(ctx, q) })
}

// ReadNodeDayHistograms is a heavy read, as ReadRollups.
func (r *Reads) ReadNodeDayHistograms(ctx context.Context, q NodePeriodQuery) ([]HistogramRow, bool, error) {
	return heavyReadOK(ctx, r, "report's per-node histograms", func(s *Store) ([]HistogramRow, bool, error) { return s.ReadNodeDayHistograms(ctx, q) })
}

// BackfillScopeDays builds the pre-aggregate of up to max folded days that
// have none (days folded before migration 020; a day the fold writes has
// one) or no per-node copy (folded before migration 033), newest first, back to retention before now (0: 800 days) but not
// before any node was seen: no day before that has rollups (two days
// earlier, for reports an agent's spool kept from before its first Hello),
// and a new database would otherwise build hundreds of empty days. The
// collector's folder calls it after each fold, so an upgraded database
// gets its history's pre-aggregate a few days a fold, and reports of
// those days read per node until then. It returns how many it built, 0
// with the fold busy elsewhere.
func (s *Store) BackfillScopeDays(ctx context.Context, now time.Time, retention time.Duration, max int) (int, error) {
	if retention <= 0 {
		retention = 800 * 24 * time.Hour
	}
	if now.IsZero() {
		now = time.Now()
	}
	rows, err := s.pool.Query(ctx, `
		SELECT d FROM generate_series(
			(SELECT through FROM rollup_folds WHERE res = 86400) - interval '1 day',
			date_bin('1 day', greatest($1::timestamptz, coalesce((SELECT min(first_seen) FROM nodes), now()) - interval '2 days'), `+epoch+`),
			interval '-1 day') d
		WHERE NOT EXISTS (SELECT 1 FROM rollup_scope_nodes WHERE scope = '' AND day = d AND per_node)
		LIMIT $2`, now.Add(-retention+24*time.Hour), max)
	if err != nil {
		return 0, fmt.Errorf("find days without a scope pre-aggregate: %w", err)
	}
	days, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return 0, fmt.Errorf("find days without a scope pre-aggregate: %w", err)
	}
	n := 0
	for _, d := range days {
		busy := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var locked bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, foldLockID).Scan(&locked); err != nil {
				return fmt.Errorf("take the fold lock: %w", err)
			}
			if busy = !locked; busy {
				return nil
			}
			return foldScopeDay(ctx, tx, d)
		})
		if err != nil {
			return n, fmt.Errorf("backfill the scope pre-aggregate of %s: %w", d.UTC().Format(time.DateOnly), err)
		}
		if busy {
			return n, nil
		}
		n++
	}
	return n, nil
}

// forgetScopeDaysOf deletes, in the transaction deleting nodes ids with
// their rollups, the pre-aggregate of every day that summed any of them:
// a report of those days reads per node until BackfillScopeDays has
// rebuilt them without the nodes (a fold rebuilding them here could take
// minutes for a node with years of history).
func forgetScopeDaysOf(ctx context.Context, tx pgx.Tx, ids []int32) error {
	for _, t := range scopeDayTables {
		if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE day IN (
			SELECT day FROM rollup_scope_nodes WHERE scope = '' AND node_ids && $1::integer[])`, ids); err != nil {
			return fmt.Errorf("forget the report pre-aggregate of its days: %w", err)
		}
	}
	return nil
}
