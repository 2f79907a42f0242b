package store_test

import (
	"context"
	"maps"
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
	var ids []int32
	for _, name := range []string{"n1", "n2", "n3"} {
		id, err := st.UpsertNode(ctx, store.Node{Name: name, Tenant: "acme", InstanceID: 1, IntervalMS: 60000})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
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
		rows, err := st.ReadFlowEdges(ctx, store.FlowRead{Nodes: ids, Sources: c.sources, PerBucket: c.perBucket})
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
