package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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

// FlowRead asks for the flow edges of Nodes in buckets of resolution Res
// starting in [From, To).
type FlowRead struct {
	Nodes    []int32
	Res      int32
	From, To time.Time
	// PerBucket returns a row per bucket; otherwise a row per edge, summed
	// over the window, with its first and last bucket.
	PerBucket bool
	// PeerAddrs, when not nil, keeps the edges whose peer or translated
	// peer is one of these.
	PeerAddrs []string
}

// FlowEdgeRow is a node's flow edge over one bucket (PerBucket) or over the
// buckets First..Last.
type FlowEdgeRow struct {
	NodeID      int32
	Tenant      string
	First, Last time.Time // bucket starts
	Res         int32     // the buckets' length, seconds
	FlowEdge
}

const flowEdgeSums = `sum(edges_folded)::bigint, sum(opened)::bigint, sum(failed)::bigint, sum(closed)::bigint, sum(retransmits)::bigint,
	sum(bytes_sent)::bigint, sum(bytes_recv)::bigint, flow_counts_sum(resets_sent), flow_counts_sum(resets_recv), flow_counts_sum(drops), flow_counts_sum(rtt)`

const flowEdgeCols = `edges_folded, opened, failed, closed, retransmits, bytes_sent, bytes_recv, resets_sent, resets_recv, drops, rtt`

// ReadFlowEdges reads flow edges (see FlowRead) from the read pool.
func (s *Store) ReadFlowEdges(ctx context.Context, q FlowRead) ([]FlowEdgeRow, error) {
	if len(q.Nodes) == 0 {
		return nil, nil
	}
	keys := `node_id, tenant, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port`
	where := `res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4 AND ($5::text[] IS NULL OR peer_addr = ANY($5) OR xlat_addr = ANY($5))`
	var sql string
	if q.PerBucket {
		sql = `SELECT ` + keys + `, ts, ts, owner_kind, owner_name, owner_workload, ` + flowEdgeCols + ` FROM flow_edges WHERE ` + where
	} else {
		// The owner's names of its newest bucket: ids are stable, names
		// are how an operator reads them now.
		sql = `SELECT ` + keys + `, min(ts), max(ts), (array_agg(owner_kind ORDER BY ts DESC))[1], (array_agg(owner_name ORDER BY ts DESC))[1],
	(array_agg(owner_workload ORDER BY ts DESC))[1], ` + flowEdgeSums + ` FROM flow_edges WHERE ` + where + ` GROUP BY ` + keys
	}
	var peers any
	if q.PeerAddrs != nil {
		peers = q.PeerAddrs
	}
	rows, err := s.pool.Query(ctx, sql, q.Res, q.Nodes, q.From, q.To, peers)
	if err != nil {
		return nil, fmt.Errorf("read flow edges: %w", err)
	}
	defer rows.Close()
	var out []FlowEdgeRow
	for rows.Next() {
		var (
			r                                            FlowEdgeRow
			role                                         int16
			lport, pport, xport                          int32
			folded, opened, failed, closed, retr, bs, br int64
			rs, rr, dr, rtt                              []byte
		)
		if err := rows.Scan(&r.NodeID, &r.Tenant, &role, &r.Local.ID, &r.LocalAddr, &lport, &r.PeerAddr, &pport, &r.XlatAddr, &xport,
			&r.First, &r.Last, &r.Local.Kind, &r.Local.Name, &r.Local.Workload,
			&folded, &opened, &failed, &closed, &retr, &bs, &br, &rs, &rr, &dr, &rtt); err != nil {
			return nil, fmt.Errorf("read flow edges: %w", err)
		}
		r.Role, r.Res = FlowRole(role), q.Res
		r.LocalPort, r.PeerPort, r.XlatPort = uint16(lport), uint16(pport), uint16(xport)
		r.EdgesFolded = uint64(folded)
		r.Opened, r.Failed, r.Closed, r.Retransmits, r.BytesSent, r.BytesRecv = uint64(opened), uint64(failed), uint64(closed), uint64(retr), uint64(bs), uint64(br)
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
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read flow edges: %w", err)
	}
	return out, nil
}

func decodeCounts(b []byte) (map[string]uint64, error) {
	if len(b) <= 2 { // {}
		return nil, nil
	}
	var m map[string]json.Number
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode counts: %w", err)
	}
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		n, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return nil, fmt.Errorf("decode count %s: %w", k, err)
		}
		out[k] = uint64(n)
	}
	return out, nil
}

func decodeRTT(b []byte) (map[int32]uint64, error) {
	m, err := decodeCounts(b)
	if err != nil || m == nil {
		return nil, err
	}
	out := make(map[int32]uint64, len(m))
	for k, v := range m {
		i, err := strconv.ParseInt(k, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("decode rtt bucket %q: %w", k, err)
		}
		out[int32(i)] = v
	}
	return out, nil
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

func (r *Reads) ReadFlowEdges(ctx context.Context, q FlowRead) ([]FlowEdgeRow, error) {
	return heavyRead(ctx, r, "flow edges", func(s *Store) ([]FlowEdgeRow, error) { return s.ReadFlowEdges(ctx, q) })
}

func (r *Reads) ReadFlowHolders(ctx context.Context, nodes []int32, from, to time.Time) ([]FlowHolder, error) {
	return heavyRead(ctx, r, "address holders", func(s *Store) ([]FlowHolder, error) { return s.ReadFlowHolders(ctx, nodes, from, to) })
}
