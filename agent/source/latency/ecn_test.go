package latency

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// TestECNAccounting: the children are the sums of the IPv4 and IPv6
// counters; ce_share is of the interval and has no value (Idle, never 0)
// when nothing ECN-capable arrived, at the first reading, or when the
// counters went back; a kernel without the counters has no latency/ecn and
// says why, and one without TCPDeliveredCE or a readable tcp_ecn lacks
// only that child.
func TestECNAccounting(t *testing.T) {
	s := &Source{log: slog.New(slog.DiscardHandler), ecn: ecn{why: "not read yet"}}
	counters := func(ce, ect0, ect1, noect, delivered uint64) [2]procnet.Counters {
		c := procnet.Counters{"IpExt.InCEPkts": ce, "IpExt.InECT0Pkts": ect0, "IpExt.InECT1Pkts": ect1, "IpExt.InNoECTPkts": noect,
			"TcpExt.TCPDeliveredCE": delivered}
		// IPv6 adds one of each, so a child that forgot it is off by one.
		c6 := procnet.Counters{"Ip6.InCEPkts": 1, "Ip6.InECT0Pkts": 1, "Ip6.InECT1Pkts": 1, "Ip6.InNoECTPkts": 1}
		return [2]procnet.Counters{c, c6}
	}
	noDelivered := counters(40, 250, 10, 5000, 0)
	delete(noDelivered[0], "TcpExt.TCPDeliveredCE")
	type want struct {
		counters map[string]uint64
		share    float64 // -1: Idle, no value
		mode     float64 // -1: no gauge
		metrics  int
		retired  bool
	}
	full := len(catalog.ECNTree())
	for _, step := range []struct {
		name string
		in   [2]procnet.Counters // snmp+netstat, snmp6
		mode int64
		want want
	}{
		{name: "first reading: no interval yet", in: counters(10, 100, 0, 1000, 7), mode: 1,
			want: want{counters: map[string]uint64{catalog.LatencyECN: 11, catalog.LatencyECNDeliveredCE: 7}, share: -1, mode: 1, metrics: full}},
		{name: "10 CE of 100 ECN-capable", in: counters(20, 180, 10, 1900, 50), mode: 1,
			want: want{counters: map[string]uint64{catalog.LatencyECN: 21}, share: 10, mode: 1, metrics: full}},
		{name: "only Not-ECT traffic: no share, not 0", in: counters(20, 180, 10, 5000, 50), mode: 2,
			want: want{counters: map[string]uint64{catalog.LatencyECN: 21}, share: -1, mode: 2, metrics: full}},
		{name: "ECN-capable, none marked: 0%", in: counters(20, 230, 10, 5000, 50), mode: 2,
			want: want{counters: map[string]uint64{catalog.LatencyECN: 21}, share: 0, mode: 2, metrics: full}},
		{name: "no TCPDeliveredCE, tcp_ecn unreadable", in: noDelivered, mode: -1,
			want: want{counters: map[string]uint64{catalog.LatencyECN: 41}, share: 50, mode: -1, metrics: full - 2}},
		{name: "no ECN counters at all", in: [2]procnet.Counters{{"Tcp.RetransSegs": 3}, {}}, mode: 1,
			want: want{share: -1, mode: -1, retired: true}},
	} {
		r := source.Reading{Counters: map[string]uint64{}}
		s.addECN(&r, step.in[0], step.in[1], step.mode)
		for id, v := range step.want.counters {
			if r.Counters[id] != v {
				t.Errorf("%s: %s = %d, want %d", step.name, id, r.Counters[id], v)
			}
		}
		idle := strings.Contains(fmt.Sprint(r.Idle), catalog.LatencyECNShare)
		got, has := r.Gauges[catalog.LatencyECNShare]
		switch {
		case step.want.share < 0 && (has || (!idle && !step.want.retired)):
			t.Errorf("%s: ce_share %v (set %v), idle %v: want no value, idle", step.name, got, has, idle)
		case step.want.share >= 0 && (!has || idle || math.Abs(got-step.want.share) > 1e-9):
			t.Errorf("%s: ce_share %v (set %v), idle %v: want %v", step.name, got, has, idle, step.want.share)
		}
		mode, hasMode := r.Gauges[catalog.LatencyECNMode]
		if (step.want.mode < 0) == hasMode || (hasMode && mode != step.want.mode) {
			t.Errorf("%s: tcp_ecn gauge %v (set %v), want %v", step.name, mode, hasMode, step.want.mode)
		}
		if len(r.Metrics) != step.want.metrics {
			t.Errorf("%s: %d metrics defined, want %d", step.name, len(r.Metrics), step.want.metrics)
		}
		if step.want.retired != (fmt.Sprint(r.Retired) == "["+catalog.LatencyECN+"]") {
			t.Errorf("%s: retired %v", step.name, r.Retired)
		}
		if c := s.ecnCapability(); c.GetAvailable() == step.want.retired {
			t.Errorf("%s: capability %v", step.name, c)
		}
	}
	if c := s.ecnCapability(); !strings.Contains(c.GetReason(), "no IpExt.InCEPkts") {
		t.Errorf("capability without the counters: %v, want it to say which counter is missing", c)
	}
}

// TestECNThreshold: the default threshold turns a steady 10% CE share CRIT
// after its hold, and the latency root with it; 0.5% stays OK.
func TestECNThreshold(t *testing.T) {
	for _, c := range []struct {
		share float64
		want  tree.State
	}{{0.5, tree.OK}, {2, tree.Warn}, {10, tree.Crit}} {
		tr := tree.New()
		tr.Define(catalog.LatencyTree()...)
		tr.Define(catalog.ECNTree()...)
		values := map[string]float64{}
		for _, m := range append(catalog.LatencyTree(), catalog.ECNTree()...) {
			values[m.ID] = 0
		}
		values[catalog.LatencyECNShare] = c.share
		var res tree.Result
		for range 3 {
			res = tr.Evaluate(values, nil)
		}
		if res.State[catalog.LatencyECNShare] != c.want || res.State[catalog.Latency] != c.want {
			t.Errorf("share %v%%: ce_share %v, latency %v, want both %v", c.share, res.State[catalog.LatencyECNShare], res.State[catalog.Latency], c.want)
		}
	}
}

// ecnPort is the port of TestECNMarks's transfers; the marking rule
// matches it.
const ecnPort = 5301

// TestECNMarks: ECN on in both namespaces of the lab, and an nftables rule
// in A marking every tenth ECT(0) data segment to B CE on its way out (the
// oracle: the rule's own counter). After a paced TCP transfer over IPv4 and
// one over IPv6, B's latency/ecn equals the rule's counter and B's
// IpExtInCEPkts+Ip6InCEPkts as nstat reads them, ect0 equals nstat's,
// ce_share is CE over the ECN-capable packets (about 10%), A's
// latency/ecn/delivered_ce equals A's TcpExtTCPDeliveredCE, and tcp_ecn
// reads 1.
func TestECNMarks(t *testing.T) {
	l := netlab.New(t)
	for _, ns := range []string{l.A, l.B} {
		if err := l.Do(ns, func() error { return os.WriteFile(TCPECNPath, []byte("1"), 0) }); err != nil {
			t.Fatalf("enable ECN in %s: %v", ns, err)
		}
	}
	// TCP hands the stack GSO aggregates whatever the device's offloads
	// say, and the rule would count (and mark) an aggregate once, the
	// receiver each of its packets: one segment an skb makes them the same.
	l.Exec(t, l.A, "ip", "link", "set", "dev", "vA", "gso_max_segs", "1")
	const table = "nbs_ecn"
	l.Nft(t, l.A, fmt.Sprintf(`table inet %s {
	chain out {
		type filter hook postrouting priority 0; policy accept;
		ip daddr %s tcp dport %d ip ecn ect0 numgen inc mod 10 == 0 counter ip ecn set ce
		ip6 daddr %s tcp dport %d ip6 ecn ect0 numgen inc mod 10 == 0 counter ip6 ecn set ce
	}
}`, table, l.IPB, ecnPort, l.IP6B, ecnPort))
	openIn := func(ns string) *Source {
		h, err := netns.Resolve(ns)
		if err != nil {
			t.Fatal(err)
		}
		// The counters are /proc's with or without BPF; no probe to load.
		return open(t, Options{Env: source.Env{Netns: h, DisableBPF: true}})
	}
	sA, sB := openIn(l.A), openIn(l.B)
	nA, nB := l.Nstat(t, l.A), l.Nstat(t, l.B)
	rA, rB := collect(t, sA), collect(t, sB)

	for _, dst := range []netip.Addr{l.IPB, l.IP6B} {
		ecnTransfer(t, l, netip.AddrPortFrom(dst, ecnPort), 2<<20)
	}

	marked := l.NftPackets(t, l.A, table)
	nA2, nB2 := l.Nstat(t, l.A), l.Nstat(t, l.B)
	readingB, err := sB.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rA2, rB2 := collect(t, sA), readingB.Counters
	delta := func(after, before map[string]uint64, names ...string) (d uint64) {
		for _, n := range names {
			d += after[n] - before[n]
		}
		return d
	}
	ce := delta(nB2, nB, "IpExtInCEPkts", "Ip6InCEPkts")
	ect0 := delta(nB2, nB, "IpExtInECT0Pkts", "Ip6InECT0Pkts")
	ect1 := delta(nB2, nB, "IpExtInECT1Pkts", "Ip6InECT1Pkts")
	retrans := delta(nA2, nA, "TcpRetransSegs")
	// 2 MiB twice at ~1448 bytes a segment: ~2,900 segments, ~290 marked.
	if marked < 200 {
		t.Fatalf("the marking rule counted %d packets, want ~290: the lab did not negotiate ECN", marked)
	}
	if got := rB2[catalog.LatencyECN] - rB[catalog.LatencyECN]; got != marked || got != ce {
		t.Errorf("latency/ecn in B counted %d, the marking rule %d, nstat %d (A retransmitted %d): want all equal", got, marked, ce, retrans)
	}
	if ect0 == 0 {
		t.Errorf("nstat counted no ECT(0) packets in B: the lab did not negotiate ECN")
	}
	share, ok := readingB.Gauges[catalog.LatencyECNShare]
	if want := 100 * float64(ce) / float64(ce+ect0+ect1); !ok || math.Abs(share-want) > 1e-9 || share < 9 || share > 11 {
		t.Errorf("ce_share %v (set %v), want %v from nstat, about 10%%", share, ok, want)
	}
	got, want := rA2[catalog.LatencyECNDeliveredCE]-rA[catalog.LatencyECNDeliveredCE], delta(nA2, nA, "TcpExtTCPDeliveredCE")
	if got != want || want < marked {
		// Classic ECN echoes a mark until the sender's CWR arrives: at
		// least every marked segment counts.
		t.Errorf("latency/ecn/delivered_ce in A counted %d, nstat %d: want equal, at least the %d marked", got, want, marked)
	}
	if readingB.Gauges[catalog.LatencyECNMode] != 1 {
		t.Errorf("tcp_ecn gauge %v, want 1", readingB.Gauges[catalog.LatencyECNMode])
	}
	for _, s := range []*Source{sA, sB} {
		caps := s.Capabilities()
		if c := caps[len(caps)-1]; c.GetName() != capECN || !c.GetAvailable() || !strings.Contains(c.GetReason(), "tcp_ecn=1") {
			t.Errorf("capability %v: want %s available, saying tcp_ecn=1", c, capECN)
		}
	}
	t.Logf("marked %d, B's CE %d of %d ECN-capable (%.2f%%), A's TCPDeliveredCE %d, A retransmitted %d", marked, ce, ce+ect0+ect1, share, want, retrans)
}

// ecnTransfer sends n bytes from A to dst (in B), paced so that no packet
// overflows the veth's backlog (a marked packet lost would be missing from
// B's counts), and returns once B has read them all and A's every byte is
// acknowledged.
func ecnTransfer(t *testing.T, l *netlab.Lab, dst netip.AddrPort, n int) {
	t.Helper()
	addr, wait := l.Sink(t, dst, int64(n))
	var c net.Conn
	if err := l.Do(l.A, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect from %s: %v", l.A, err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(f func(fd int) error) {
		t.Helper()
		var ferr error
		if err := raw.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil || ferr != nil {
			t.Fatalf("socket option: %v %v", err, ferr)
		}
	}
	// 200 Mbit/s: 2 MiB in ~85 ms, far below what the veth's backlog drops.
	ctl(func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, 25_000_000)
	})
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatalf("send to %s: %v", dst, err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var info *unix.TCPInfo
		ctl(func(fd int) (err error) {
			info, err = unix.GetsockoptTCPInfo(fd, syscall.IPPROTO_TCP, unix.TCP_INFO)
			return err
		})
		if info.Unacked == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d segments to %s unacknowledged after 10s", info.Unacked, dst)
		}
	}
}
