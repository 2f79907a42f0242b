package latencyrx

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// open opens the source, closed with the test, and returns its one
// capability. It times every read (no sample), so counts compare exactly.
func open(t *testing.T, env source.Env) (*Source, *nbsv1.Capability) {
	t.Helper()
	s, err := Open(context.Background(), Options{Env: env, ReadSample: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	caps := s.Capabilities()
	if len(caps) != 1 || caps[0].GetName() != capName {
		t.Fatalf("capabilities %v, want one, %s", caps, capName)
	}
	return s, caps[0]
}

func collect(t *testing.T, s *Source) source.Reading {
	t.Helper()
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// counts returns each histogram's count, and checks every histogram has a
// definition in the same reading.
func counts(t *testing.T, r source.Reading) map[string]uint64 {
	t.Helper()
	defined := map[string]bool{}
	for _, m := range r.Metrics {
		defined[m.ID] = true
	}
	out := map[string]uint64{}
	for id, h := range r.Histograms {
		if !defined[id] {
			t.Errorf("histogram %s has no definition", id)
		}
		out[id] = h.Count
	}
	return out
}

// traffic sends udp datagrams to udpAddr and tcp messages from A to
// readers in B, each read before the next is sent, so every datagram and
// every message is one packet to time and one read.
func traffic(t *testing.T, lab *netlab.Lab, udpAddr netip.Addr, udp, tcp int) {
	t.Helper()
	var (
		uc *net.UDPConn
		ln net.Listener
	)
	if err := lab.Do(lab.B, func() (err error) {
		if uc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(udpAddr, 0))); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", netip.AddrPortFrom(lab.IPB, 0).String())
		return err
	}); err != nil {
		t.Fatalf("readers in %s: %v", lab.B, err)
	}
	defer uc.Close()
	defer ln.Close()
	var c net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatalf("dial from %s: %v", lab.A, err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	_ = uc.SetReadDeadline(deadline)
	_ = srv.SetReadDeadline(deadline)
	buf := make([]byte, 2048)
	for i := range udp {
		lab.SendUDP(t, lab.A, uc.LocalAddr().(*net.UDPAddr).AddrPort(), 1, 200, 0)
		if _, err := uc.Read(buf); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
	msg := make([]byte, 300)
	for i := range tcp {
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		for got := 0; got < len(msg); {
			n, err := srv.Read(buf[:len(msg)-got])
			if err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			got += n
		}
	}
}

// Attached, the branch's seven histograms appear and carry this interval's
// packets only, each protocol in its child and both in the parents;
// detached, the branch is retired and reports nothing.
func TestIntervalsAndChildren(t *testing.T) {
	const udp, tcp = 25, 15
	lab := netlab.New(t)
	h, err := netns.Resolve(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	s, c := open(t, source.Env{Netns: h})
	if !c.GetAvailable() {
		netlab.SkipOrFail(t, "latencyrx: %s", c.GetReason())
	}
	if r := collect(t, s); len(r.Metrics) != 0 || len(r.Histograms) != 0 {
		t.Fatalf("detached source reported %d metrics, %d histograms", len(r.Metrics), len(r.Histograms))
	}
	traffic(t, lab, lab.IPB, 3, 3) // before the attachment: never counted
	if err := s.SetActive(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if !s.Active() {
		t.Fatal("not active after SetActive(true)")
	}

	traffic(t, lab, lab.IPB, udp, tcp)
	got := counts(t, collect(t, s))
	want := map[string]uint64{
		catalog.LatencyRXStackUDP: udp, catalog.LatencyRXReadUDP: udp,
		catalog.LatencyRXStackTCP: tcp, catalog.LatencyRXReadTCP: tcp,
		catalog.LatencyRXStack: udp + tcp, catalog.LatencyRXRead: udp + tcp, catalog.LatencyRX: udp + tcp,
	}
	for id, n := range want {
		if got[id] != n {
			t.Errorf("first interval: %s counted %d, want %d", id, got[id], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("first interval: histograms %v, want exactly %v", got, want)
	}

	// The next interval has only its own packets (IPv6 this time); idle,
	// every histogram is still there, empty.
	traffic(t, lab, lab.IP6B, 4, 0)
	got = counts(t, collect(t, s))
	if got[catalog.LatencyRXStackUDP] != 4 || got[catalog.LatencyRXReadUDP] != 4 || got[catalog.LatencyRXStackTCP] != 0 || got[catalog.LatencyRX] != 4 {
		t.Errorf("second interval: %v, want 4 UDP datagrams over IPv6, read, and no TCP", got)
	}
	got = counts(t, collect(t, s))
	for id := range want {
		if n, ok := got[id]; !ok || n != 0 {
			t.Errorf("idle interval: %s = %d (present %v), want an empty histogram", id, n, ok)
		}
	}

	if err := s.SetActive(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	if !slices.Equal(r.Retired, []string{catalog.LatencyRX}) || len(r.Metrics) != 0 {
		t.Errorf("after detaching: retired %v, %d metrics; want [%s] and none", r.Retired, len(r.Metrics), catalog.LatencyRX)
	}
	traffic(t, lab, lab.IPB, 3, 0)
	if err := s.SetActive(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	// What arrived while detached is not counted on reattaching.
	if got := counts(t, collect(t, s)); got[catalog.LatencyRX] != 0 {
		t.Errorf("after reattaching: %d observations from while it was detached", got[catalog.LatencyRX])
	}
}

// Without BPF the source never measures, cannot be attached, and says why.
func TestDisabled(t *testing.T) {
	s, c := open(t, source.Env{DisableBPF: true})
	if c.GetAvailable() || c.GetReason() != source.BPFDisabled {
		t.Fatalf("capability %v, want unavailable: %s", c, source.BPFDisabled)
	}
	if err := s.SetActive(context.Background(), true); err == nil {
		t.Fatal("SetActive(true) without BPF succeeded")
	}
	if r := collect(t, s); len(r.Metrics) != 0 || len(r.Histograms) != 0 {
		t.Fatalf("disabled source reported %d metrics", len(r.Metrics))
	}
	if s.Programs() != nil {
		t.Fatal("disabled source has programs")
	}
}
