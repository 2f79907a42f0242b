package store_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestFlowReads: a map's reads of flow edges as ingest stored them. The
// edges of several nodes (read as two statements of half the nodes each)
// are summed per edge over a window's minute and hour buckets, and read per
// bucket; the RTT histograms of chosen edges are the same whether read by
// primary key lookups per bucket (a short window) or joined with the
// window's rows (a long one), and count only the edges and buckets asked.
func TestFlowReads(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	ids := acmeNodes(ctx, t, st, "n1", "n2", "n3")
	owner := store.FlowOwner{ID: "pod:shop.cart-1", Kind: "pod", Name: "shop/cart-1", Workload: "shop/cart"}
	edge := func(peer string, rtt int32) store.FlowEdge {
		return store.FlowEdge{Local: owner, Role: store.FlowClient, LocalAddr: "10.0.0.1", PeerAddr: peer, PeerPort: 80,
			FlowCounters: store.FlowCounters{Opened: 2, BytesSent: 10, ResetsSent: map[string]uint64{"no_socket": 1}, RTT: map[int32]uint64{rtt: 1}}}
	}
	// Minutes 10:58 to 11:02: two hours, five minute buckets, every node.
	t0 := time.Date(2026, 11, 29, 10, 58, 30, 0, time.UTC)
	var reports []store.Report
	for m := range 5 {
		for i, id := range ids {
			reports = append(reports, store.Report{NodeID: id, InstanceID: 1, Seq: uint64(m + 1), Time: t0.Add(time.Duration(m) * time.Minute),
				IntervalMS: 60000, Flows: []store.FlowEdge{edge("10.0.1.1", 300+int32(m)), edge("10.0.1.2", 400+int32(i))}})
		}
	}
	if _, err := st.WriteReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	from, to := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	hours := store.FlowSources(from, to)
	minutes := []store.FlowSource{{Res: store.RollupMinute, From: from, To: to}}
	for _, c := range []struct {
		name      string
		sources   []store.FlowSource
		perBucket bool
		rows      int
	}{
		{"hours summed", hours, false, 6},
		{"minutes summed", minutes, false, 6},
		{"hours per bucket", hours, true, 12},
		{"minutes per bucket", minutes, true, 30},
	} {
		read, err := st.ReadFlowEdges(ctx, store.FlowRead{Nodes: ids, Sources: c.sources, PerBucket: c.perBucket})
		rows := read.Slice()
		if err != nil {
			t.Fatal(err)
		}
		var opened, resets uint64
		nodes := map[int32]bool{}
		for _, r := range rows {
			opened += r.Opened
			resets += r.ResetsSent["no_socket"]
			nodes[r.NodeID] = true
			if r.Tenant != "acme" || r.Local != owner || r.PeerPort != 80 || r.BytesSent != r.Opened*5 || r.RTT != nil {
				t.Errorf("%s: row %+v", c.name, r)
			}
			if !c.perBucket && (!r.First.Equal(t0.Truncate(time.Duration(c.sources[0].Res)*time.Second)) || r.End.Sub(r.First) < 2*time.Minute) {
				t.Errorf("%s: a sum over %s to %s", c.name, r.First, r.End)
			}
		}
		if len(rows) != c.rows || opened != 2*5*2*3 || resets != 5*2*3 || len(nodes) != 3 {
			t.Errorf("%s: %d rows (want %d) of %d nodes, %d opened (want 60), %d resets (want 30)", c.name, len(rows), c.rows, len(nodes), opened, resets)
		}
	}
	keys := []store.FlowRowKey{
		{Node: ids[0], Role: store.FlowClient, Owner: owner.ID, LocalAddr: "10.0.0.1", PeerAddr: "10.0.1.1", PeerPort: 80},
		{Node: ids[2], Role: store.FlowClient, Owner: owner.ID, LocalAddr: "10.0.0.1", PeerAddr: "10.0.1.2", PeerPort: 80},
		{Node: ids[1], Role: store.FlowClient, Owner: owner.ID, LocalAddr: "10.0.0.1", PeerAddr: "10.0.9.9", PeerPort: 80}, // none
	}
	want := map[store.FlowRowKey]map[int32]uint64{
		keys[0]: {300: 1, 301: 1, 302: 1, 303: 1, 304: 1},
		keys[1]: {402: 5},
	}
	// The last three minutes only: 11:00 to 11:03.
	late := []store.FlowSource{{Res: store.RollupMinute, From: from.Add(time.Hour), To: from.Add(time.Hour + 3*time.Minute)}}
	wantLate := map[store.FlowRowKey]map[int32]uint64{keys[0]: {302: 1, 303: 1, 304: 1}, keys[1]: {402: 3}}
	for _, c := range []struct {
		name    string
		sources []store.FlowSource
		want    map[store.FlowRowKey]map[int32]uint64
	}{{"hours", hours, want}, {"minutes", minutes, want}, {"late minutes", late, wantLate}} {
		looked, err := st.ReadFlowRTT(ctx, c.sources, keys)
		if err != nil {
			t.Fatal(err)
		}
		joined, err := st.ReadFlowRTTJoined(ctx, c.sources, keys)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(looked, c.want, maps.Equal) || !maps.EqualFunc(joined, c.want, maps.Equal) {
			t.Errorf("%s: RTT looked up %v, joined %v, want %v", c.name, looked, joined, c.want)
		}
	}
}

// TestFlowRTTWithoutStatistics: a page's RTT lookups take the primary key
// on a flow_edges never analyzed, as a fresh install's first minutes have
// it. Asked as equalities, the planner took the (res, ts) index there (a
// small table's estimates make both look like one row) and read a bucket's
// every row per lookup: 2 to 22 s a page of 1,000 rows at 3 to 8 nodes
// (bench/flowmap). The lookups' answers are TestFlowReads'.
func TestFlowRTTWithoutStatistics(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	ids := acmeNodes(ctx, t, st, "n1", "n2", "n3")
	if _, err := st.Pool().Exec(ctx, `ALTER TABLE flow_edges SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	// 150 owners on 3 nodes, 10 peers each, both ends: 3,000 rows a
	// minute for 5 minutes, and their hour and day rows (written as SQL:
	// the shape of the table is what matters here, not ingest).
	t0 := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	if _, err := st.Pool().Exec(ctx, `
WITH e AS (SELECT g, (g + 1 + k * 15) % 150 AS p FROM generate_series(0, 149) g, generate_series(0, 9) k),
ends AS (SELECT g / 50 AS n, 1 AS role, g AS o, 0 AS lport, p AS peer, 8080 AS pport FROM e
	UNION ALL SELECT p / 50, 2, p, 8080, g, 0 FROM e),
b AS (SELECT 60 AS res, $2::timestamptz + m * interval '1 minute' AS ts FROM generate_series(0, 4) m
	UNION ALL SELECT 3600, date_trunc('hour', $2::timestamptz) UNION ALL SELECT 86400, date_trunc('day', $2::timestamptz))
INSERT INTO flow_edges (res, node_id, ts, tenant, role, owner_id, local_addr, local_port, peer_addr, peer_port, xlat_addr, xlat_port,
	owner_kind, owner_name, owner_workload, edges_folded, opened, failed, closed, retransmits, bytes_sent, bytes_recv,
	resets_sent, resets_recv, drops, rtt, rtt_n)
SELECT res, ($1::int[])[n + 1], ts, 'acme', role, 'pod:app-' || o, '10.0.0.' || o, lport, '10.0.0.' || peer, pport, '', 0,
	'pod', 'shop/app-' || o, 'shop/app', 0, 1, 0, 1, 0, 10, 10, '{}', '{}', '{}',
	jsonb_build_object('300', CASE WHEN res = 60 THEN 1 ELSE 5 END), CASE WHEN res = 60 THEN 1 ELSE 5 END
FROM ends, b`, ids, t0); err != nil {
		t.Fatal(err)
	}
	var analyzed bool
	if err := st.Pool().QueryRow(ctx, `SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'flow_edges'`).Scan(&analyzed); err != nil || analyzed {
		t.Fatalf("flow_edges analyzed: %v (%v); the test needs it never analyzed", analyzed, err)
	}
	read, err := st.ReadFlowEdges(ctx, store.FlowRead{Nodes: ids, Sources: []store.FlowSource{{Res: store.RollupHour, From: t0.Truncate(time.Hour), To: t0.Add(time.Hour)}}})
	rows := read.Slice()
	if err != nil || len(rows) != 3000 {
		t.Fatalf("%d rows (%v), want 3000", len(rows), err)
	}
	var keys []store.FlowRowKey
	for _, r := range rows[:1000] {
		keys = append(keys, r.Key())
	}
	for _, c := range []struct {
		name    string
		sources []store.FlowSource
	}{
		{"an hour", store.FlowSources(t0.Truncate(time.Hour), t0.Truncate(time.Hour).Add(2*time.Hour))},
		{"5 minutes", store.FlowSources(t0.Add(-time.Minute), t0.Add(5*time.Minute))},
	} {
		sql, args := store.FlowRTTSQL(c.sources, keys)
		var plan string
		if err := st.Pool().QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, `"flow_edges_pkey"`) || strings.Contains(plan, `"flow_edges_time"`) {
			t.Errorf("%s: the RTT lookups do not take the primary key alone:\n%s", c.name, plan)
		}
		rtt, err := st.ReadFlowRTT(ctx, c.sources, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if h := rtt[k]; len(h) != 1 || h[300] != 5 {
				t.Fatalf("%s: %+v has RTT %v, want {300: 5}", c.name, k, h)
			}
		}
	}
}

// acmeNodes registers nodes of tenant acme at a minute's interval.
func acmeNodes(ctx context.Context, t *testing.T, st *store.Store, names ...string) []int32 {
	t.Helper()
	var ids []int32
	for _, name := range names {
		id, err := st.UpsertNode(ctx, store.Node{Name: name, Tenant: "acme", InstanceID: 1, IntervalMS: 60000})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}
