package store

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// FlowNode is a node row whose flows a caller may read: every row scope
// sees, retired ones too (a tenant keeps the history it owned).
type FlowNode struct {
	ID     int32
	Name   string
	Tenant string
	Labels map[string]string
}

// FlowNodesIn lists the node rows scope sees.
func (s *Store) FlowNodesIn(ctx context.Context, scope Scope) ([]FlowNode, error) {
	clause, args := scope.LabelClause("labels", 1)
	rows, err := s.pool.Query(ctx, `SELECT id, name, tenant, labels FROM nodes WHERE `+clause+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list nodes for flows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FlowNode, error) {
		var n FlowNode
		err := r.Scan(&n.ID, &n.Name, &n.Tenant, &n.Labels)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes for flows: %w", err)
	}
	return out, nil
}

// FlowSource is one resolution's buckets starting in [From, To).
type FlowSource struct {
	Res      int32 // seconds
	From, To time.Time
}

// FlowSources covers [from, to) — both whole minutes — with the coarsest
// buckets that fit: whole UTC days from the day buckets, whole hours from
// the hour buckets, the minutes at either end from the minute buckets.
// Every resolution is written with the report (flowwrite.go), so the
// cover is exact; a day's window reads a row per edge, not 1,440.
func FlowSources(from, to time.Time) []FlowSource {
	var out []FlowSource
	var cover func(from, to time.Time, levels []int32)
	cover = func(from, to time.Time, levels []int32) {
		if !from.Before(to) {
			return
		}
		res := levels[0]
		if len(levels) == 1 {
			out = append(out, FlowSource{res, from, to})
			return
		}
		step := time.Duration(res) * time.Second
		a := from.Truncate(step)
		if a.Before(from) {
			a = a.Add(step)
		}
		b := to.Truncate(step)
		if !a.Before(b) {
			cover(from, to, levels[1:])
			return
		}
		cover(from, a, levels[1:])
		out = append(out, FlowSource{res, a, b})
		cover(b, to, levels[1:])
	}
	cover(from.UTC(), to.UTC(), []int32{RollupDay, RollupHour, RollupMinute})
	return out
}

// FlowRead asks for the flow edges of Nodes in Sources.
type FlowRead struct {
	Nodes   []int32
	Sources []FlowSource
	// PerBucket returns a row per bucket; otherwise a row per edge, summed
	// over the sources, with the span its buckets cover.
	PerBucket bool
	// PeerAddrs, when not nil, keeps the edges whose peer or translated
	// peer is one of these.
	PeerAddrs []string
	// OwnerIDs and LocalAddrs, when either is not nil, keep the edges whose
	// local owner or local address is one of these.
	OwnerIDs, LocalAddrs []string
	// RTT reads the RTT histograms too: merging them is most of an
	// aggregate's cost, and a map needs them for its page only.
	RTT bool
}

// FlowEdgeRow is a node's flow edge over one bucket (PerBucket) or summed
// over the buckets that cover [First, End).
type FlowEdgeRow struct {
	NodeID     int32
	Tenant     string
	First, End time.Time
	FlowEdge
}

// Key is the row's edge as the node reported it, without its counters.
func (r FlowEdgeRow) Key() FlowRowKey {
	return FlowRowKey{r.NodeID, r.Role, r.Local.ID, r.LocalAddr, r.LocalPort, r.PeerAddr, r.PeerPort, r.XlatAddr, r.XlatPort}
}

// FlowRowKey identifies a node's edge.
type FlowRowKey struct {
	Node      int32
	Role      FlowRole
	Owner     string
	LocalAddr string
	LocalPort uint16
	PeerAddr  string
	PeerPort  uint16
	XlatAddr  string
	XlatPort  uint16
}

// FlowEdgesSQL is the statement ReadFlowEdges sends for q, with its
// arguments (bench/flowmap explains it).
func FlowEdgesSQL(q FlowRead) (string, []any) {
	args := []any{q.Nodes}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var srcs []string
	for _, src := range q.Sources {
		srcs = append(srcs, "(res = "+arg(src.Res)+" AND ts >= "+arg(src.From)+" AND ts < "+arg(src.To)+")")
	}
	where := `node_id = ANY($1) AND (` + strings.Join(srcs, " OR ") + `)`
	if q.PeerAddrs != nil {
		a := arg(q.PeerAddrs)
		where += ` AND (peer_addr = ANY(` + a + `) OR xlat_addr = ANY(` + a + `))`
	}
	if q.OwnerIDs != nil || q.LocalAddrs != nil {
		where += ` AND (owner_id = ANY(` + arg(orEmptyStrings(q.OwnerIDs)) + `) OR local_addr = ANY(` + arg(orEmptyStrings(q.LocalAddrs)) + `))`
	}
	// The RTT histograms only when asked: a column of '{}' costs both
	// ends a datum a row.
	rtt := ``
	if q.RTT {
		rtt = `, rtt`
	}
	// Rows are read per bucket and summed here: a GROUP BY of ten key
	// columns cost PostgreSQL 2-3× reading the rows (a map of 50,000
	// edges: 0.45 s against 0.17 s), and most edges have one row a
	// bucket anyway. Measured again for the last 5 minutes' minute rows
	// (half the nodes, 250,000 rows into 50,000; sums, the reason maps as
	// arrays): read per bucket 0.26 s, grouped by hashing 0.58-0.80 s
	// (work_mem 256MB), by sorting 1.06-1.10 s. Maps are empty for most
	// rows ('{}').
	sql := `SELECT node_id, tenant, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port, ts, res,
	owner_kind, owner_name, owner_workload, edges_folded, opened, failed, closed, retransmits, bytes_sent, bytes_recv,
	resets_sent, resets_recv, drops, holders_left` + rtt + ` FROM flow_edges WHERE ` + where
	return sql, args
}

// ReadFlowEdges reads flow edges (see FlowRead).
//
// A read of many nodes is two statements of half the nodes each, on two
// connections at once, decoded by two goroutines: decoding is most of a
// map's first read (bench/flowmap), and rows of two nodes never sum
// together.
func (s *Store) ReadFlowEdges(ctx context.Context, q FlowRead) (FlowRows, error) {
	if len(q.Nodes) < flowSplitNodes {
		r, err := s.readFlowEdges(ctx, q)
		if err != nil {
			return nil, err
		}
		return r.rows(), nil
	}
	a, b := q, q
	a.Nodes, b.Nodes = q.Nodes[:len(q.Nodes)/2], q.Nodes[len(q.Nodes)/2:]
	var rb *rowChunks
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		rb, err = s.readFlowEdges(gctx, b)
		return err
	})
	ra, err := s.readFlowEdges(gctx, a)
	if werr := g.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	return append(ra.rows(), rb.rows()...), nil
}

// FlowRows are a read's rows, in the chunks they were read into: put in
// one slice, a map's 100,000 rows of 300 bytes were copied once more, and
// its old copy left to the collector (bench/flowmap).
type FlowRows [][]FlowEdgeRow

// Len is the number of rows.
func (f FlowRows) Len() int {
	n := 0
	for _, c := range f {
		n += len(c)
	}
	return n
}

// All is every row, in order.
func (f FlowRows) All() iter.Seq[*FlowEdgeRow] {
	return func(yield func(*FlowEdgeRow) bool) {
		for _, c := range f {
			for i := range c {
				if !yield(&c[i]) {
					return
				}
			}
		}
	}
}

// Slice is the rows in one slice (a copy).
func (f FlowRows) Slice() []FlowEdgeRow {
	out := make([]FlowEdgeRow, 0, f.Len())
	for _, c := range f {
		out = append(out, c...)
	}
	return out
}

// rowChunks holds a read's rows in chunks, each row at a fixed place: a
// slice grown by append copied 100,000 rows of 300 bytes several times and
// left each old copy for the collector (bench/flowmap).
type rowChunks struct {
	chunks [][]FlowEdgeRow
	n      int
}

const rowChunk = 4096

// add appends r and returns its index.
func (c *rowChunks) add(r FlowEdgeRow) int {
	if c.n%rowChunk == 0 {
		c.chunks = append(c.chunks, make([]FlowEdgeRow, 0, rowChunk))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, r)
	c.n++
	return c.n - 1
}

func (c *rowChunks) at(i int) *FlowEdgeRow { return &c.chunks[i/rowChunk][i%rowChunk] }

// rows is c's rows (nil: none).
func (c *rowChunks) rows() FlowRows {
	if c == nil {
		return nil
	}
	return c.chunks
}

// flowSplitNodes is the fewest nodes ReadFlowEdges reads in two halves:
// two, so that the map's tests (of two nodes or more) read through the split.
const flowSplitNodes = 2

func (s *Store) readFlowEdges(ctx context.Context, q FlowRead) (*rowChunks, error) {
	if len(q.Nodes) == 0 || len(q.Sources) == 0 {
		return nil, nil
	}
	sql, args := FlowEdgesSQL(q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read flow edges: %w", err)
	}
	defer rows.Close()
	var sums flowSums
	raw := newRawRow(rows)
	for raw.next() {
		var r FlowEdgeRow
		r.NodeID, r.Tenant, r.Role = int32(raw.int(0)), raw.str(1), FlowRole(raw.int(2))
		r.LocalPort, r.PeerPort, r.XlatPort = uint16(raw.int(5)), uint16(raw.int(7)), uint16(raw.int(9))
		r.First = raw.time(10)
		res := raw.int(11)
		r.End = r.First.Add(time.Duration(res) * time.Second)
		r.EdgesFolded = uint64(raw.int(15))
		r.Opened, r.Failed, r.Closed = uint64(raw.int(16)), uint64(raw.int(17)), uint64(raw.int(18))
		r.Retransmits, r.BytesSent, r.BytesRecv = uint64(raw.int(19)), uint64(raw.int(20)), uint64(raw.int(21))
		rs, rr, dr := raw.json(22), raw.json(23), raw.json(24)
		r.HoldersLeftOut = uint64(raw.int(25))
		var rtt []byte
		if q.RTT {
			rtt = raw.json(26)
		}
		if raw.err != nil {
			return nil, fmt.Errorf("read flow edges: %w", raw.err)
		}
		var err error
		if r.ResetsSent, err = decodeCounts(rs); err == nil {
			if r.ResetsRecv, err = decodeCounts(rr); err == nil {
				if r.Drops, err = decodeCounts(dr); err == nil {
					r.RTT, err = decodeRTT(rtt)
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("read flow edges: %w", err)
		}
		var ns *nodeSums
		if !q.PerBucket {
			ns = sums.node(r.NodeID, flowBucket{res, r.First.Unix()})
			// The guessed edge's key against the row's bytes: a right
			// guess decodes none of the row's key strings.
			if e := sums.expect(ns); e != nil && e.Role == r.Role && e.LocalPort == r.LocalPort && e.PeerPort == r.PeerPort &&
				e.XlatPort == r.XlatPort && raw.is(3, e.Local.ID) && raw.is(4, e.LocalAddr) && raw.is(6, e.PeerAddr) && raw.is(8, e.XlatAddr) {
				// The owner's names are the newest bucket's: an older
				// row's are not decoded.
				if r.End.After(e.End) {
					r.Local.Kind, r.Local.Name, r.Local.Workload = raw.str(12), raw.str(13), raw.str(14)
					if raw.err != nil {
						return nil, fmt.Errorf("read flow edges: %w", raw.err)
					}
				}
				sums.hit(ns, &r)
				continue
			}
		}
		r.Local.Kind, r.Local.Name, r.Local.Workload = raw.str(12), raw.str(13), raw.str(14)
		owner, laddr, paddr, xaddr := raw.istr(3), raw.istr(4), raw.istr(6), raw.istr(8)
		if raw.err != nil {
			return nil, fmt.Errorf("read flow edges: %w", raw.err)
		}
		r.Local.ID, r.LocalAddr, r.PeerAddr, r.XlatAddr = owner.s, laddr.s, paddr.s, xaddr.s
		if q.PerBucket {
			sums.out.add(r)
			continue
		}
		sums.add(ns, flowSumKey{r.NodeID, r.Role, r.LocalPort, r.PeerPort, r.XlatPort, owner.id, laddr.id, paddr.id, xaddr.id}, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read flow edges: %w", err)
	}
	return &sums.out, nil
}

func orEmptyStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// decodeCounts reads reason → count as stored: a flat object of numbers,
// which PostgreSQL writes as {"a": 1, "b": 2}. Most rows have none ({}).
func decodeCounts(b []byte) (map[string]uint64, error) {
	if len(b) <= 2 {
		return nil, nil
	}
	out := map[string]uint64{}
	if err := eachCount(b, func(k string, v uint64) { out[k] += v }); err != nil {
		return nil, err
	}
	return out, nil
}

func decodeRTT(b []byte) (map[int32]uint64, error) {
	if len(b) <= 2 {
		return nil, nil
	}
	out := map[int32]uint64{}
	var bad error
	err := eachCount(b, func(k string, v uint64) {
		i, err := strconv.ParseInt(k, 10, 32)
		if err != nil {
			bad = fmt.Errorf("decode rtt bucket %q: %w", k, err)
			return
		}
		out[int32(i)] += v
	})
	if err == nil {
		err = bad
	}
	return out, err
}

// eachCount calls fn with each key and count of a flat JSON object of
// non-negative numbers: what flow_edges' maps hold. A hand-written reader:
// encoding/json's reflection was a third of a map's read. Keys are metric
// id segments and bucket numbers (ingest checks them), with no escapes;
// anything else is refused.
func eachCount(b []byte, fn func(k string, v uint64)) error {
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	fail := func() error { return fmt.Errorf("decode counts: %.64q is not a flat object of counts", b) }
	skip()
	if i >= len(b) || b[i] != '{' {
		return fail()
	}
	i++
	for first := true; ; first = false {
		skip()
		if first && i < len(b) && b[i] == '}' {
			return nil
		}
		if i >= len(b) || b[i] != '"' {
			return fail()
		}
		i++
		ks := i
		for i < len(b) && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) || b[i] != '"' {
			return fail()
		}
		k := string(b[ks:i])
		i++
		skip()
		if i >= len(b) || b[i] != ':' {
			return fail()
		}
		i++
		skip()
		vs := i
		for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] == '+' || b[i] == '-') {
			i++
		}
		v, err := strconv.ParseUint(string(b[vs:i]), 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(string(b[vs:i]), 64)
			if ferr != nil || f < 0 {
				return fail()
			}
			v = uint64(f)
		}
		fn(k, v)
		skip()
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			return nil
		}
		return fail()
	}
}

// ReadFlowRTT reads the RTT histograms of the given edges of nodes in
// sources, summed per edge: a map reads them for its page only.
func (s *Store) ReadFlowRTT(ctx context.Context, sources []FlowSource, keys []FlowRowKey) (map[FlowRowKey]map[int32]uint64, error) {
	return s.readFlowRTT(ctx, sources, keys, maxRTTLookups)
}

// readFlowRTT is ReadFlowRTT with at most maxLookups primary key lookups.
func (s *Store) readFlowRTT(ctx context.Context, sources []FlowSource, keys []FlowRowKey, maxLookups int) (map[FlowRowKey]map[int32]uint64, error) {
	out := map[FlowRowKey]map[int32]uint64{}
	if len(keys) == 0 || len(sources) == 0 {
		return out, nil
	}
	sql, args := flowRTTSQL(sources, keys, maxLookups)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read flow rtt: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k FlowRowKey
		var r int16
		var lp, pp, xp int32
		var b []byte
		if err := rows.Scan(&k.Node, &r, &k.Owner, &k.LocalAddr, &lp, &k.PeerAddr, &pp, &k.XlatAddr, &xp, &b); err != nil {
			return nil, fmt.Errorf("read flow rtt: %w", err)
		}
		k.Role, k.LocalPort, k.PeerPort, k.XlatPort = FlowRole(r), uint16(lp), uint16(pp), uint16(xp)
		h := out[k]
		if h == nil {
			h = map[int32]uint64{}
			out[k] = h
		}
		if err := eachCount(b, func(key string, v uint64) {
			if i, err := strconv.ParseInt(key, 10, 32); err == nil {
				h[int32(i)] += v
			}
		}); err != nil {
			return nil, fmt.Errorf("read flow rtt: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read flow rtt: %w", err)
	}
	return out, nil
}

// FlowRTTSQL is the statement ReadFlowRTT sends, with its arguments
// (bench/flowmap explains it).
func FlowRTTSQL(sources []FlowSource, keys []FlowRowKey) (string, []any) {
	return flowRTTSQL(sources, keys, maxRTTLookups)
}

func flowRTTSQL(sources []FlowSource, keys []FlowRowKey, maxLookups int) (string, []any) {
	n := len(keys)
	var (
		node, lport, pport, xport  = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		role                       = make([]int16, n)
		owner, laddr, paddr, xaddr = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	)
	for i, k := range keys {
		node[i], role[i], owner[i], laddr[i], lport[i] = k.Node, int16(k.Role), k.Owner, k.LocalAddr, int32(k.LocalPort)
		paddr[i], pport[i], xaddr[i], xport[i] = k.PeerAddr, int32(k.PeerPort), k.XlatAddr, int32(k.XlatPort)
	}
	args := []any{node, role, owner, laddr, lport, paddr, pport, xaddr, xport}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	const keys9 = `unnest($1::int[], $2::smallint[], $3::text[], $4::text[], $5::int[], $6::text[], $7::int[], $8::text[], $9::int[])
	AS k (node_id, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port)`
	var sql string
	if bres, bts := flowBuckets(sources, maxLookups/len(keys)); bres != nil {
		// Few buckets: every (edge, bucket) is a primary key lookup, kept
		// a subquery run per edge and bucket by OFFSET 0. Joined, the
		// planner (which cannot know that an edge has one row a bucket)
		// read every row of the window's buckets and sorted them
		// (bench/flowmap: 100,000 to 500,000 rows for a page's 1,000).
		//
		// The lookup is "the first row of the primary key's order at or
		// after the key, if it is the key": a row comparison ordered as
		// the primary key, LIMIT 1. Only the primary key serves it
		// without sorting, whatever the statistics say. As equalities,
		// a table never analyzed (a fresh install's first minutes) made
		// the (res, ts) index look as cheap, and each lookup read its
		// bucket's every row: 2 to 22 s a page at 3 to 8 nodes
		// (TestFlowRTTWithoutStatistics).
		const pk = `f.res, f.node_id, f.ts, f.role, f.owner_id, f.local_addr, f.local_port, f.peer_addr, f.peer_port, f.xlat_addr, f.xlat_port`
		sql = `SELECT k.node_id, k.role, k.owner_id, k.local_addr, k.local_port, k.peer_addr, k.peer_port, k.xlat_addr, k.xlat_port, f.rtt
FROM ` + keys9 + `
CROSS JOIN unnest(` + arg(bres) + `::int[], ` + arg(bts) + `::timestamptz[]) AS b (res, ts)
CROSS JOIN LATERAL (SELECT ` + pk + `, f.rtt FROM flow_edges f
	WHERE (` + pk + `) >= (b.res, k.node_id, b.ts, k.role, k.owner_id, k.local_addr, k.local_port, k.peer_addr, k.peer_port, k.xlat_addr, k.xlat_port)
	ORDER BY ` + pk + ` LIMIT 1) f
WHERE f.res = b.res AND f.node_id = k.node_id AND f.ts = b.ts AND f.role = k.role AND f.owner_id = k.owner_id
	AND f.local_addr = k.local_addr AND f.local_port = k.local_port AND f.peer_addr = k.peer_addr AND f.peer_port = k.peer_port
	AND f.xlat_addr = k.xlat_addr AND f.xlat_port = k.xlat_port AND f.rtt <> '{}'`
	} else {
		var srcs []string
		for _, src := range sources {
			srcs = append(srcs, "(f.res = "+arg(src.Res)+" AND f.ts >= "+arg(src.From)+" AND f.ts < "+arg(src.To)+")")
		}
		sql = `SELECT f.node_id, f.role, f.owner_id, f.local_addr, f.local_port, f.peer_addr, f.peer_port, f.xlat_addr, f.xlat_port, f.rtt
FROM ` + keys9 + `
JOIN flow_edges f USING (node_id, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port)
WHERE (` + strings.Join(srcs, " OR ") + `) AND f.rtt <> '{}'`
	}
	return sql, args
}

// maxRTTLookups bounds the primary key lookups of ReadFlowRTT (edges ×
// buckets); past it, it joins the edges with the window's rows.
const maxRTTLookups = 100_000

// flowBuckets lists the buckets of sources (resolution and start), or nil
// when there are more than limit.
func flowBuckets(sources []FlowSource, limit int) ([]int32, []time.Time) {
	var res []int32
	var ts []time.Time
	for _, src := range sources {
		step := time.Duration(src.Res) * time.Second
		for t := src.From; t.Before(src.To); t = t.Add(step) {
			if len(ts) >= limit {
				return nil, nil
			}
			res, ts = append(res, src.Res), append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil, nil
	}
	return res, ts
}

// FlowHolder is one span of an owner's hold of an address on a node.
type FlowHolder struct {
	NodeID      int32
	Tenant      string
	Address     string
	Owner       FlowOwner
	First, Last time.Time
}

// ReadFlowHolders reads the holder spans of nodes that overlap [from, to].
func (s *Store) ReadFlowHolders(ctx context.Context, nodes []int32, from, to time.Time) ([]FlowHolder, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT node_id, tenant, address, owner_id, owner_kind, owner_name, owner_workload, first_seen, last_seen
FROM flow_holders WHERE node_id = ANY($1) AND last_seen >= $2 AND first_seen <= $3`, nodes, from, to)
	if err != nil {
		return nil, fmt.Errorf("read address holders: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FlowHolder, error) {
		var h FlowHolder
		err := r.Scan(&h.NodeID, &h.Tenant, &h.Address, &h.Owner.ID, &h.Owner.Kind, &h.Owner.Name, &h.Owner.Workload, &h.First, &h.Last)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read address holders: %w", err)
	}
	return out, nil
}

// The flow map's reads are heavy reads: the replica's, or the primary's
// read pool (Reads).
func (r *Reads) FlowNodesIn(ctx context.Context, scope Scope) ([]FlowNode, error) {
	return heavyRead(ctx, r, "flow map's nodes", func(s *Store) ([]FlowNode, error) { return s.FlowNodesIn(ctx, scope) })
}

func (r *Reads) ReadFlowEdges(ctx context.Context, q FlowRead) (FlowRows, error) {
	return heavyRead(ctx, r, "flow edges", func(s *Store) (FlowRows, error) { return s.ReadFlowEdges(ctx, q) })
}

func (r *Reads) ReadFlowRTT(ctx context.Context, sources []FlowSource, keys []FlowRowKey) (map[FlowRowKey]map[int32]uint64, error) {
	return heavyRead(ctx, r, "flow edges' RTT", func(s *Store) (map[FlowRowKey]map[int32]uint64, error) { return s.ReadFlowRTT(ctx, sources, keys) })
}

func (r *Reads) ReadFlowHolders(ctx context.Context, nodes []int32, from, to time.Time) ([]FlowHolder, error) {
	return heavyRead(ctx, r, "address holders", func(s *Store) ([]FlowHolder, error) { return s.ReadFlowHolders(ctx, nodes, from, to) })
}
