package drops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func TestParseConntrackStat(t *testing.T) {
	const six18 = `entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart
00000010  00000000 00000000 00000000 00000003 00000000 00000000 00000000 00000000 00000001 0000000a 00000002 00000000  00000000 00000000 00000000 00000000
00000010  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 000000f0 00000000 00000000  00000000 00000000 00000000 00000000
`
	for _, c := range []struct {
		name, in string
		want     []uint64
		err      string
	}{
		{"6.18 layout, two CPUs, hex", six18, []uint64{0xfa, 1, 2}, ""},
		// An older kernel's layout: other columns, other order.
		{"older layout", "entries searched found new invalid ignore delete delete_list insert insert_failed drop early_drop\n" +
			"00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000004 00000005 00000006\n",
			[]uint64{5, 4, 6}, ""},
		{"no drop column", "entries found\n00000001 00000002\n", nil, `no column "drop"`},
		{"header only", "entries drop insert_failed early_drop\n", nil, "want a header and a row"},
		{"short row", "entries drop insert_failed early_drop\n0 1 2\n", nil, "has 3 fields"},
		{"not hex", "entries drop insert_failed early_drop\n0 zz 0 0\n", nil, "column drop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseConntrackStat([]byte(c.in), "drop", "insert_failed", "early_drop")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestConntrackAbsent: a namespace without nf_conntrack has no
// drops/conntrack, says why in its capability, and is not an error; a
// conntrack that goes away retires its subtree.
func TestConntrackAbsent(t *testing.T) {
	_, err := readConntrack(func(string) ([]byte, error) {
		return nil, &fs.PathError{Op: "open", Path: ConntrackCountPath, Err: fs.ErrNotExist}
	})
	if !errors.Is(err, errNoConntrack) {
		t.Fatalf("readConntrack without the module: %v, want errNoConntrack", err)
	}
	s := &Source{kernel: newKernel()}
	r := source.Reading{Counters: map[string]uint64{}, Gauges: map[string]float64{}}
	s.kernel.add(&r, conntrack{count: 3, max: 12}, nil, nil)
	if r.Gauges[catalog.DropsConntrackUsage] != 25 || r.Gauges[catalog.DropsConntrackEntries] != 3 || !hasCap(s, capConntrack, true) {
		t.Fatalf("with conntrack: gauges %v, capabilities %v", r.Gauges, s.Capabilities())
	}
	r = source.Reading{Counters: map[string]uint64{}, Gauges: map[string]float64{}}
	s.kernel.add(&r, conntrack{}, err, nil)
	for _, m := range r.Metrics {
		if strings.HasPrefix(m.ID, catalog.DropsConntrack) {
			t.Errorf("%s defined without conntrack", m.ID)
		}
	}
	if len(r.Counters) != 0 || len(r.Gauges) != 0 || fmt.Sprint(r.Retired) != "["+catalog.DropsConntrack+"]" {
		t.Errorf("without conntrack: counters %v, gauges %v, retired %v", r.Counters, r.Gauges, r.Retired)
	}
	if !hasCap(s, capConntrack, false) {
		t.Errorf("capabilities %v: want %s unavailable, saying nf_conntrack is not loaded", s.Capabilities(), capConntrack)
	}
}

func hasCap(s *Source, name string, available bool) bool {
	for _, c := range s.Capabilities() {
		if c.GetName() == name {
			return c.GetAvailable() == available && (available || strings.Contains(c.GetReason(), "not loaded"))
		}
	}
	return false
}

// TestDeviceAccounting: the parents count every increase once, from the
// kernel's values at the first reading; a device arriving with counts of
// its own (moved in) adds nothing until they move; a driver reset counts
// from zero; children appear when a device's counter moves, are bounded
// by MaxDevices, and go when the device goes.
func TestDeviceAccounting(t *testing.T) {
	k := newKernel()
	lk := func(i int32, name string, rxDropped uint64) link {
		return link{index: i, name: name, stats: map[string]uint64{"rx_dropped": rxDropped, "tx_errors": 1}}
	}
	step := func(links ...link) source.Reading {
		r := source.Reading{Counters: map[string]uint64{}, Gauges: map[string]float64{}}
		k.add(&r, conntrack{}, errNoConntrack, links)
		return r
	}
	rxd := catalog.DropsDevice + "/rx_dropped"
	r := step(lk(1, "lo", 0), lk(2, "eth0", 100))
	if r.Counters[rxd] != 100 || r.Counters[catalog.DropsDevice] != 102 || len(r.Metrics) != len(catalog.DeviceTree()) {
		t.Fatalf("first reading: %v, %d metrics", r.Counters, len(r.Metrics))
	}
	r = step(lk(1, "lo", 0), lk(2, "eth0", 107), lk(3, "moved", 5000))
	if r.Counters[rxd] != 107 || r.Counters[rxd+"/eth0"] != 7 || r.Counters[rxd+"/moved"] != 0 {
		t.Fatalf("second reading: %v", r.Counters)
	}
	r = step(lk(1, "lo", 0), lk(2, "eth0", 3), lk(3, "moved", 5001))
	if r.Counters[rxd] != 111 || r.Counters[rxd+"/eth0"] != 10 || r.Counters[rxd+"/moved"] != 1 {
		t.Fatalf("after a reset of eth0's counters: %v", r.Counters)
	}
	r = step(lk(1, "lo", 0), lk(3, "moved", 5001))
	if r.Counters[rxd] != 111 || fmt.Sprint(r.Retired) != "["+rxd+"/eth0]" {
		t.Fatalf("eth0 gone: %v, retired %v", r.Counters, r.Retired)
	}
	var links []link
	for i := range MaxDevices + 5 {
		links = append(links, lk(int32(10+i), fmt.Sprintf("v%d", i), 0))
	}
	step(links...)
	for i := range links {
		links[i].stats = map[string]uint64{"rx_dropped": 1, "tx_errors": 1}
	}
	r = step(links...)
	children := 0
	for id := range r.Counters {
		if isDeviceChild(id) && strings.HasPrefix(id, rxd+"/") {
			children++
		}
	}
	// "moved" keeps its child: MaxDevices-1 of the new devices get one.
	if children != MaxDevices || r.Counters[rxd] != 111+uint64(len(links)) {
		t.Errorf("%d children of %s (max %d), parent %d", children, rxd, MaxDevices, r.Counters[rxd])
	}
}

// ctStats sums `conntrack -S` (ctnetlink's per-CPU statistics, not the
// /proc file the source reads) in ns.
func ctStats(t *testing.T, l *netlab.Lab, ns string) map[string]uint64 {
	t.Helper()
	out := l.Exec(t, ns, "conntrack", "-S")
	sum := map[string]uint64{}
	for _, f := range strings.Fields(out) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "cpu" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("conntrack -S: %q: %v", f, err)
		}
		sum[k] += n
	}
	if _, ok := sum["drop"]; !ok {
		t.Fatalf("conntrack -S printed no drop counter: %q", out)
	}
	return sum
}

func readUint(t *testing.T, l *netlab.Lab, ns, path string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimSpace(l.Exec(t, ns, "cat", path)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestConntrackTableFull fills the conntrack tables of the lab with
// nf_conntrack_max set to 16. In B, 16 TCP connections held open (assured,
// so never evicted), then more attempts, whose SYNs the kernel drops
// ("table full"). In A, 200 UDP flows never answered (not assured): beyond
// 16, each evicts an entry (early_drop) when one is in the 8 buckets the
// kernel looks at, and is dropped otherwise. The children equal
// `conntrack -S`'s deltas (ctnetlink, not the /proc file the source reads)
// and the table's count. insert_failed (a clash of two packets of one new
// flow on two CPUs) is not reproduced: it stays 0 on both sides.
//
// On this kernel (6.18) nf_conntrack_max and nf_conntrack_buckets are
// read-only outside the initial namespace: the limit is the host's, applied
// to each namespace's own count. The test lowers both for about a second
// and restores them.
func TestConntrackTableFull(t *testing.T) {
	const maxEntries, extra, udpFlows = 16, 6, 200
	if _, err := exec.LookPath("conntrack"); err != nil {
		netlab.SkipOrFail(t, "conntrack (Debian package conntrack) not installed: %v", err)
	}
	l := netlab.New(t)
	h, err := netns.Resolve(l.B)
	if err != nil {
		t.Fatal(err)
	}
	// Any ct expression makes B track connections.
	l.Nft(t, l.B, `table inet nbs_ct {
	chain in {
		type filter hook input priority 0; policy accept;
		ct state new counter accept
	}
}`)
	var ln net.Listener
	if err := l.Do(l.B, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(l.IPB, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	dst := ln.Addr().String()

	s := open(t, Options{Env: source.Env{Netns: h, DisableBPF: true}})
	if !hasCap(s, capConntrack, true) {
		t.Fatalf("capabilities %v: want %s", s.Capabilities(), capConntrack)
	}
	c0, o0 := collect(t, s), ctStats(t, l, l.B)

	// The fewest buckets the kernel allows (512): early_drop looks for an
	// entry to evict in 8 buckets only, so with the host's hash size the
	// lab's few entries would never be found.
	restore := hostSysctls(t, map[string]string{ConntrackMaxPath: strconv.Itoa(maxEntries), ConntrackBucketsPath: "1"})
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var fds []int
	err = l.Do(l.A, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		for range maxEntries {
			c, err := d.Dial("tcp", dst)
			if err != nil {
				return fmt.Errorf("connection %d of %d: %w", len(conns)+1, maxEntries, err)
			}
			conns = append(conns, c)
		}
		// The table is full: these SYNs are dropped. Non-blocking, so each
		// sends one SYN now and none is retried before they are closed.
		for range extra {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			var sa unix.SockaddrInet4
			ap := netip.MustParseAddrPort(dst)
			sa.Addr, sa.Port = ap.Addr().As4(), int(ap.Port())
			if err := unix.Connect(fd, &sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
				return err
			}
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // under the SYN's first retransmission (1 s)
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		t.Fatal(err)
	}
	count := readUint(t, l, l.B, ConntrackCountPath)
	max := readUint(t, l, l.B, ConntrackMaxPath)
	o1 := ctStats(t, l, l.B)
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o2 := ctStats(t, l, l.B)
	// Phase 2, in A: its table fills with UDP flows never answered (one per
	// source port), which are not assured, so each flow beyond the maximum
	// evicts one when the 8 buckets the kernel looks at hold one
	// (early_drop), and is dropped otherwise.
	// B's full table would drop the flows as they leave: B stops tracking.
	l.NftDelete(t, l.B, "nbs_ct")
	l.Nft(t, l.A, `table inet nbs_ct {
	chain in {
		type filter hook input priority 0; policy accept;
		ct state new counter accept
	}
}`)
	hA, err := netns.Resolve(l.A)
	if err != nil {
		t.Fatal(err)
	}
	sA := open(t, Options{Env: source.Env{Netns: hA, DisableBPF: true}})
	a0, p0 := collect(t, sA), ctStats(t, l, l.A)
	if err := l.Do(l.B, func() error {
		for range udpFlows {
			c, err := net.Dial("udp", netip.AddrPortFrom(l.IPA, l.ClosedPort).String())
			if err != nil {
				return err
			}
			_, err = c.Write([]byte("x"))
			c.Close()
			if err != nil && !errors.Is(err, unix.ECONNREFUSED) {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	p1 := ctStats(t, l, l.A)
	a1, err := sA.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p2 := ctStats(t, l, l.A)
	countA := readUint(t, l, l.A, ConntrackCountPath)
	restore()
	if fmt.Sprint(p1) != fmt.Sprint(p2) {
		t.Fatalf("conntrack -S in A moved around the collection: %v, then %v", p1, p2)
	}
	t.Logf("%d UDP flows into A: nf_conntrack_count %d, conntrack -S drop +%d early_drop +%d insert_failed +%d",
		udpFlows, countA, p1["drop"]-p0["drop"], p1["early_drop"]-p0["early_drop"], p1["insert_failed"]-p0["insert_failed"])
	for _, c := range []struct{ id, oracle string }{
		{catalog.DropsConntrackDrop, "drop"},
		{catalog.DropsConntrackInsertFailed, "insert_failed"},
		{catalog.DropsConntrackEarlyDrop, "early_drop"},
	} {
		if got, want := a1.Counters[c.id]-a0[c.id], p1[c.oracle]-p0[c.oracle]; got != want {
			t.Errorf("A: %s +%d, conntrack -S %s +%d", c.id, got, c.oracle, want)
		}
	}
	if p1["early_drop"] == p0["early_drop"] || p1["drop"] == p0["drop"] || countA != maxEntries {
		t.Errorf("%d UDP flows into A's table (max %d, 512 buckets): count %d, no early drop or no drop; the test tests nothing",
			udpFlows, maxEntries, countA)
	}
	if a1.Gauges[catalog.DropsConntrackUsage] != 100 {
		t.Errorf("A's usage %v%%, want 100%%", a1.Gauges[catalog.DropsConntrackUsage])
	}
	if fmt.Sprint(o1) != fmt.Sprint(o2) {
		t.Fatalf("conntrack -S moved around the collection: %v, then %v", o1, o2)
	}
	cnt := readUint(t, l, l.B, ConntrackCountPath)
	t.Logf("nf_conntrack_count %d (max was %d), conntrack -S deltas drop %d insert_failed %d early_drop %d; agent %d %d %d, entries %v usage %v%%",
		cnt, max, o1["drop"]-o0["drop"], o1["insert_failed"]-o0["insert_failed"], o1["early_drop"]-o0["early_drop"],
		r.Counters[catalog.DropsConntrackDrop]-c0[catalog.DropsConntrackDrop],
		r.Counters[catalog.DropsConntrackInsertFailed]-c0[catalog.DropsConntrackInsertFailed],
		r.Counters[catalog.DropsConntrackEarlyDrop]-c0[catalog.DropsConntrackEarlyDrop],
		r.Gauges[catalog.DropsConntrackEntries], r.Gauges[catalog.DropsConntrackUsage])
	if max != maxEntries || count != maxEntries || cnt != count {
		t.Fatalf("nf_conntrack_max %d, count %d then %d: want the table full at %d", max, count, cnt, maxEntries)
	}
	for _, c := range []struct {
		id, oracle string
	}{
		{catalog.DropsConntrackDrop, "drop"},
		{catalog.DropsConntrackInsertFailed, "insert_failed"},
		{catalog.DropsConntrackEarlyDrop, "early_drop"},
	} {
		if got, want := r.Counters[c.id]-c0[c.id], o1[c.oracle]-o0[c.oracle]; got != want {
			t.Errorf("%s +%d, conntrack -S %s +%d", c.id, got, c.oracle, want)
		}
	}
	drop := r.Counters[catalog.DropsConntrackDrop] - c0[catalog.DropsConntrackDrop]
	if drop < extra {
		t.Errorf("drops/conntrack/drop +%d, want at least the %d SYNs sent to a full table", drop, extra)
	}
	if got, want := r.Counters[catalog.DropsConntrack]-c0[catalog.DropsConntrack],
		drop+r.Counters[catalog.DropsConntrackInsertFailed]-c0[catalog.DropsConntrackInsertFailed]; got != want {
		t.Errorf("drops/conntrack +%d, want drop + insert_failed = %d", got, want)
	}
	if e := r.Gauges[catalog.DropsConntrackEntries]; e != float64(cnt) {
		t.Errorf("entries %v, nf_conntrack_count %d", e, cnt)
	}
	if u, want := r.Gauges[catalog.DropsConntrackUsage], 100*float64(cnt)/float64(max); math.Abs(u-want) > 1e-9 || u != 100 {
		t.Errorf("usage %v%%, want %v%% (full)", u, want)
	}
	// The table full: usage CRIT, and any drop WARN at least at any
	// interval up to 1000 s.
	tr := tree.New()
	tr.Define(r.Metrics...)
	res := tr.Evaluate(map[string]float64{catalog.DropsConntrackUsage: r.Gauges[catalog.DropsConntrackUsage],
		catalog.DropsConntrackDrop: float64(drop) / 1000, catalog.DropsConntrackEarlyDrop: 0, catalog.DropsConntrackInsertFailed: 0,
		catalog.DropsConntrackEntries: float64(cnt), catalog.DropsConntrack: float64(drop) / 1000}, nil)
	if res.State[catalog.DropsConntrackUsage] != tree.Crit || res.State[catalog.DropsConntrackDrop] != tree.Warn {
		t.Errorf("states %v: want usage CRIT and drop WARN", res.State)
	}
}

// hostSysctls sets files of the initial namespace's /proc/sys and returns
// what puts them back (also a cleanup of t); each is put back once.
func hostSysctls(t *testing.T, set map[string]string) (restore func()) {
	t.Helper()
	orig := map[string][]byte{}
	restore = func() {
		for path, v := range orig {
			if err := os.WriteFile(path, v, 0); err != nil {
				t.Errorf("restore %s to %s: %v", path, v, err)
			}
			delete(orig, path)
		}
	}
	t.Cleanup(restore)
	for path, v := range set {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read the host's %s: %v", path, err)
		}
		orig[path] = b
		if err := os.WriteFile(path, []byte(v), 0); err != nil {
			t.Fatalf("set %s to %s: %v", path, v, err)
		}
	}
	return restore
}

// ipLinkStats reads `ip -s -s -j link` in ns: by device, each counter of
// catalog.DeviceCounters by its kernel name.
func ipLinkStats(t *testing.T, l *netlab.Lab, ns string) map[string]map[string]uint64 {
	t.Helper()
	var links []struct {
		Name  string `json:"ifname"`
		Stats struct {
			RX map[string]uint64 `json:"rx"`
			TX map[string]uint64 `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(l.Exec(t, ns, "ip", "-s", "-s", "-j", "link", "show")), &links); err != nil {
		t.Fatalf("ip -s -s -j link: %v", err)
	}
	out := map[string]map[string]uint64{}
	for _, ln := range links {
		m := map[string]uint64{}
		for _, c := range catalog.DeviceCounters() {
			dir, name, _ := strings.Cut(c.Kernel, "_") // rx_missed_errors: rx.missed_errors
			v, ok := map[string]map[string]uint64{"rx": ln.Stats.RX, "tx": ln.Stats.TX}[dir][name]
			if !ok {
				t.Fatalf("ip -j link: %s has no %s.%s", ln.Name, dir, name)
			}
			m[c.Kernel] = v
		}
		out[ln.Name] = m
	}
	return out
}

// TestDeviceDrops: packets routed into a tun device no process reads, and
// through a veth whose peer is down, are dropped by the device
// (tx_dropped); every device's children, and each counter, equal
// `ip -s -s link`'s deltas for B's devices (lo, the veth, the tun).
//
// What a veth can show: tx_dropped (its peer down, the peer's backlog
// full) and rx_dropped (the peer's XDP ring full); never missed, FIFO,
// over, frame, CRC or carrier errors, which only hardware has. Here the
// tun's tx_dropped is exact to the packet, the veth's at least the
// datagrams sent (its own neighbour discovery is dropped too).
func TestDeviceDrops(t *testing.T) {
	const n = 30
	l := netlab.New(t)
	h, err := netns.Resolve(l.B)
	if err != nil {
		t.Fatal(err)
	}
	l.Exec(t, l.B, "ip", "tuntap", "add", "dev", "nbstun", "mode", "tun")
	l.Exec(t, l.B, "ip", "addr", "add", "192.0.2.1/30", "dev", "nbstun")
	l.Exec(t, l.B, "ip", "link", "set", "nbstun", "up")
	s := open(t, Options{Env: source.Env{Netns: h, DisableBPF: true}})
	// vB's peer down, and A's address resolved for good, so B's datagrams
	// reach vB's transmit and are dropped there.
	mac := strings.Fields(l.Exec(t, l.A, "cat", "/sys/class/net/vA/address"))
	l.Exec(t, l.A, "ip", "link", "set", "vA", "down")
	l.Exec(t, l.B, "ip", "neigh", "replace", l.IPA.String(), "lladdr", mac[0], "dev", "vB", "nud", "permanent")
	c0, o0 := collect(t, s), ipLinkStats(t, l, l.B)
	netlab.SendUDPIn(t, h, netip.MustParseAddrPort("192.0.2.2:9"), n, 64, 0)
	netlab.SendUDPIn(t, h, netip.AddrPortFrom(l.IPA, 9), n, 64, 0)
	c1, o1 := collect(t, s), ipLinkStats(t, l, l.B)
	if len(o1) < 3 {
		t.Fatalf("ip link shows %d devices in B, want lo, vB and nbstun", len(o1))
	}
	var headline uint64
	for _, c := range catalog.DeviceCounters() {
		var sum uint64
		for dev, after := range o1 {
			d := after[c.Kernel] - o0[dev][c.Kernel]
			sum += d
			child := c.Metric.ID + "/" + catalog.MetricSegment(dev)
			if got := c1[child] - c0[child]; got != d {
				t.Errorf("%s +%d, ip -s -s link %s %s +%d", child, got, dev, c.Kernel, d)
			}
		}
		if got := c1[c.Metric.ID] - c0[c.Metric.ID]; got != sum {
			t.Errorf("%s +%d, ip -s -s link's devices +%d", c.Metric.ID, got, sum)
		}
		if c.Headline {
			headline += sum
		}
	}
	if got := c1[catalog.DropsDevice] - c0[catalog.DropsDevice]; got != headline {
		t.Errorf("%s +%d, want rx_dropped+rx_missed+rx_errors+tx_dropped+tx_errors = %d", catalog.DropsDevice, got, headline)
	}
	tun, veth := catalog.DropsDevice+"/tx_dropped/nbstun", catalog.DropsDevice+"/tx_dropped/vb"
	if got := c1[tun] - c0[tun]; got != n {
		t.Errorf("%s +%d, sent %d into the unread tun", tun, got, n)
	}
	// At least: the IPv6 neighbour discovery vB sends also goes nowhere.
	if got := c1[veth] - c0[veth]; got < n {
		t.Errorf("%s +%d, sent %d through it with its peer down", veth, got, n)
	}
	t.Logf("%s +%d, %s +%d; ip -s -s link: nbstun tx dropped +%d, vB +%d", tun, c1[tun]-c0[tun], veth, c1[veth]-c0[veth],
		o1["nbstun"]["tx_dropped"]-o0["nbstun"]["tx_dropped"], o1["vB"]["tx_dropped"]-o0["vB"]["tx_dropped"])
	if !hasCap(s, capDevice, true) {
		t.Errorf("capabilities %v", s.Capabilities())
	}
	// The agent restarting: a new source continues from the kernel's
	// values, so the ledger (source.SinceBoot) can count what happened
	// between the two.
	s2 := open(t, Options{Env: source.Env{Netns: h, DisableBPF: true}})
	netlab.SendUDPIn(t, h, netip.MustParseAddrPort("192.0.2.2:9"), n, 64, 0)
	c2 := collect(t, s2)
	if got := c2[catalog.DropsDevice+"/tx_dropped"] - c1[catalog.DropsDevice+"/tx_dropped"]; got != n {
		t.Errorf("a new source's tx_dropped is %d above the old one's last, want the %d dropped since", got, n)
	}
	for _, id := range []string{catalog.DropsDevice, catalog.DropsDevice + "/tx_dropped"} {
		if !s2.SinceBoot(id) || s2.SinceBoot(tun) || s2.Continues(id) {
			t.Errorf("SinceBoot(%s) %v, SinceBoot(%s) %v, Continues %v", id, s2.SinceBoot(id), tun, s2.SinceBoot(tun), s2.Continues(id))
		}
	}
}

// TestKernelCapabilitiesAtOpen: with BPF as without, the capabilities the
// agent asks for once, right after Open, already say what conntrack and the
// devices give.
func TestKernelCapabilitiesAtOpen(t *testing.T) {
	l := netlab.New(t)
	h, err := netns.Resolve(l.B)
	if err != nil {
		t.Fatal(err)
	}
	for _, bpf := range []bool{true, false} {
		s := open(t, Options{Env: source.Env{Netns: h, DisableBPF: !bpf}})
		if bpf && s.probe == nil {
			netlab.SkipOrFail(t, "drops: BPF unavailable: %s", s.bpfWhy)
		}
		if !hasCap(s, capDevice, true) {
			t.Errorf("bpf %v: capabilities %v, want %s available", bpf, s.Capabilities(), capDevice)
		}
		// The host has nf_conntrack (the lab's tests use it): B sees it.
		if _, err := os.Stat(ConntrackCountPath); err == nil && !hasCap(s, capConntrack, true) {
			t.Errorf("bpf %v: capabilities %v, want %s available", bpf, s.Capabilities(), capConntrack)
		}
	}
}
