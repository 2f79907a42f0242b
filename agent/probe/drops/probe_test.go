package drops

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/evidence"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func load(t *testing.T, opts Options) *Probe {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "drops: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// named returns p's counts by reason name.
func named(t *testing.T, p *Probe) map[string]uint64 {
	t.Helper()
	c, err := p.Counts()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for code, v := range c.ByReason {
		out[p.Names().Reason(code)] = v
	}
	if c.Overflow > 0 {
		out["overflow"] = c.Overflow
	}
	return out
}

type collector struct {
	p      *Probe
	mu     sync.Mutex
	events []Event
	cancel context.CancelFunc
	done   chan error
}

func collect(p *Probe) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{p: p, cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- p.ReadEvents(ctx, func(e Event) {
			c.mu.Lock()
			c.events = append(c.events, e)
			c.mu.Unlock()
		})
	}()
	return c
}

// stop waits until n events matched keep (or 5 s), then stops reading and
// returns the matching ones. It has the reader take what waits in the ring
// (SyncEvents), as the agent's collections do, rather than wait for a poll.
func (c *collector) stop(t *testing.T, n int, keep func(Event) bool) []Event {
	t.Helper()
	var out []Event
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.sync()
		c.mu.Lock()
		out = out[:0]
		for _, e := range c.events {
			if keep(e) {
				out = append(out, e)
			}
		}
		c.mu.Unlock()
		if len(out) >= n || time.Now().After(deadline) {
			break
		}
	}
	c.cancel()
	if err := <-c.done; err != nil {
		t.Errorf("ReadEvents: %v", err)
	}
	return out
}

// sync has the reader take what waits in the ring, for a while.
func (c *collector) sync() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = c.p.SyncEvents(ctx) // a timeout: the loop tries again
}

func ifindex(t *testing.T, l *netlab.Lab, ns, dev string) uint32 {
	t.Helper()
	var idx int
	if err := l.Do(ns, func() error {
		i, err := net.InterfaceByName(dev)
		if err == nil {
			idx = i.Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return uint32(idx)
}

// TestNetfilterDrop: an nftables drop rule in B; the probe's netfilter_drop
// count must equal the rule's own counter, with evidence naming the packets.
func TestNetfilterDrop(t *testing.T) {
	const n = 200
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B), EvidencePerSecond: 100000})
	pA := load(t, Options{NetnsInode: l.Inode(t, l.A)})
	l.Nft(t, l.B, `table inet nbs_drop {
	chain in {
		type filter hook input priority 0; policy accept;
		udp dport 7777 counter drop
	}
}`)
	ev := collect(p)
	before, beforeA := named(t, p), named(t, pA)
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IPB, 7777), n, 100, 100*time.Microsecond)
	rule := l.NftPackets(t, l.B, "nbs_drop")
	after, afterA := named(t, p), named(t, pA)
	got := after["netfilter_drop"] - before["netfilter_drop"]
	t.Logf("B: nft counter %d, BPF netfilter_drop +%d", rule, got)
	if rule != n || got != rule {
		t.Errorf("BPF netfilter_drop +%d, nft rule counter %d, sent %d: want all equal", got, rule, n)
	}
	if d := afterA["netfilter_drop"] - beforeA["netfilter_drop"]; d != 0 {
		t.Errorf("A's probe counted %d of B's netfilter drops", d)
	}

	vB := ifindex(t, l, l.B, "vB")
	events := ev.stop(t, n, func(e Event) bool { return e.Reason == "netfilter_drop" })
	if len(events) != n {
		t.Errorf("%d netfilter_drop events, want %d", len(events), n)
	}
	for _, e := range events {
		if e.Protocol != "udp" || e.Src.Addr() != l.IPA || e.Src.Port() == 0 ||
			e.Dst != netip.AddrPortFrom(l.IPB, 7777) || e.Netns != l.Inode(t, l.B) || e.Ifindex != vB {
			t.Errorf("event %+v: want udp %s:* -> %s:7777 on ifindex %d in netns %d", e, l.IPA, l.IPB, vB, l.Inode(t, l.B))
			break
		}
		if e.Location == 0 {
			t.Errorf("event without location: %+v", e)
			break
		}
	}
	if len(events) > 0 {
		t.Logf("netfilter_drop evidence: %+v", events[0])
		// Root can read kallsyms: the drop site is named, in netfilter.
		if f := p.Functions([]uint64{events[0].Location})[events[0].Location]; !strings.HasPrefix(f, "nf") || !strings.Contains(f, "+0x") {
			t.Errorf("netfilter drop located in %q, want a netfilter function+offset", f)
		}
	}
}

// TestUDPNoSocketAndRcvbuf: UDP to a closed port (no_socket, UdpNoPorts)
// and to a socket that never reads (socket_rcvbuff, UdpRcvbufErrors), in
// both address families.
func TestUDPNoSocketAndRcvbuf(t *testing.T) {
	const n = 100
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B), EvidencePerSecond: -1})

	var rfd4, rfd6 int
	if err := l.Do(l.B, func() error {
		for _, s := range []struct {
			fd     *int
			family int
			sa     unix.Sockaddr
		}{
			{&rfd4, unix.AF_INET, &unix.SockaddrInet4{Port: 8888, Addr: l.IPB.As4()}},
			{&rfd6, unix.AF_INET6, &unix.SockaddrInet6{Port: 8888, Addr: l.IP6B.As16()}},
		} {
			fd, err := unix.Socket(s.family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			*s.fd = fd
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1024); err != nil {
				return err
			}
			if err := unix.Bind(fd, s.sa); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd4)
	defer unix.Close(rfd6)

	before, nb := named(t, p), l.Nstat(t, l.B)
	for _, dst := range []netip.Addr{l.IPB, l.IP6B} {
		l.SendUDP(t, l.A, netip.AddrPortFrom(dst, 9999), n, 100, 100*time.Microsecond)
		l.SendUDP(t, l.A, netip.AddrPortFrom(dst, 8888), n, 1000, 100*time.Microsecond)
	}
	time.Sleep(50 * time.Millisecond) // the last datagrams cross the veth
	after, na := named(t, p), l.Nstat(t, l.B)
	delta := func(k string) uint64 { return na[k] - nb[k] }
	noPorts := delta("UdpNoPorts") + delta("Udp6NoPorts")
	rcvbuf := delta("UdpRcvbufErrors") + delta("Udp6RcvbufErrors")
	gotNoSock := after["no_socket"] - before["no_socket"]
	gotRcvbuf := after["socket_rcvbuff"] - before["socket_rcvbuff"]
	t.Logf("B: BPF no_socket +%d, UdpNoPorts+Udp6NoPorts +%d; BPF socket_rcvbuff +%d, UdpRcvbufErrors+Udp6RcvbufErrors +%d",
		gotNoSock, noPorts, gotRcvbuf, rcvbuf)
	if noPorts != 2*n || gotNoSock != noPorts {
		t.Errorf("no_socket +%d, nstat +%d, sent %d", gotNoSock, noPorts, 2*n)
	}
	if rcvbuf < n || gotRcvbuf != rcvbuf {
		t.Errorf("socket_rcvbuff +%d, nstat +%d (want equal, at least %d)", gotRcvbuf, rcvbuf, n)
	}
}

// TestCountsByNetns: counting every namespace, UDP to closed ports in A
// and in B lands under each namespace's inode, equal to each namespace's
// own UdpNoPorts; with the per-CPU table, and without it, every drop in
// the hash behind it.
func TestCountsByNetns(t *testing.T) {
	l := netlab.New(t)
	for _, noTable := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-table=%v", noTable), func(t *testing.T) {
			countsByNetns(t, l, load(t, Options{EvidencePerSecond: -1, noNetnsTable: noTable}))
		})
	}
}

func countsByNetns(t *testing.T, l *netlab.Lab, p *Probe) {
	const nB, nA = 120, 80
	noSocket := func() map[uint32]uint64 {
		byNetns, err := p.CountsByNetns()
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint32]uint64{}
		for ns, c := range byNetns {
			for code, v := range c.ByReason {
				if p.Names().Reason(code) == "no_socket" {
					out[ns] += v
				}
			}
		}
		return out
	}
	before, sa, sb := noSocket(), l.Nstat(t, l.A), l.Nstat(t, l.B)
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IPB, 9999), nB, 100, 100*time.Microsecond)
	l.SendUDP(t, l.B, netip.AddrPortFrom(l.IPA, 9999), nA, 100, 100*time.Microsecond)
	time.Sleep(50 * time.Millisecond) // the last datagrams cross the veth
	after, aa, ab := noSocket(), l.Nstat(t, l.A), l.Nstat(t, l.B)
	for _, c := range []struct {
		ns    string
		sent  int
		nstat uint64
	}{
		{l.A, nA, aa["UdpNoPorts"] - sa["UdpNoPorts"]},
		{l.B, nB, ab["UdpNoPorts"] - sb["UdpNoPorts"]},
	} {
		ino := l.Inode(t, c.ns)
		got := after[ino] - before[ino]
		t.Logf("%s: BPF no_socket +%d, UdpNoPorts +%d", c.ns, got, c.nstat)
		if c.nstat != uint64(c.sent) || got != c.nstat {
			t.Errorf("%s: BPF no_socket +%d, UdpNoPorts +%d, sent %d: want all equal", c.ns, got, c.nstat, c.sent)
		}
	}
}

// TestEvidenceRateLimit: a burst far over the limit yields the bucket (the
// limit) and at most its refill over the burst, and every drop is an event
// or a suppression.
func TestEvidenceRateLimit(t *testing.T) {
	const limit, burst = 5, 300
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B), EvidencePerSecond: limit})
	ev := collect(p)
	start := time.Now()
	l.SendUDP(t, l.A, netip.AddrPortFrom(l.IPB, 9999), burst, 10, 0)
	elapsed := time.Since(start)
	events := ev.stop(t, limit, func(Event) bool { return true })
	var total uint64
	for _, v := range named(t, p) {
		total += v
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	maxEvents := limit + int(math.Ceil(limit*elapsed.Seconds()))
	t.Logf("%d drops in %s: %d events (max %d), %d suppressed, %d ring full", total, elapsed, len(events), maxEvents, st.Suppressed, st.RingFull)
	if len(events) < limit || len(events) > maxEvents {
		t.Errorf("%d events, want %d..%d", len(events), limit, maxEvents)
	}
	if got := uint64(len(events)) + st.Suppressed + st.RingFull; got != total {
		t.Errorf("events %d + suppressed %d + ring full %d = %d, want every drop (%d)", len(events), st.Suppressed, st.RingFull, got, total)
	}
}

// The generated event layout decodes as the kernel writes it.
func TestDecodeEvent(t *testing.T) {
	p := &Probe{names: Names{reasons: map[uint32]string{12: "netfilter_drop"}}, clock: evidence.ClockWithOffset(time.Second)}
	raw := make([]byte, 72)
	le := func(off int, v uint64, size int) {
		for i := 0; i < size; i++ {
			raw[off+i] = byte(v >> (8 * i))
		}
	}
	le(0, 5_000_000_000, 8)      // ts
	le(8, 0xffffffff81234567, 8) // location
	le(16, 4026531840, 4)        // netns
	le(20, 12, 4)                // reason
	le(24, 3, 4)                 // ifindex
	le(28, unix.AF_INET6, 2)     // family
	le(30, unix.ETH_P_IPV6, 2)   // l3proto
	raw[32] = unix.IPPROTO_UDP   // l4proto
	le(34, 40000, 2)             // sport
	le(36, 7777, 2)              // dport
	copy(raw[38:], netip.MustParseAddr("2001:2::1").AsSlice())
	copy(raw[54:], netip.MustParseAddr("::ffff:198.18.0.2").AsSlice())
	e, err := p.decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := "2001:2::1]:40000 198.18.0.2:7777 udp netfilter_drop 12 3 4026531840"
	if got := fmt.Sprintf("%s %s %s %s %d %d %d", strings.TrimPrefix(e.Src.String(), "["), e.Dst, e.Protocol, e.Reason, e.Code, e.Ifindex, e.Netns); got != want {
		t.Errorf("decoded %q, want %q", got, want)
	}
	if e.Time.UnixNano() != 6_000_000_000 || e.Location != 0xffffffff81234567 {
		t.Errorf("decoded time %d location %#x", e.Time.UnixNano(), e.Location)
	}
	if _, err := p.decode(raw[:30]); err == nil {
		t.Error("short record decoded without error")
	}
	for _, c := range []struct {
		l3     uint16
		family uint16
		l4     uint8
		want   string
	}{{unix.ETH_P_ARP, 0, 0, "arp"}, {0x88cc, 0, 0, "ethertype_0x88cc"}, {unix.ETH_P_IP, unix.AF_INET, 1, "icmp"}, {unix.ETH_P_IP, unix.AF_INET, 99, "ipproto_99"}, {0, 0, 0, ""}} {
		if got := protocol(c.l3, c.family, c.l4); got != c.want {
			t.Errorf("protocol(%#x, %d, %d) = %q, want %q", c.l3, c.family, c.l4, got, c.want)
		}
	}
}

// The kernel's lookup names addresses as kallsyms, read by the test
// itself, places them, more than one batch of them at a time.
func TestKsyms(t *testing.T) {
	k := newKsyms(nil)
	if k.err != nil {
		netlab.SkipOrFail(t, "%v", k.err)
	}
	t.Cleanup(func() {
		if err := k.close(); err != nil {
			t.Error(err)
		}
	})
	want := map[uint64]string{}
	for _, name := range []string{"nf_hook_slow", "tcp_v4_rcv", "__udp4_lib_rcv", "ip_rcv"} {
		addr, err := symbolAddr("/proc/kallsyms", name)
		if err != nil {
			netlab.SkipOrFail(t, "kallsyms: %v", err)
		}
		for off := uint64(1); off <= 5; off++ {
			want[addr+off] = fmt.Sprintf("%s+0x%x", name, off)
		}
	}
	addrs := []uint64{0, 1}
	for a := range want {
		addrs = append(addrs, a)
	}
	got := k.names(addrs)
	if len(got) != len(want) {
		t.Errorf("names of %d addresses: %d named, want %d: %v", len(addrs), len(got), len(want), got)
	}
	for a, w := range want {
		if got[a] != w {
			t.Errorf("names(%#x) = %q, want %q", a, got[a], w)
		}
	}
	if _, ok := k.cache[1]; !ok || k.cache[1] != "" || len(k.cache) != len(want)+1 {
		t.Errorf("cache has %d entries (1: %q): want every address looked up, 1 unnamed", len(k.cache), k.cache[1])
	}
	if err := k.close(); err != nil {
		t.Fatal(err)
	}
	if got := k.names([]uint64{addrs[2] + 100}); len(got) != 0 {
		t.Errorf("names after close = %v, want none", got)
	}
}

func TestSymbolName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nf_hook_slow+0x4/0x110", "nf_hook_slow+0x4"},
		{"nft_do_chain+0x2a/0x5c0 [nf_tables]", "nft_do_chain+0x2a"},
		{"0xffffffffc0001234", ""},
		{"", ""},
	} {
		b := make([]byte, ksymLen)
		copy(b, c.in)
		if got := symbolName(b); got != c.want {
			t.Errorf("symbolName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// symbolAddr finds a text symbol's address in kallsyms, independently of ksyms.
func symbolAddr(path, name string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[1] == "T" || f[1] == "t") && f[2] == name {
			a, err := strconv.ParseUint(f[0], 16, 64)
			if err == nil && a == 0 {
				err = fmt.Errorf("%s shows no addresses (kptr_restrict)", path)
			}
			return a, err
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}

// TestProgramsAndClose covers Programs, and calls after Close.
func TestProgramsAndClose(t *testing.T) {
	p, err := Load(Options{})
	if err != nil {
		netlab.SkipOrFail(t, "drops: %v", err)
	}
	prog := p.Programs()["kfree_skb"]
	if prog == nil {
		t.Fatal("Programs()[kfree_skb] missing")
	}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	insns, _ := info.VerifiedInstructions()
	t.Logf("kfree_skb: %s, %d instructions verified", info.Name, insns)
	done := make(chan error, 1)
	go func() { done <- p.ReadEvents(context.Background(), func(Event) {}) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		running := p.ring.Reading()
		if running || time.Now().After(deadline) {
			break
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ReadEvents after Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadEvents did not return after Close")
	}
	if _, err := p.Counts(); err == nil {
		t.Error("Counts after Close: no error")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
