package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// ExportNode is one node as the Prometheus exports see it: its current row,
// its roots and raised children (their newest values), and the running
// totals of its counters.
type ExportNode struct {
	ID            int32
	Name          string
	Tenant        string
	AgentVersion  string
	KernelRelease string
	// Last is when its newest report was stored (node_latest.ts).
	Last    time.Time
	Metrics []ExportMetric
}

// ExportMetric is one metric of an ExportNode.
type ExportMetric struct {
	Path     string
	Kind     Kind
	Unit     string
	Quantile float64
	// HasLatest: Latest holds the newest value (a root, or a child the
	// newest report raised); a counter child that only moved has none.
	HasLatest bool
	Latest    LatestValue
	// Counter is the running total of a rate that ever moved (nil: none
	// yet, the total is 0).
	Counter *CounterTotal
}

// CounterTotal is a row of export_counters (migration 027).
type CounterTotal struct {
	Total   float64
	Born    time.Time
	BornInc float64
}

// Export is what ExportNodes read, at the database's clock.
type Export struct {
	Now   time.Time
	Nodes []ExportNode
}

// ExportNodes reads, for the current rows of the nodes scope sees that
// reported since since: every root, every child the newest report raised,
// and every counter that moved since since (or belongs to one of those).
// The database's clock is the one every collector shares, so two
// collectors asked at once give one answer.
func (s *Store) ExportNodes(ctx context.Context, scope Scope, since time.Time) (Export, error) {
	var out Export
	clause, args := scope.LabelClause("n.labels", 2)
	rows, err := s.pool.Query(ctx, `
		SELECT n.id, n.name, n.tenant, n.agent_version, n.kernel_release, l.ts,
			coalesce((SELECT jsonb_agg(jsonb_build_array(e.k, e.v, d.kind, d.unit, d.quantile))
				FROM jsonb_each(l.roots || l.raised) e(k, v)
				JOIN metric_paths p ON p.path = e.k
				JOIN node_metrics nm ON nm.node_id = n.id AND nm.metric_id = p.id
				JOIN metric_defs d ON d.id = nm.def_id), '[]')
		FROM nodes n JOIN node_latest l ON l.node_id = n.id
		WHERE n.retired_at IS NULL AND l.ts >= $1 AND `+clause+`
		ORDER BY n.name`, append([]any{since}, args...)...)
	if err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	byID := map[int32]int{}
	var pairNodes []int32
	var pairPaths []string
	for rows.Next() {
		var n ExportNode
		var raw []byte
		if err := rows.Scan(&n.ID, &n.Name, &n.Tenant, &n.AgentVersion, &n.KernelRelease, &n.Last, &raw); err != nil {
			rows.Close()
			return out, fmt.Errorf("export: scan a node: %w", err)
		}
		var entries [][]json.RawMessage
		if err := json.Unmarshal(raw, &entries); err != nil {
			rows.Close()
			return out, fmt.Errorf("export: decode the values of node %s: %w", n.Name, err)
		}
		for _, e := range entries {
			if len(e) != 5 {
				continue
			}
			m := ExportMetric{HasLatest: true}
			if err := decodeAll([]any{&m.Path, &m.Latest, &m.Kind, &m.Unit, &m.Quantile}, e); err != nil {
				rows.Close()
				return out, fmt.Errorf("export: decode a value of node %s: %w", n.Name, err)
			}
			n.Metrics = append(n.Metrics, m)
			if m.Kind == KindRate {
				pairNodes, pairPaths = append(pairNodes, n.ID), append(pairPaths, m.Path)
			}
		}
		byID[n.ID] = len(out.Nodes)
		out.Nodes = append(out.Nodes, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&out.Now); err != nil {
		return out, fmt.Errorf("export: read the clock: %w", err)
	}
	if len(out.Nodes) == 0 {
		return out, nil
	}
	ids := make([]int32, len(out.Nodes))
	for i, n := range out.Nodes {
		ids[i] = n.ID
	}
	rows, err = s.pool.Query(ctx, `
		SELECT c.node_id, p.path, c.total, c.born, c.born_inc
		FROM export_counters c JOIN metric_paths p ON p.id = c.metric_id
		WHERE c.node_id = ANY($1) AND (c.updated >= $2 OR (c.node_id, p.path) IN (SELECT * FROM unnest($3::int[], $4::text[])))`,
		ids, since, pairNodes, pairPaths)
	if err != nil {
		return out, fmt.Errorf("export: read counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int32
		var path string
		var c CounterTotal
		if err := rows.Scan(&id, &path, &c.Total, &c.Born, &c.BornInc); err != nil {
			return out, fmt.Errorf("export: scan a counter: %w", err)
		}
		n := &out.Nodes[byID[id]]
		found := false
		for i := range n.Metrics {
			if n.Metrics[i].Path == path {
				n.Metrics[i].Counter = &c
				found = true
				break
			}
		}
		if !found {
			n.Metrics = append(n.Metrics, ExportMetric{Path: path, Kind: KindRate, Counter: &c})
		}
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("export: read counters: %w", err)
	}
	return out, nil
}

func decodeAll(dst []any, src []json.RawMessage) error {
	for i := range dst {
		if err := json.Unmarshal(src[i], dst[i]); err != nil {
			return err
		}
	}
	return nil
}

// PruneCounters deletes the running totals not moved since cutoff, batch
// rows a statement: the series of gone owners and nodes.
func (s *Store) PruneCounters(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM export_counters WHERE ctid IN (SELECT ctid FROM export_counters WHERE updated < $1 LIMIT $2)`, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("prune export counters: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
