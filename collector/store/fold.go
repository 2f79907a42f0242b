package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// No rollup is written by the write path (an upsert per metric and report
// made ingest several times slower, BENCHMARKS.md). FoldRollups adds the
// reports stored since the last fold to the minute rollups (pending.go),
// then recomputes hours from their minutes and days from their hours once
// closed; rollup_folds says up to where (migration 012). ReadRollups
// computes what is not folded yet, so a report is exact for the open
// minute, hour and day too.
//
// Late data: the minute fold of a report whose hour is already folded marks
// the hour in rollup_dirty, in the transaction of its minute rows. The fold
// then recomputes the marked hours (and their folded days) and deletes the
// marks in one transaction, and reads take marked hours from their minutes:
// a late report counts exactly once, at once.

// foldLockID makes one collector fold at a time. A fold is a recompute, so
// two at once would write the same rows, but a day folded from its hours
// while another fold recomputes one of them would miss that hour's late
// data, and the mark that said so would be gone.
const foldLockID = 0x6e6273_f0

// FoldGrace is how long after its end an hour is folded: its minutes'
// reports still on their way are folded into them first. Any later one
// marks the hour dirty when it is folded (markLateHours).
const FoldGrace = 2 * time.Minute

// epoch is the origin of date_bin: buckets are UTC, whatever the session's
// time zone (date_trunc would follow it).
const epoch = `timestamptz '1970-01-01 00:00:00+00'`

// rollupSource is one resolution's rows over [from, to): what a recompute
// or a read of unfolded buckets aggregates.
type rollupSource struct {
	res      int32
	from, to time.Time
}

// aggSamples aggregates the sample rollups of one source ($1 resolution,
// $2 start, $3 end) of nodes $4, metrics $5 (NULL: all) into buckets of $6
// seconds; readSourceHistograms returns the histogram rows of the same,
// each given its bucket, for mergeHistograms. The fold writes what they
// make and a read of unfolded buckets returns it, so the two cannot
// disagree. One source a statement, as the plain reads: the index range
// per node of the primary key (res, node_id, ts, metric_id). With the
// sources as arrays joined LATERAL, a read of an unfolded bucket cost about
// 0.35 s whatever its size (a 10-node report 5× slower, BENCHMARKS.md).
const aggSamples = `
SELECT node_id, metric_id, date_bin(make_interval(secs => $6), ts, ` + epoch + `) AS b,
	sum(n)::bigint AS n, sum(sum) AS sum, min(min) AS min, max(max) AS max,
	sum(ok_s) AS ok_s, sum(warn_s) AS warn_s, sum(crit_s) AS crit_s
FROM rollup_samples
WHERE res = $1 AND node_id = ANY($4) AND ts >= $2 AND ts < $3 AND ($5::integer[] IS NULL OR metric_id = ANY($5))
GROUP BY 1, 2, 3`

// Reads return what ReadRollups scans from the tables. Histograms are
// merged in Go (mergeHistograms), from their buckets column: unnest with
// GROUP BY in SQL made the fold 2.5–3× slower (BENCHMARKS.md, Storage),
// and merging a month's rows that way made a report slower (Reports).
const (
	readAggSamples       = `SELECT node_id, metric_id, b, n, sum, min, max, ok_s, warn_s, crit_s FROM (` + aggSamples + `) x`
	readSourceHistograms = `
SELECT node_id, metric_id, date_bin(make_interval(secs => $6), ts, ` + epoch + `), count, sum, buckets FROM rollup_histograms
WHERE res = $1 AND node_id = ANY($4) AND ts >= $2 AND ts < $3 AND ($5::integer[] IS NULL OR metric_id = ANY($5))`
)

// mergeSamples merges rows of one node, metric and bucket start (from
// several sources) into one row each.
func mergeSamples(rows []SampleRow) []SampleRow {
	type key struct {
		node int32
		path string
		ts   int64
	}
	at := map[key]int{}
	out := rows[:0:0]
	for _, r := range rows {
		k := key{r.NodeID, r.Path, r.TS.Unix()}
		if i, ok := at[k]; ok {
			out[i].Merge(r.SampleAgg)
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}

// mergeHistograms merges rows of one node, metric and bucket start (finer
// rows given their coarser bucket's start) into one row each, in the order
// each was first seen. Each group is added up in one reused
// loglinear.Dense: a map per group (loglinear.Histogram) made the minute
// fold's merge of a full tree's 50 histograms a report most of its Go
// time, a hash write per bucket (BENCHMARKS.md, "Ingest against raw COPY").
func mergeHistograms(rows []HistogramRow) []HistogramRow {
	type key struct {
		node, metric int32
		ts           int64
	}
	group := make([]int32, len(rows))
	at := map[key]int32{}
	var first []int // each group's first row
	for i, r := range rows {
		k := key{r.NodeID, r.metricID, r.TS.Unix()}
		g, ok := at[k]
		if !ok {
			g = int32(len(first))
			at[k] = g
			first = append(first, i)
		}
		group[i] = g
	}
	// The rows of each group together, in their order (a counting sort).
	start := make([]int, len(first)+1)
	for _, g := range group {
		start[g+1]++
	}
	for g := range first {
		start[g+1] += start[g]
	}
	order := make([]int, len(rows))
	fill := slices.Clone(start[:len(first)])
	for i, g := range group {
		order[fill[g]] = i
		fill[g]++
	}
	var d loglinear.Dense
	out := make([]HistogramRow, 0, len(first))
	// Never nil, not even empty: the fold writes them to NOT NULL columns.
	idx, cnt := make([]int32, 0, 16*len(first)), make([]int64, 0, 16*len(first))
	for g, i := range first {
		d.Reset()
		for _, j := range order[start[g]:start[g+1]] {
			d.AddBuckets(rows[j].Index, rows[j].Counts, rows[j].Count, rows[j].Sum)
		}
		n := len(idx)
		idx, cnt = d.AppendBuckets(idx, cnt)
		r := rows[i]
		// Full slice expressions: the arrays are shared by every row out,
		// and appending to one must not write into the next.
		out = append(out, HistogramRow{NodeID: r.NodeID, Path: r.Path, TS: time.Unix(r.TS.Unix(), 0).UTC(), Count: d.Count, Sum: d.Sum,
			metricID: r.metricID, Index: idx[n:len(idx):len(idx)], Counts: cnt[n:len(cnt):len(cnt)]})
	}
	return out
}

// The fold replaces ($7 is the resolution written), never adds: running
// it twice, or over a bucket already folded, leaves the same rows. Its
// histograms are merged in Go (mergeHistograms), like a read's, staged
// and replaced: unnest and GROUP BY in SQL took the fold several times
// longer (BENCHMARKS.md).
const (
	foldSamples = `
INSERT INTO rollup_samples AS r (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
SELECT $7, b, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s FROM (` + aggSamples + `) x
ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET
	n = EXCLUDED.n, sum = EXCLUDED.sum, min = EXCLUDED.min, max = EXCLUDED.max,
	ok_s = EXCLUDED.ok_s, warn_s = EXCLUDED.warn_s, crit_s = EXCLUDED.crit_s`
	replaceRollupHistograms = `
INSERT INTO rollup_histograms AS r (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
SELECT res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count FROM stage_rollup_histograms
ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET
	count = EXCLUDED.count, sum = EXCLUDED.sum, bucket_index = EXCLUDED.bucket_index, bucket_count = EXCLUDED.bucket_count`
)

// foldBucket recomputes the rollups of resolution target at b from the
// next finer resolution, for some nodes, in tx.
func foldBucket(ctx context.Context, tx pgx.Tx, target int32, b time.Time, nodes []int32) error {
	src := int32(RollupMinute)
	if target == RollupDay {
		src = RollupHour
	}
	end := b.Add(time.Duration(target) * time.Second)
	if _, err := tx.Exec(ctx, foldSamples, src, b, end, nodes, nil, float64(target), target); err != nil {
		return fmt.Errorf("fold sample rollups: %w", err)
	}
	var hists histMerge
	if err := hists.read(ctx, tx, readSourceHistograms, src, b, end, nodes, nil, float64(target)); err != nil {
		return err
	}
	if len(hists.out) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, rollupStagingDDL); err != nil {
		return fmt.Errorf("create rollup staging tables: %w", err)
	}
	if err := hists.stage(ctx, tx, target); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, replaceRollupHistograms); err != nil {
		return fmt.Errorf("fold histogram rollups: %w", err)
	}
	return nil
}

// interval is [from, to).
type interval struct{ from, to time.Time }

func ceilTo(t time.Time, step time.Duration) time.Time {
	if c := t.Truncate(step); c.Before(t) {
		return c.Add(step)
	}
	return t
}

// split divides the buckets of step in [from, to) (all aligned to step)
// into those read as stored rows — before through and not dirty — and
// those computed from the finer resolution.
func split(from, to, through time.Time, dirty []time.Time, step time.Duration) (stored, computed []interval) {
	add := func(out []interval, iv interval) []interval {
		if !iv.from.Before(iv.to) {
			return out
		}
		if n := len(out); n > 0 && out[n-1].to.Equal(iv.from) {
			out[n-1].to = iv.to
			return out
		}
		return append(out, iv)
	}
	end := to
	if through.Before(end) {
		end = through
	}
	cur := from
	for _, d := range dirty {
		if d.Before(cur) || !d.Before(end) {
			continue
		}
		stored = add(stored, interval{cur, d})
		computed = add(computed, interval{d, d.Add(step)})
		cur = d.Add(step)
	}
	stored = add(stored, interval{cur, end})
	if through.After(from) {
		computed = add(computed, interval{through, to})
	} else {
		computed = add(computed, interval{from, to})
	}
	return stored, computed
}

// foldState is what a read needs to know of the folds over [from, to).
type foldState struct {
	hour, day time.Time   // rollup_folds.through
	dirty     []time.Time // marked hours, sorted
}

func readFoldState(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, from, to time.Time) (foldState, error) {
	var st foldState
	err := q.QueryRow(ctx, `SELECT
		(SELECT through FROM rollup_folds WHERE res = 3600), (SELECT through FROM rollup_folds WHERE res = 86400),
		coalesce((SELECT array_agg(DISTINCT ts ORDER BY ts) FROM rollup_dirty WHERE res = 3600 AND ts >= $1 AND ts < $2), '{}')`,
		from, to).Scan(&st.hour, &st.day, &st.dirty)
	if err != nil {
		return st, fmt.Errorf("read rollup fold watermarks: %w", err)
	}
	return st, nil
}

// foldedSources is how a read of resolution res over [from, to) (aligned)
// is made: the intervals read as stored rows of res, and the finer
// sources the rest is aggregated from. A day not folded yet is its hours,
// each of them its minutes if not folded either.
func foldedSources(res int32, from, to time.Time, st foldState) (stored []interval, srcs []rollupSource) {
	if res == RollupHour {
		stored, computed := split(from, to, st.hour, st.dirty, time.Hour)
		for _, c := range computed {
			srcs = append(srcs, rollupSource{RollupMinute, c.from, c.to})
		}
		return stored, srcs
	}
	var days []time.Time
	for _, h := range st.dirty {
		if d := h.Truncate(24 * time.Hour); !slices.ContainsFunc(days, d.Equal) {
			days = append(days, d)
		}
	}
	stored, computed := split(from, to, st.day, days, 24*time.Hour)
	for _, c := range computed {
		hours, minutes := split(c.from, c.to, st.hour, st.dirty, time.Hour)
		for _, h := range hours {
			srcs = append(srcs, rollupSource{RollupHour, h.from, h.to})
		}
		for _, m := range minutes {
			srcs = append(srcs, rollupSource{RollupMinute, m.from, m.to})
		}
	}
	return stored, srcs
}

// FoldOptions are one fold's clock and limits.
type FoldOptions struct {
	// Now is the fold's clock; zero takes PostgreSQL's, the clock writers
	// decide their dirty marks by. Tests set it.
	Now time.Time
	// MinuteRetention and HourRetention, if set, are the rollup retention:
	// a dirty hour whose minutes retention may have deleted (a day whose
	// hours) is not recomputed, which would lose what was deleted; its
	// late data stays in the finer rollups only, and is logged.
	MinuteRetention, HourRetention time.Duration
	// NodesPerStatement bounds one statement's share of a bucket (1,000
	// when zero).
	NodesPerStatement int
	// ReportsPerFold bounds one transaction of the minute fold
	// (defaultReportsPerFold when zero).
	ReportsPerFold int
}

// FoldResult says what one fold did.
type FoldResult struct {
	// Busy: another collector was folding, this one did nothing.
	Busy bool
	// Reports folded into the minute rollups.
	Reports int
	// Hours and Days folded as they closed, dirty Recomputed, and dirty
	// ones Skipped for retention.
	Hours, Days, Recomputed, Skipped int
	// Through is where the hour and day rollups are complete afterwards.
	HourThrough, DayThrough time.Time
}

// FoldRollups folds closed hours from their minutes and closed days from
// their hours, advancing rollup_folds, and recomputes the hours marked
// dirty by late writes. Only one collector folds at a time (an advisory
// lock): the others return Busy.
func (s *Store) FoldRollups(ctx context.Context, o FoldOptions) (FoldResult, error) {
	var res FoldResult
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("fold rollups: acquire a connection: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, foldLockID).Scan(&locked); err != nil {
		conn.Release()
		return res, fmt.Errorf("fold rollups: take the fold lock: %w", err)
	}
	if !locked {
		conn.Release()
		return FoldResult{Busy: true}, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, foldLockID); err != nil {
			// Ending the session releases the lock; a pooled connection
			// must not keep it.
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()

	now := o.Now
	if now.IsZero() {
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return res, fmt.Errorf("fold rollups: read the clock: %w", err)
		}
	}
	chunk := o.NodesPerStatement
	if chunk <= 0 {
		chunk = 1000
	}
	var nodes []int32
	rows, err := conn.Query(ctx, `SELECT id FROM nodes ORDER BY id`)
	if err != nil {
		return res, fmt.Errorf("fold rollups: list nodes: %w", err)
	}
	if nodes, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
		return res, fmt.Errorf("fold rollups: list nodes: %w", err)
	}
	fold := func(ctx context.Context, tx pgx.Tx, target int32, b time.Time) error {
		for c := range slices.Chunk(nodes, chunk) {
			// As the rollups' foreign keys did (migration 024): a node
			// deleted meanwhile is not written, and deleting one waits for
			// this transaction, then deletes what it wrote.
			rows, err := tx.Query(ctx, `SELECT id FROM nodes WHERE id = ANY($1) ORDER BY id FOR KEY SHARE`, c)
			if err != nil {
				return fmt.Errorf("lock nodes to fold: %w", err)
			}
			if c, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
				return fmt.Errorf("lock nodes to fold: %w", err)
			}
			if len(c) == 0 {
				continue
			}
			if err := foldBucket(ctx, tx, target, b, c); err != nil {
				return fmt.Errorf("fold the %ds rollups of %s: %w", target, b.UTC().Format(time.RFC3339), err)
			}
		}
		if target == RollupDay {
			// In the day's transaction: the pre-aggregate is always the
			// sum of the day rows (scopeagg.go).
			return foldScopeDay(ctx, tx, b)
		}
		return nil
	}
	through := func(db interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) error {
		st, err := readFoldState(ctx, db, now, now)
		res.HourThrough, res.DayThrough = st.hour, st.day
		return err
	}

	// Closed minutes' pending reports first, into the minute rollups,
	// marking the folded hours they reach dirty: the steps below then see
	// them. A transaction a chunk, each complete: a fold that dies loses
	// nothing and repeats nothing.
	perFold := o.ReportsPerFold
	if perFold <= 0 {
		perFold = defaultReportsPerFold
	}
	before := now.Add(-MinuteGrace).Truncate(time.Minute)
	fresh, err := readFreshMinutes(ctx, conn)
	if err != nil {
		return res, fmt.Errorf("fold pending reports into minute rollups: %w", err)
	}
	var hists histMerge // kept from chunk to chunk
	for cur := (foldCursor{fresh: fresh}); ; {
		n, next, more, err := foldPending(ctx, conn, before, cur, perFold, &hists)
		cur = next
		res.Reports += n
		if err != nil {
			return res, fmt.Errorf("fold pending reports into minute rollups: %w", err)
		}
		if !more {
			break
		}
	}

	// Dirty hours next, in one transaction with the delete of their
	// marks: a read sees the mark and the old row, or neither and the new
	// row. READ COMMITTED: each recompute sees every commit before it
	// started, so the writes of every mark deleted here; a mark committed
	// after the delete stays for the next fold.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := through(tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM rollup_dirty WHERE res = 3600 RETURNING ts`)
		if err != nil {
			return fmt.Errorf("take dirty rollup marks: %w", err)
		}
		marks, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		if err != nil {
			return fmt.Errorf("take dirty rollup marks: %w", err)
		}
		slices.SortFunc(marks, time.Time.Compare)
		marks = slices.CompactFunc(marks, time.Time.Equal)
		var days []time.Time
		for _, h := range marks {
			// Not folded yet: the fold of its hour reads it.
			if !h.Before(res.HourThrough) {
				continue
			}
			if o.MinuteRetention > 0 && h.Before(now.Add(-o.MinuteRetention+time.Hour)) {
				s.log.Warn("late data for an hour older than the minute rollups' retention: not folded into its hour and day", "hour", h.UTC())
				res.Skipped++
				continue
			}
			if err := fold(ctx, tx, RollupHour, h); err != nil {
				return err
			}
			res.Recomputed++
			if d := h.Truncate(24 * time.Hour); d.Before(res.DayThrough) && !slices.ContainsFunc(days, d.Equal) {
				days = append(days, d)
			}
		}
		for _, d := range days {
			if o.HourRetention > 0 && d.Before(now.Add(-o.HourRetention+24*time.Hour)) {
				s.log.Warn("late data for a day older than the hour rollups' retention: not folded into its day", "day", d.UTC())
				res.Skipped++
				continue
			}
			if err := fold(ctx, tx, RollupDay, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}

	// Then what closed: each bucket and its watermark in one transaction.
	for _, step := range []struct {
		res  int32
		next func() bool
	}{
		{RollupHour, func() bool { return !res.HourThrough.Add(time.Hour + FoldGrace).After(now) }},
		// A day once all its hours are folded.
		{RollupDay, func() bool { return !res.DayThrough.Add(24 * time.Hour).After(res.HourThrough) }},
	} {
		for step.next() {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			b := &res.HourThrough
			if step.res == RollupDay {
				b = &res.DayThrough
			}
			next := b.Add(time.Duration(step.res) * time.Second)
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if err := fold(ctx, tx, step.res, *b); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `UPDATE rollup_folds SET through = $2 WHERE res = $1`, step.res, next); err != nil {
					return fmt.Errorf("advance the %ds rollup watermark: %w", step.res, err)
				}
				return nil
			})
			if err != nil {
				return res, err
			}
			*b = next
			if step.res == RollupHour {
				res.Hours++
			} else {
				res.Days++
			}
		}
	}
	return res, nil
}

// SetFoldWatermark says the rollups of res are complete before through
// (backfills and benchmarks that write hour and day rollups themselves).
func (s *Store) SetFoldWatermark(ctx context.Context, res int32, through time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE rollup_folds SET through = $2 WHERE res = $1`, res, through); err != nil {
		return fmt.Errorf("set the %ds rollup watermark: %w", res, err)
	}
	return nil
}
