package drops

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/sourcetest"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func open(t *testing.T, opts Options) *Source {
	t.Helper()
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func collect(t *testing.T, s *Source) map[string]uint64 {
	t.Helper()
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range r.Metrics {
		defined[m.ID] = true
	}
	for id := range r.Counters {
		if !defined[id] {
			t.Errorf("counter %s has no definition", id)
		}
	}
	return r.Counters
}

// TestBPFReasons: a netfilter drop rule and UDP to a closed port in B; the
// children equal the rule's counter and UdpNoPorts, the root excludes
// not_specified, and the evidence reaches the reading.
func TestBPFReasons(t *testing.T) {
	const n = 150
	l := netlab.New(t)
	h, err := netns.Resolve(l.B)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: h, EvidencePerSecond: 10000}, MaxEventsPerInterval: 1000})
	if s.probe == nil {
		netlab.SkipOrFail(t, "drops: BPF unavailable: %s", s.bpfWhy)
	}
	l.Nft(t, l.B, `table inet nbs_drop {
	chain in {
		type filter hook input priority 0; policy accept;
		udp dport 7777 counter drop
	}
}`)
	c0, nb := collect(t, s), l.Nstat(t, l.B)
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IPB, 7777), n, 64, 100*time.Microsecond)
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IP6B, 9999), n, 64, 100*time.Microsecond)
	time.Sleep(100 * time.Millisecond)
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	na := l.Nstat(t, l.B)
	rule := l.NftPackets(t, l.B, "nbs_drop")
	nf := r.Counters["drops/netfilter_drop"] - c0["drops/netfilter_drop"]
	ns := r.Counters["drops/no_socket"] - c0["drops/no_socket"]
	noPorts := na["UdpNoPorts"] + na["Udp6NoPorts"] - nb["UdpNoPorts"] - nb["Udp6NoPorts"]
	t.Logf("netfilter_drop +%d (nft counter %d), no_socket +%d (UdpNoPorts+Udp6NoPorts +%d)", nf, rule, ns, noPorts)
	if nf != rule || rule != n {
		t.Errorf("drops/netfilter_drop +%d, nft counter %d, sent %d", nf, rule, n)
	}
	if ns != noPorts || noPorts != n {
		t.Errorf("drops/no_socket +%d, UdpNoPorts+Udp6NoPorts +%d, sent %d", ns, noPorts, n)
	}
	var sum uint64
	for id, v := range r.Counters {
		// Conntrack and device drops are counted apart (catalog.DropsDevice).
		if schema.Parent(id) == catalog.Drops && id != catalog.DropsNotSpecified && id != catalog.DropsConntrack && id != catalog.DropsDevice {
			sum += v
		}
	}
	if r.Counters[catalog.Drops] != sum {
		t.Errorf("drops = %d, children without not_specified sum to %d", r.Counters[catalog.Drops], sum)
	}
	byMetric := map[string]int{}
	for _, e := range r.Events {
		byMetric[e.GetMetricId()]++
		if e.GetMetricId() == "drops/netfilter_drop" && (e.GetFields()["protocol"] != "udp" ||
			e.GetFields()["dst"] != netip.AddrPortFrom(l.IPB, 7777).String() || e.GetFields()["function"] == "") {
			t.Errorf("netfilter_drop evidence %v", e.GetFields())
		}
	}
	if byMetric["drops/netfilter_drop"] != n || byMetric["drops/no_socket"] != n {
		t.Errorf("evidence by metric %v, want %d netfilter_drop and %d no_socket", byMetric, n, n)
	}
	var thr *catalog.Threshold
	for _, m := range r.Metrics {
		switch m.ID {
		case catalog.DropsNotSpecified:
			if m.Threshold != nil {
				t.Errorf("not_specified has a default threshold %+v", m.Threshold)
			}
		case "drops/netfilter_drop":
			thr = m.Threshold
		}
	}
	if thr == nil {
		t.Fatal("drops/netfilter_drop undefined or without a threshold")
	}
	// 150 drops in one 1-second interval: over netfilter_drop's crit level,
	// and the root follows.
	tr := tree.New()
	tr.Define(r.Metrics...)
	res := tr.Evaluate(map[string]float64{catalog.Drops: float64(sum), "drops/netfilter_drop": float64(nf), "drops/no_socket": float64(ns)}, nil)
	if res.State["drops/netfilter_drop"] != tree.Crit || res.State[catalog.Drops] != tree.Crit {
		t.Errorf("states %v: want drops/netfilter_drop and drops CRIT", res.State)
	}
	if s.Programs()["kfree_skb"] == nil {
		t.Error("Programs() has no kfree_skb")
	}
}

// TestProcFallback: without BPF, UDP to a closed port shows as
// drops/no_socket from UdpNoPorts, and the source says why.
func TestProcFallback(t *testing.T) {
	const n = 40
	l := netlab.New(t)
	h, err := netns.Resolve(l.B)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: h, DisableBPF: true}})
	c0, nb := collect(t, s), l.Nstat(t, l.B)
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IPB, 9999), n, 64, 0)
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IP6B, 9999), n, 64, 0)
	time.Sleep(50 * time.Millisecond)
	c1, na := collect(t, s), l.Nstat(t, l.B)
	noPorts := na["UdpNoPorts"] + na["Udp6NoPorts"] - nb["UdpNoPorts"] - nb["Udp6NoPorts"]
	if got := c1["drops/no_socket"] - c0["drops/no_socket"]; got != noPorts || noPorts != 2*n {
		t.Errorf("drops/no_socket +%d, nstat +%d, sent %d", got, noPorts, 2*n)
	}
	if c1[catalog.Drops] < c1["drops/no_socket"] {
		t.Errorf("root %d below its child %d", c1[catalog.Drops], c1["drops/no_socket"])
	}
	caps := s.Capabilities()
	if len(caps) != 4 || caps[0].GetAvailable() || caps[0].GetReason() == "" || !caps[1].GetAvailable() ||
		caps[2].GetName() != capConntrack || caps[3].GetName() != capDevice || !caps[3].GetAvailable() {
		t.Errorf("capabilities %v", caps)
	}
	if s.Programs() != nil || s.Name() != "drops (/proc)" {
		t.Errorf("Programs() = %v, Name() = %q", s.Programs(), s.Name())
	}
}

// TestOwners drops UDP to closed ports in a pod's namespace, a named one
// and one a process holds, with the probe counting every namespace, and
// checks the owner children of drops/no_socket against each namespace's
// UdpNoPorts, that children add up to their parent exactly, and that the
// evidence names each owner.
func TestOwners(t *testing.T) {
	l := sourcetest.NewOwnerLab(t)
	// Many places: other tests' drops on this host must not crowd the lab's
	// owners out.
	s := open(t, Options{Env: source.Env{Netns: l.Self, AllNetns: true, Owners: l.Resolver, TopOwners: 64,
		EvidencePerSecond: 10000}, MaxEventsPerInterval: 1000})
	if s.probe == nil {
		netlab.SkipOrFail(t, "drops: BPF unavailable: %s", s.bpfWhy)
	}
	collect := func() (map[string]uint64, []string, []*nbsv1.Event) {
		r, err := s.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r.Counters, r.Retired, r.Events
	}
	base, _, _ := collect()
	led := sourcetest.NewLedger(base)
	counts := []int{40, 30, 20}
	before := make([]map[string]uint64, len(l.Cases))
	for i, c := range l.Cases {
		before[i] = sourcetest.SNMP(t, c.H)
		netlab.SendUDPIn(t, c.H, netip.MustParseAddrPort("127.0.0.1:9999"), counts[i], 64, 0)
	}
	events := l.Collect(t, led, collect)
	parent := catalog.DropReason("no_socket").ID
	for i, c := range l.Cases {
		after := sourcetest.SNMP(t, c.H)
		noPorts := after["Udp.NoPorts"] - before[i]["Udp.NoPorts"]
		if noPorts != uint64(counts[i]) {
			t.Fatalf("%s: oracle UdpNoPorts +%d, sent %d", c.Label, noPorts, counts[i])
		}
		if got := led.Inc[parent+"/"+c.ID]; got != noPorts {
			t.Errorf("%s/%s = %d, UdpNoPorts +%d", parent, c.ID, got, noPorts)
		}
		l.CheckEvents(t, events, c, parent)
	}
	sourcetest.CheckSum(t, led, parent)
}
