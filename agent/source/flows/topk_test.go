package flows

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/nbs-project/nbs/agent/owner"
	probe "github.com/nbs-project/nbs/agent/probe/flows"
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
