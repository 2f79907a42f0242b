package latencyecn

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/triggeredtest"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// Attached in lab namespace B, the branch counts the CE marks B's vB
// received from A's address as the marking rule in A counted them, under
// the device's child and the peer's; detached, the branch is retired.
func TestBranchCountsMarksByDeviceAndPeer(t *testing.T) {
	lab := netlab.New(t)
	ctx := context.Background()
	s := triggeredtest.Active(t, lab.B, func(env source.Env) (*Source, error) {
		return Open(ctx, Options{Env: env})
	})
	lab.Nft(t, lab.A, fmt.Sprintf(`table inet nbs_ce { chain out { type filter hook output priority 0; policy accept;
  ip daddr %s udp dport 9999 numgen random mod 4 == 0 counter ip ecn set ce
}
}`, lab.IPB))
	r0, _ := triggeredtest.Collect(t, s)
	lab.SendUDP(t, lab.A, netip.AddrPortFrom(lab.IPB, 9999), 2000, 100, 0)
	r, ids := triggeredtest.Collect(t, s)
	marked := lab.NftPackets(t, lab.A, "nbs_ce")
	dev := catalog.LatencyECNDevices + "/vb"
	pe := dev + "/" + catalog.MetricSegment(lab.IPA.String())
	for _, id := range []string{catalog.LatencyECNDevices, dev, pe} {
		if !slices.Contains(ids, id) {
			t.Fatalf("%s missing: %v", id, ids)
		}
		if got := r.Counters[id] - r0.Counters[id]; got != marked || marked == 0 {
			t.Errorf("%s: %d marks; the marking rule counted %d", id, got, marked)
		}
	}
	triggeredtest.DetachRetires(t, s, catalog.LatencyECNDevices)
}
