package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// stagingDDL creates per-connection staging tables. Rows are COPYed there and
// moved with INSERT … ON CONFLICT DO NOTHING: COPY alone cannot skip reports
// that are already stored, and resends after a reconnect are normal.
const stagingDDL = `
CREATE TEMP TABLE IF NOT EXISTS stage_reports (LIKE reports) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_histograms (LIKE histograms) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_events (LIKE events) ON COMMIT DELETE ROWS;`

// moveStaged inserts the staged reports that are new and, only for those,
// their histograms and events, so a resent report adds nothing twice. The
// new reports' keys are left for the minute fold (rollup_pending, migration
// 016): the rollups are no longer written here, where an upsert per metric
// and report cost most of the transaction (BENCHMARKS.md).
//
// A batch without histograms (a healthy fleet's: roots only) writes its
// pending keys straight from the inserted rows, and one without events
// has no events step: the join and GROUP BY over the staged histograms,
// and the empty joins, were a measurable part of a small report's write.
func moveStaged(hists, events bool) string {
	pending := `INSERT INTO rollup_pending (node_id, instance_id, seq, ts) SELECT node_id, instance_id, seq, ts FROM ins`
	if hists {
		pending = `INSERT INTO rollup_pending (node_id, instance_id, seq, ts, hist_ids)
	SELECT i.node_id, i.instance_id, i.seq, i.ts, array_agg(DISTINCT s.metric_id) FILTER (WHERE s.metric_id IS NOT NULL)
	FROM ins i LEFT JOIN stage_histograms s USING (node_id, instance_id, seq) GROUP BY 1, 2, 3, 4`
	}
	q := `
WITH ins AS (
	INSERT INTO reports SELECT * FROM stage_reports ON CONFLICT DO NOTHING
	RETURNING node_id, instance_id, seq, ts
), p AS (
	` + pending + `
)`
	if hists {
		q += `, h AS (
	INSERT INTO histograms SELECT s.* FROM stage_histograms s JOIN ins USING (node_id, instance_id, seq)
)`
	}
	if events {
		q += `, e AS (
	INSERT INTO events SELECT s.* FROM stage_events s JOIN ins USING (node_id, instance_id, seq)
)`
	}
	return q + `
SELECT node_id, instance_id, seq FROM ins`
}

// mergeLatest merges a batch's newest values into node_latest, one row per
// node, in one statement: $1..$6 are arrays with an element per node.
// A report older than what is stored (a late resend) must not move the
// node's newest state backwards.
//
// A report that carries root metrics only (a healthy node's, every
// interval) goes to hot, a few entries stored inline, and metrics — every
// metric's newest value, out of line — is kept as it is instead of being
// rewritten whole (migration 021). Its roots' states (root_states,
// rootStates) let the fleet summary's trigger skip a report that changes no
// state (migration 023). A report that carries more has no root_states: it
// folds hot, older than it and newer than metrics, into metrics.
//
// A report that carries more replaces the node's values outright when it
// carries every key of them (migration 032): a node's values are base_*
// (the last such report's, as arrays), metrics (values merged since from
// reports that carried some keys) and hot, each newer than the one before
// (migration 035). Such a report (deep, its values in $9..$13 as one
// slice of each array a node, $14/$15 its bounds, and its keys in $8, a
// string a node, comma-separated: a slice of a text[] is found by walking
// it from the start, which at 500 nodes a batch cost more than the jsonb
// it replaced; its times and intervals in $11/$12 from $16 to $17, one
// of each when every value shares them, the usual case: 2.2 KB less to
// write for a busy tree) replaces base_* and empties metrics and hot:
// written as arrays in binary, not parsed as a jsonb object of every
// value. metrics_keys (latestKeys) says it is covered
// without reading the stored keys when the key set is the one the last
// covered merge stored; then base_paths, the same keys in the same
// order, is kept as it is (its TOAST not written again). Otherwise each
// stored key is looked up in the report, once per change of the node's
// key set. A deep report that is not covered is merged into metrics as
// before, built as jsonb from its arrays. $5 (jsonb) is a roots-only
// report's values, NULL for a deep one.
//
// One statement for the batch rather than one per node: a pipeline of 500
// upserts cost 1.24x the one statement (BenchmarkLatestMerge). Rows are
// locked in the order of the arrays, node order, so concurrent batches
// cannot deadlock.
const mergeLatest = `
INSERT INTO node_latest (node_id, ts, interval_ms, snapshot_ts, metrics, root_states, metrics_keys,
	base_paths, base_vals, base_states, base_times, base_intervals, base_novalue)
SELECT u.n, u.ts, u.i, u.snap, coalesce(u.m, '{}'), u.rs, u.k,
	CASE WHEN u.m IS NULL THEN string_to_array(u.p, ',') END, CASE WHEN u.m IS NULL THEN ($9::float8[])[u.lo + 1:u.hi] END,
	CASE WHEN u.m IS NULL THEN ($10::smallint[])[u.lo + 1:u.hi] END, CASE WHEN u.m IS NULL THEN ($11::bigint[])[u.tlo + 1:u.thi] END,
	CASE WHEN u.m IS NULL THEN ($12::integer[])[u.tlo + 1:u.thi] END, CASE WHEN u.m IS NULL THEN ($13::boolean[])[u.lo + 1:u.hi] END
FROM unnest($1::int[], $2::timestamptz[], $3::int[], $4::timestamptz[], $5::jsonb[], $6::text[], $7::bigint[], $14::int[], $15::int[],
		$8::text[], $16::int[], $17::int[]) AS u(n, ts, i, snap, m, rs, k, lo, hi, p, tlo, thi)
ON CONFLICT (node_id) DO UPDATE SET
	(metrics, metrics_keys, base_paths, base_vals, base_states, base_times, base_intervals, base_novalue) = (
		SELECT CASE WHEN x.roots THEN node_latest.metrics WHEN x.covered THEN '{}'
				ELSE node_latest.metrics || node_latest.hot || ` + latestBaseExcluded + ` END,
			CASE WHEN x.roots THEN node_latest.metrics_keys WHEN x.covered THEN EXCLUDED.metrics_keys END,
			CASE WHEN x.covered AND (node_latest.metrics_keys IS DISTINCT FROM EXCLUDED.metrics_keys OR node_latest.base_paths IS NULL)
				THEN EXCLUDED.base_paths ELSE node_latest.base_paths END,
			CASE WHEN x.covered THEN EXCLUDED.base_vals ELSE node_latest.base_vals END,
			CASE WHEN x.covered THEN EXCLUDED.base_states ELSE node_latest.base_states END,
			CASE WHEN x.covered THEN EXCLUDED.base_times ELSE node_latest.base_times END,
			CASE WHEN x.covered THEN EXCLUDED.base_intervals ELSE node_latest.base_intervals END,
			CASE WHEN x.covered THEN EXCLUDED.base_novalue ELSE node_latest.base_novalue END
		FROM (SELECT EXCLUDED.root_states IS NOT NULL AS roots, coalesce(EXCLUDED.root_states IS NULL AND ` + latestCovered + `, false) AS covered) x),
	hot = CASE WHEN EXCLUDED.root_states IS NULL THEN '{}' ELSE node_latest.hot || EXCLUDED.metrics END,
	root_states = EXCLUDED.root_states,
	ts = EXCLUDED.ts,
	interval_ms = EXCLUDED.interval_ms,
	snapshot_ts = coalesce(EXCLUDED.snapshot_ts, node_latest.snapshot_ts)
WHERE node_latest.ts <= EXCLUDED.ts`

// latestCovered is whether a deep report (EXCLUDED, its keys in
// base_paths) carries every key of the node's stored values: base_paths,
// metrics and hot. hot is a few roots; base_paths and metrics are looked
// up only when their key set is not known to be the report's.
const latestCovered = `(node_latest.metrics_keys = EXCLUDED.metrics_keys
			OR (node_latest.base_paths IS NULL OR node_latest.base_paths <@ EXCLUDED.base_paths)
				AND NOT EXISTS (SELECT FROM jsonb_object_keys(node_latest.metrics) k WHERE NOT k = ANY(EXCLUDED.base_paths)))
		AND NOT EXISTS (SELECT FROM jsonb_object_keys(node_latest.hot) k WHERE NOT k = ANY(EXCLUDED.base_paths))`

// latestBaseExcluded is a deep report's values (EXCLUDED's base_*) as jsonb.
const latestBaseExcluded = `nbs_latest_base(EXCLUDED.base_paths, EXCLUDED.base_vals, EXCLUDED.base_states,
			EXCLUDED.base_times, EXCLUDED.base_intervals, EXCLUDED.base_novalue, false, NULL)`

// latestBase is a node_latest row's base_* (migration 035) as jsonb, and
// latestBaseRoots its roots only.
const (
	latestBase      = `nbs_latest_base(base_paths, base_vals, base_states, base_times, base_intervals, base_novalue, false, NULL)`
	latestBaseRoots = `nbs_latest_base(base_paths, base_vals, base_states, base_times, base_intervals, base_novalue, true, NULL)`
)

// latestValues is how a query reads a node's newest values from node_latest
// (migrations 021, 035): each layer newer than the one before.
const latestValues = `(` + latestBase + ` || metrics || hot)`

// latestRootValues is latestValues with base_* built for its roots only:
// what a read that keeps only roots needs.
const latestRootValues = `(` + latestBaseRoots + ` || metrics || hot)`

// WriteReports stores a batch in one transaction. It returns, for every
// report of the batch, whether it was new; false means it was already stored.
func (s *Store) WriteReports(ctx context.Context, reports []Report) (map[ReportKey]bool, error) {
	result := make(map[ReportKey]bool, len(reports))
	if err := s.WriteReportsInto(ctx, reports, result); err != nil {
		return nil, err
	}
	return result, nil
}

// WriteReportsInto is WriteReports into result, a map the caller keeps
// from batch to batch (emptied first): made a batch, with the batch's
// reports without duplicates, they were a twentieth of the collector's
// allocations at 10,000 nodes. On an error result means nothing.
func (s *Store) WriteReportsInto(ctx context.Context, reports []Report, result map[ReportKey]bool) error {
	clear(result)
	// queueLatest's arguments until the batch is sent, and the batch's
	// reports without duplicates.
	sc := s.latestScratches.Get().(*latestScratch)
	defer func() {
		sc.reset()
		s.latestScratches.Put(sc)
	}()
	unique := sc.unique[:0]
	for _, r := range reports {
		if _, seen := result[r.Key()]; seen {
			continue
		}
		result[r.Key()] = false
		unique = append(unique, r)
	}
	sc.unique = unique
	if len(unique) == 0 {
		return nil
	}
	if err := s.ensurePartitions(ctx, unique); err != nil {
		return err
	}

	rows, err := newCopyRows(unique)
	if err != nil {
		return err
	}
	// The batch's latest values are written into a buffer kept from an
	// earlier batch: grown from nothing, its copies were a sixth of the
	// collector's allocations at a full tree per report. pgx has copied it
	// into its messages once the transaction is over.
	buf := s.latestBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxLatestBuf {
			*buf = (*buf)[:0]
			s.latestBufs.Put(buf)
		}
	}()
	// And the rows COPYed, then the statements' arguments, into another
	// (copyEncoded, sendEncoded).
	args := s.latestBufs.Get().(*[]byte)
	defer func() {
		if cap(*args) <= maxLatestBuf {
			*args = (*args)[:0]
			s.latestBufs.Put(args)
		}
	}()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		stored, err := copyDirect(ctx, tx, rows, args)
		if err != nil {
			return err
		}
		if stored {
			for k := range result {
				result[k] = true
			}
		} else if err := s.writeStaged(ctx, tx, rows, result, args); err != nil {
			return err
		}
		// One round trip for the latest values. Rollups are the fold's
		// (FoldRollups), from rollup_pending.
		batch := &pgx.Batch{}
		*buf, err = queueLatest(batch, s.latestSeed, (*buf)[:0], unique, result, sc)
		if err != nil {
			return err
		}
		// After the latest values, whose merge locks the batch's nodes:
		// addCounters relies on it.
		queueCounters(batch, unique, result)
		if err := queueFlowEdges(batch, unique, result); err != nil {
			return err
		}
		queueHolders(batch, unique, result)
		if batch.Len() == 0 {
			return nil
		}
		if *args, err = sendEncoded(ctx, tx, batch, *args); err != nil {
			return fmt.Errorf("update latest values: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write %d reports: %w", len(unique), err)
	}
	return nil
}

// storedValue is a sample's value as reports.vals keeps it: NaN for no
// value. A sentinel in the float8[] rather than a NULL element: the array
// stays without a null bitmap, COPY keeps encoding a []float64, and every
// aggregate reading it already had to pass over NaN (see Sample.NoValue).
func storedValue(s Sample) float64 {
	if s.NoValue {
		return math.NaN()
	}
	return s.Value
}

// sampleOf is a stored sample read back: NaN is no value.
func sampleOf(id int32, v float64, st int16) Sample {
	if math.IsNaN(v) {
		return Sample{MetricID: id, State: State(st), NoValue: true}
	}
	return Sample{MetricID: id, Value: v, State: State(st)}
}

// CopyRows is one report as the rows COPY writes: its reports row, in
// the columns of reports, and its histograms and events rows (benchmarks
// that seed history COPY the same rows).
func CopyRows(r Report) (report []any, hists, events [][]any, err error) {
	ids := make([]int32, len(r.Samples))
	vals := make([]float64, len(r.Samples))
	states := make([]int16, len(r.Samples))
	for i, smp := range r.Samples {
		ids[i], vals[i], states[i] = smp.MetricID, storedValue(smp), int16(smp.State)
	}
	inst, seq := int64(r.InstanceID), int64(r.Seq)
	report = []any{r.NodeID, inst, seq, r.Time, int32(r.IntervalMS), r.Snapshot, ids, vals, states}
	for _, h := range r.Histograms {
		hists = append(hists, []any{r.NodeID, inst, seq, r.Time, h.MetricID, int64(h.Count), h.Sum, h.BucketIndex, h.BucketCount})
	}
	for _, e := range r.Events {
		fields, err := json.Marshal(e.Fields)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("encode event fields: %w", err)
		}
		events = append(events, []any{r.NodeID, inst, seq, e.Time, e.MetricID, fields})
	}
	return report, hists, events, nil
}

// copyRows is a batch as the rows COPY writes: the reports, histograms
// and rollup_pending rows encoded straight from its reports (copyrows.go),
// the events as CopyRows gives them.
type copyRows struct {
	reports reportRows
	hists   histRows
	pending pendingRows
	events  anyRows
}

func newCopyRows(reports []Report) (copyRows, error) {
	c := copyRows{reports: reportRows(reports), hists: newHistRows(reports), pending: newPendingRows(reports)}
	for _, r := range reports {
		if len(r.Events) == 0 {
			continue
		}
		_, _, es, err := CopyRows(Report{NodeID: r.NodeID, InstanceID: r.InstanceID, Seq: r.Seq, Events: r.Events})
		if err != nil {
			return copyRows{}, err
		}
		c.events = append(c.events, es...)
	}
	return c, nil
}

// copyDirect COPYs a batch straight into reports, histograms, events and
// rollup_pending, as if none of its reports were stored yet, which is the
// normal case: a resend happens only after a reconnect. If one was (the
// primary key refuses it), the copies are undone to a savepoint and it
// returns false, for writeStaged. The staging tables' extra COPY and
// INSERT … SELECT cost as much as the rest of a batch's write
// (BENCHMARKS.md, "Fleet": "Ingest against raw COPY").
func copyDirect(ctx context.Context, tx pgx.Tx, c copyRows, buf *[]byte) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin savepoint: %w", err)
	}
	err = copyAll(ctx, sp, "", c, true, buf)
	if uniqueViolation(err) { // a resend
		if err := sp.Rollback(ctx); err != nil {
			return false, fmt.Errorf("roll back to savepoint: %w", err)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("release savepoint: %w", err)
	}
	return true, nil
}

// copyAll COPYs a batch's rows into the tables named prefix+name: the
// stored tables, or the staging ones ("stage_"), which take no pending
// rows (moveStaged writes those for the new reports only). The rows are
// encoded into buf (copyEncoded).
func copyAll(ctx context.Context, tx pgx.Tx, prefix string, c copyRows, pending bool, buf *[]byte) error {
	for _, t := range []struct {
		name string
		cols []string
		rows copySource
	}{
		{"reports", []string{"node_id", "instance_id", "seq", "ts", "interval_ms", "snapshot", "metric_ids", "vals", "states"}, c.reports},
		{"histograms", []string{"node_id", "instance_id", "seq", "ts", "metric_id", "count", "sum", "bucket_index", "bucket_count"}, c.hists},
		{"events", []string{"node_id", "instance_id", "seq", "ts", "metric_id", "fields"}, c.events},
		{"rollup_pending", []string{"node_id", "instance_id", "seq", "ts", "hist_ids"}, c.pending},
	} {
		if t.rows.Len() == 0 || (t.name == "rollup_pending" && !pending) {
			continue
		}
		var err error
		if *buf, err = copyEncoded(ctx, tx, prefix+t.name, t.cols, t.rows, *buf); err != nil {
			return fmt.Errorf("copy %s: %w", t.name, err)
		}
	}
	return nil
}

// writeStaged stores the reports of a batch that are not stored yet: COPY
// to staging tables, then moveStaged. It marks the new ones in result.
func (s *Store) writeStaged(ctx context.Context, tx pgx.Tx, c copyRows, result map[ReportKey]bool, buf *[]byte) error {
	if _, err := tx.Exec(ctx, stagingDDL); err != nil {
		return fmt.Errorf("create staging tables: %w", err)
	}
	if err := copyAll(ctx, tx, "stage_", c, false, buf); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, moveStaged(c.hists.Len() > 0, len(c.events) > 0))
	if err != nil {
		return fmt.Errorf("insert staged reports: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k ReportKey
		var inst, seq int64
		if err := rows.Scan(&k.NodeID, &inst, &seq); err != nil {
			return fmt.Errorf("scan inserted report: %w", err)
		}
		k.InstanceID, k.Seq = uint64(inst), uint64(seq)
		result[k] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("insert staged reports: %w", err)
	}
	return nil
}

// queueLatest merges the batch's new reports into one row per node, so the
// database sees one upsert per node and batch rather than one per sample.
// seed keys the hash of each node's key set (metrics_keys, mergeLatest).
// The JSON is appended to all, which it returns. The arguments queued
// are sc's: sc must not be reset before the batch is sent.
//
// A node's values are its reports' samples, oldest report first, sorted
// by key in jsonb's order with the newest of each key kept: no map a
// node, no key strings joined a node (a map a node and the joined keys
// were a third of the collector's allocations at 10,000 nodes).
func queueLatest(batch *pgx.Batch, seed maphash.Seed, all []byte, reports []Report, inserted map[ReportKey]bool, sc *latestScratch) ([]byte, error) {
	order := sc.order[:0]
	for i := range reports {
		if inserted[reports[i].Key()] {
			order = append(order, int32(i))
		}
	}
	sc.order = order
	if len(order) == 0 {
		return all, nil
	}
	// Node by node, in node order like the rollups, so concurrent batches
	// lock rows in one order and cannot deadlock; a node's reports oldest
	// first, in the batch's order where their times are equal.
	slices.SortStableFunc(order, func(a, b int32) int {
		ra, rb := &reports[a], &reports[b]
		if c := cmp.Compare(ra.NodeID, rb.NodeID); c != 0 {
			return c
		}
		return ra.OrderTime().Compare(rb.OrderTime())
	})
	nodes := 0
	for i, ri := range order {
		if i == 0 || reports[ri].NodeID != reports[order[i-1]].NodeID {
			nodes++
		}
	}
	sc.size(nodes)
	var (
		h       maphash.Hash
		n       int32 // deep values so far
		anyNone bool
		most    int           // the most entries a node had
		text    = sc.text[:0] // every deep node's keys, then every roots-only node's states
		entries = sc.entries[:0]
	)
	h.SetSeed(seed)
	for g, i := 0, 0; g < len(order); i++ {
		node := reports[order[g]].NodeID
		e := g + 1
		for e < len(order) && reports[order[e]].NodeID == node {
			e++
		}
		last := &reports[order[e-1]]
		sc.nodes[i], sc.ts[i], sc.intervals[i] = node, last.OrderTime(), int32(last.IntervalMS)
		sc.snapshots[i], sc.states[i], sc.paths[i] = nil, nil, nil
		entries = entries[:0]
		deep := false
		for _, ri := range order[g:e] {
			r := &reports[ri]
			if r.Snapshot {
				sc.snapTimes[i] = r.OrderTime()
				sc.snapshots[i] = &sc.snapTimes[i]
			}
			t := r.OrderTime().UnixMilli()
			for _, smp := range r.Samples {
				deep = deep || strings.IndexByte(smp.Path, '/') >= 0
				entries = append(entries, latestEntry{path: smp.Path,
					v: LatestValue{Value: smp.Value, State: smp.State, TimeMS: t, IntervalMS: r.IntervalMS, NoValue: smp.NoValue}})
			}
		}
		g = e
		// By key, the newest of each kept: of equal keys the one added
		// last, the newest report's. Their indexes sorted, not the
		// entries themselves: a swap moves 4 bytes rather than 48.
		perm := sc.perm[:0]
		for j := range entries {
			perm = append(perm, int32(j))
		}
		slices.SortFunc(perm, func(a, b int32) int {
			if c := latestKeyCompare(entries[a].path, entries[b].path); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		sc.perm = perm
		ent := sc.sorted[:0]
		for j, x := range perm {
			if j+1 < len(perm) && entries[perm[j+1]].path == entries[x].path {
				continue
			}
			ent = append(ent, entries[x])
		}
		sc.sorted = ent
		most = max(most, len(entries))
		sc.keySets[i] = latestKeyHash(&h, ent)
		sc.lo[i], sc.tlo[i] = n, int32(len(sc.times))
		if !deep && sc.snapshots[i] == nil {
			sc.stateAt[i] = len(text)
			text = appendRootStates(text, ent, &sc.byName)
			sc.stateEnd[i] = len(text)
			var err error
			if all, err = appendLatestJSON(all, ent); err != nil {
				return all, err
			}
		} else {
			sc.stateAt[i] = len(text)
			for j := range ent {
				k, v := ent[j].path, &ent[j].v
				if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
					return all, fmt.Errorf("encode latest values: %s: unsupported value %v", k, v.Value)
				}
				// A metric id has no comma (schema.CheckID): one here
				// would be read back as two keys.
				if strings.IndexByte(k, ',') >= 0 {
					return all, fmt.Errorf("encode latest values: %q: a comma in a metric id", k)
				}
				if j > 0 {
					text = append(text, ',')
				}
				text = append(text, k...)
				sc.vals, sc.vstates = append(sc.vals, v.Value), append(sc.vstates, int16(v.State))
				sc.times, sc.ivals, sc.novalue = append(sc.times, v.TimeMS), append(sc.ivals, int32(v.IntervalMS)), append(sc.novalue, v.NoValue)
				anyNone = anyNone || v.NoValue
			}
			sc.stateEnd[i] = len(text)
			if t := sc.times[sc.tlo[i]:]; len(t) > 1 && !slices.ContainsFunc(t, func(x int64) bool { return x != t[0] }) &&
				!slices.ContainsFunc(sc.ivals[sc.tlo[i]:], func(x int32) bool { return x != sc.ivals[sc.tlo[i]] }) {
				sc.times, sc.ivals = sc.times[:sc.tlo[i]+1], sc.ivals[:sc.tlo[i]+1]
			}
			sc.deep[i] = true
			n += int32(len(ent))
		}
		sc.hi[i], sc.thi[i], sc.ends[i] = n, int32(len(sc.times)), len(all)
	}
	// No node's paths stay reachable from the room kept.
	clear(entries[:most])
	clear(sc.sorted[:min(most, cap(sc.sorted))])
	sc.entries, sc.sorted, sc.text = entries[:0], sc.sorted[:0], text
	// Every node's keys and states in one string, each a slice of it: a
	// string a node was an allocation a node.
	str := string(text)
	start := 0
	for i := range nodes {
		sc.metrics[i] = nil
		if sc.deep[i] {
			sc.strs[i] = str[sc.stateAt[i]:sc.stateEnd[i]]
			sc.paths[i] = &sc.strs[i]
		} else {
			sc.strs[i] = str[sc.stateAt[i]:sc.stateEnd[i]]
			sc.states[i] = &sc.strs[i]
			sc.metrics[i] = all[start:sc.ends[i]:sc.ends[i]]
		}
		start = sc.ends[i]
	}
	// An empty array is NULL, as a slice never appended to was.
	novalue := sc.novalue
	if !anyNone {
		novalue = nil // NULL: no value is without one
	}
	batch.Queue(mergeLatest, sc.nodes, sc.ts, sc.intervals, sc.snapshots, sc.metrics, sc.states, sc.keySets, sc.paths,
		nilIfEmpty(sc.vals), nilIfEmpty(sc.vstates), nilIfEmpty(sc.times), nilIfEmpty(sc.ivals), nilIfEmpty(novalue),
		sc.lo, sc.hi, sc.tlo, sc.thi)
	return all, nil
}

// nilIfEmpty is s, or nil (NULL to pgx) when it has nothing.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// latestEntry is one value for a node's newest values (queueLatest).
type latestEntry struct {
	path string
	v    LatestValue
}

// latestScratch is what queueLatest builds for a batch, kept for the next
// one (Store.latestScratches) once reset, and the arguments it queues: a
// node's values grown into a new map each batch, and a slice an argument,
// were a third of the write path's allocations.
type latestScratch struct {
	unique  []Report      // the batch without duplicates (WriteReportsInto)
	order   []int32       // the new reports, by node and time
	entries []latestEntry // a node's values, report after report
	perm    []int32       // entries' indexes by key
	sorted  []latestEntry // a node's newest values by key
	text    []byte
	byName  []int // appendRootStates' room
	// An element a node, the batch's arguments (mergeLatest).
	nodes, intervals, lo, hi, tlo, thi []int32
	ts, snapTimes                      []time.Time
	snapshots                          []*time.Time
	metrics                            [][]byte
	states, paths                      []*string
	strs                               []string
	keySets                            []int64
	ends, stateAt, stateEnd            []int
	deep                               []bool
	// A deep node's values, node after node: node i's are [lo[i], hi[i]),
	// its times and intervals [tlo[i], thi[i]), one of each when all of
	// its values share them.
	vals    []float64
	vstates []int16
	times   []int64
	ivals   []int32
	novalue []bool
}

// size gives every per-node slice n elements and empties the values'.
func (sc *latestScratch) size(n int) {
	sc.nodes, sc.intervals = resize(sc.nodes, n), resize(sc.intervals, n)
	sc.lo, sc.hi, sc.tlo, sc.thi = resize(sc.lo, n), resize(sc.hi, n), resize(sc.tlo, n), resize(sc.thi, n)
	sc.ts, sc.snapTimes, sc.snapshots = resize(sc.ts, n), resize(sc.snapTimes, n), resize(sc.snapshots, n)
	sc.metrics, sc.states, sc.paths, sc.strs = resize(sc.metrics, n), resize(sc.states, n), resize(sc.paths, n), resize(sc.strs, n)
	sc.keySets, sc.ends, sc.stateAt, sc.stateEnd = resize(sc.keySets, n), resize(sc.ends, n), resize(sc.stateAt, n), resize(sc.stateEnd, n)
	sc.deep = resize(sc.deep, n)
	clear(sc.deep)
	sc.vals, sc.vstates, sc.times, sc.ivals, sc.novalue = sc.vals[:0], sc.vstates[:0], sc.times[:0], sc.ivals[:0], sc.novalue[:0]
}

// resize is s with n elements, grown when it has not the room.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// reset lets go of what the batch's arguments refer to (its strings, its
// JSON), and of room that a batch of the largest reports needed: nothing
// of the batch stays reachable from the scratch.
func (sc *latestScratch) reset() {
	if cap(sc.entries) > maxLatestEntries || cap(sc.sorted) > maxLatestEntries {
		sc.entries, sc.perm, sc.sorted = nil, nil, nil
	}
	if cap(sc.text) > maxLatestBuf {
		sc.text = nil
	}
	if cap(sc.vals) > maxLatestEntries {
		sc.vals, sc.vstates, sc.times, sc.ivals, sc.novalue = nil, nil, nil, nil, nil
	}
	clear(sc.strs[:cap(sc.strs)])
	clear(sc.metrics[:cap(sc.metrics)])
	clear(sc.states[:cap(sc.states)])
	clear(sc.paths[:cap(sc.paths)])
	clear(sc.snapshots[:cap(sc.snapshots)])
	sc.order = sc.order[:0]
	if cap(sc.unique) > maxLatestEntries {
		sc.unique = nil
	}
	clear(sc.unique)
	sc.unique = sc.unique[:0]
}

// maxLatestBuf is the largest latest-values buffer kept for the next
// batch: a batch of the largest reports allowed must not pin its memory.
const maxLatestBuf = 8 << 20

// maxLatestEntries is as many values as a scratch keeps room for: a
// batch of 500 full trees (150,000 values) and its growth fit, so a
// saturated writer keeps its room (12 MB of entries).
const maxLatestEntries = 1 << 18

// latestKeyCompare orders keys as jsonb keeps an object's keys (shorter
// first, then bytewise): jsonb input sorts every object, and an object
// already in order is checked in one pass (migration 032).
func latestKeyCompare(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// latestKeyHash is a hash of a node's key set (its entries, sorted by
// latestKeyCompare), as metrics_keys keeps it: equal hashes, one seed,
// the same keys but for a chance of 2^-64 that a client cannot aim at
// (the seed is the process's own).
func latestKeyHash(h *maphash.Hash, ent []latestEntry) int64 {
	h.Reset()
	var n [4]byte
	for i := range ent {
		k := ent[i].path
		// Each key after its length: keys cannot run together.
		binary.LittleEndian.PutUint32(n[:], uint32(len(k)))
		h.Write(n[:])
		h.WriteString(k)
	}
	return int64(h.Sum64())
}

// appendLatestJSON appends a node's values (ent, by latestKeyCompare) as
// the JSON object node_latest keeps (LatestValue's encoding), in their
// order. Written by hand: encoding/json's reflection and sorted keys
// were 15% of the collector's CPU at a full tree per report. Each value's
// fields are in jsonb's order too ("i", "n", "s", "t", "v").
func appendLatestJSON(b []byte, ent []latestEntry) ([]byte, error) {
	b = append(b, '{')
	for i := range ent {
		k, v := ent[i].path, &ent[i].v
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
			return nil, fmt.Errorf("encode latest values: %s: unsupported value %v", k, v.Value)
		}
		b = append(b, `:{"i":`...)
		b = strconv.AppendUint(b, uint64(v.IntervalMS), 10)
		if v.NoValue {
			b = append(b, `,"n":true`...)
		}
		b = append(b, `,"s":`...)
		b = strconv.AppendInt(b, int64(v.State), 10)
		b = append(b, `,"t":`...)
		b = strconv.AppendInt(b, v.TimeMS, 10)
		b = append(b, `,"v":`...)
		b = appendJSONFloat(b, v.Value)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string: as it is when nothing in
// it needs escaping (a metric path, always so far), else as
// encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends a finite f as encoding/json writes a float64.
func appendJSONFloat(b []byte, f float64) []byte {
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 as e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// addCounters adds a batch's increases to the running totals
// (export_counters, migration 027): $1..$3 are arrays with an element per
// node and metric, in that order.
//
// A MERGE, not INSERT … ON CONFLICT DO UPDATE: an upsert that finds its
// row locks it first (a WAL record of its own) and then updates it; the
// MERGE's join finds the row and updates it. At about 87 moved counters
// a report (IngestVsCopy's full trees) that was 15-17% of the
// statement's backend CPU and 35% of its WAL (168 → 107 bytes a row,
// 5 KB a report).
// What a MERGE does not do is take a row another transaction inserts
// meanwhile: it would fail on the primary key. None can: only this
// statement inserts rows, and it follows the batch's node_latest merge
// (mergeLatest) in the same transaction, which locks every node it
// writes counters for (an ON CONFLICT DO UPDATE locks its row even when
// its WHERE keeps it as it is), so two batches with a node in common run
// their counters one after the other, the second seeing the first's
// rows. For the same reason they cannot deadlock. A row deleted meanwhile
// (PruneCounters, a node deleted) no longer matches, and is inserted
// again, as the upsert did. The increases come through nbs_counter_incs
// (migration 038), whose planner estimate keeps the join a probe of the
// primary key a row: from unnest's, a plan made with the arrays in hand
// hashed the whole table.
const addCounters = `
MERGE INTO export_counters c USING nbs_counter_incs($1, $2, $3) AS x ON c.node_id = x.n AND c.metric_id = x.m
WHEN MATCHED THEN UPDATE SET total = c.total + x.v, updated = now()
WHEN NOT MATCHED THEN INSERT (node_id, metric_id, total, born, born_inc, updated) VALUES (x.n, x.m, x.v, now(), x.v, now())`

// queueCounters sums the new reports' non-zero increases per node and
// metric: a quiet counter costs no row, and a resend (not new) adds nothing.
// The order of the reports does not matter to a sum, so a late report adds
// its increase like any other.
//
// The increases are sorted by node and metric as one integer each and
// summed where equal: a map of the sums, then sorting its keys by a
// comparison of two fields, was 6% of the collector's CPU in
// IngestVsCopy (87 counters a report).
func queueCounters(batch *pgx.Batch, reports []Report, inserted map[ReportKey]bool) {
	n := 0
	for _, r := range reports {
		n += len(r.Samples)
	}
	incs := make([]counterInc, 0, n)
	for _, r := range reports {
		if !inserted[r.Key()] {
			continue
		}
		for _, smp := range r.Samples {
			if smp.Counter && !smp.NoValue && smp.Value > 0 && smp.MetricID != 0 {
				incs = append(incs, counterInc{counterKey(r.NodeID, smp.MetricID), smp.Value})
			}
		}
	}
	if len(incs) == 0 {
		return
	}
	// Stable: each sum adds in the batch's order, as a map of sums did.
	slices.SortStableFunc(incs, func(a, b counterInc) int { return cmp.Compare(a.key, b.key) })
	nodes, metrics, vals := make([]int32, 0, len(incs)), make([]int32, 0, len(incs)), make([]float64, 0, len(incs))
	for i, inc := range incs {
		if i > 0 && inc.key == incs[i-1].key {
			vals[len(vals)-1] += inc.v
			continue
		}
		node, metric := inc.ids()
		nodes, metrics, vals = append(nodes, node), append(metrics, metric), append(vals, inc.v)
	}
	batch.Queue(addCounters, nodes, metrics, vals)
}

// counterInc is one report's increase of a counter, keyed by counterKey.
type counterInc struct {
	key uint64
	v   float64
}

// counterKey orders by node, then metric, as two int32 compare: each with
// its sign bit flipped, so a negative id sorts before a positive one.
func counterKey(node, metric int32) uint64 {
	return uint64(uint32(node)^1<<31)<<32 | uint64(uint32(metric)^1<<31)
}

func (c counterInc) ids() (node, metric int32) {
	return int32(uint32(c.key>>32) ^ 1<<31), int32(uint32(c.key) ^ 1<<31)
}

// appendRootStates appends the states of a roots-only report's metrics
// (ent) in one canonical string ("drops=1,ping=3": by key, bytewise):
// equal strings, equal states, which is all the fleet summary's trigger
// needs to know to skip (migration 023). byName is its room to sort in.
func appendRootStates(b []byte, ent []latestEntry, byName *[]int) []byte {
	idx := (*byName)[:0]
	for i := range ent {
		idx = append(idx, i)
	}
	slices.SortFunc(idx, func(x, y int) int { return strings.Compare(ent[x].path, ent[y].path) })
	*byName = idx
	for j, i := range idx {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, ent[i].path...)
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(ent[i].v.State), 10)
	}
	return b
}
