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
	// One statement, a node a row: its values and its counters are index
	// lookups of that node (the counters' primary key leads with node_id).
	// With the counters read apart for every node id at once, = ANY of
	// 10,000 ids made PostgreSQL test each id against every counter row.
	rows, err := s.pool.Query(ctx, `
		SELECT n.id, n.name, n.tenant, n.agent_version, n.kernel_release, l.ts, now(),
			coalesce((SELECT jsonb_agg(jsonb_build_array(e.k, e.v, d.kind, d.unit, d.quantile))
				FROM jsonb_each(l.roots || l.raised) e(k, v)
				JOIN metric_paths p ON p.path = e.k
				JOIN node_metrics nm ON nm.node_id = n.id AND nm.metric_id = p.id
				JOIN metric_defs d ON d.id = nm.def_id), '[]'),
			coalesce((SELECT jsonb_agg(jsonb_build_array(p.path, c.total, floor(extract(epoch FROM c.born) * 1000), c.born_inc))
				FROM export_counters c JOIN metric_paths p ON p.id = c.metric_id
				WHERE c.node_id = n.id AND (c.updated >= $1 OR strpos(p.path, '/') = 0 OR l.raised ? p.path)), '[]')
		FROM nodes n JOIN node_latest l ON l.node_id = n.id
		WHERE n.retired_at IS NULL AND l.ts >= $1 AND `+clause+`
		ORDER BY n.name`, append([]any{since}, args...)...)
	if err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n ExportNode
		var values, counters []byte
		if err := rows.Scan(&n.ID, &n.Name, &n.Tenant, &n.AgentVersion, &n.KernelRelease, &n.Last, &out.Now, &values, &counters); err != nil {
			return out, fmt.Errorf("export: scan a node: %w", err)
		}
		if err := n.decode(values, counters); err != nil {
			return out, fmt.Errorf("export: node %s: %w", n.Name, err)
		}
		out.Nodes = append(out.Nodes, n)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	if out.Now.IsZero() {
		if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&out.Now); err != nil {
			return out, fmt.Errorf("export: read the clock: %w", err)
		}
	}
	return out, nil
}

// decode reads a node's values ([path, value, kind, unit, quantile]) and
// counters ([path, total, born Unix ms, born increase]) as ExportNodes
// aggregates them.
func (n *ExportNode) decode(values, counters []byte) error {
	var entries [][]json.RawMessage
	if err := json.Unmarshal(values, &entries); err != nil {
		return fmt.Errorf("decode values: %w", err)
	}
	at := map[string]int{}
	for _, e := range entries {
		m := ExportMetric{HasLatest: true}
		if len(e) != 5 {
			return fmt.Errorf("decode values: %d fields, want 5", len(e))
		}
		if err := decodeAll([]any{&m.Path, &m.Latest, &m.Kind, &m.Unit, &m.Quantile}, e); err != nil {
			return fmt.Errorf("decode a value: %w", err)
		}
		at[m.Path] = len(n.Metrics)
		n.Metrics = append(n.Metrics, m)
	}
	if err := json.Unmarshal(counters, &entries); err != nil {
		return fmt.Errorf("decode counters: %w", err)
	}
	for _, e := range entries {
		var path string
		var c CounterTotal
		var born float64
		if len(e) != 4 {
			return fmt.Errorf("decode counters: %d fields, want 4", len(e))
		}
		if err := decodeAll([]any{&path, &c.Total, &born, &c.BornInc}, e); err != nil {
			return fmt.Errorf("decode a counter: %w", err)
		}
		c.Born = time.UnixMilli(int64(born))
		if i, ok := at[path]; ok {
			n.Metrics[i].Counter = &c
			continue
		}
		n.Metrics = append(n.Metrics, ExportMetric{Path: path, Kind: KindRate, Counter: &c})
	}
	return nil
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
