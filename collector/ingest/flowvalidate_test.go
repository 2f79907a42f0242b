package ingest

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Flow edges and address holders: every field an agent controls is
// bounded, and one bad edge rejects the report, saying which and why.
func TestFlowLimits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	pod := func() *nbsv1.FlowOwner {
		return &nbsv1.FlowOwner{Id: "pod:shop.cart-1", Kind: "pod", Name: "shop/cart-1", Workload: "shop/cart"}
	}
	client := func(mut func(e *nbsv1.FlowEdge)) *nbsv1.Report {
		e := &nbsv1.FlowEdge{Local: pod(), Role: nbsv1.FlowRole_FLOW_ROLE_CLIENT, LocalAddress: "10.0.0.1", PeerAddress: "10.0.0.2", PeerPort: 5432,
			Opened: 3, ResetsReceived: map[string]uint64{"no_socket": 2},
			Rtt: &nbsv1.Histogram{BucketIndex: []uint32{100, 200}, BucketCount: []uint64{1, 2}, Count: 3, Sum: 1e6}}
		mut(e)
		return &nbsv1.Report{Flows: []*nbsv1.FlowEdge{e}}
	}
	holder := func(mut func(h *nbsv1.AddressHolder)) *nbsv1.Report {
		h := &nbsv1.AddressHolder{Address: "10.0.0.1", Owner: pod()}
		mut(h)
		return &nbsv1.Report{AddressHolders: []*nbsv1.AddressHolder{h}}
	}
	many := func(n int) map[string]uint64 {
		m := map[string]uint64{}
		for i := range n {
			m["r"+strings.Repeat("x", i%10)+string(rune('a'+i%26))+string(rune('a'+i/26))] = 1
		}
		return m
	}
	edges := func(n int) *nbsv1.Report {
		r := client(func(*nbsv1.FlowEdge) {})
		for len(r.Flows) < n {
			r.Flows = append(r.Flows, r.Flows[0])
		}
		return r
	}
	holders := func(n int) *nbsv1.Report {
		r := &nbsv1.Report{}
		for range n {
			r.AddressHolders = append(r.AddressHolders, &nbsv1.AddressHolder{Address: "10.0.0.1", Owner: pod()})
		}
		return r
	}
	cases := []struct {
		name   string
		r      *nbsv1.Report
		reason string // "" = accepted
		want   string
	}{
		{"a good client edge", client(func(*nbsv1.FlowEdge) {}), "", ""},
		{"a good server edge", client(func(e *nbsv1.FlowEdge) {
			e.Role, e.LocalPort, e.PeerPort = nbsv1.FlowRole_FLOW_ROLE_SERVER, 5432, 0
		}), "", ""},
		{"a good translated client edge", client(func(e *nbsv1.FlowEdge) { e.PeerTranslatedAddress, e.PeerTranslatedPort = "10.1.0.9", 8080 }), "", ""},
		{"a good other edge", &nbsv1.Report{Flows: []*nbsv1.FlowEdge{{Other: true, EdgesFolded: 12, Opened: 40}}}, "", ""},
		{"a good holder", holder(func(*nbsv1.AddressHolder) {}), "", ""},
		{"as many edges as allowed", edges(wire.MaxFlowEdges), "", ""},
		{"too many edges", edges(wire.MaxFlowEdges + 1), "too_large", "2001 flow edges, at most 2000 allowed (--ingest.max-flow-edges)"},
		{"too many holders", holders(wire.MaxAddressHolders + 1), "too_large", "at most 4000 allowed (--ingest.max-address-holders)"},
		{"no local owner", client(func(e *nbsv1.FlowEdge) { e.Local = nil }), "bad_flow", "flow edge 0: local owner is missing"},
		{"an empty owner id", client(func(e *nbsv1.FlowEdge) { e.Local.Id = "" }), "bad_flow", "owner id is empty"},
		{"an owner id that is no segment", client(func(e *nbsv1.FlowEdge) { e.Local.Id = "pod:A/B" }), "bad_flow", "is not a metric id segment"},
		{"an owner id too long", client(func(e *nbsv1.FlowEdge) { e.Local.Id = strings.Repeat("a", 300) }), "bad_flow", "is not a metric id segment"},
		{"an unknown owner kind", client(func(e *nbsv1.FlowEdge) { e.Local.Kind = "vm" }), "bad_flow", `kind "vm" is not host`},
		{"an owner name too long", client(func(e *nbsv1.FlowEdge) { e.Local.Name = strings.Repeat("n", 257) }), "bad_flow", "owner name is 257 bytes, at most 256"},
		{"a NUL in a workload", client(func(e *nbsv1.FlowEdge) { e.Local.Workload = "a\x00" }), "bad_flow", "owner workload contains a NUL byte"},
		{"a local address that is no IP", client(func(e *nbsv1.FlowEdge) { e.LocalAddress = "cart" }), "bad_flow", `local_address "cart" is not an IP address`},
		{"an empty peer", client(func(e *nbsv1.FlowEdge) { e.PeerAddress = "" }), "bad_flow", "peer_address \"\" is not an IP address"},
		{"a zoned peer", client(func(e *nbsv1.FlowEdge) { e.PeerAddress = "fe80::1%eth0" }), "bad_flow", "has a zone"},
		{"a translated address that is no IP", client(func(e *nbsv1.FlowEdge) { e.PeerTranslatedAddress, e.PeerTranslatedPort = "x", 1 }), "bad_flow", "peer_translated_address"},
		{"a translated address without port", client(func(e *nbsv1.FlowEdge) { e.PeerTranslatedAddress = "10.1.0.9" }), "bad_flow", "go together"},
		{"a port past 65535", client(func(e *nbsv1.FlowEdge) { e.PeerPort = 65536 }), "bad_flow", "peer_port 65536 is above 65535"},
		{"a client edge without peer port", client(func(e *nbsv1.FlowEdge) { e.PeerPort = 0 }), "bad_flow", "a client edge has peer_port"},
		{"a server edge with a peer port", client(func(e *nbsv1.FlowEdge) { e.Role, e.LocalPort = nbsv1.FlowRole_FLOW_ROLE_SERVER, 80 }), "bad_flow", "a server edge"},
		{"no role", client(func(e *nbsv1.FlowEdge) { e.Role = nbsv1.FlowRole_FLOW_ROLE_UNSPECIFIED }), "bad_flow", "is not client or server"},
		{"an other edge naming an owner", &nbsv1.Report{Flows: []*nbsv1.FlowEdge{{Other: true, Local: pod()}}}, "bad_flow", "must leave local"},
		{"edges folded on an edge", client(func(e *nbsv1.FlowEdge) { e.EdgesFolded = 3 }), "bad_flow", "edges_folded 3 on an edge that is not other"},
		{"an other edge of holders left out alone", &nbsv1.Report{Flows: []*nbsv1.FlowEdge{{Other: true, HoldersLeftOut: 40}}}, "", ""},
		{"holders left out on an edge", client(func(e *nbsv1.FlowEdge) { e.HoldersLeftOut = 3 }), "bad_flow", "holders_left_out 3 on an edge that is not other"},
		{"a count past the limit", client(func(e *nbsv1.FlowEdge) { e.Retransmits = math.MaxUint64 }), "bad_flow", "retransmits 18446744073709551615 is above"},
		{"too many reasons", client(func(e *nbsv1.FlowEdge) { e.Drops = many(65) }), "bad_flow", "drops has 65 reasons, at most 64"},
		{"a reason that is no segment", client(func(e *nbsv1.FlowEdge) { e.ResetsSent = map[string]uint64{"No Socket": 1} }), "bad_flow", "is not a metric id segment"},
		{"a reason count past the limit", client(func(e *nbsv1.FlowEdge) { e.ResetsSent = map[string]uint64{"x": 1 << 62} }), "bad_flow", "reason x:"},
		{"rtt buckets past the layout", client(func(e *nbsv1.FlowEdge) {
			e.Rtt = &nbsv1.Histogram{BucketIndex: []uint32{loglinear.Buckets}, BucketCount: []uint64{1}, Count: 1}
		}), "bad_flow", "past the layout"},
		{"rtt count not the total", client(func(e *nbsv1.FlowEdge) { e.Rtt.Count = 4 }), "bad_flow", "does not equal the bucket total"},
		{"rtt indexes not increasing", client(func(e *nbsv1.FlowEdge) { e.Rtt.BucketIndex = []uint32{200, 100} }), "bad_flow", "strictly increasing"},
		{"rtt with a metric id", client(func(e *nbsv1.FlowEdge) { e.Rtt.MetricId = "lat" }), "bad_flow", "metric_id and start_unix_nano must be empty"},
		{"rtt with a NaN sum", client(func(e *nbsv1.FlowEdge) { e.Rtt.Sum = math.NaN() }), "bad_flow", "sum NaN"},
		{"a holder without owner", holder(func(h *nbsv1.AddressHolder) { h.Owner = nil }), "bad_flow", "address holder 0 (10.0.0.1): owner is missing"},
		{"a holder address that is no IP", holder(func(h *nbsv1.AddressHolder) { h.Address = "10.0.0.256" }), "bad_flow", "is not an IP address"},
		{"a holder with a bad owner", holder(func(h *nbsv1.AddressHolder) { h.Owner.Kind = "" }), "bad_flow", "kind \"\" is not host"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &stream{metrics: metricSet{base: map[string]streamMetric{}}}
			c.r.Sequence, c.r.TimeUnixNano, c.r.IntervalMs = 1, now.UnixNano(), 1000
			_, _, rej := DefaultLimits().checkReport(c.r, st, now)
			switch {
			case c.reason == "" && rej != nil:
				t.Fatalf("checkReport = %v, want accepted", rej)
			case c.reason != "" && (rej == nil || rej.reason != c.reason || !strings.Contains(rej.msg, c.want)):
				t.Fatalf("checkReport = %v, want %s containing %q", rej, c.reason, c.want)
			}
		})
	}
}

// What is accepted is converted as sent, addresses canonical, and one
// holder per address and report.
func TestFlowConversion(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	owner := &nbsv1.FlowOwner{Id: "pod:shop.cart-1", Kind: "pod", Name: "shop/cart-1", Workload: "shop/cart"}
	r := &nbsv1.Report{Sequence: 1, TimeUnixNano: now.UnixNano(), IntervalMs: 1000,
		Flows: []*nbsv1.FlowEdge{{Local: owner, Role: nbsv1.FlowRole_FLOW_ROLE_CLIENT, LocalAddress: "::ffff:10.0.0.1", PeerAddress: "10.0.0.2",
			PeerPort: 443, PeerTranslatedAddress: "10.1.0.9", PeerTranslatedPort: 8443, Opened: 2, Failed: 1, Closed: 1, Retransmits: 4,
			BytesSent: 100, BytesReceived: 200, ResetsSent: map[string]uint64{"abort": 1, "zero": 0}, Drops: map[string]uint64{"netfilter": 5},
			Rtt: &nbsv1.Histogram{BucketIndex: []uint32{7}, BucketCount: []uint64{2}, Count: 2, Sum: 3}}},
		AddressHolders: []*nbsv1.AddressHolder{{Address: "10.0.0.1", Owner: owner}, {Address: "10.0.0.1", Owner: &nbsv1.FlowOwner{Id: "host", Kind: "host"}}},
	}
	out, _, rej := DefaultLimits().checkReport(r, &stream{metrics: metricSet{base: map[string]streamMetric{}}}, now)
	if rej != nil {
		t.Fatal(rej)
	}
	e := out.Flows[0]
	want := store.FlowEdge{Local: store.FlowOwner{ID: "pod:shop.cart-1", Kind: "pod", Name: "shop/cart-1", Workload: "shop/cart"}, Role: store.FlowClient,
		LocalAddr: "10.0.0.1", PeerAddr: "10.0.0.2", PeerPort: 443, XlatAddr: "10.1.0.9", XlatPort: 8443,
		FlowCounters: store.FlowCounters{Opened: 2, Failed: 1, Closed: 1, Retransmits: 4, BytesSent: 100, BytesRecv: 200,
			ResetsSent: map[string]uint64{"abort": 1}, Drops: map[string]uint64{"netfilter": 5}, RTT: map[int32]uint64{7: 2}}}
	if got, w := strings.ReplaceAll(fmtAny(e), " ", ""), strings.ReplaceAll(fmtAny(want), " ", ""); got != w {
		t.Fatalf("edge\n got %s\nwant %s", got, w)
	}
	if len(out.Holders) != 1 || out.Holders[0].Owner.ID != "pod:shop.cart-1" {
		t.Fatalf("holders %+v, want the first holder of 10.0.0.1 only", out.Holders)
	}
}

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }
