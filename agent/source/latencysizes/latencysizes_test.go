package latencysizes

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/triggeredtest"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// txRx is the oracle, `ip -s link`: a device's TX and RX packets.
func txRx(t *testing.T, lab *netlab.Lab, ns, dev string) (tx, rx uint64) {
	t.Helper()
	out := lab.Exec(t, ns, "ip", "-s", "-j", "link", "show", "dev", dev)
	var ls []struct {
		Stats struct {
			RX struct{ Packets uint64 } `json:"rx"`
			TX struct{ Packets uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("ip -s -j link show dev %s: %v: %q", dev, err, out)
	}
	return ls[0].Stats.TX.Packets, ls[0].Stats.RX.Packets
}

// Attached in lab namespace A, the branch names A's device vA by name, with
// its xmit and received children counting every packet `ip -s link`
// counts, and the parent every packet sent; detached, the branch is
// retired and nothing is collected.
func TestBranchCountsTheDevice(t *testing.T) {
	lab := netlab.New(t)
	ctx := context.Background()
	s := triggeredtest.Active(t, lab.A, func(env source.Env) (*Source, error) {
		return Open(ctx, Options{Env: env})
	})
	// The device's counters are read on both sides of each collection:
	// the lab sends packets of its own (IPv6 neighbour discovery) at any
	// moment, and one between a read and a collection is counted by one
	// side only. What the branch counts must lie between the two.
	txPre, rxPre := txRx(t, lab, lab.A, "vA")
	triggeredtest.Collect(t, s)
	tx0, rx0 := txRx(t, lab, lab.A, "vA")
	lab.Bulk(t, 4<<20)
	tx1, rx1 := txRx(t, lab, lab.A, "vA")
	r, ids := triggeredtest.Collect(t, s)
	txPost, rxPost := txRx(t, lab, lab.A, "vA")
	dev := catalog.LatencySizes + "/va"
	for _, id := range []string{catalog.LatencySizes, dev, dev + "/" + catalog.SizesXmit, dev + "/" + catalog.SizesReceived} {
		if !slices.Contains(ids, id) || r.Histograms[id] == nil {
			t.Fatalf("%s missing: metrics %v", id, ids)
		}
	}
	if got := r.Histograms[dev+"/"+catalog.SizesXmit].Count; got < tx1-tx0 || got > txPost-txPre {
		t.Errorf("xmit: %d packets, ip link TX %d (at most %d with the reads around the collections)", got, tx1-tx0, txPost-txPre)
	}
	if got := r.Histograms[dev+"/"+catalog.SizesReceived].Count; got < rx1-rx0 || got > rxPost-rxPre {
		t.Errorf("received: %d packets, ip link RX %d (at most %d with the reads around the collections)", got, rx1-rx0, rxPost-rxPre)
	}
	sent := r.Histograms[dev].Count
	if all := r.Histograms[catalog.LatencySizes].Count; all != sent || sent == 0 || sent > txPost-txPre {
		t.Errorf("sent on vA %d, all devices %d, driver %d: want all = vA's (A has no other traffic), at most the driver's", sent, all, txPost-txPre)
	}
	if q := r.Histograms[dev].Quantile(0.99); q < 1536 {
		t.Errorf("sent p99 %.0f bytes, want above the MTU (TCP's GSO packets)", q)
	}

	triggeredtest.DetachRetires(t, s, catalog.LatencySizes)
}
