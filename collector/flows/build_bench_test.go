package flows

import (
	"fmt"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// BenchmarkBuild builds bench/flowmap's map in memory: 100 nodes, 5,000
// pod owners each holding an address, 50,000 edges seen by both ends,
// one hour bucket each (the last hour's first read, without PostgreSQL):
//
//	go test -run '^$' -bench Build -benchmem ./collector/flows/
func BenchmarkBuild(b *testing.B) {
	const nodes, owners, fanout = 100, 50, 10
	total := nodes * owners
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	in := Input{Nodes: map[int32]store.FlowNode{}, Res: time.Hour, From: at.Add(-time.Hour), To: at.Add(time.Hour)}
	for n := range nodes {
		in.Nodes[int32(n+1)] = store.FlowNode{ID: int32(n + 1), Name: fmt.Sprintf("node-%03d", n), Tenant: "acme"}
	}
	owner := func(g int) store.FlowOwner {
		return store.FlowOwner{ID: fmt.Sprintf("pod:shop.app-%d", g), Kind: "pod", Name: fmt.Sprintf("shop/app-%d", g), Workload: fmt.Sprintf("shop/app%d", g%97)}
	}
	addr := func(g int) string { return fmt.Sprintf("10.%d.%d.%d", g>>16&255, g>>8&255, g&255) }
	row := func(g int, e store.FlowEdge) store.FlowEdgeRow {
		return store.FlowEdgeRow{NodeID: int32(g/owners + 1), Tenant: "acme", First: at, End: at.Add(time.Hour), FlowEdge: e}
	}
	var rows []store.FlowEdgeRow
	for g := range total {
		in.Holders = append(in.Holders, store.FlowHolder{NodeID: int32(g/owners + 1), Tenant: "acme", Address: addr(g), Owner: owner(g),
			First: at.Add(-time.Hour), Last: at.Add(5 * time.Minute)})
		for k := range fanout {
			p := (g + (k+1)*owners*7 + 1) % total
			c := store.FlowCounters{Opened: 5, Closed: 5, BytesSent: 40000, BytesRecv: 900000, Retransmits: uint64((g + k) % 3)}
			if (g+k)%10 == 0 {
				c.ResetsSent = map[string]uint64{"no_socket": 1}
			}
			rows = append(rows,
				row(g, store.FlowEdge{Local: owner(g), Role: store.FlowClient, LocalAddr: addr(g), PeerAddr: addr(p), PeerPort: 8080, FlowCounters: c}),
				row(p, store.FlowEdge{Local: owner(p), Role: store.FlowServer, LocalAddr: addr(p), LocalPort: 8080, PeerAddr: addr(g), FlowCounters: c}))
		}
	}
	in.Rows = store.FlowRows{rows}
	for b.Loop() {
		if g := Build(in); len(g.Edges) != total*fanout {
			b.Fatalf("%d edges, want %d", len(g.Edges), total*fanout)
		}
	}
}
