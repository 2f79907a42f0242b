package latencysizes

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
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

// bulk copies 4 MiB over one TCP connection from A to B.
func bulk(t *testing.T, lab *netlab.Lab) {
	t.Helper()
	var ln net.Listener
	if err := lab.Do(lab.B, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(lab.IPB.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = io.Copy(io.Discard, c)
			c.Close()
		}
		done <- err
	}()
	var c net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Write(make([]byte, 4<<20))
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("receive timed out")
	}
}

// Attached in lab namespace A, the branch names A's device vA by name, with
// its xmit and received children counting every packet `ip -s link`
// counts, and the parent every packet sent; detached, the branch is
// retired and nothing is collected.
func TestBranchCountsTheDevice(t *testing.T) {
	lab := netlab.New(t)
	h, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), Options{Env: source.Env{Netns: h}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Programs() == nil {
		netlab.SkipOrFail(t, "latencysizes: unavailable: %s", s.Capabilities()[0].GetReason())
	}
	ctx := context.Background()
	if err := s.SetActive(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	tx0, rx0 := txRx(t, lab, lab.A, "vA")
	bulk(t, lab)
	tx1, rx1 := txRx(t, lab, lab.A, "vA")
	r, err := s.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range r.Metrics {
		ids = append(ids, m.ID)
	}
	dev := catalog.LatencySizes + "/va"
	for _, id := range []string{catalog.LatencySizes, dev, dev + "/" + catalog.SizesXmit, dev + "/" + catalog.SizesReceived} {
		if !slices.Contains(ids, id) || r.Histograms[id] == nil {
			t.Fatalf("%s missing: metrics %v", id, ids)
		}
	}
	if got := r.Histograms[dev+"/"+catalog.SizesXmit].Count; got != tx1-tx0 {
		t.Errorf("xmit: %d packets, ip link TX %d", got, tx1-tx0)
	}
	if got := r.Histograms[dev+"/"+catalog.SizesReceived].Count; got != rx1-rx0 {
		t.Errorf("received: %d packets, ip link RX %d", got, rx1-rx0)
	}
	sent := r.Histograms[dev].Count
	if all := r.Histograms[catalog.LatencySizes].Count; all != sent || sent == 0 || sent > tx1-tx0 {
		t.Errorf("sent on vA %d, all devices %d, driver %d: want all = vA's (A has no other traffic), at most the driver's", sent, all, tx1-tx0)
	}
	if q := r.Histograms[dev].Quantile(0.99); q < 1536 {
		t.Errorf("sent p99 %.0f bytes, want above the MTU (TCP's GSO packets)", q)
	}

	if err := s.SetActive(ctx, false); err != nil {
		t.Fatal(err)
	}
	r, err = s.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.Retired, catalog.LatencySizes) || len(r.Metrics) != 0 {
		t.Errorf("detached: retired %v, metrics %d; want the branch retired, none", r.Retired, len(r.Metrics))
	}
}
