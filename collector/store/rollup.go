package store

import (
	"context"
	"fmt"
	"math"
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
// (gauges), and seconds spent in each state.
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
	if o.N == 0 {
		return
	}
	if a.N == 0 || o.Min < a.Min {
		a.Min = o.Min
	}
	if a.N == 0 || o.Max > a.Max {
		a.Max = o.Max
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
			if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
				continue
			}
			k := RollupKey{rep.NodeID, s.MetricID, res, ts}
			a := r.Samples[k]
			if a == nil {
				a = &SampleAgg{}
				r.Samples[k] = a
			}
			a.add(s.Value, s.State, seconds)
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

// upsertRollupSamples is mergeRollupSamples with the buckets as arrays, one
// per column: a statement the write path queues with the rest of its
// batch, where staging them would cost the transaction three more round
// trips (the DDL, the COPY and the merge), most of what a batch of healthy
// nodes' reports cost on a busy machine (BENCHMARKS.md).
const upsertRollupSamples = `
INSERT INTO rollup_samples AS r
SELECT * FROM unnest($1::integer[], $2::timestamptz[], $3::integer[], $4::integer[], $5::bigint[],
	$6::float8[], $7::float8[], $8::float8[], $9::float8[], $10::float8[], $11::float8[])
ORDER BY 1, 3, 2, 4` + addRollupSamples

const mergeRollupHistograms = `
INSERT INTO rollup_histograms AS r (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
SELECT res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count FROM stage_rollup_histograms ORDER BY res, node_id, ts, metric_id
ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET
	count = r.count + EXCLUDED.count, sum = r.sum + EXCLUDED.sum,
	(bucket_index, bucket_count) = (
		SELECT array_agg(i ORDER BY i), array_agg(c ORDER BY i) FROM (
			SELECT i, sum(c)::bigint AS c FROM (
				SELECT * FROM unnest(r.bucket_index, r.bucket_count) AS a(i, c)
				UNION ALL SELECT * FROM unnest(EXCLUDED.bucket_index, EXCLUDED.bucket_count) AS b(i, c)
			) u GROUP BY i
		) g)`

// queueRollups folds the batch's new reports into the minute rollups, in
// the transaction that stores them; hours and days are folded from them
// later (FoldRollups). The sample upsert is queued into batch; histograms,
// whose buckets are arrays themselves, are COPYed to staging (created with
// the reports' staging tables) and their merge queued.
func queueRollups(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, reports []Report, inserted map[ReportKey]bool) error {
	r := NewRollups()
	for _, rep := range reports {
		if inserted[rep.Key()] {
			r.Add(rep, RollupMinute)
		}
	}
	if n := len(r.Samples); n > 0 {
		res, ts, node, metric := make([]int32, 0, n), make([]time.Time, 0, n), make([]int32, 0, n), make([]int32, 0, n)
		cnt, sum, lo, hi, ok, warn, crit := make([]int64, 0, n), make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n),
			make([]float64, 0, n), make([]float64, 0, n), make([]float64, 0, n)
		for _, k := range sortedKeys(r.Samples) {
			a := r.Samples[k]
			res, ts, node, metric = append(res, k.Res), append(ts, time.Unix(k.TS, 0).UTC()), append(node, k.NodeID), append(metric, k.MetricID)
			cnt, sum, lo, hi = append(cnt, a.N), append(sum, a.Sum), append(lo, a.Min), append(hi, a.Max)
			ok, warn, crit = append(ok, a.OK), append(warn, a.Warn), append(crit, a.Crit)
		}
		batch.Queue(upsertRollupSamples, res, ts, node, metric, cnt, sum, lo, hi, ok, warn, crit)
	}
	if len(r.Histograms) > 0 {
		if err := copyRollupHistograms(ctx, tx, r); err != nil {
			return err
		}
		batch.Queue(mergeRollupHistograms)
	}
	return nil
}

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
	for _, table := range []string{"rollup_samples", "rollup_histograms"} {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+table+` WHERE res = $1 AND ts < $2`, res, cutoff)
		if err != nil {
			return n, fmt.Errorf("delete %s older than %s: %w", table, cutoff.Format(time.RFC3339), err)
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
// from the finer rollups as the fold would (foldedSources), so a caller
// reads the same buckets whenever it asks.
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
	filter := q.metricFilter(paths)
	stored := []interval{{q.From, q.To}}
	var srcs []rollupSource
	if q.Res == RollupHour || q.Res == RollupDay {
		// A bucket is in the range if it starts in it: computed buckets
		// take their sources from where they start to where they end.
		step := time.Duration(q.Res) * time.Second
		from, to := ceilTo(q.From, step), ceilTo(q.To, step)
		if !from.Before(to) {
			return nil, nil, nil
		}
		st, err := readFoldState(ctx, s.pool, from, to)
		if err != nil {
			return nil, nil, err
		}
		stored, srcs = foldedSources(q.Res, from, to, st)
	}
	var out rollupRows
	for _, iv := range stored {
		if err := out.read(ctx, s.pool, paths,
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
			if err := part.read(ctx, s.pool, paths, readAggSamples, readSourceHistograms, src.res, src.from, src.to, q.NodeIDs, filter, float64(q.Res)); err != nil {
				return nil, nil, err
			}
		}
		out.samples = append(out.samples, mergeSamples(part.samples)...)
		out.hists = append(out.hists, mergeHistograms(part.hists)...)
	}
	return out.samples, out.hists, nil
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
	reports := map[ReportKey]*Report{}
	rows, err := s.pool.Query(ctx, `
		SELECT node_id, instance_id, seq, ts, interval_ms, metric_ids, vals, states FROM reports
		WHERE node_id = ANY($1) AND ts >= $2 AND ts < $3`, q.NodeIDs, q.From, q.To)
	if err != nil {
		return nil, nil, fmt.Errorf("read raw reports: %w", err)
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
			return nil, nil, fmt.Errorf("scan raw report: %w", err)
		}
		r.InstanceID, r.Seq, r.IntervalMS = uint64(inst), uint64(seq), uint32(interval)
		for i := range ids {
			if i < len(vals) && i < len(states) {
				r.Samples = append(r.Samples, Sample{MetricID: ids[i], Value: vals[i], State: State(states[i])})
			}
		}
		reports[r.Key()] = &r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read raw reports: %w", err)
	}
	rows, err = s.pool.Query(ctx, `
		SELECT node_id, instance_id, seq, ts, metric_id, count, sum, bucket_index, bucket_count FROM histograms
		WHERE node_id = ANY($1) AND ts >= $2 AND ts < $3`, q.NodeIDs, q.From, q.To)
	if err != nil {
		return nil, nil, fmt.Errorf("read raw histograms: %w", err)
	}
	for rows.Next() {
		var k ReportKey
		var inst, seq, count int64
		var ts time.Time
		var h Histogram
		if err := rows.Scan(&k.NodeID, &inst, &seq, &ts, &h.MetricID, &count, &h.Sum, &h.BucketIndex, &h.BucketCount); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("scan raw histogram: %w", err)
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
		return nil, nil, fmt.Errorf("read raw histograms: %w", err)
	}
	for _, r := range reports {
		acc.Add(*r, q.Res)
	}
	keep := func(id int32) bool { return q.Match == nil || q.Match(paths[id]) }
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
	return samples, hists, nil
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
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT ON (p.path) p.path, m.title, m.unit, m.kind, m.scale, m.quantile
		FROM node_metrics nm JOIN metric_defs m ON m.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
		WHERE nm.node_id = ANY($1) ORDER BY p.path, nm.node_id`, nodeIDs)
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
// a month of healthy minutes costs nothing.
func (s *Store) BadMinutes(ctx context.Context, nodeIDs []int32, from, to time.Time, limit int) ([]SampleRow, error) {
	paths, err := s.metricPaths(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples
		WHERE res = 60 AND (warn_s > 0 OR crit_s > 0) AND node_id = ANY($1) AND ts >= $2 AND ts < $3
		ORDER BY ts LIMIT $4`, nodeIDs, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("read non-OK minutes: %w", err)
	}
	defer rows.Close()
	var out []SampleRow
	for rows.Next() {
		var r SampleRow
		var mid int32
		if err := rows.Scan(&r.NodeID, &mid, &r.TS, &r.N, &r.Sum, &r.Min, &r.Max, &r.OK, &r.Warn, &r.Crit); err != nil {
			return nil, fmt.Errorf("scan non-OK minute: %w", err)
		}
		r.Path = paths[mid]
		out = append(out, r)
	}
	return out, rows.Err()
}
