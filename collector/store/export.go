package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	// A node a row, its values as arrays (pgx decodes them in binary), each
	// value's definition and counter looked up by key: the LIMITs keep
	// PostgreSQL from joining a node's every definition (187 on a busy
	// node) to find its six roots, which cost 0.5 ms a node (BENCHMARKS.md,
	// "Export"). The counters that moved within the window but are not
	// among the values are read apart, by their own index on updated.
	rows, err := s.pool.Query(ctx, `
		SELECT n.id, n.name, n.tenant, n.agent_version, n.kernel_release, l.ts, now(),
			v.paths, v.vals, v.kinds, v.units, v.quantiles, v.totals, v.borns, v.born_incs
		FROM nodes n JOIN node_latest l ON l.node_id = n.id
		CROSS JOIN LATERAL (
			SELECT array_agg(e.k) AS paths, array_agg(e.v::text) AS vals, array_agg(d.kind) AS kinds, array_agg(d.unit) AS units,
				array_agg(d.quantile) AS quantiles, array_agg(coalesce(c.total, 0)) AS totals,
				array_agg(coalesce(c.born, 'epoch')) AS borns, array_agg(coalesce(c.born_inc, 0)) AS born_incs
			FROM jsonb_each(l.roots || l.raised) e(k, v)
			CROSS JOIN LATERAL (SELECT id FROM metric_paths WHERE path = e.k LIMIT 1) p
			CROSS JOIN LATERAL (SELECT def_id FROM node_metrics WHERE node_id = n.id AND metric_id = p.id LIMIT 1) nm
			CROSS JOIN LATERAL (SELECT kind, unit, quantile FROM metric_defs WHERE id = nm.def_id LIMIT 1) d
			LEFT JOIN LATERAL (SELECT total, born, born_inc FROM export_counters WHERE node_id = n.id AND metric_id = p.id LIMIT 1) c ON true) v
		WHERE n.retired_at IS NULL AND l.ts >= $1 AND `+clause+`
		ORDER BY n.name`, append([]any{since}, args...)...)
	if err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	at := map[int32]int{}
	for rows.Next() {
		var n ExportNode
		var paths, vals, units []string
		var kinds []int16
		var quantiles, totals, bornIncs []float64
		var borns []time.Time
		if err := rows.Scan(&n.ID, &n.Name, &n.Tenant, &n.AgentVersion, &n.KernelRelease, &n.Last, &out.Now,
			&paths, &vals, &kinds, &units, &quantiles, &totals, &borns, &bornIncs); err != nil {
			rows.Close()
			return out, fmt.Errorf("export: scan a node: %w", err)
		}
		for i, p := range paths {
			m := ExportMetric{Path: p, Kind: Kind(kinds[i]), Unit: units[i], Quantile: quantiles[i], HasLatest: true}
			if err := json.Unmarshal([]byte(vals[i]), &m.Latest); err != nil {
				rows.Close()
				return out, fmt.Errorf("export: node %s: decode the value of %s: %w", n.Name, p, err)
			}
			if m.Kind == KindRate && totals[i] > 0 {
				m.Counter = &CounterTotal{Total: totals[i], Born: borns[i], BornInc: bornIncs[i]}
			}
			n.Metrics = append(n.Metrics, m)
		}
		at[n.ID] = len(out.Nodes)
		out.Nodes = append(out.Nodes, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	if out.Now.IsZero() {
		if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&out.Now); err != nil {
			return out, fmt.Errorf("export: read the clock: %w", err)
		}
	}
	if len(out.Nodes) == 0 {
		return out, nil
	}
	rows, err = s.pool.Query(ctx, `
		SELECT c.node_id, p.path, c.total, c.born, c.born_inc
		FROM export_counters c JOIN metric_paths p ON p.id = c.metric_id JOIN nodes n ON n.id = c.node_id
		WHERE c.updated >= $1 AND strpos(p.path, '/') > 0 AND n.retired_at IS NULL AND `+clause, append([]any{since}, args...)...)
	if err != nil {
		return out, fmt.Errorf("export: read moving counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int32
		var path string
		var c CounterTotal
		if err := rows.Scan(&id, &path, &c.Total, &c.Born, &c.BornInc); err != nil {
			return out, fmt.Errorf("export: scan a counter: %w", err)
		}
		i, ok := at[id]
		if !ok {
			continue // a node outside the scope or the window
		}
		n := &out.Nodes[i]
		if slices.ContainsFunc(n.Metrics, func(m ExportMetric) bool { return m.Path == path }) {
			continue // a raised child, read with its value
		}
		n.Metrics = append(n.Metrics, ExportMetric{Path: path, Kind: KindRate, Counter: &c})
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("export: read moving counters: %w", err)
	}
	return out, nil
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
