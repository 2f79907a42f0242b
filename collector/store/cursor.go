package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReportCursor asks for a node's reports newer than After, but none older
// than Lookback before the node's newest report: the bound is relative to
// the node's own clock, which the reader's may not agree with.
type ReportCursor struct {
	NodeID   int32
	After    time.Time
	Lookback time.Duration
}

// ReportsAfter reads the samples of the reports each cursor asks for,
// ordered by node and time, with their keys (instance and sequence);
// histograms and events are not read, and sample paths are left for
// MetricPaths to resolve. A node with nothing newer than
// its cursor costs one index lookup.
func (s *Store) ReportsAfter(ctx context.Context, cursors []ReportCursor) ([]Report, error) {
	ids := make([]int32, len(cursors))
	after := make([]time.Time, len(cursors))
	lookback := make([]int64, len(cursors))
	for i, c := range cursors {
		ids[i], after[i], lookback[i] = c.NodeID, c.After, c.Lookback.Milliseconds()
	}
	rows, err := s.pool.Query(ctx, `
		SELECT r.node_id, r.instance_id, r.seq, r.ts, r.interval_ms, r.metric_ids, r.vals, r.states
		FROM unnest($1::int[], $2::timestamptz[], $3::bigint[]) AS w(node_id, since, lookback_ms)
		JOIN node_latest l ON l.node_id = w.node_id AND l.ts > w.since
		JOIN reports r ON r.node_id = w.node_id
			AND r.ts > greatest(w.since, l.ts - w.lookback_ms * interval '1 millisecond')
		ORDER BY r.node_id, r.ts`, ids, after, lookback)
	if err != nil {
		return nil, fmt.Errorf("read new reports: %w", err)
	}
	defer rows.Close()
	var out []Report
	for rows.Next() {
		var r Report
		var interval int32
		var metricIDs []int32
		var vals []float64
		var states []int16
		var inst, seq int64
		if err := rows.Scan(&r.NodeID, &inst, &seq, &r.Time, &interval, &metricIDs, &vals, &states); err != nil {
			return nil, fmt.Errorf("read new reports: %w", err)
		}
		r.InstanceID, r.Seq, r.IntervalMS = uint64(inst), uint64(seq), uint32(interval)
		r.Samples = make([]Sample, 0, len(metricIDs))
		for i, id := range metricIDs {
			if i < len(vals) && i < len(states) {
				r.Samples = append(r.Samples, sampleOf(id, vals[i], states[i]))
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read new reports: %w", err)
	}
	return out, nil
}

// NewestTimes is every node's newest report time (node_latest's, by
// OrderTime): what a reader compares with its cursors to know which nodes
// have anything newer, without sending a cursor per node.
func (s *Store) NewestTimes(ctx context.Context) (map[int32]time.Time, error) {
	return s.NewestTimesInto(ctx, nil)
}

// NewestTimesInto is NewestTimes into out, emptied first, which it
// returns: a reader that asks every few seconds (the alert evaluator's
// sweep) keeps one map rather than growing a new one of every node.
func (s *Store) NewestTimesInto(ctx context.Context, out map[int32]time.Time) (map[int32]time.Time, error) {
	if out == nil {
		out = map[int32]time.Time{}
	}
	clear(out)
	rows, err := s.pool.Query(ctx, `SELECT node_id, ts FROM node_latest`)
	if err != nil {
		return nil, fmt.Errorf("read newest report times: %w", err)
	}
	if err := nodeTimesInto(rows, out); err != nil {
		return nil, fmt.Errorf("read newest report times: %w", err)
	}
	return out, nil
}

// NodeTimes collects rows of (node id, time) into a map, closing rows.
func NodeTimes(rows pgx.Rows) (map[int32]time.Time, error) {
	out := map[int32]time.Time{}
	if err := nodeTimesInto(rows, out); err != nil {
		return nil, err
	}
	return out, nil
}

func nodeTimesInto(rows pgx.Rows, out map[int32]time.Time) error {
	defer rows.Close()
	for rows.Next() {
		var id int32
		var ts time.Time
		if err := rows.Scan(&id, &ts); err != nil {
			return err
		}
		out[id] = ts
	}
	return rows.Err()
}

// MetricPaths resolves metric ids to their paths; unknown ids are left out.
func (s *Store) MetricPaths(ctx context.Context, ids []int32) (map[int32]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, path FROM metric_paths WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read metric paths: %w", err)
	}
	defer rows.Close()
	out := make(map[int32]string, len(ids))
	for rows.Next() {
		var id int32
		var p string
		if err := rows.Scan(&id, &p); err != nil {
			return nil, fmt.Errorf("read metric paths: %w", err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read metric paths: %w", err)
	}
	return out, nil
}
