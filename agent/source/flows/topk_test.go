package flows

import (
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/owner"
	probe "github.com/nbs-project/nbs/agent/probe/flows"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// The top-K kept in a heap of K names the same edges, in the same order,
// as ranking every edge would, ties in the figures included, and folds
// the rest into "other" exactly; run twice, so the ranking's reused
// storage starts from an earlier interval's.
func TestTopKHeapEqualsAFullRanking(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 2))
	local := netip.MustParseAddr("10.0.0.1")
	var edges []probe.Edge
	for i := range 500 {
		e := probe.Edge{Key: probe.Key{Netns: 1, Role: probe.Client, Local: local,
			Peer: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), PeerPort: 443},
			// Few distinct figures: many ties, broken by the address.
			Counts: probe.Counts{Failed: rng.Uint64N(3), Opened: rng.Uint64N(4), BytesSent: rng.Uint64N(3)}}
		if rng.IntN(5) == 0 {
			e.ResetsSent = map[uint32]uint64{1: 1 + rng.Uint64N(2)}
		}
		edges = append(edges, e)
	}
	// What ranking all of them gives.
	ranked := slices.Clone(edges)
	slices.SortFunc(ranked, func(a, b probe.Edge) int {
		rank := func(e probe.Edge) rankedEdge {
			return rankedEdge{id: edgeID{role: e.Role, local: e.Local, peer: e.Peer, peerPort: e.PeerPort},
				trouble: trouble(e.Counts), busy: e.Opened + e.Closed + e.Failed, volume: e.BytesSent + e.BytesReceived}
		}
		return rankCmp(rank(a), rank(b))
	})
	var total uint64
	for _, e := range edges {
		total += e.Opened + e.Failed + e.BytesSent
	}
	for _, k := range []int{1, 7, 200, 499, 500, 600} {
		s := &Source{resolver: owner.New(owner.Options{Proc: t.TempDir(), NetnsDirs: []string{}}), top: k}
		for round := range 2 {
			iv := probe.Interval{Edges: slices.Clone(edges)}
			for i := range iv.Edges {
				iv.Edges[i].ResetsSent = maps.Clone(edges[i].ResetsSent)
			}
			out, folded := s.edges(iv, nil)
			named := min(k, len(edges))
			if folded != len(edges)-named {
				t.Fatalf("top %d, round %d: %d folded, want %d", k, round, folded, len(edges)-named)
			}
			for i := range named {
				if got, want := out[i].GetPeerAddress(), ranked[i].Peer.String(); got != want {
					t.Fatalf("top %d, round %d: edge %d is %s, want %s", k, round, i, got, want)
				}
			}
			var sum uint64
			for _, e := range out {
				sum += e.GetOpened() + e.GetFailed() + e.GetBytesSent()
			}
			if sum != total {
				t.Errorf("top %d, round %d: totals %d, want %d", k, round, sum, total)
			}
			if other := len(out) > named; other != (folded > 0) {
				t.Errorf("top %d, round %d: an other edge %v with %d folded", k, round, other, folded)
			}
		}
	}
}

// Each report carries what was held since the one before, none of it
// again: the held edges' storage is reused from report to report.
func TestReportsCarryEachHeldIntervalOnce(t *testing.T) {
	s := &Source{resolver: owner.New(owner.Options{Proc: t.TempDir(), NetnsDirs: []string{}}), top: 10, every: time.Minute}
	backend := netip.MustParseAddrPort("10.0.2.1:8080")
	for report, c := range []struct {
		intervals int
		peers     []byte
	}{{2, []byte{1, 2, 3}}, {1, []byte{2}}, {3, []byte{4, 5}}} {
		want := map[string]uint64{}
		for range c.intervals {
			iv := probe.Interval{Overflow: probe.Counts{Failed: 1}}
			xlat := map[int]netip.AddrPort{}
			for _, p := range c.peers {
				peer := netip.AddrFrom4([4]byte{10, 0, 1, p})
				iv.Edges = append(iv.Edges, probe.Edge{Key: probe.Key{Netns: 1, Role: probe.Client, DNAT: p%2 == 0,
					Local: netip.MustParseAddr("10.0.0.1"), LocalPort: 40000, Peer: peer, PeerPort: 80},
					Counts: probe.Counts{Opened: uint64(p)}})
				if p%2 == 0 {
					xlat[len(iv.Edges)-1] = backend
				}
				want[peer.String()] += uint64(p)
			}
			s.hold(iv, xlat)
		}
		got := map[string]uint64{}
		var otherFailed uint64
		for _, e := range s.takeHeld() {
			if e.GetOther() {
				otherFailed = e.GetFailed()
				continue
			}
			got[e.GetPeerAddress()] += e.GetOpened()
		}
		if !maps.Equal(got, want) || otherFailed != uint64(c.intervals) {
			t.Errorf("report %d: opened by peer %v and %d failed in other, want %v and %d", report, got, otherFailed, want, c.intervals)
		}
	}
}

// A burst of edges does not keep its storage for good: once an interval
// needs a quarter of it, it goes, and the next report is still exact.
func TestStorageOfABurstIsLetGo(t *testing.T) {
	s := &Source{resolver: owner.New(owner.Options{Proc: t.TempDir(), NetnsDirs: []string{}}), top: 10, every: time.Minute}
	interval := func(n int) (probe.Interval, uint64) {
		var iv probe.Interval
		var opened uint64
		for i := range n {
			iv.Edges = append(iv.Edges, probe.Edge{Key: probe.Key{Netns: 1, Role: probe.Client, Local: netip.MustParseAddr("10.0.0.1"),
				Peer: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), PeerPort: 80}, Counts: probe.Counts{Opened: 1 + uint64(i%3)}})
			opened += 1 + uint64(i%3)
		}
		return iv, opened
	}
	for _, c := range []struct {
		edges int
		kept  bool
	}{{5000, true}, {4000, true}, {10, false}, {10, true}} {
		iv, want := interval(c.edges)
		s.hold(iv, nil)
		var got uint64
		for _, e := range s.takeHeld() {
			got += e.GetOpened()
		}
		if got != want {
			t.Errorf("%d edges: %d opened reported, want %d", c.edges, got, want)
		}
		if kept := s.pending.Edges != nil && s.aggs != nil; kept != c.kept {
			t.Errorf("after %d edges: storage kept %v (held edges' capacity %d, by owner %d), want %v",
				c.edges, kept, cap(s.pending.Edges), cap(s.aggs), c.kept)
		}
	}
}

// Holders gathered between two reports with edges past what a report
// carries are left out and counted, each once however many intervals
// name it, and the count rides on the report's other edge.
func TestHeldAddressesPastTheCapAreCounted(t *testing.T) {
	batch := func(from, n int) []*nbsv1.AddressHolder {
		var hs []*nbsv1.AddressHolder
		for i := from; i < from+n; i++ {
			hs = append(hs, &nbsv1.AddressHolder{Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(),
				Owner: &nbsv1.FlowOwner{Id: "pod:a.b"}})
		}
		return hs
	}
	s := &Source{log: slog.New(slog.DiscardHandler), holders: &holders{}}
	s.holdAddresses(batch(0, wire.MaxAddressHolders-10))
	s.holdAddresses(batch(0, wire.MaxAddressHolders-10)) // the same again: none new
	s.holdAddresses(batch(wire.MaxAddressHolders, 25))
	s.holdAddresses(batch(wire.MaxAddressHolders, 25)) // left out again: counted once
	if len(s.heldAddrs) != wire.MaxAddressHolders || s.heldLeft != 15 {
		t.Fatalf("%d held, %d counted as left out; want %d and 15", len(s.heldAddrs), s.heldLeft, wire.MaxAddressHolders)
	}

	cases := []struct {
		name  string
		edges []*nbsv1.FlowEdge
		left  uint64
		want  []uint32 // holders_left_out of each edge
	}{
		{"none left out", []*nbsv1.FlowEdge{{}}, 0, []uint32{0}},
		{"on the other edge there is", []*nbsv1.FlowEdge{{}, {Other: true, EdgesFolded: 3}}, 15, []uint32{0, 15}},
		{"an other edge of its own", []*nbsv1.FlowEdge{{}}, 15, []uint32{0, 15}},
		{"no edges at all", nil, 7, []uint32{7}},
		{"past 32 bits", nil, 1 << 40, []uint32{1<<32 - 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := withHoldersLeftOut(c.edges, c.left)
			if len(got) != len(c.want) {
				t.Fatalf("%d edges, want %d", len(got), len(c.want))
			}
			for i, e := range got {
				if e.GetHoldersLeftOut() != c.want[i] || (c.want[i] > 0 && !e.GetOther()) {
					t.Errorf("edge %d: other %v, holders_left_out %d; want %d on the other edge", i, e.GetOther(), e.GetHoldersLeftOut(), c.want[i])
				}
			}
		})
	}
}
