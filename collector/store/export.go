package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
//
// Four statements, none a lookup per metric: the nodes with their roots
// and raised children (one jsonb each; a root's newest value is hot's when
// the fleet summary's trigger skipped the reports since, migration 023);
// the definitions of those this Store has not seen (a cache, exportDefTTL); the counters of roots and of
// what moved; the counters of raised children that did not move. Looked up
// one by one in a lateral join, 60,000 roots' definitions and counters cost
// about 1.5 s at 10,000 nodes (BENCHMARKS.md, "Export: the scrape at 10,000 nodes").
func (s *Store) ExportNodes(ctx context.Context, scope Scope, since time.Time) (Export, error) {
	var out Export
	clause, args := scope.LabelClause("n.labels", 2)
	rows, err := s.pool.Query(ctx, `
		SELECT n.id, n.name, n.tenant, n.agent_version, n.kernel_release, l.ts, now(), l.roots || l.raised || l.hot
		FROM nodes n JOIN node_latest l ON l.node_id = n.id
		WHERE n.retired_at IS NULL AND l.ts >= $1 AND `+clause+`
		ORDER BY n.name`, append([]any{since}, args...)...)
	if err != nil {
		return out, fmt.Errorf("export: read nodes: %w", err)
	}
	at := map[int32]int{}
	values := make([]map[string]LatestValue, 0)
	for rows.Next() {
		var n ExportNode
		var raw []byte
		if err := rows.Scan(&n.ID, &n.Name, &n.Tenant, &n.AgentVersion, &n.KernelRelease, &n.Last, &out.Now, &raw); err != nil {
			rows.Close()
			return out, fmt.Errorf("export: scan a node: %w", err)
		}
		var v map[string]LatestValue
		if err := json.Unmarshal(raw, &v); err != nil {
			rows.Close()
			return out, fmt.Errorf("export: node %s: decode its values: %w", n.Name, err)
		}
		at[n.ID] = len(out.Nodes)
		out.Nodes = append(out.Nodes, n)
		values = append(values, v)
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
	defs, err := s.exportDefinitions(ctx, out.Nodes, values, out.Now)
	if err != nil {
		return out, err
	}
	for i := range out.Nodes {
		n := &out.Nodes[i]
		for path, v := range values[i] {
			d, ok := defs[exportDefKey{n.ID, path}]
			if !ok {
				continue // no definition: nothing says what its value is
			}
			n.Metrics = append(n.Metrics, ExportMetric{Path: path, Kind: d.kind, Unit: d.unit, Quantile: d.quantile, HasLatest: true, Latest: v})
		}
		slices.SortFunc(n.Metrics, func(a, b ExportMetric) int { return strings.Compare(a.Path, b.Path) })
	}

	// The counters of roots (every node's, moved or not) and of whatever
	// moved within the window, with one pass over the table.
	rows, err = s.pool.Query(ctx, `
		SELECT c.node_id, p.path, c.total, c.born, c.born_inc
		FROM export_counters c JOIN metric_paths p ON p.id = c.metric_id JOIN nodes n ON n.id = c.node_id
		WHERE (c.updated >= $1 OR strpos(p.path, '/') = 0) AND n.retired_at IS NULL AND `+clause, append([]any{since}, args...)...)
	if err != nil {
		return out, fmt.Errorf("export: read counters: %w", err)
	}
	seen := map[exportDefKey]bool{}
	if err := s.attachCounters(rows, out.Nodes, at, seen); err != nil {
		return out, err
	}
	// A raised child whose counter has not moved within the window.
	var missNodes []int32
	var missPaths []string
	for i := range out.Nodes {
		n := &out.Nodes[i]
		for _, m := range n.Metrics {
			if m.Kind == KindRate && m.HasLatest && strings.Contains(m.Path, "/") && !seen[exportDefKey{n.ID, m.Path}] {
				missNodes, missPaths = append(missNodes, n.ID), append(missPaths, m.Path)
			}
		}
	}
	if len(missNodes) > 0 {
		rows, err = s.pool.Query(ctx, `
			SELECT c.node_id, p.path, c.total, c.born, c.born_inc
			FROM unnest($1::int[], $2::text[]) x(n, path) JOIN metric_paths p ON p.path = x.path
			JOIN export_counters c ON c.node_id = x.n AND c.metric_id = p.id`, missNodes, missPaths)
		if err != nil {
			return out, fmt.Errorf("export: read raised counters: %w", err)
		}
		if err := s.attachCounters(rows, out.Nodes, at, seen); err != nil {
			return out, err
		}
	}
	return out, nil
}

// attachCounters puts each counter row on its node's metric, or adds a
// rate metric for it (a child that moved without being raised).
func (s *Store) attachCounters(rows pgx.Rows, nodes []ExportNode, at map[int32]int, seen map[exportDefKey]bool) error {
	defer rows.Close()
	for rows.Next() {
		var id int32
		var path string
		var c CounterTotal
		if err := rows.Scan(&id, &path, &c.Total, &c.Born, &c.BornInc); err != nil {
			return fmt.Errorf("export: scan a counter: %w", err)
		}
		i, ok := at[id]
		if !ok {
			continue // a node outside the window
		}
		seen[exportDefKey{id, path}] = true
		n := &nodes[i]
		j := slices.IndexFunc(n.Metrics, func(m ExportMetric) bool { return m.Path == path })
		if j >= 0 {
			if n.Metrics[j].Kind == KindRate {
				n.Metrics[j].Counter = &c
			}
			continue
		}
		n.Metrics = append(n.Metrics, ExportMetric{Path: path, Kind: KindRate, Counter: &c})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("export: read counters: %w", err)
	}
	return nil
}

// exportDefKey is a node's metric, as the export's definition cache holds it.
type exportDefKey struct {
	node int32
	path string
}

// exportDef is what an export needs of a metric's definition.
type exportDef struct {
	kind     Kind
	unit     string
	quantile float64
	read     time.Time
}

// exportDefTTL is how long the export trusts a definition it read: an
// agent that changes one (a new version's unit or quantile) is exported
// with the new one after at most this long.
const exportDefTTL = 10 * time.Minute

// maxExportDefs bounds the cache: past it, it starts over. A node's roots
// and raised children are a few dozen, so a million is a fleet of tens of
// thousands of troubled nodes.
const maxExportDefs = 1_000_000

// exportDefinitions returns the definitions of every node's values, from
// the cache or, for those it lacks or holds too long, one statement.
func (s *Store) exportDefinitions(ctx context.Context, nodes []ExportNode, values []map[string]LatestValue, now time.Time) (map[exportDefKey]exportDef, error) {
	out := map[exportDefKey]exportDef{}
	var missNodes []int32
	var missPaths []string
	s.mu.Lock()
	if s.exportDefs == nil || len(s.exportDefs) > maxExportDefs {
		s.exportDefs = map[exportDefKey]exportDef{}
	}
	for i, n := range nodes {
		for path := range values[i] {
			k := exportDefKey{n.ID, path}
			if d, ok := s.exportDefs[k]; ok && now.Sub(d.read) < exportDefTTL {
				out[k] = d
				continue
			}
			missNodes, missPaths = append(missNodes, n.ID), append(missPaths, path)
		}
	}
	s.mu.Unlock()
	if len(missNodes) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT x.n, x.path, d.kind, d.unit, d.quantile
		FROM unnest($1::int[], $2::text[]) x(n, path) JOIN metric_paths p ON p.path = x.path
		JOIN node_metrics nm ON nm.node_id = x.n AND nm.metric_id = p.id JOIN metric_defs d ON d.id = nm.def_id`, missNodes, missPaths)
	if err != nil {
		return nil, fmt.Errorf("export: read definitions: %w", err)
	}
	defer rows.Close()
	read := map[exportDefKey]exportDef{}
	for rows.Next() {
		var k exportDefKey
		d := exportDef{read: now}
		if err := rows.Scan(&k.node, &k.path, &d.kind, &d.unit, &d.quantile); err != nil {
			return nil, fmt.Errorf("export: scan a definition: %w", err)
		}
		read[k], out[k] = d, d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("export: read definitions: %w", err)
	}
	s.mu.Lock()
	maps.Copy(s.exportDefs, read)
	s.mu.Unlock()
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
