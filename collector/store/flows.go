package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// FlowProbe asks for the evidence other nodes hold about one flow: events
// whose endpoints are Src and Dst in either orientation (a reset B sent to
// A carries the same src and dst as the one A received; a packet of A's that
// B dropped carries them swapped), whose protocol is Protocol (evidence
// without one — resets, flows — is TCP), stored between From and To by the
// other node's clock. Near is the moment the caller cares about; the
// nearest events win when there are more than the limit.
type FlowProbe struct {
	Src, Dst, Protocol string
	From, To, Near     time.Time
}

// Counterpart is another node's evidence about the same flow.
type Counterpart struct {
	Node string
	StoredEvent
}

// maxFlowScan bounds the rows read per orientation of one probe before
// the nearest are picked: an agent may send a thousand events of one
// 5-tuple in a report, and a read must stay cheap whatever it sent.
const maxFlowScan = 100

// Counterparts answers each probe with at most perProbe events of nodes
// that scope sees, other than except, nearest first; the answer is aligned
// with probes. A node outside the scope contributes nothing, so an answer
// never reveals that it exists. Only nodes of except's tenant count (the
// nodes without one are a tenant of their own): two tenants' address
// spaces may overlap, and a look-alike flow of another tenant is not the
// same flow, whoever asks (collector/tenant). space, when not "", is a
// label key naming an address space within a tenant (a cluster, a
// network): then only nodes with except's value of it count, a node
// without the label matching only others without it.
func (s *Store) Counterparts(ctx context.Context, scope Scope, except int32, space string, probes []FlowProbe, perProbe int) ([][]Counterpart, error) {
	out := make([][]Counterpart, len(probes))
	if len(probes) == 0 || perProbe <= 0 {
		return out, nil
	}
	idx := make([]int32, len(probes))
	src, dst, proto := make([]string, len(probes)), make([]string, len(probes)), make([]string, len(probes))
	from, to, near := make([]time.Time, len(probes)), make([]time.Time, len(probes)), make([]time.Time, len(probes))
	for i, p := range probes {
		idx[i], src[i], dst[i], proto[i], from[i], to[i], near[i] = int32(i), p.Src, p.Dst, p.Protocol, p.From, p.To, p.Near
	}
	visible, scopeArgs := nodeIDsIn(scope, 12)
	// Each orientation is an equality on both indexed expressions and a
	// range on ts (events_flow); the predicate fields ? 'src' is repeated
	// so the planner may use that partial index. The scope applies before
	// the scan limit, so other tenants' events cannot crowd out the
	// caller's.
	arm := func(a, b string) string {
		return `(SELECT e.node_id, e.ts, e.metric_id, e.fields FROM events e
			WHERE e.fields ? 'src' AND e.fields->>'src' = ` + a + ` AND e.fields->>'dst' = ` + b + `
				AND e.ts >= q.lo AND e.ts <= q.hi AND e.node_id <> $9 AND e.node_id IN ` + visible + `
				AND e.node_id IN (SELECT o.id FROM nodes o, nodes me WHERE me.id = $9 AND o.tenant = me.tenant
					AND ($11 = '' OR o.labels->>$11 IS NOT DISTINCT FROM me.labels->>$11))
				AND coalesce(e.fields->>'protocol', 'tcp') = q.proto
			ORDER BY e.ts LIMIT $10)`
	}
	rows, err := s.pool.Query(ctx, `
		SELECT q.i, n.name, c.ts, p.path, c.fields
		FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[])
			AS q(i, src, dst, proto, lo, hi, near)
		CROSS JOIN LATERAL (
			SELECT u.* FROM (`+arm("q.src", "q.dst")+` UNION ALL `+arm("q.dst", "q.src")+`) u
			ORDER BY abs(extract(epoch FROM u.ts - q.near)) LIMIT $8
		) c
		JOIN nodes n ON n.id = c.node_id
		JOIN metric_paths p ON p.id = c.metric_id
		ORDER BY q.i, abs(extract(epoch FROM c.ts - q.near)), n.name`,
		append([]any{idx, src, dst, proto, from, to, near, perProbe, except, maxFlowScan, space}, scopeArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("read counterpart evidence: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int32
		var c Counterpart
		var raw []byte
		if err := rows.Scan(&i, &c.Node, &c.Time, &c.Metric, &raw); err != nil {
			return nil, fmt.Errorf("scan counterpart evidence: %w", err)
		}
		if err := json.Unmarshal(raw, &c.Fields); err != nil {
			return nil, fmt.Errorf("decode counterpart evidence: %w", err)
		}
		out[i] = append(out[i], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read counterpart evidence: %w", err)
	}
	return out, nil
}
