package store

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// FlowRole is the role of a flow edge's local owner (proto FlowRole).
type FlowRole int16

const (
	// FlowOther is a node's "other" edge: the sum of the edges past its
	// top-K, with no owner or peer.
	FlowOther  FlowRole = 0
	FlowClient FlowRole = 1
	FlowServer FlowRole = 2
)

// FlowOwner is what owns a socket's network namespace (agent/owner).
type FlowOwner struct {
	ID, Kind, Name, Workload string
}

// FlowEdge is one interval's connections between one local owner and one
// peer, in one role, as a node reported them (proto FlowEdge, validated by
// collector/ingest). Addresses are canonical (netip.Addr.String).
type FlowEdge struct {
	Local       FlowOwner
	Role        FlowRole
	LocalAddr   string
	LocalPort   uint16
	PeerAddr    string
	PeerPort    uint16
	XlatAddr    string
	XlatPort    uint16
	EdgesFolded uint64 // the other edge only
	// The other edge only: address holders the node left out of the
	// report past its cap (proto FlowEdge.holders_left_out).
	HoldersLeftOut uint64
	FlowCounters
}

// FlowCounters are an edge's counts over some time.
type FlowCounters struct {
	Opened, Failed, Closed, Retransmits uint64
	BytesSent, BytesRecv                uint64
	// reason → count
	ResetsSent, ResetsRecv, Drops map[string]uint64
	// Smoothed RTT in ns: log-linear bucket index → count.
	RTT map[int32]uint64
}

// Add adds o to c.
func (c *FlowCounters) Add(o FlowCounters) {
	c.Opened += o.Opened
	c.Failed += o.Failed
	c.Closed += o.Closed
	c.Retransmits += o.Retransmits
	c.BytesSent += o.BytesSent
	c.BytesRecv += o.BytesRecv
	c.ResetsSent = addCounts(c.ResetsSent, o.ResetsSent)
	c.ResetsRecv = addCounts(c.ResetsRecv, o.ResetsRecv)
	c.Drops = addCounts(c.Drops, o.Drops)
	c.RTT = addCounts(c.RTT, o.RTT)
}

func addCounts[K comparable](dst, src map[K]uint64) map[K]uint64 {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[K]uint64, len(src))
	}
	for k, v := range src {
		dst[k] += v
	}
	return dst
}

// AddressHolder says which owner held an address on the reporting node
// during the report's interval.
type AddressHolder struct {
	Address string
	Owner   FlowOwner
}

// flowRollups are the resolutions flow edges are summed into, each written
// by the transaction that stores the report.
var flowRollups = []int32{RollupMinute, RollupHour, RollupDay}

// flowKey is one row of flow_edges.
type flowKey struct {
	res   int32
	node  int32
	ts    int64
	role  FlowRole
	owner string
	laddr string
	lport uint16
	paddr string
	pport uint16
	xaddr string
	xport uint16
}

type flowRow struct {
	key    flowKey
	owner  FlowOwner
	folded uint64
	left   uint64 // holders left out
	FlowCounters
}

// upsertFlowEdges adds the flows of a batch's new reports to flow_edges,
// one statement: rows of the same key (one node's reports of the same
// minute, hour or day) are summed first, since ON CONFLICT may touch a
// row once per statement, and sorted, so two transactions lock shared
// rows (a node's hour, when a resend races its stream) in one order.
const upsertFlowEdges = `
INSERT INTO flow_edges (res, node_id, ts, tenant, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port,
	owner_kind, owner_name, owner_workload, edges_folded, opened, failed, closed, retransmits, bytes_sent, bytes_recv,
	resets_sent, resets_recv, drops, rtt, rtt_n, holders_left)
SELECT u.res, u.node_id, u.ts, coalesce(n.tenant, ''), u.role, u.owner_id, u.local_addr, u.local_port, u.peer_addr, u.peer_port, u.xlat_addr, u.xlat_port,
	u.owner_kind, u.owner_name, u.owner_workload, u.edges_folded, u.opened, u.failed, u.closed, u.retransmits, u.bytes_sent, u.bytes_recv,
	u.resets_sent, u.resets_recv, u.drops, u.rtt, u.rtt_n, u.holders_left
FROM unnest($1::int[], $2::int[], $3::timestamptz[], $4::smallint[], $5::text[], $6::text[], $7::int[], $8::text[], $9::int[], $10::text[], $11::int[],
	$12::text[], $13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[], $21::bigint[],
	$22::jsonb[], $23::jsonb[], $24::jsonb[], $25::jsonb[], $26::bigint[], $27::bigint[])
	WITH ORDINALITY AS u (res, node_id, ts, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port,
	owner_kind, owner_name, owner_workload, edges_folded, opened, failed, closed, retransmits, bytes_sent, bytes_recv,
	resets_sent, resets_recv, drops, rtt, rtt_n, holders_left, ord)
LEFT JOIN nodes n ON n.id = u.node_id
ORDER BY u.ord
ON CONFLICT (res, node_id, ts, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port) DO UPDATE SET
	owner_kind = EXCLUDED.owner_kind, owner_name = EXCLUDED.owner_name, owner_workload = EXCLUDED.owner_workload,
	edges_folded = flow_edges.edges_folded + EXCLUDED.edges_folded,
	opened = flow_edges.opened + EXCLUDED.opened, failed = flow_edges.failed + EXCLUDED.failed,
	closed = flow_edges.closed + EXCLUDED.closed, retransmits = flow_edges.retransmits + EXCLUDED.retransmits,
	bytes_sent = flow_edges.bytes_sent + EXCLUDED.bytes_sent, bytes_recv = flow_edges.bytes_recv + EXCLUDED.bytes_recv,
	resets_sent = flow_counts_add(flow_edges.resets_sent, EXCLUDED.resets_sent),
	resets_recv = flow_counts_add(flow_edges.resets_recv, EXCLUDED.resets_recv),
	drops = flow_counts_add(flow_edges.drops, EXCLUDED.drops),
	rtt = flow_counts_add(flow_edges.rtt, EXCLUDED.rtt), rtt_n = flow_edges.rtt_n + EXCLUDED.rtt_n,
	holders_left = flow_edges.holders_left + EXCLUDED.holders_left`

// flowRowsOf sums the flows of the batch's new reports into the rows of
// every resolution, sorted by key.
func flowRowsOf(reports []Report, inserted map[ReportKey]bool) []*flowRow {
	at := map[flowKey]*flowRow{}
	var rows []*flowRow
	for _, r := range reports {
		if !inserted[r.Key()] || len(r.Flows) == 0 {
			continue
		}
		t := r.Time.Unix()
		for _, res := range flowRollups {
			ts := t - mod(t, int64(res))
			for _, e := range r.Flows {
				k := flowKey{res: res, node: r.NodeID, ts: ts, role: e.Role, owner: e.Local.ID, laddr: e.LocalAddr, lport: e.LocalPort,
					paddr: e.PeerAddr, pport: e.PeerPort, xaddr: e.XlatAddr, xport: e.XlatPort}
				row := at[k]
				if row == nil {
					row = &flowRow{key: k}
					at[k] = row
					rows = append(rows, row)
				}
				row.owner = e.Local
				row.folded += e.EdgesFolded
				row.left += e.HoldersLeftOut
				row.Add(e.FlowCounters)
			}
		}
	}
	slices.SortFunc(rows, func(a, b *flowRow) int {
		x, y := a.key, b.key
		return cmp.Or(cmp.Compare(x.res, y.res), cmp.Compare(x.node, y.node), cmp.Compare(x.ts, y.ts), cmp.Compare(x.role, y.role),
			cmp.Compare(x.owner, y.owner), cmp.Compare(x.laddr, y.laddr), cmp.Compare(x.lport, y.lport), cmp.Compare(x.paddr, y.paddr),
			cmp.Compare(x.pport, y.pport), cmp.Compare(x.xaddr, y.xaddr), cmp.Compare(x.xport, y.xport))
	})
	return rows
}

// countsJSON encodes reason → count for a jsonb column.
func countsJSON[K comparable](m map[K]uint64) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		switch k := any(k).(type) {
		case string:
			out[k] = v
		case int32:
			out[strconv.Itoa(int(k))] = v
		}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// queueFlowEdges queues the upsert of the batch's new flows.
func queueFlowEdges(batch *pgx.Batch, reports []Report, inserted map[ReportKey]bool) error {
	rows := flowRowsOf(reports, inserted)
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	var (
		res, node, lport, pport, xport               = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		ts                                           = make([]time.Time, n)
		role                                         = make([]int16, n)
		owner, laddr, paddr, xaddr, kind, name, wl   = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		folded, opened, failed, closed, retr, bs, br = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		rs, rr, dr, rtt                              = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		rttN, left                                   = make([]int64, n), make([]int64, n)
	)
	for i, r := range rows {
		k := r.key
		res[i], node[i], ts[i], role[i] = k.res, k.node, time.Unix(k.ts, 0).UTC(), int16(k.role)
		owner[i], laddr[i], lport[i], paddr[i], pport[i], xaddr[i], xport[i] = k.owner, k.laddr, int32(k.lport), k.paddr, int32(k.pport), k.xaddr, int32(k.xport)
		kind[i], name[i], wl[i] = r.owner.Kind, r.owner.Name, r.owner.Workload
		folded[i], opened[i], failed[i], closed[i] = clampInt64(r.folded), clampInt64(r.Opened), clampInt64(r.Failed), clampInt64(r.Closed)
		retr[i], bs[i], br[i], left[i] = clampInt64(r.Retransmits), clampInt64(r.BytesSent), clampInt64(r.BytesRecv), clampInt64(r.left)
		var err error
		if rs[i], err = countsJSON(r.ResetsSent); err != nil {
			return fmt.Errorf("encode flow resets: %w", err)
		}
		if rr[i], err = countsJSON(r.ResetsRecv); err != nil {
			return fmt.Errorf("encode flow resets: %w", err)
		}
		if dr[i], err = countsJSON(r.Drops); err != nil {
			return fmt.Errorf("encode flow drops: %w", err)
		}
		if rtt[i], err = countsJSON(r.RTT); err != nil {
			return fmt.Errorf("encode flow rtt: %w", err)
		}
		var total uint64
		for _, c := range r.RTT {
			total += c
		}
		rttN[i] = clampInt64(total)
	}
	batch.Queue(upsertFlowEdges, res, node, ts, role, owner, laddr, lport, paddr, pport, xaddr, xport, kind, name, wl,
		folded, opened, failed, closed, retr, bs, br, rs, rr, dr, rtt, rttN, left)
	return nil
}

// clampInt64 stores a count in a bigint column: ingest bounds every value
// far below (--ingest limits), so this only guards the conversion.
func clampInt64(v uint64) int64 {
	if v > 1<<62 {
		return 1 << 62
	}
	return int64(v)
}

// holderSpan is one owner's hold of one address on one node over
// [from, to], from a batch's reports.
type holderSpan struct {
	node     int32
	address  string
	owner    FlowOwner
	from, to time.Time
}

// extendHolder extends the node's newest span of the address when the same
// owner holds it, else starts a new span: history by time, so a peer
// address resolves to whoever held it then. The newest span is locked, so
// two transactions of one node (a resend racing its stream) cannot both
// start one.
const extendHolder = `
WITH last AS (
	SELECT id, owner_id FROM flow_holders WHERE node_id = $1 AND address = $2 ORDER BY last_seen DESC LIMIT 1 FOR UPDATE
), ext AS (
	UPDATE flow_holders h SET first_seen = least(h.first_seen, $7), last_seen = greatest(h.last_seen, $8),
		owner_kind = $4, owner_name = $5, owner_workload = $6
	FROM last WHERE h.id = last.id AND last.owner_id = $3
	RETURNING h.id
)
INSERT INTO flow_holders (tenant, node_id, address, owner_id, owner_kind, owner_name, owner_workload, first_seen, last_seen)
SELECT coalesce((SELECT tenant FROM nodes WHERE id = $1), ''), $1, $2, $3, $4, $5, $6, $7, $8
WHERE NOT EXISTS (SELECT 1 FROM ext)`

// holderSpans merges the holders of a batch's new reports: consecutive
// reports of a node in which the same owner holds an address make one
// span, so a batch costs a statement per (node, address) and change of
// owner, not per report.
func holderSpans(reports []Report, inserted map[ReportKey]bool) []holderSpan {
	type key struct {
		node    int32
		address string
	}
	var news []Report
	for _, r := range reports {
		if inserted[r.Key()] && len(r.Holders) > 0 {
			news = append(news, r)
		}
	}
	slices.SortStableFunc(news, func(a, b Report) int { return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), a.Time.Compare(b.Time)) })
	open := map[key]int{}
	var spans []holderSpan
	for _, r := range news {
		from := r.Time.Add(-time.Duration(r.IntervalMS) * time.Millisecond)
		for _, h := range r.Holders {
			k := key{r.NodeID, h.Address}
			if i, ok := open[k]; ok && spans[i].owner.ID == h.Owner.ID {
				spans[i].owner = h.Owner
				spans[i].to = r.Time
				continue
			}
			open[k] = len(spans)
			spans = append(spans, holderSpan{node: r.NodeID, address: h.Address, owner: h.Owner, from: from, to: r.Time})
		}
	}
	return spans
}

// queueHolders queues the batch's new holder spans, in time order per
// node and address.
func queueHolders(batch *pgx.Batch, reports []Report, inserted map[ReportKey]bool) {
	for _, s := range holderSpans(reports, inserted) {
		batch.Queue(extendHolder, s.node, s.address, s.owner.ID, s.owner.Kind, s.owner.Name, s.owner.Workload, s.from, s.to)
	}
}
