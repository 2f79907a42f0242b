package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/schema"
)

// Scope narrows node queries to the nodes a caller may see. The caller's
// access.Principal is one: a customer sees the nodes whose labels contain its
// selector, staff see every node, nobody sees none.
type Scope interface {
	// LabelClause is a boolean SQL expression on the jsonb labels column,
	// with its arguments numbered from argN.
	LabelClause(column string, argN int) (string, []any)
	// Sees is the same test on one node's labels.
	Sees(labels map[string]string) bool
	// SeesAll says the scope is every node (staff): a name's current row
	// is the one it sees, with no rows of former tenants to choose from.
	SeesAll() bool
}

// All is the scope of the collector itself: every node.
type All struct{}

func (All) LabelClause(string, int) (string, []any) { return "TRUE", nil }
func (All) Sees(map[string]string) bool             { return true }
func (All) SeesAll() bool                           { return true }

// newestFirst orders a name's rows: the current one, else the most
// recently retired. A scope sees a name's newest row among those it
// holds: staff the current one, the tenant a node moved away from the
// last row it owned (migration 014).
const newestFirst = `retired_at IS NOT NULL, retired_at DESC, id DESC`

// NodesIn lists the nodes scope sees, by name: each name's newest row in
// the scope.
func (s *Store) NodesIn(ctx context.Context, scope Scope) ([]Node, error) {
	q, args := `SELECT `+nodeColumns+` FROM nodes WHERE retired_at IS NULL ORDER BY name`, []any(nil)
	if !scope.SeesAll() {
		var clause string
		clause, args = scope.LabelClause("labels", 1)
		q = `SELECT DISTINCT ON (name) ` + nodeColumns + ` FROM nodes WHERE ` + clause + ` ORDER BY name, ` + newestFirst
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) { return scanNode(r) })
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeByNameIn is NodeByName for a scope: a node the scope does not see is
// not found, with exactly the error of a node that does not exist, so an
// answer cannot tell the two apart.
func (s *Store) NodeByNameIn(ctx context.Context, scope Scope, name string) (Node, error) {
	clause, args := scope.LabelClause("labels", 2)
	n, err := scanNode(s.pool.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = $1 AND `+clause+` ORDER BY `+newestFirst+` LIMIT 1`,
		append([]any{name}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		return n, fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return n, fmt.Errorf("read node %q: %w", name, err)
	}
	return n, nil
}

// nodeIDsIn is a subquery of the ids of the nodes scope sees, its arguments
// numbered from argN.
func nodeIDsIn(scope Scope, argN int) (string, []any) {
	clause, args := scope.LabelClause("labels", argN)
	return `(SELECT id FROM nodes WHERE ` + clause + `)`, args
}

// RootDefinitionsIn is RootDefinitions of the nodes scope sees.
func (s *Store) RootDefinitionsIn(ctx context.Context, scope Scope) (map[int32][]MetricDef, error) {
	clause, args := scope.LabelClause("n.labels", 1)
	return s.rootDefinitions(ctx, `AND `+clause, args...)
}

// LatestRootsIn is the newest values of the roots of the nodes scope sees:
// what the fleet view shows. A node's newest values hold its whole tree
// (every metric of its last snapshot, about 200 on a busy node) and the
// fleet view needs its few roots: sending and decoding the rest was most
// of the fleet view's time at 1,000 nodes (BENCHMARKS.md).
func (s *Store) LatestRootsIn(ctx context.Context, scope Scope) (map[int32]Latest, error) {
	ids, args := nodeIDsIn(scope, 1)
	return s.latestAll(ctx, `(SELECT coalesce(jsonb_object_agg(k, v), '{}') FROM jsonb_each(`+latestRootValues+`) e(k, v) WHERE strpos(k, '/') = 0)`,
		`WHERE node_id IN `+ids, args...)
}

// NamesOutside returns those of names that name a node of which scope
// sees no row, current or retired: for a customer, another tenant's node
// (or staff's), never one it had. Staff see every node: none. It is what
// a customer's reads check ping targets (ping/<node name>) against, so
// that nothing stored before the collector refused them at ingest
// (ingest.PingGuard) names another tenant's node to it.
func (s *Store) NamesOutside(ctx context.Context, scope Scope, names []string) ([]string, error) {
	if scope.SeesAll() || len(names) == 0 {
		return nil, nil
	}
	clause, args := scope.LabelClause("labels", 2)
	rows, err := s.pool.Query(ctx, `SELECT name FROM nodes WHERE name = ANY($1) GROUP BY name HAVING NOT bool_or(`+clause+`)`,
		append([]any{names}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("check node names against a scope: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check node names against a scope: %w", err)
	}
	return out, nil
}

// NameScoper is what the store tells of node names and scopes
// (Store.NamesOutside).
type NameScoper interface {
	NamesOutside(ctx context.Context, scope Scope, names []string) ([]string, error)
}

// PingTargetOf returns the target segment of a ping target subtree's path
// (ping/<target>[/...]), "" for anything else (ping/clock is the node's
// own clock).
func PingTargetOf(path string) string {
	rest, ok := strings.CutPrefix(path, "ping/")
	if !ok {
		return ""
	}
	target, _, _ := strings.Cut(rest, "/")
	if target == "clock" {
		return ""
	}
	return target
}

// ForeignPing is the predicate of the paths, among paths, under a ping
// target named after a node outside scope: another tenant's node, which a
// customer must never see named, whatever history holds (the collector
// refuses such targets at ingest; what was stored before is filtered
// here). Nil for staff, or when none is.
func ForeignPing(ctx context.Context, q any, scope Scope, paths []string) (func(string) bool, error) {
	ns, ok := q.(NameScoper)
	if !ok || scope.SeesAll() {
		return nil, nil
	}
	seen := map[string]bool{}
	var names []string
	for _, p := range paths {
		if t := PingTargetOf(p); t != "" && !seen[t] {
			seen[t] = true
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	outside, err := ns.NamesOutside(ctx, scope, names)
	if err != nil || len(outside) == 0 {
		return nil, err
	}
	hidden := make([]string, len(outside))
	for i, n := range outside {
		hidden[i] = "ping/" + n
	}
	return func(path string) bool {
		for _, h := range hidden {
			if schema.Within(path, h) {
				return true
			}
		}
		return false
	}, nil
}

// FormerRow is the row a node's name had before its latest move to
// another tenant: its id (0: none), that tenant, and when the move retired
// it.
type FormerRow struct {
	ID     int32
	Tenant string
	Until  time.Time
}

// FormerRow returns the row the name had before the move that made
// current its current row: the most recently retired other row.
func (s *Store) FormerRow(ctx context.Context, name string, current int32) (FormerRow, error) {
	var f FormerRow
	err := s.pool.QueryRow(ctx, `SELECT id, tenant, retired_at FROM nodes WHERE name = $1 AND id <> $2 AND retired_at IS NOT NULL
		ORDER BY retired_at DESC, id DESC LIMIT 1`, name, current).Scan(&f.ID, &f.Tenant, &f.Until)
	if errors.Is(err, pgx.ErrNoRows) {
		return FormerRow{}, nil
	}
	if err != nil {
		return FormerRow{}, fmt.Errorf("read node %q's row before its move: %w", name, err)
	}
	return f, nil
}
