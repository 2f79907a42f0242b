package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Minute rollups are folded from the raw reports, off the write path: a
// writer leaves the key of every new report in rollup_pending (migration
// 016), in the statement that stores it, and foldPending moves closed
// minutes' pending reports into the minute rollups. Adding a report's
// samples and deleting its key commit together, so a report is counted
// exactly once, however late it arrives and whether or not a fold dies
// halfway; a resent report is not new, so it is never pending. Reads add
// the pending reports to what is folded, in one snapshot (pendingRollups),
// so they are exact before the fold too.

// MinuteGrace is how long after a minute ends its reports are folded: the
// reports of its last seconds are still on their way, and each fold of a
// minute already folded is an upsert per metric instead of an insert.
const MinuteGrace = 10 * time.Second

// defaultReportsPerFold bounds one fold transaction: a collector that was
// down, or a fleet's spools replaying, must not make one transaction of
// hours of reports.
const defaultReportsPerFold = 20000

const (
	foldPendingDDL = `
CREATE TEMP TABLE IF NOT EXISTS fold_pending (
	node_id integer, instance_id bigint, seq bigint, ts timestamptz, hist_ids integer[]
) ON COMMIT DELETE ROWS`
	// takePending moves pending keys of reports before $1 to the
	// transaction's own table, in node order from node $3 on: up to $2,
	// ending before the last node of a full chunk (whose reports may go
	// on) unless that node is all of it. It returns how many it took, how
	// many it saw (a full chunk: $2, and there may be more) and the last
	// node taken. Only the fold lock's holder deletes from
	// rollup_pending, so the ctids it selects are the rows it deletes.
	//
	// In node order, a chunk holds whole nodes: each minute rollup row is
	// written by one chunk, and a row the fold has not written before is
	// a plain insert (foldPendingSamples). Taken as stored (by time),
	// every chunk of a fleet's minute held about one report of every
	// node, and each chunk after the first updated every row the first
	// inserted: 5 updates a row at 6 reports a minute (BENCHMARKS.md,
	// "The minute fold"). The lower bound skips the index entries of the
	// chunks already taken.
	takePending = `
WITH k AS MATERIALIZED (
	SELECT ctid, node_id FROM rollup_pending WHERE ts < $1 AND node_id >= $3 ORDER BY node_id, ts LIMIT $2
), cut AS (
	SELECT CASE WHEN count(*) = $2 AND min(node_id) < max(node_id) THEN max(node_id) END AS node FROM k
), d AS (
	DELETE FROM rollup_pending WHERE ctid = ANY(ARRAY(SELECT k.ctid FROM k, cut WHERE cut.node IS NULL OR k.node_id < cut.node))
	RETURNING node_id, instance_id, seq, ts, hist_ids
), i AS (
	INSERT INTO fold_pending SELECT * FROM d
)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM k), coalesce((SELECT max(node_id) FROM d), 0)`
	// foldPendingSamples adds the taken reports' samples to the minute
	// rollups, as Rollups.Add would: infinities skipped, a sample's
	// interval counted in its state, a sample with no value (NaN) in its
	// state only, with min +Inf and max -Inf where a bucket has no value
	// at all (SampleAgg). Rows in key order (sortedKeys).
	//
	// The arrays unnested in the select list, in step (as unnest(a, b, c)
	// does: the shorter ones padded with NULL), rather than in FROM: there
	// each report's three arrays were put in a tuplestore each (a
	// function scan), here each element is handed on as it is read:
	// 11-19% less backend CPU for the statement over 9,200 full trees
	// (TestExplainFoldHistograms, NBS_FOLD_SAMPLES_VARIANTS).
	//
	// A row of a minute from $1 on (rollup_folds' minute watermark when
	// the fold began: no fold had reached it) of a node other than $2
	// (one whose reports the chunk before took some of) is new: a plain
	// INSERT, half the time of an upsert's (BENCHMARKS.md). Any other row
	// may be stored, and is added to. Were a "new" row stored after all
	// (a collector older than migration 024 writing minute rollups), the
	// insert fails on the primary key and foldPending writes the chunk
	// again with $1 infinity: every row an upsert.
	foldPendingSamples = `
WITH agg AS MATERIALIZED (
	SELECT node_id, b, m, b >= $1 AND node_id <> $2 AS new, count(*) FILTER (WHERE v <> 'NaN') AS n,
		coalesce(sum(v) FILTER (WHERE v <> 'NaN'), 0) AS sum, coalesce(min(v) FILTER (WHERE v <> 'NaN'), 'Infinity') AS min,
		coalesce(max(v) FILTER (WHERE v <> 'NaN'), '-Infinity') AS max,
		coalesce(sum(secs) FILTER (WHERE s = 1), 0) AS ok_s, coalesce(sum(secs) FILTER (WHERE s = 2), 0) AS warn_s,
		coalesce(sum(secs) FILTER (WHERE s = 3), 0) AS crit_s
	FROM (
		SELECT p.node_id, date_bin('1 minute', p.ts, ` + epoch + `) AS b, unnest(rp.metric_ids) AS m, unnest(rp.vals) AS v,
			unnest(rp.states) AS s, rp.interval_ms::float8 / 1000 AS secs
		FROM fold_pending p JOIN reports rp USING (node_id, instance_id, seq, ts)
	) x
	WHERE m IS NOT NULL AND s IS NOT NULL AND v IS NOT NULL AND v NOT IN ('Infinity', '-Infinity')
	GROUP BY node_id, b, m
), fresh AS (
	INSERT INTO rollup_samples (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
	SELECT 60, b, node_id, m, n, sum, min, max, ok_s, warn_s, crit_s FROM agg WHERE new ORDER BY node_id, b, m
)
INSERT INTO rollup_samples AS r (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
SELECT 60, b, node_id, m, n, sum, min, max, ok_s, warn_s, crit_s FROM agg WHERE NOT new ORDER BY node_id, b, m` + addRollupSamples
	// foldPendingStagedHistograms is foldPendingSamples for the staged
	// histogram rows (stage_rollup_histograms): new ones inserted, the
	// others merged as mergeRollupHistograms does.
	foldPendingStagedHistograms = `
WITH fresh AS (
	INSERT INTO rollup_histograms (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
	SELECT res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count FROM stage_rollup_histograms
	WHERE ts >= $1 AND node_id <> $2 ORDER BY res, node_id, ts, metric_id
)` + mergeRollupHistogramsWhere + `
WHERE NOT (ts >= $1 AND node_id <> $2)` + mergeRollupHistogramsSet
	// foldPendingHistograms reads the taken reports' histograms, each
	// given its minute, through the histograms index by report (node_id,
	// ts, metric_id; migration 037): one descent a report and its rows in
	// metric order (histMerge's guess relies on it), where by metric
	// (metric_id = ANY(hist_ids) over the index of migration 001) each
	// histogram was a descent of its own: a third less backend CPU over
	// 9,200 full trees (TestExplainFoldHistograms). The instance and
	// sequence tell two reports of one node at one time apart; a report
	// without histograms (hist_ids NULL: a healthy node's) costs nothing.
	// OFFSET 0: as histProbe.
	//
	// Each row is read as stored (histMerge.readReports bins its time
	// and reads its arrays as PostgreSQL sends them): rollup_buckets()
	// was a SQL function call per histogram (not inlined: it is
	// IMMUTABLE for the generated columns, array_send only STABLE), a
	// fifth of the read's backend CPU, and date_bin and array_send(…) ||
	// array_send(…) in its place a call and a copy more a histogram
	// (5% of the read's backend CPU, "scan-concat").
	foldPendingHistograms = `
SELECT p.node_id, h.metric_id, p.ts, h.count, h.sum, h.bucket_index, h.bucket_count
FROM fold_pending p CROSS JOIN LATERAL (
	SELECT h.metric_id, h.count, h.sum, h.bucket_index, h.bucket_count FROM histograms h
	WHERE h.node_id = p.node_id AND h.ts = p.ts AND h.instance_id = p.instance_id AND h.seq = p.seq
	OFFSET 0
) h
WHERE p.hist_ids IS NOT NULL`
	// histProbe finds the histogram m.id of report p. OFFSET 0 keeps the
	// subquery as it is written, a probe with all three index columns:
	// flattened, the planner (which cannot know a temporary table's rows)
	// scanned the node's whole day in the index for every report and
	// matched each row against every metric of its report — 15 million
	// comparisons and 9.5 of the 13 s that folding 5,852 full-tree
	// reports took (BENCHMARKS.md, "Ingest against raw COPY").
	histProbe = `
CROSS JOIN LATERAL (
	SELECT h.metric_id, h.instance_id, h.seq, h.ts, h.count, h.sum, h.bucket_index, h.bucket_count FROM histograms h
	WHERE h.node_id = p.node_id AND h.metric_id = m.id AND h.ts = p.ts AND h.instance_id = p.instance_id AND h.seq = p.seq
	OFFSET 0
) h`
	// lockFoldNodes locks the nodes of the taken reports FOR KEY SHARE,
	// as the rollups' foreign keys did (migration 024), and drops the
	// reports of nodes that are gone: deleting a node (deleteRows) then
	// waits for this transaction and deletes what it wrote, and a report
	// stored while its node was being deleted is not folded. The nodes
	// by their keys, an index probe each, whatever join the planner would
	// rather (with hash joins off, a semi join scanned the chunk once for
	// every node: 44 s).
	lockFoldNodes = `
WITH live AS (
	SELECT id FROM nodes WHERE id = ANY(ARRAY(SELECT DISTINCT node_id FROM fold_pending)) ORDER BY id FOR KEY SHARE
)
DELETE FROM fold_pending WHERE node_id NOT IN (SELECT id FROM live)`
	// markLateHours marks the hours already folded that the taken reports
	// reach: the hour fold recomputes them (FoldRollups), and reads take
	// them from their minutes until it has.
	markLateHours = `
INSERT INTO rollup_dirty (res, ts)
SELECT DISTINCT 3600, date_bin('1 hour', ts, ` + epoch + `) FROM fold_pending
WHERE ts < (SELECT through FROM rollup_folds WHERE res = 3600)`
)

// foldCursor is where a fold's next chunk starts and what it may find
// stored.
type foldCursor struct {
	// node: the next chunk takes nodes from here on.
	node int32
	// split: a node the chunk before took some of the reports of (0: none).
	split int32
	// fresh: the minute watermark when the fold began (rollup_folds, res
	// 60): no fold had written a minute from here on.
	fresh time.Time
}

// foldPending folds pending reports before before, from cur on, into the
// minute rollups, in one transaction: up to limit, whole nodes but for
// one node with more (takePending). It returns how many it took, where
// the next chunk starts, and whether there may be more.
func foldPending(ctx context.Context, conn interface {
	Begin(context.Context) (pgx.Tx, error)
}, before time.Time, cur foldCursor, limit int, hists *histMerge) (int, foldCursor, bool, error) {
	var n, seen int
	var last int32
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// A chunk of full trees is millions of samples to group: in the
		// default 4 MB the sort of its histograms went to disk.
		//
		// A chunk is a few thousand nodes' minute, its reports found by
		// their keys: an index probe each. A hash join read the whole day
		// partition instead (about 5× the probes' time with a day's first
		// 2 minutes in it, and it grows all day), and the planner chose it
		// whenever the partition was small; a merge join sorts as much.
		//
		// The fold recomputes from what is stored and a commit lost to a
		// crash is lost whole (its rollups and the delete of its pending
		// keys alike), so it need not wait for its commit to be flushed.
		if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off;
			SET LOCAL synchronous_commit = off`); err != nil {
			return fmt.Errorf("set the fold's work memory and joins: %w", err)
		}
		if _, err := tx.Exec(ctx, foldPendingDDL); err != nil {
			return fmt.Errorf("create the fold's table: %w", err)
		}
		if err := tx.QueryRow(ctx, takePending, before, limit, cur.node).Scan(&n, &seen, &last); err != nil {
			return fmt.Errorf("take pending reports: %w", err)
		}
		if n == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, lockFoldNodes); err != nil {
			return fmt.Errorf("lock the nodes of pending reports: %w", err)
		}
		// Merged as they are read (histMerge), their arrays staged as
		// they are: through a loglinear.Histogram (a map) and back, with
		// its buckets sorted again, they were half the minute fold's Go
		// time at 10,000 nodes. The statements below order the rows
		// themselves.
		hists.reset() // kept from chunk to chunk (FoldRollups)
		if err := hists.readReports(ctx, tx, foldPendingHistograms); err != nil {
			return err
		}
		if len(hists.out) > 0 {
			if _, err := tx.Exec(ctx, rollupStagingDDL); err != nil {
				return fmt.Errorf("create rollup staging tables: %w", err)
			}
			if err := hists.stage(ctx, tx, int32(RollupMinute)); err != nil {
				return err
			}
		}
		write := func(fresh any) error {
			return pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, foldPendingSamples, fresh, cur.split); err != nil {
					return fmt.Errorf("fold pending reports' samples: %w", err)
				}
				if len(hists.out) > 0 {
					if _, err := tx.Exec(ctx, foldPendingStagedHistograms, fresh, cur.split); err != nil {
						return fmt.Errorf("fold pending reports' histograms: %w", err)
					}
				}
				return nil
			})
		}
		// Grouped by hashing: the planner, which cannot know how many
		// samples the chunk's reports hold, sorted them all instead
		// (about a third more time for the statement, BENCHMARKS.md).
		if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = off`); err != nil {
			return fmt.Errorf("set the fold's grouping: %w", err)
		}
		if err := write(cur.fresh); uniqueViolation(err) {
			err = write(pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true})
			if err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = on`); err != nil {
			return fmt.Errorf("set the fold's grouping: %w", err)
		}
		if _, err := tx.Exec(ctx, markLateHours); err != nil {
			return fmt.Errorf("mark late hours dirty: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE rollup_folds SET through = greatest(through, $1) WHERE res = 60`, before); err != nil {
			return fmt.Errorf("advance the minute watermark: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, cur, false, err
	}
	next := cur
	next.split = 0
	switch {
	case seen < limit:
	case last == 0 || last < cur.node: // impossible: a full chunk takes some
	case n == seen: // one node filled the chunk: its next ones follow
		next.node, next.split = last, last
	default: // the chunk ended before the node after last
		next.node = last + 1
	}
	return n, next, seen == limit, nil
}

// readFreshMinutes is the minute watermark (rollup_folds, res 60): no fold
// wrote a minute rollup from there on. None (a database the migration
// adding it has not reached): infinity, every row an upsert.
//
// The start of its minute: a fold writes only minutes before its own
// (minute-aligned) bound, and migration 024 set the watermark to the
// moment it ran, inside a minute no fold had written. Unaligned, that
// minute's rows were all upserts, which cost more than the inserts they
// are: a fleet's first minutes after the migration, and every fresh
// database's (BenchmarkIngestVsCopy's drain: half its rows).
func readFreshMinutes(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (time.Time, error) {
	var t *time.Time
	err := q.QueryRow(ctx, `SELECT (SELECT date_bin('1 minute', through, `+epoch+`) FROM rollup_folds WHERE res = 60)`).Scan(&t)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the minute watermark: %w", err)
	}
	if t == nil {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), nil
	}
	return *t, nil
}

// Pending reports as raw rows, in the columns rawReports reads: those of
// nodes $1 from $2 to $3.
const (
	pendingReports = `
SELECT rp.node_id, rp.instance_id, rp.seq, rp.ts, rp.interval_ms, rp.metric_ids, rp.vals, rp.states
FROM rollup_pending p JOIN reports rp USING (node_id, instance_id, seq, ts)
WHERE p.node_id = ANY($1) AND p.ts >= $2 AND p.ts < $3`
	pendingHistograms = `
SELECT p.node_id, h.instance_id, h.seq, h.ts, h.metric_id, h.count, h.sum, h.bucket_index, h.bucket_count
FROM rollup_pending p CROSS JOIN LATERAL unnest(p.hist_ids) AS m(id)` + histProbe + `
WHERE p.node_id = ANY($1) AND p.ts >= $2 AND p.ts < $3`
)

// pendingRollups is the buckets of res that the pending reports of nodes
// add over [from, to) (aligned to res: whole buckets), read in db's
// snapshot.
func pendingRollups(ctx context.Context, db querier, nodes []int32, res int32, from, to time.Time) (*Rollups, error) {
	acc := NewRollups()
	if !from.Before(to) {
		return acc, nil
	}
	reports, err := rawReports(ctx, db, pendingReports, pendingHistograms, nodes, from, to)
	if err != nil {
		return nil, fmt.Errorf("pending reports: %w", err)
	}
	for _, r := range reports {
		acc.Add(*r, res)
	}
	return acc, nil
}

// UnfoldedFrom is where the open (unfolded) minutes begin: the start of the
// minute of the oldest report not folded into the minute rollups yet, and
// false when every stored report is folded. Reads are exact either way
// (they add those reports from their raw rows); a caller says it, e.g. that
// a report's buckets from here on are still filling.
func (s *Store) UnfoldedFrom(ctx context.Context) (time.Time, bool, error) {
	var t *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT date_bin('1 minute', min(ts), `+epoch+`) FROM rollup_pending`).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("read where the unfolded minutes begin: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return t.UTC(), true, nil
}
