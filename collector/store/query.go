package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
)

const nodeColumns = `id, name, labels, agent_version, kernel_release, instance_id, interval_ms, capabilities, first_seen, last_hello, ping_address, tenant, retired_at, claimed_labels`

func scanNode(row pgx.Row) (Node, error) {
	var n Node
	var labels, caps, claimed []byte
	var inst int64
	var interval int32
	if err := row.Scan(&n.ID, &n.Name, &labels, &n.AgentVersion, &n.KernelRelease, &inst, &interval, &caps, &n.FirstSeen, &n.LastHello, &n.PingAddress,
		&n.Tenant, &n.Retired, &claimed); err != nil {
		return n, err
	}
	if claimed != nil {
		if err := json.Unmarshal(claimed, &n.ClaimedLabels); err != nil {
			return n, fmt.Errorf("decode claimed labels of node %s: %w", n.Name, err)
		}
	}
	n.InstanceID, n.IntervalMS = uint64(inst), uint32(interval)
	if err := json.Unmarshal(labels, &n.Labels); err != nil {
		return n, fmt.Errorf("decode labels of node %s: %w", n.Name, err)
	}
	if err := json.Unmarshal(caps, &n.Capabilities); err != nil {
		return n, fmt.Errorf("decode capabilities of node %s: %w", n.Name, err)
	}
	return n, nil
}

// Nodes lists every node's current row, by name.
func (s *Store) Nodes(ctx context.Context) ([]Node, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE retired_at IS NULL ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) { return scanNode(r) })
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeByName returns the name's current row; ErrNotFound for an unknown node.
func (s *Store) NodeByName(ctx context.Context, name string) (Node, error) {
	n, err := scanNode(s.pool.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = $1 AND retired_at IS NULL`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return n, fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return n, fmt.Errorf("read node %q: %w", name, err)
	}
	return n, nil
}

func scanDef(r pgx.CollectableRow) (MetricDef, error) {
	var d MetricDef
	var thr []byte
	if err := r.Scan(&d.Path, &d.Title, &d.Unit, &d.Kind, &d.Description, &thr, &d.Scale, &d.Quantile); err != nil {
		return d, err
	}
	if thr != nil {
		d.DefaultThreshold = &Threshold{}
		if err := json.Unmarshal(thr, d.DefaultThreshold); err != nil {
			return d, fmt.Errorf("decode threshold of %s: %w", d.Path, err)
		}
	}
	return d, nil
}

// Definitions returns a node's metric definitions ordered by path, so a
// parent always precedes its children.
func (s *Store) Definitions(ctx context.Context, nodeID int32) ([]MetricDef, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT p.path, m.title, m.unit, m.kind, m.description, m.default_threshold, m.scale, m.quantile
		FROM node_metrics nm JOIN metric_defs m ON m.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
		WHERE nm.node_id = $1 ORDER BY p.path`, nodeID)
	if err != nil {
		return nil, fmt.Errorf("read definitions of node %d: %w", nodeID, err)
	}
	defs, err := pgx.CollectRows(rows, scanDef)
	if err != nil {
		return nil, fmt.Errorf("read definitions of node %d: %w", nodeID, err)
	}
	return defs, nil
}

// RootDefinitions returns every node's root metric definitions, for the fleet view.
func (s *Store) RootDefinitions(ctx context.Context) (map[int32][]MetricDef, error) {
	return s.rootDefinitions(ctx, "")
}

// rootDefinitions reads root definitions; and narrows the nodes n ("AND
// …"). Each node's roots are looked up by its key and the roots' ids: a
// filter on the paths made PostgreSQL join every definition of every node
// (185,000 at 1,000 busy nodes) to find 5,000.
func (s *Store) rootDefinitions(ctx context.Context, and string, args ...any) (map[int32][]MetricDef, error) {
	rows, err := s.pool.Query(ctx, `
		WITH roots AS MATERIALIZED (SELECT coalesce(array_agg(id), '{}') AS ids FROM metric_paths WHERE strpos(path, '/') = 0)
		SELECT nm.node_id, p.path, m.title, m.unit, m.kind, m.description, m.default_threshold
		FROM roots r CROSS JOIN nodes n JOIN node_metrics nm ON nm.node_id = n.id AND nm.metric_id = ANY(r.ids)
		JOIN metric_defs m ON m.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
		WHERE TRUE `+and+` ORDER BY nm.node_id, p.path`, args...)
	if err != nil {
		return nil, fmt.Errorf("read root definitions: %w", err)
	}
	defer rows.Close()
	out := map[int32][]MetricDef{}
	for rows.Next() {
		var node int32
		var d MetricDef
		var thr []byte
		if err := rows.Scan(&node, &d.Path, &d.Title, &d.Unit, &d.Kind, &d.Description, &thr); err != nil {
			return nil, fmt.Errorf("scan root definition: %w", err)
		}
		if thr != nil {
			d.DefaultThreshold = &Threshold{}
			if err := json.Unmarshal(thr, d.DefaultThreshold); err != nil {
				return nil, fmt.Errorf("decode threshold of %s: %w", d.Path, err)
			}
		}
		out[node] = append(out[node], d)
	}
	return out, rows.Err()
}

func scanLatest(ts time.Time, interval int32, snap *time.Time, raw []byte) (Latest, error) {
	l := Latest{Time: ts, IntervalMS: uint32(interval)}
	if snap != nil {
		l.SnapshotAt = *snap
	}
	if err := json.Unmarshal(raw, &l.Metrics); err != nil {
		return l, fmt.Errorf("decode latest values: %w", err)
	}
	return l, nil
}

// Latest returns a node's newest values; ok is false if it never reported.
func (s *Store) Latest(ctx context.Context, nodeID int32) (l Latest, ok bool, err error) {
	var ts time.Time
	var interval int32
	var snap *time.Time
	var raw []byte
	err = s.pool.QueryRow(ctx, `SELECT ts, interval_ms, snapshot_ts, `+latestValues+` FROM node_latest WHERE node_id = $1`, nodeID).
		Scan(&ts, &interval, &snap, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("read latest of node %d: %w", nodeID, err)
	}
	l, err = scanLatest(ts, interval, snap, raw)
	return l, err == nil, err
}

// LatestAll returns the newest values of every node that reported.
func (s *Store) LatestAll(ctx context.Context) (map[int32]Latest, error) {
	return s.latestAll(ctx, latestValues, "")
}

// latestAll reads the newest values (metrics, an expression on
// latestValues) of the nodes where selects ("WHERE …").
func (s *Store) latestAll(ctx context.Context, metrics, where string, args ...any) (map[int32]Latest, error) {
	rows, err := s.pool.Query(ctx, `SELECT node_id, ts, interval_ms, snapshot_ts, `+metrics+` FROM node_latest `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read latest values: %w", err)
	}
	defer rows.Close()
	out := map[int32]Latest{}
	for rows.Next() {
		var node int32
		var ts time.Time
		var interval int32
		var snap *time.Time
		var raw []byte
		if err := rows.Scan(&node, &ts, &interval, &snap, &raw); err != nil {
			return nil, fmt.Errorf("scan latest values: %w", err)
		}
		l, err := scanLatest(ts, interval, snap, raw)
		if err != nil {
			return nil, err
		}
		out[node] = l
	}
	return out, rows.Err()
}

// Bucket aggregates one metric over the reports of a time step. A report
// that does not carry the metric counts as zero for a rate (the agent always
// sends a non-zero increase) and as missing for a gauge; one that carries it
// without a value (stored NaN) counts in Worst only.
type Bucket struct {
	Start      time.Time
	Sum        float64 // sum of the values present
	Max        float64 // largest value present
	Present    int     // reports that carried a value of the metric
	Reports    int     // reports in the step
	IntervalMS int64   // summed report intervals
	Worst      State   // worst state among the reports that carried it
}

// Series aggregates a node's metric into steps over [from, to).
func (s *Store) Series(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]Bucket, error) {
	ids, err := s.lookupMetricID(ctx, path)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($5::interval, r.ts, $3::timestamptz) AS b,
			coalesce(sum(v.v), 0), coalesce(max(v.v), 0), count(v.v), count(*), sum(r.interval_ms),
			coalesce(max(`+severitySQL("r.states[p.i]")+`), 0)
		FROM reports r CROSS JOIN LATERAL (SELECT array_position(r.metric_ids, $2) AS i) p
		CROSS JOIN LATERAL (SELECT nullif(r.vals[p.i], 'NaN') AS v) v
		WHERE r.node_id = $1 AND r.ts >= $3 AND r.ts < $4
		GROUP BY b ORDER BY b`, nodeID, ids, from, to, step)
	if err != nil {
		return nil, fmt.Errorf("read series %s of node %d: %w", path, nodeID, err)
	}
	defer rows.Close()
	var out []Bucket
	for rows.Next() {
		var b Bucket
		var sev int
		if err := rows.Scan(&b.Start, &b.Sum, &b.Max, &b.Present, &b.Reports, &b.IntervalMS, &sev); err != nil {
			return nil, fmt.Errorf("scan series: %w", err)
		}
		b.Worst = State(schema.StateOfSeverity(sev))
		out = append(out, b)
	}
	return out, rows.Err()
}

// BaselineValues returns a node's values of a metric in its newest reports
// in [from, before) in which the metric was not in breach, newest first, at
// most limit of them: the inputs of the moving median the agent judged the
// metric against (agent/tree learn: a value enters its baseline only when
// its streamed state is OK). A report that carried the metric in another
// state is left out (not counted in limit). One that did not carry it, or
// carried it without a value, gives NaN: for a rate the caller reads it as
// zero (a rate is streamed whenever it moved), for other kinds it skips it
// (a healthy child is streamed only in snapshots).
func (s *Store) BaselineValues(ctx context.Context, nodeID int32, path string, from, before time.Time, limit int) ([]float64, error) {
	id, err := s.lookupMetricID(ctx, path)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT coalesce(r.vals[p.i], 'NaN'::float8)
		FROM reports r CROSS JOIN LATERAL (SELECT array_position(r.metric_ids, $2) AS i) p
		WHERE r.node_id = $1 AND r.ts >= $3 AND r.ts < $4 AND (p.i IS NULL OR r.states[p.i] = $6)
		ORDER BY r.ts DESC LIMIT $5`, nodeID, id, from, before, limit, int16(StateOK))
	if err != nil {
		return nil, fmt.Errorf("read the baseline values of %s on node %d: %w", path, nodeID, err)
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return nil, fmt.Errorf("read the baseline values of %s on node %d: %w", path, nodeID, err)
	}
	return vals, nil
}

// severitySQL ranks the stored state expr as schema.Severity does (which is
// not the enum's order), so that max() over it finds the worst state;
// schema.StateOfSeverity reads the rank back.
func severitySQL(expr string) string {
	var b strings.Builder
	b.WriteString("CASE " + expr)
	for n := 1; n <= schema.MaxSeverity; n++ {
		fmt.Fprintf(&b, " WHEN %d THEN %d", int32(schema.StateOfSeverity(n)), n)
	}
	b.WriteString(" ELSE 0 END")
	return b.String()
}

func (s *Store) lookupMetricID(ctx context.Context, path string) (int32, error) {
	if err := s.checkEpoch(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	id, ok := s.metricIDs[path]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	err := s.pool.QueryRow(ctx, `SELECT id FROM metric_paths WHERE path = $1`, path).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("metric %q: %w", path, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("look up metric %q: %w", path, err)
	}
	return id, nil
}

// StoredEvent is one piece of evidence as read back.
type StoredEvent struct {
	Time   time.Time
	Metric string
	Fields map[string]string
}

// Events returns a node's newest evidence for a metric and its descendants.
func (s *Store) Events(ctx context.Context, nodeID int32, path string, from, to time.Time, limit int) ([]StoredEvent, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT e.ts, p.path, e.fields FROM events e JOIN metric_paths p ON p.id = e.metric_id
		WHERE e.node_id = $1 AND (p.path = $2 OR p.path LIKE $3) AND e.ts >= $4 AND e.ts < $5
		ORDER BY e.ts DESC LIMIT $6`, nodeID, path, likePrefix(path)+"/%", from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", path, err)
	}
	defer rows.Close()
	var out []StoredEvent
	for rows.Next() {
		var e StoredEvent
		var raw []byte
		if err := rows.Scan(&e.Time, &e.Metric, &raw); err != nil {
			return nil, fmt.Errorf("scan event: %w", err)
		}
		if err := json.Unmarshal(raw, &e.Fields); err != nil {
			return nil, fmt.Errorf("decode event: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func likePrefix(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' || s[i] == '_' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Recent is a metric's activity over a recent window.
type Recent struct {
	Sum   float64 // summed values (a rate's total increase)
	Worst State
}

// RecentByMetric sums each metric of a node over [since, now]: what the tree
// shows besides the newest interval, so a burst is still visible after it ends.
func (s *Store) RecentByMetric(ctx context.Context, nodeID int32, since time.Time) (map[string]Recent, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT p.path, coalesce(sum(nullif(u.v, 'NaN')), 0), max(`+severitySQL("u.s")+`)
		FROM reports r CROSS JOIN LATERAL unnest(r.metric_ids, r.vals, r.states) AS u(m, v, s)
		JOIN metric_paths p ON p.id = u.m
		WHERE r.node_id = $1 AND r.ts >= $2
		GROUP BY p.path`, nodeID, since)
	if err != nil {
		return nil, fmt.Errorf("read recent values of node %d: %w", nodeID, err)
	}
	defer rows.Close()
	out := map[string]Recent{}
	for rows.Next() {
		var path string
		var r Recent
		var sev int
		if err := rows.Scan(&path, &r.Sum, &sev); err != nil {
			return nil, fmt.Errorf("scan recent value: %w", err)
		}
		r.Worst = State(schema.StateOfSeverity(sev))
		out[path] = r
	}
	return out, rows.Err()
}

// HistogramBucket is one step of a histogram metric: the merged
// distribution of every report in the step.
type HistogramBucket struct {
	Start time.Time
	Hist  *loglinear.Histogram
}

// HistogramSeries merges a node's histograms into steps over [from, to).
// Merging bucket counts is exact, so percentiles of a step are those of all
// its samples, not an average of per-report percentiles.
func (s *Store) HistogramSeries(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]HistogramBucket, error) {
	id, err := s.lookupMetricID(ctx, path)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($5::interval, ts, $3::timestamptz) AS b, bucket_index, bucket_count, sum
		FROM histograms WHERE node_id = $1 AND metric_id = $2 AND ts >= $3 AND ts < $4
		ORDER BY b`, nodeID, id, from, to, step)
	if err != nil {
		return nil, fmt.Errorf("read histograms %s of node %d: %w", path, nodeID, err)
	}
	defer rows.Close()
	var out []HistogramBucket
	for rows.Next() {
		var b time.Time
		var idx []int32
		var cnt []int64
		var sum float64
		if err := rows.Scan(&b, &idx, &cnt, &sum); err != nil {
			return nil, fmt.Errorf("scan histogram: %w", err)
		}
		if len(out) == 0 || !out[len(out)-1].Start.Equal(b) {
			out = append(out, HistogramBucket{Start: b, Hist: loglinear.New()})
		}
		h := out[len(out)-1].Hist
		for i := range idx {
			h.Counts[uint32(idx[i])] += uint64(cnt[i])
			h.Count += uint64(cnt[i])
		}
		h.Sum += sum
	}
	return out, rows.Err()
}
