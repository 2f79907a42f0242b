package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// Rollup resolutions, in seconds.
const (
	RollupMinute = 60
	RollupHour   = 3600
	// RollupDay (UTC days) keeps a month's totals to a few rows per node
	// and metric: reading hour rollups of 100 nodes for 30 days took
	// seconds (BENCHMARKS.md).
	RollupDay = 86400
)

// RollupKey is one node's metric in one bucket of a resolution, keyed by
// the report's time.
type RollupKey struct {
	NodeID   int32
	MetricID int32
	Res      int32
	TS       int64 // unix seconds of the bucket's start
}

// SampleAgg folds samples of any kind: count and sum (a rate's stored
// value is its increase, so sum is the counter's total), min and max
// (gauges), and seconds spent in each state. A sample with no value (a
// ping root whose every echo was lost) counts its seconds in its state
// and nothing else: n, sum, min and max are of values only, so an
// average or a maximum over a period does not take such an interval as 0.
// An aggregate of no value at all has n 0, min +Inf and max -Inf: the
// identities of min and max, so SQL's min(), least(), max() and
// greatest() over stored rows need no filter; a reader shows nothing for
// n 0 (never min or max).
type SampleAgg struct {
	N              int64
	Sum, Min, Max  float64
	OK, Warn, Crit float64
}

func (a *SampleAgg) add(v float64, st State, seconds float64) {
	if a.N == 0 || v < a.Min {
		a.Min = v
	}
	if a.N == 0 || v > a.Max {
		a.Max = v
	}
	a.N++
	a.Sum += v
	a.addState(st, seconds)
}

// addNoValue counts a sample without a value: its state only.
func (a *SampleAgg) addNoValue(st State, seconds float64) {
	if a.N == 0 {
		a.Min, a.Max = math.Inf(1), math.Inf(-1)
	}
	a.addState(st, seconds)
}

func (a *SampleAgg) addState(st State, seconds float64) {
	switch st {
	case StateOK:
		a.OK += seconds
	case StateWarn:
		a.Warn += seconds
	case StateCrit:
		a.Crit += seconds
	}
}

// Merge adds another aggregate.
func (a *SampleAgg) Merge(o SampleAgg) {
	if o.N > 0 {
		if a.N == 0 || o.Min < a.Min {
			a.Min = o.Min
		}
		if a.N == 0 || o.Max > a.Max {
			a.Max = o.Max
		}
	} else if a.N == 0 && o.OK+o.Warn+o.Crit > 0 {
		a.Min, a.Max = math.Inf(1), math.Inf(-1)
	}
	a.N += o.N
	a.Sum += o.Sum
	a.OK += o.OK
	a.Warn += o.Warn
	a.Crit += o.Crit
}

// Rollups accumulates reports into rollup buckets. The write path and the
// raw read path use the same code, so the two can only differ in what
// they were given.
type Rollups struct {
	Samples    map[RollupKey]*SampleAgg
	Histograms map[RollupKey]*loglinear.Histogram
}

func NewRollups() *Rollups {
	return &Rollups{Samples: map[RollupKey]*SampleAgg{}, Histograms: map[RollupKey]*loglinear.Histogram{}}
}

// Add folds one report into the given resolutions.
func (r *Rollups) Add(rep Report, resolutions ...int32) {
	t := rep.Time.Unix()
	seconds := float64(rep.IntervalMS) / 1000
	for _, res := range resolutions {
		ts := t - mod(t, int64(res))
		for _, s := range rep.Samples {
			if math.IsInf(s.Value, 0) {
				continue
			}
			k := RollupKey{rep.NodeID, s.MetricID, res, ts}
			a := r.Samples[k]
			if a == nil {
				a = &SampleAgg{}
				r.Samples[k] = a
			}
			if s.NoValue || math.IsNaN(s.Value) {
				a.addNoValue(s.State, seconds)
			} else {
				a.add(s.Value, s.State, seconds)
			}
		}
		for _, h := range rep.Histograms {
			k := RollupKey{rep.NodeID, h.MetricID, res, ts}
			a := r.Histograms[k]
			if a == nil {
				a = loglinear.New()
				r.Histograms[k] = a
			}
			for i, idx := range h.BucketIndex {
				if i < len(h.BucketCount) && idx >= 0 && h.BucketCount[i] > 0 {
					a.Counts[uint32(idx)] += uint64(h.BucketCount[i])
				}
			}
			a.Count += h.Count
			a.Sum += h.Sum
		}
	}
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// sortedKeys orders upserts the same way in every transaction, so two
// writers touching the same rows lock them in the same order and cannot
// deadlock.
func sortedKeys[V any](m map[RollupKey]V) []RollupKey {
	keys := make([]RollupKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Res != b.Res {
			return a.Res < b.Res
		}
		if a.NodeID != b.NodeID {
			return a.NodeID < b.NodeID
		}
		if a.TS != b.TS {
			return a.TS < b.TS
		}
		return a.MetricID < b.MetricID
	})
	return keys
}

const rollupStagingDDL = `
CREATE TEMP TABLE IF NOT EXISTS stage_rollup_samples (LIKE rollup_samples) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_rollup_histograms (LIKE rollup_histograms) ON COMMIT DELETE ROWS;`

// addRollupSamples adds new buckets to the stored ones.
const addRollupSamples = `
ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET
	n = r.n + EXCLUDED.n, sum = r.sum + EXCLUDED.sum,
	min = least(r.min, EXCLUDED.min), max = greatest(r.max, EXCLUDED.max),
	ok_s = r.ok_s + EXCLUDED.ok_s, warn_s = r.warn_s + EXCLUDED.warn_s, crit_s = r.crit_s + EXCLUDED.crit_s`

// mergeRollupSamples and mergeRollupHistograms add staged buckets to the
// stored ones; ORDER BY takes row locks in key order (see sortedKeys).
const mergeRollupSamples = `
INSERT INTO rollup_samples AS r SELECT * FROM stage_rollup_samples ORDER BY res, node_id, ts, metric_id` + addRollupSamples

const mergeRollupHistograms = mergeRollupHistogramsWhere + mergeRollupHistogramsSet

// mergeRollupHistograms in two, for a WHERE between.
const (
	mergeRollupHistogramsWhere = `
INSERT INTO rollup_histograms AS r (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
SELECT res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count FROM stage_rollup_histograms`
	mergeRollupHistogramsSet = ` ORDER BY res, node_id, ts, metric_id
ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET
	count = r.count + EXCLUDED.count, sum = r.sum + EXCLUDED.sum,
	(bucket_index, bucket_count) = (
		SELECT array_agg(i ORDER BY i), array_agg(c ORDER BY i) FROM (
			SELECT i, sum(c)::bigint AS c FROM (
				SELECT * FROM unnest(r.bucket_index, r.bucket_count) AS a(i, c)
				UNION ALL SELECT * FROM unnest(EXCLUDED.bucket_index, EXCLUDED.bucket_count) AS b(i, c)
			) u GROUP BY i
		) g)`
)

// WriteRollups merges accumulated rollups into the stored ones, through
// staging tables (benchmarks and backfills seed history with it).
func WriteRollups(ctx context.Context, tx pgx.Tx, r *Rollups) error {
	if len(r.Samples) == 0 && len(r.Histograms) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, rollupStagingDDL); err != nil {
		return fmt.Errorf("create rollup staging tables: %w", err)
	}
	if len(r.Samples) > 0 {
		rows := make([][]any, 0, len(r.Samples))
		for _, k := range sortedKeys(r.Samples) {
			a := r.Samples[k]
			rows = append(rows, []any{k.Res, time.Unix(k.TS, 0).UTC(), k.NodeID, k.MetricID, a.N, a.Sum, a.Min, a.Max, a.OK, a.Warn, a.Crit})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"stage_rollup_samples"},
			[]string{"res", "ts", "node_id", "metric_id", "n", "sum", "min", "max", "ok_s", "warn_s", "crit_s"},
			pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy sample rollups: %w", err)
		}
		if _, err := tx.Exec(ctx, mergeRollupSamples); err != nil {
			return fmt.Errorf("merge sample rollups: %w", err)
		}
	}
	if len(r.Histograms) > 0 {
		if err := copyRollupHistograms(ctx, tx, r); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, mergeRollupHistograms); err != nil {
			return fmt.Errorf("merge histogram rollups: %w", err)
		}
	}
	return nil
}

func copyRollupHistograms(ctx context.Context, tx pgx.Tx, r *Rollups) error {
	rows := make([][]any, 0, len(r.Histograms))
	for _, k := range sortedKeys(r.Histograms) {
		h := r.Histograms[k]
		idx := h.Sorted()
		bi := make([]int32, len(idx))
		bc := make([]int64, len(idx))
		for i, b := range idx {
			bi[i], bc[i] = int32(b), int64(h.Counts[b])
		}
		rows = append(rows, []any{k.Res, time.Unix(k.TS, 0).UTC(), k.NodeID, k.MetricID, int64(h.Count), h.Sum, bi, bc})
	}
	return stageRollupHistograms(ctx, tx, rows)
}

// stageRollupHistograms COPYs rows of stage_rollup_histograms' columns:
// res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count.
func stageRollupHistograms(ctx context.Context, tx pgx.Tx, rows [][]any) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"stage_rollup_histograms"},
		[]string{"res", "ts", "node_id", "metric_id", "count", "sum", "bucket_index", "bucket_count"},
		pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy histogram rollups: %w", err)
	}
	return nil
}

// SeedRollups writes rollups in their own transaction (benchmarks, backfill).
func (s *Store) SeedRollups(ctx context.Context, r *Rollups) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return WriteRollups(ctx, tx, r) })
}

// DeleteRollupsBefore is rollup retention: buckets of resolution res that
// start before cutoff go.
func (s *Store) DeleteRollupsBefore(ctx context.Context, res int32, cutoff time.Time) (int64, error) {
	var n int64
	if res == RollupDay {
		// The scope pre-aggregate first: a report reading in between finds
		// no pre-aggregate for the day and reads what is left per node,
		// never sums of day rows that are gone.
		if err := deleteScopeDaysBefore(ctx, s.pool, cutoff); err != nil {
			return n, err
		}
	}
	for _, table := range []string{"rollup_samples", "rollup_histograms"} {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE res = $1 AND ts < $2`, res, cutoff)
		if err != nil {
			return n, fmt.Errorf("delete %s older than %s: %w", table, cutoff.Format(time.RFC3339), err)
		}
		n += tag.RowsAffected()
	}
	// The flow map's buckets leave with the tree's (migration 029); an
	// address's holders with the day rollups, the longest kept, since an
	// edge of a day still kept resolves by them.
	tag, err := s.pool.Exec(ctx, `DELETE FROM flow_edges WHERE res = $1 AND ts < $2`, res, cutoff)
	if err != nil {
		return n, fmt.Errorf("delete flow edges older than %s: %w", cutoff.Format(time.RFC3339), err)
	}
	n += tag.RowsAffected()
	if res == RollupDay {
		tag, err := s.pool.Exec(ctx, `DELETE FROM flow_holders WHERE last_seen < $1`, cutoff)
		if err != nil {
			return n, fmt.Errorf("delete address holders older than %s: %w", cutoff.Format(time.RFC3339), err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// RollupQuery asks for the rollups of some nodes over [From, To).
type RollupQuery struct {
	NodeIDs  []int32
	Res      int32
	From, To time.Time
	// Raw computes the same buckets from raw reports instead (the
	// benchmark's comparison, and periods the rollups do not cover).
	Raw bool
	// Match, if set, keeps only the metrics it accepts (filtered in SQL).
	Match func(path string) bool
}

// metricFilter is the ids of the metrics q wants, nil for all.
func (q RollupQuery) metricFilter(paths map[int32]string) []int32 {
	if q.Match == nil {
		return nil
	}
	ids := []int32{}
	for id, p := range paths {
		if q.Match(p) {
			ids = append(ids, id)
		}
	}
	return ids
}

// SampleRow and HistogramRow are one node's metric in one bucket.
type SampleRow struct {
	NodeID int32
	Path   string
	TS     time.Time
	SampleAgg
}

type HistogramRow struct {
	NodeID int32
	Path   string
	TS     time.Time
	Count  uint64
	Sum    float64
	// Index and Counts are the non-empty buckets as stored. A report folds
	// tens of thousands of rows: kept sparse, a row is merged into a
	// loglinear.Dense with no map built for it (AddTo).
	Index  []int32
	Counts []int64

	metricID int32 // what the fold writes back
}

// AddTo merges the row's buckets into d.
func (r HistogramRow) AddTo(d *loglinear.Dense) { d.AddBuckets(r.Index, r.Counts, r.Count, r.Sum) }

// ReadRollups returns the buckets of q, from the rollup tables or, with
// q.Raw, computed from raw reports by the write path's own code. Hour and
// day buckets not folded yet, or marked dirty by late data, are computed
// from the finer rollups as the fold would (foldedSources), and reports
// not folded into the minute rollups yet (rollup_pending) are added from
// their raw rows, all in one snapshot: a caller reads the same buckets
// whenever it asks, before and after any fold.
func (s *Store) ReadRollups(ctx context.Context, q RollupQuery) ([]SampleRow, []HistogramRow, error) {
	paths, err := s.metricPaths(ctx)
	if err != nil {
		return nil, nil, err
	}
	if q.Raw {
		return s.readRaw(ctx, q, paths)
	}
	if !q.From.Before(q.To) {
		return nil, nil, nil
	}
	var samples []SampleRow
	var hists []HistogramRow
	// One snapshot: a fold commits its rows with the deletion of what
	// they were made of (pending keys, dirty marks), so a read sees either
	// or the other, never both or neither.
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		samples, hists, err = readRollups(ctx, tx, q, paths)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return samples, hists, nil
}

func readRollups(ctx context.Context, tx pgx.Tx, q RollupQuery, paths map[int32]string) ([]SampleRow, []HistogramRow, error) {
	filter := q.metricFilter(paths)
	stored := []interval{{q.From, q.To}}
	// A bucket is in the range if it starts in it: the pending reports
	// read are those of the buckets that start in it.
	step := time.Duration(q.Res) * time.Second
	from, to := ceilTo(q.From, step), ceilTo(q.To, step)
	var srcs []rollupSource
	if q.Res == RollupHour || q.Res == RollupDay {
		// Computed buckets take their sources from where they start to
		// where they end.
		if !from.Before(to) {
			return nil, nil, nil
		}
		st, err := readFoldState(ctx, tx, from, to)
		if err != nil {
			return nil, nil, err
		}
		stored, srcs = foldedSources(q.Res, from, to, st)
	}
	var out rollupRows
	for _, iv := range stored {
		if err := out.read(ctx, tx, paths,
			`SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples
			WHERE res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4 AND ($5::integer[] IS NULL OR metric_id = ANY($5))`,
			`SELECT node_id, metric_id, ts, count, sum, buckets FROM rollup_histograms
			WHERE res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4 AND ($5::integer[] IS NULL OR metric_id = ANY($5))`,
			q.Res, q.NodeIDs, iv.from, iv.to, filter); err != nil {
			return nil, nil, err
		}
	}
	if len(srcs) > 0 {
		var part rollupRows
		for _, src := range srcs {
			if err := part.read(ctx, tx, paths, readAggSamples, readSourceHistograms, src.res, src.from, src.to, q.NodeIDs, filter, float64(q.Res)); err != nil {
				return nil, nil, err
			}
		}
		out.samples = append(out.samples, mergeSamples(part.samples)...)
		out.hists = append(out.hists, mergeHistograms(part.hists)...)
	}
	pending, err := pendingRollups(ctx, tx, q.NodeIDs, q.Res, from, to)
	if err != nil {
		return nil, nil, err
	}
	ps, ph := pending.rows(paths, q.Match)
	return addSamples(out.samples, ps), addHistograms(out.hists, ph), nil
}

// addSamples merges rows of buckets (add) into rows with one row per node,
// metric and bucket (rows), in place where a bucket is in both.
func addSamples(rows, add []SampleRow) []SampleRow {
	if len(add) == 0 {
		return rows
	}
	type key struct {
		node int32
		path string
		ts   int64
	}
	at := make(map[key]int, len(add))
	for i, r := range add {
		at[key{r.NodeID, r.Path, r.TS.Unix()}] = i
	}
	used := make([]bool, len(add))
	for i := range rows {
		if j, ok := at[key{rows[i].NodeID, rows[i].Path, rows[i].TS.Unix()}]; ok {
			rows[i].Merge(add[j].SampleAgg)
			used[j] = true
		}
	}
	for j, r := range add {
		if !used[j] {
			rows = append(rows, r)
		}
	}
	return rows
}

// addHistograms is addSamples of histogram rows.
func addHistograms(rows, add []HistogramRow) []HistogramRow {
	if len(add) == 0 {
		return rows
	}
	type key struct {
		node, metric int32
		ts           int64
	}
	at := make(map[key]int, len(add))
	for i, r := range add {
		at[key{r.NodeID, r.metricID, r.TS.Unix()}] = i
	}
	used := make([]bool, len(add))
	for i := range rows {
		if j, ok := at[key{rows[i].NodeID, rows[i].metricID, rows[i].TS.Unix()}]; ok {
			h := rows[i].histogram()
			for k, idx := range add[j].Index {
				h.Counts[uint32(idx)] += uint64(add[j].Counts[k])
			}
			h.Count += add[j].Count
			h.Sum += add[j].Sum
			rows[i] = histogramRow(rows[i].NodeID, rows[i].metricID, rows[i].Path, rows[i].TS, h)
			used[j] = true
		}
	}
	for j, r := range add {
		if !used[j] {
			rows = append(rows, r)
		}
	}
	return rows
}

// rollupRows collects rollup rows read by queries of the same columns.
type rollupRows struct {
	samples []SampleRow
	hists   []HistogramRow
	// The rows' buckets are sub-slices of shared chunks, not two
	// allocations per row.
	arena bucketArena
}

// querier is a pool or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// read appends the rows of a samples and a histograms query, both of args.
func (o *rollupRows) read(ctx context.Context, db querier, paths map[int32]string, samplesSQL, histsSQL string, args ...any) error {
	if err := o.readSamples(ctx, db, paths, samplesSQL, args...); err != nil {
		return err
	}
	return o.readHistograms(ctx, db, paths, histsSQL, args...)
}

func (o *rollupRows) readSamples(ctx context.Context, db querier, paths map[int32]string, query string, args ...any) error {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("read sample rollups: %w", err)
	}
	defer rows.Close()
	// One set of scan targets for all rows: Scan's pointers would move a
	// row declared in the loop to the heap, once per row.
	var r SampleRow
	var mid int32
	for rows.Next() {
		if err := rows.Scan(&r.NodeID, &mid, &r.TS, &r.N, &r.Sum, &r.Min, &r.Max, &r.OK, &r.Warn, &r.Crit); err != nil {
			return fmt.Errorf("scan sample rollup: %w", err)
		}
		r.Path = paths[mid]
		o.samples = append(o.samples, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read sample rollups: %w", err)
	}
	return nil
}

func (o *rollupRows) readHistograms(ctx context.Context, db querier, paths map[int32]string, query string, args ...any) error {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("read histogram rollups: %w", err)
	}
	defer rows.Close()
	var h HistogramRow
	var count int64
	for rows.Next() {
		if err := rows.Scan(&h.NodeID, &h.metricID, &h.TS, &count, &h.Sum, nil); err != nil {
			return fmt.Errorf("scan histogram rollup: %w", err)
		}
		if h.Index, h.Counts, err = o.arena.decode(rows, 5); err != nil {
			return fmt.Errorf("scan histogram rollup buckets: %w", err)
		}
		h.Count, h.Path = uint64(count), paths[h.metricID]
		o.hists = append(o.hists, h)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read histogram rollups: %w", err)
	}
	return nil
}

func (s *Store) readRaw(ctx context.Context, q RollupQuery, paths map[int32]string) ([]SampleRow, []HistogramRow, error) {
	acc := NewRollups()
	reports, err := rawReports(ctx, s.pool, `
		SELECT node_id, instance_id, seq, ts, interval_ms, metric_ids, vals, states FROM reports
		WHERE node_id = ANY($1) AND ts >= $2 AND ts < $3`, `
		SELECT node_id, instance_id, seq, ts, metric_id, count, sum, bucket_index, bucket_count FROM histograms
		WHERE node_id = ANY($1) AND ts >= $2 AND ts < $3`, q.NodeIDs, q.From, q.To)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range reports {
		acc.Add(*r, q.Res)
	}
	samples, hists := acc.rows(paths, q.Match)
	return samples, hists, nil
}

// rows is the accumulated buckets as rows, of the metrics match accepts
// (nil: all).
func (acc *Rollups) rows(paths map[int32]string, match func(string) bool) ([]SampleRow, []HistogramRow) {
	keep := func(id int32) bool { return match == nil || match(paths[id]) }
	samples := make([]SampleRow, 0, len(acc.Samples))
	for k, a := range acc.Samples {
		if !keep(k.MetricID) {
			continue
		}
		samples = append(samples, SampleRow{k.NodeID, paths[k.MetricID], time.Unix(k.TS, 0).UTC(), *a})
	}
	hists := make([]HistogramRow, 0, len(acc.Histograms))
	for k, h := range acc.Histograms {
		if !keep(k.MetricID) {
			continue
		}
		hists = append(hists, histogramRow(k.NodeID, k.MetricID, paths[k.MetricID], time.Unix(k.TS, 0).UTC(), h))
	}
	return samples, hists
}

// histogram is the row's buckets as a histogram.
func (r HistogramRow) histogram() *loglinear.Histogram {
	h := loglinear.New()
	for i, idx := range r.Index {
		h.Counts[uint32(idx)] += uint64(r.Counts[i])
	}
	h.Count, h.Sum = r.Count, r.Sum
	return h
}

func histogramRow(node, metric int32, path string, ts time.Time, h *loglinear.Histogram) HistogramRow {
	idx := h.Sorted()
	// Never nil: the fold writes them to NOT NULL columns.
	r := HistogramRow{NodeID: node, Path: path, TS: ts, Count: h.Count, Sum: h.Sum, metricID: metric,
		Index: make([]int32, len(idx)), Counts: make([]int64, len(idx))}
	for i, b := range idx {
		r.Index[i], r.Counts[i] = int32(b), int64(h.Counts[b])
	}
	return r
}

// rawReports reads reports and their histograms by two queries of args:
// reportsSQL returns node_id, instance_id, seq, ts, interval_ms,
// metric_ids, vals, states; histsSQL node_id, instance_id, seq, ts,
// metric_id, count, sum, bucket_index, bucket_count.
func rawReports(ctx context.Context, db querier, reportsSQL, histsSQL string, args ...any) (map[ReportKey]*Report, error) {
	reports := map[ReportKey]*Report{}
	rows, err := db.Query(ctx, reportsSQL, args...)
	if err != nil {
		return nil, fmt.Errorf("read raw reports: %w", err)
	}
	for rows.Next() {
		var r Report
		var inst, seq int64
		var interval int32
		var ids []int32
		var vals []float64
		var states []int16
		if err := rows.Scan(&r.NodeID, &inst, &seq, &r.Time, &interval, &ids, &vals, &states); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan raw report: %w", err)
		}
		r.InstanceID, r.Seq, r.IntervalMS = uint64(inst), uint64(seq), uint32(interval)
		for i := range ids {
			if i < len(vals) && i < len(states) {
				r.Samples = append(r.Samples, sampleOf(ids[i], vals[i], states[i]))
			}
		}
		reports[r.Key()] = &r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read raw reports: %w", err)
	}
	rows, err = db.Query(ctx, histsSQL, args...)
	if err != nil {
		return nil, fmt.Errorf("read raw histograms: %w", err)
	}
	for rows.Next() {
		var k ReportKey
		var inst, seq, count int64
		var ts time.Time
		var h Histogram
		if err := rows.Scan(&k.NodeID, &inst, &seq, &ts, &h.MetricID, &count, &h.Sum, &h.BucketIndex, &h.BucketCount); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan raw histogram: %w", err)
		}
		k.InstanceID, k.Seq, h.Count = uint64(inst), uint64(seq), uint64(count)
		r := reports[k]
		if r == nil {
			r = &Report{NodeID: k.NodeID, InstanceID: k.InstanceID, Seq: k.Seq, Time: ts}
			reports[k] = r
		}
		r.Histograms = append(r.Histograms, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read raw histograms: %w", err)
	}
	return reports, nil
}

// metricPaths is the whole path dictionary by id (small: one row per
// distinct metric path of the fleet).
func (s *Store) metricPaths(ctx context.Context) (map[int32]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, path FROM metric_paths`)
	if err != nil {
		return nil, fmt.Errorf("read metric paths: %w", err)
	}
	defer rows.Close()
	out := map[int32]string{}
	for rows.Next() {
		var id int32
		var p string
		if err := rows.Scan(&id, &p); err != nil {
			return nil, fmt.Errorf("scan metric path: %w", err)
		}
		out[id] = p
	}
	return out, rows.Err()
}

// DefinitionsOf is one definition per metric path over some nodes (the
// catalogue gives every node the same title, unit and scale for a path).
func (s *Store) DefinitionsOf(ctx context.Context, nodeIDs []int32) (map[string]MetricDef, error) {
	// The lowest node's definition of each path, chosen on the ids alone
	// (a path is one metric id) before the joins: a report of 1,000 busy
	// nodes otherwise joined and sorted 185,000 rows by path for 200-odd.
	rows, err := s.pool.Query(ctx, `
		SELECT p.path, m.title, m.unit, m.kind, m.scale, m.quantile
		FROM (SELECT DISTINCT ON (metric_id) metric_id, def_id FROM node_metrics
			WHERE node_id = ANY($1) ORDER BY metric_id, node_id) nm
		JOIN metric_defs m ON m.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id`, nodeIDs)
	if err != nil {
		return nil, fmt.Errorf("read metric definitions: %w", err)
	}
	defer rows.Close()
	out := map[string]MetricDef{}
	for rows.Next() {
		var d MetricDef
		var kind int16
		if err := rows.Scan(&d.Path, &d.Title, &d.Unit, &kind, &d.Scale, &d.Quantile); err != nil {
			return nil, fmt.Errorf("scan metric definition: %w", err)
		}
		d.Kind = Kind(kind)
		out[d.Path] = d
	}
	return out, rows.Err()
}

// BadMinutes are the minute rollups of some nodes in which any metric was
// WARN or CRIT: what incidents are made of, read through a partial index so
// a month of healthy minutes costs nothing. Reports not folded yet are
// added from their raw rows, in the same snapshot (ReadRollups).
func (s *Store) BadMinutes(ctx context.Context, nodeIDs []int32, from, to time.Time, limit int) ([]SampleRow, error) {
	paths, err := s.metricPaths(ctx)
	if err != nil {
		return nil, err
	}
	var out []SampleRow
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		out, err = badMinutes(ctx, tx, paths, nodeIDs, from, to, limit)
		return err
	})
	return out, err
}

func badMinutes(ctx context.Context, tx pgx.Tx, paths map[int32]string, nodeIDs []int32, from, to time.Time, limit int) ([]SampleRow, error) {
	var rows rollupRows
	if err := rows.readSamples(ctx, tx, paths, `
		SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples
		WHERE res = 60 AND (warn_s > 0 OR crit_s > 0) AND node_id = ANY($1) AND ts >= $2 AND ts < $3
		ORDER BY ts LIMIT $4`, nodeIDs, from, to, limit); err != nil {
		return nil, fmt.Errorf("read non-OK minutes: %w", err)
	}
	pending, err := pendingRollups(ctx, tx, nodeIDs, RollupMinute, ceilTo(from, time.Minute), ceilTo(to, time.Minute))
	if err != nil {
		return nil, err
	}
	if len(pending.Samples) == 0 {
		return rows.samples, nil
	}
	// A minute with pending reports is its stored row (bad or not) and
	// theirs: read the stored rows of those minutes whatever their state.
	add, _ := pending.rows(paths, nil)
	lo, hi := add[0].TS, add[0].TS
	for _, r := range add {
		lo, hi = minTime(lo, r.TS), maxTime(hi, r.TS)
	}
	var stored rollupRows
	if err := stored.readSamples(ctx, tx, paths, `
		SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples
		WHERE res = 60 AND node_id = ANY($1) AND ts >= $2 AND ts <= $3`, nodeIDs, lo, hi); err != nil {
		return nil, fmt.Errorf("read minutes with pending reports: %w", err)
	}
	type key struct {
		node int32
		path string
		ts   int64
	}
	touched := map[key]bool{}
	for _, r := range add {
		touched[key{r.NodeID, r.Path, r.TS.Unix()}] = true
	}
	var merged []SampleRow
	for _, r := range stored.samples {
		if touched[key{r.NodeID, r.Path, r.TS.Unix()}] {
			merged = append(merged, r)
		}
	}
	merged = addSamples(merged, add)
	out := slices.DeleteFunc(rows.samples, func(r SampleRow) bool { return touched[key{r.NodeID, r.Path, r.TS.Unix()}] })
	for _, r := range merged {
		if r.Warn > 0 || r.Crit > 0 {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b SampleRow) int { return a.TS.Compare(b.TS) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
