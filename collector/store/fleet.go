package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/schema"
)

// FleetSort orders a fleet page.
type FleetSort int

const (
	// FleetByState: worst state first, then by name.
	FleetByState FleetSort = iota
	// FleetByName: by name, numbers in names compared as numbers (sim-2
	// before sim-10).
	FleetByName
	// FleetByLastSeen: newest report first, never-reported nodes last,
	// then by name.
	FleetByLastSeen
)

// FleetQuery is one page of the fleet the caller sees.
type FleetQuery struct {
	// Name keeps the nodes whose name contains it, ignoring case.
	Name string
	// Labels keeps the nodes that carry every one of these labels.
	Labels map[string]string
	// States keeps the nodes in one of these states (after staleness);
	// empty keeps all. Counts are of the nodes before this filter.
	States []State
	Sort   FleetSort
	Offset int
	Limit  int
	// Now and StaleAfter (missed intervals) decide which nodes are stale:
	// a stale node's state is UNKNOWN, whatever it last reported.
	Now        time.Time
	StaleAfter int
	// HideAgent leaves the agent's own root out of a node's state (a
	// customer's view: it does not see that root).
	HideAgent bool
}

// RootValue is a root metric's newest value in node_latest.roots, and
// since when it has been in its state (migration 018).
type RootValue struct {
	LatestValue
	// SinceMS is the Unix ms of the first report that carried the root in
	// its current state; nil when not known (it was already in it when the
	// collector began keeping this).
	SinceMS *int64 `json:"since"`
}

// FleetEntry is one node of a fleet page.
type FleetEntry struct {
	Node       Node
	Reported   bool      // it has a report; Time and IntervalMS are its newest
	Time       time.Time // of its newest report
	IntervalMS uint32
	Stale      bool
	State      State
	Roots      map[string]RootValue
	// Raised are the metrics below the roots its newest report carried in
	// a state other than OK: what explains a raised root.
	Raised map[string]LatestValue
}

// FleetPage is what a FleetQuery found.
type FleetPage struct {
	// Total is the nodes that match the name and label filters; Counts
	// splits them by state, Matched is those that also pass the state
	// filter (what the pages of Entries go through).
	Total   int
	Counts  map[State]int
	Matched int
	Entries []FleetEntry
}

// fleetRow is what a fleet page reads of every node the caller sees to
// count, filter and order them: a few fixed-size columns.
type fleetRow struct {
	id       int32
	name     string
	key      string // nameKey(name)
	ts       *time.Time
	interval int32
	worst    int16
	stale    bool
	state    State
}

// Fleet reads one page of the nodes scope sees. It reads every such node's
// name and summary columns (node_latest.worst, maintained by a trigger), so
// that counts and order cover the whole filtered fleet, and the roots of
// the page's nodes only: never a node's tree.
func (s *Store) Fleet(ctx context.Context, scope Scope, q FleetQuery) (FleetPage, error) {
	page := FleetPage{Counts: map[State]int{StateOK: 0, StateWarn: 0, StateCrit: 0, StateUnknown: 0}}
	// A customer sees a name's newest row among those it holds (NodesIn):
	// the row is chosen first, filtered after, so a filter cannot bring
	// back an older row of the name.
	from, args := `nodes n`, []any{}
	where := []string{`n.retired_at IS NULL`}
	if !scope.SeesAll() {
		clause, a := scope.LabelClause("labels", 1)
		args = append(args, a...)
		from = `(SELECT DISTINCT ON (name) id, name, labels FROM nodes WHERE ` + clause + ` ORDER BY name, ` + newestFirst + `) n`
		where = nil
	}
	if q.Name != "" {
		args = append(args, q.Name)
		where = append(where, fmt.Sprintf(`strpos(lower(n.name), lower($%d)) > 0`, len(args)))
	}
	if len(q.Labels) > 0 {
		sel, err := json.Marshal(q.Labels)
		if err != nil {
			return page, fmt.Errorf("encode label filter: %w", err)
		}
		args = append(args, string(sel))
		where = append(where, fmt.Sprintf(`n.labels @> $%d::jsonb`, len(args)))
	}
	worst := `l.worst`
	if q.HideAgent {
		worst = `l.worst_own`
	}
	sql := `SELECT n.id, n.name, l.ts, coalesce(l.interval_ms, 0), coalesce(` + worst + `, 0)::smallint
		FROM ` + from + ` LEFT JOIN node_latest l ON l.node_id = n.id`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, ` AND `)
	}
	// Both reads see one snapshot, so a page's states and roots agree.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return page, fmt.Errorf("list the fleet: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // read-only: nothing to commit
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return page, fmt.Errorf("list the fleet: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fleetRow, error) {
		var f fleetRow
		err := r.Scan(&f.id, &f.name, &f.ts, &f.interval, &f.worst)
		return f, err
	})
	if err != nil {
		return page, fmt.Errorf("list the fleet: %w", err)
	}
	page.Total = len(all)
	kept := all[:0]
	for _, f := range all {
		f.key = nameKey(f.name)
		f.state = StateUnknown // never reported
		if f.ts != nil {
			iv := time.Duration(max(f.interval, 1)) * time.Millisecond
			f.stale = q.Now.Sub(*f.ts) > time.Duration(q.StaleAfter)*iv
			f.state = Worse(StateOK, State(schema.StateOfSeverity(int(f.worst))))
			if f.stale {
				f.state = StateUnknown
			}
		}
		page.Counts[f.state]++
		if len(q.States) == 0 || slices.Contains(q.States, f.state) {
			kept = append(kept, f)
		}
	}
	page.Matched = len(kept)
	slices.SortFunc(kept, fleetOrder(q.Sort))
	lo := min(max(q.Offset, 0), len(kept))
	hi := min(lo+max(q.Limit, 0), len(kept))
	kept = kept[lo:hi]
	if len(kept) == 0 {
		page.Entries = []FleetEntry{}
		return page, nil
	}
	ids := make([]int32, len(kept))
	for i, f := range kept {
		ids[i] = f.id
	}
	details, err := fleetDetails(ctx, tx, ids)
	if err != nil {
		return page, err
	}
	page.Entries = make([]FleetEntry, 0, len(kept))
	for _, f := range kept {
		e, ok := details[f.id]
		if !ok {
			continue // deleted between the two reads
		}
		e.Stale, e.State = f.stale, f.state
		page.Entries = append(page.Entries, e)
	}
	return page, nil
}

// fleetDetails reads the nodes and root values of a page's nodes.
func fleetDetails(ctx context.Context, tx pgx.Tx, ids []int32) (map[int32]FleetEntry, error) {
	cols := strings.ReplaceAll(`n.`+nodeColumns, `, `, `, n.`)
	rows, err := tx.Query(ctx, `SELECT `+cols+`, l.ts, coalesce(l.interval_ms, 0), coalesce(l.roots, '{}'), coalesce(l.raised, '{}'), coalesce(l.hot, '{}')
		FROM nodes n LEFT JOIN node_latest l ON l.node_id = n.id WHERE n.id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read the fleet page's nodes: %w", err)
	}
	defer rows.Close()
	out := make(map[int32]FleetEntry, len(ids))
	for rows.Next() {
		var e FleetEntry
		var ts *time.Time
		var interval int32
		var roots, raised, hot []byte
		n, err := scanNode(scanAlso{rows, []any{&ts, &interval, &roots, &raised, &hot}})
		if err != nil {
			return nil, fmt.Errorf("scan the fleet page's nodes: %w", err)
		}
		e.Node = n
		if ts != nil {
			e.Reported, e.Time, e.IntervalMS = true, *ts, uint32(interval)
		}
		if err := json.Unmarshal(roots, &e.Roots); err != nil {
			return nil, fmt.Errorf("decode the roots of node %s: %w", n.Name, err)
		}
		if err := json.Unmarshal(raised, &e.Raised); err != nil {
			return nil, fmt.Errorf("decode the raised metrics of node %s: %w", n.Name, err)
		}
		if err := newerRootValues(e.Roots, hot); err != nil {
			return nil, fmt.Errorf("decode the newest root values of node %s: %w", n.Name, err)
		}
		out[n.ID] = e
	}
	return out, rows.Err()
}

// newerRootValues gives roots the values hot holds for them. The summary's
// trigger skips reports that change no root's state (migration 023), so
// roots keeps the values of its last run and hot the newer ones; a root's
// "since" is always roots'.
func newerRootValues(roots map[string]RootValue, hot []byte) error {
	if len(roots) == 0 || len(hot) <= 2 { // "{}"
		return nil
	}
	var newer map[string]LatestValue
	if err := json.Unmarshal(hot, &newer); err != nil {
		return err
	}
	for k, r := range roots {
		if v, ok := newer[k]; ok {
			r.LatestValue = v
			roots[k] = r
		}
	}
	return nil
}

// scanAlso scans a row's leading columns into what scanNode asks for and
// its trailing ones into more.
type scanAlso struct {
	row  pgx.Row
	more []any
}

func (s scanAlso) Scan(dest ...any) error { return s.row.Scan(append(dest, s.more...)...) }

// PathDefinitionsOf returns the definition of each of paths that one of
// the nodes ids has: path, title, unit and kind (what a fleet page shows).
// The agent's catalogue gives every node the same of these for a path (as
// DefinitionsOf assumes), so one node's is read per path, through the key
// (node_id, metric_id): a handful of index probes, however many nodes.
func (s *Store) PathDefinitionsOf(ctx context.Context, ids []int32, paths []string) (map[string]MetricDef, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT p.path, d.title, d.unit, d.kind
		FROM metric_paths p CROSS JOIN LATERAL (
			SELECT def_id FROM node_metrics nm WHERE nm.node_id = ANY($1) AND nm.metric_id = p.id LIMIT 1) nm
		JOIN metric_defs d ON d.id = nm.def_id
		WHERE p.path = ANY($2)`, ids, paths)
	if err != nil {
		return nil, fmt.Errorf("read definitions: %w", err)
	}
	defer rows.Close()
	out := make(map[string]MetricDef, len(paths))
	for rows.Next() {
		var d MetricDef
		if err := rows.Scan(&d.Path, &d.Title, &d.Unit, &d.Kind); err != nil {
			return nil, fmt.Errorf("scan definition: %w", err)
		}
		out[d.Path] = d
	}
	return out, rows.Err()
}

func fleetOrder(by FleetSort) func(a, b fleetRow) int {
	return func(a, b fleetRow) int {
		switch by {
		case FleetByState:
			if c := cmp.Compare(severity(b.state), severity(a.state)); c != 0 {
				return c
			}
		case FleetByLastSeen:
			switch {
			case a.ts == nil && b.ts != nil:
				return 1
			case a.ts != nil && b.ts == nil:
				return -1
			case a.ts != nil && b.ts != nil:
				if c := b.ts.Compare(*a.ts); c != 0 {
					return c
				}
			}
		}
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	}
}

// CompareNames orders node names as people read them: runs of digits by
// their number (sim-2 before sim-10), the rest ignoring case; names that
// still tie (sim-02 and sim-2, Web and web) by their bytes, so the order
// is total.
func CompareNames(a, b string) int {
	if c := strings.Compare(nameKey(a), nameKey(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// nameKey is a name's sort key for CompareNames, compared bytewise: text
// runs lower-cased, each run of digits as '0', the length of its number
// without leading zeros (one byte), and that number's digits. '0' orders
// against text as any digit would, and a longer number after a shorter.
// Sorting 10,000 names on keys made once costs a fifth of comparing runs
// in every comparison (18 ms on this machine).
func nameKey(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	for s != "" {
		digits := isDigit(s[0])
		r := run(s, digits)
		s = s[len(r):]
		if !digits {
			b.WriteString(strings.ToLower(r))
			continue
		}
		n := strings.TrimLeft(r, "0")
		b.WriteByte('0')
		b.WriteByte(byte(min(len(n), 255)))
		b.WriteString(n)
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// run is s's leading run of ASCII digits (digits) or of anything else.
func run(s string, digits bool) string {
	i := 0
	for i < len(s) && isDigit(s[i]) == digits {
		i++
	}
	return s[:i]
}

func severity(s State) int { return s.Severity() }
