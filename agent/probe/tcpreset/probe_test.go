package tcpreset

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/nbs-project/nbs/agent/probe/evidence"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// load loads a probe, skipping (or failing under NBS_REQUIRE_BPF=1) when
// this machine cannot run BPF.
func load(t *testing.T, opts Options) *Probe {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "tcpreset: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// named returns p's counts as "direction/name" -> count.
func named(t *testing.T, p *Probe) map[string]uint64 {
	t.Helper()
	c, err := p.Counts()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for k, v := range c {
		out[keyName(p.Names(), k)] = v
	}
	return out
}

func keyName(n Names, k Key) string {
	if k.Direction == DirectionSent {
		return "sent/" + n.Reason(k.Code)
	}
	return k.Direction.String() + "/" + n.State(k.Code)
}

func eventName(e Event) string {
	if e.Direction == DirectionSent {
		return "sent/" + e.Reason
	}
	return e.Direction.String() + "/" + e.State
}

// collector runs ReadEvents in the background until stop.
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

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

// stop waits until n events arrived (or a timeout), then stops reading.
// It has the reader take what waits in the ring (SyncEvents), as the
// agent's collections do, rather than wait for a poll.
func (c *collector) stop(t *testing.T, n int) []Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_ = c.p.SyncEvents(ctx) // a timeout: the loop tries again
		cancel()
		if c.len() >= n || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.cancel()
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("ReadEvents: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadEvents did not return after cancel")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

func sum(m map[string]uint64, prefix string) uint64 {
	var s uint64
	for k, v := range m {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			s += v
		}
	}
	return s
}

// TestResetReasons causes 20 resets of each recipe and checks the counts
// exactly, against the recipes' known reasons and against nstat, and checks
// the evidence events' addresses.
func TestResetReasons(t *testing.T) {
	const n = 20
	l := netlab.New(t)
	inoA, inoB := l.Inode(t, l.A), l.Inode(t, l.B)
	probes := map[string]*Probe{
		l.A: load(t, Options{NetnsInode: inoA, EvidencePerSecond: 100000}),
		l.B: load(t, Options{NetnsInode: inoB, EvidencePerSecond: 100000}),
	}
	collectors := map[string]*collector{l.A: collect(probes[l.A]), l.B: collect(probes[l.B])}
	before := map[string]map[string]uint64{l.A: l.Nstat(t, l.A), l.B: l.Nstat(t, l.B)}
	start := time.Now()

	l.ResetNoSocket(t, n)
	l.ResetAbortOnClose(t, n)
	l.ResetLingerZero(t, n)
	l.ResetAbortOnLinger(t, n)

	want := map[string]map[string]uint64{
		l.A: {
			"sent/tcp_state":           n, // SO_LINGER{1,0}: via tcp_disconnect, docs/kernel.md "Reset and drop reasons"
			"sent/tcp_abort_on_linger": n,
			"received/syn_sent":        n, // answers to the connects to a closed port
			"received/established":     n, // B's abort on close
		},
		l.B: {
			"sent/no_socket":          n,
			"sent/tcp_abort_on_close": n,
			"received/established":    n, // A's linger-zero close
			"received/close_wait":     n, // A's abort on linger, after A's FIN
		},
	}
	got := map[string]map[string]uint64{}
	for _, ns := range []string{l.A, l.B} {
		got[ns] = named(t, probes[ns])
		t.Logf("%s counts: %v", ns, got[ns])
		if fmt.Sprint(got[ns]) != fmt.Sprint(want[ns]) {
			t.Errorf("%s counts = %v, want %v", ns, got[ns], want[ns])
		}
	}

	// nstat is the independent oracle: each counter's delta must equal
	// what BPF attributed to the matching reason in the same namespace.
	oracle := []struct {
		counter string
		bpf     func(m map[string]uint64) uint64
	}{
		{"TcpOutRsts", func(m map[string]uint64) uint64 { return sum(m, "sent/") }},
		{"TcpExtTCPAbortOnClose", func(m map[string]uint64) uint64 { return m["sent/tcp_abort_on_close"] }},
		{"TcpExtTCPAbortOnData", func(m map[string]uint64) uint64 { return m["sent/tcp_state"] }},
		{"TcpExtTCPAbortOnLinger", func(m map[string]uint64) uint64 { return m["sent/tcp_abort_on_linger"] }},
	}
	for _, ns := range []string{l.A, l.B} {
		after := l.Nstat(t, ns)
		for _, o := range oracle {
			d := after[o.counter] - before[ns][o.counter]
			if b := o.bpf(got[ns]); d != b {
				t.Errorf("%s: nstat %s +%d, BPF %d", ns, o.counter, d, b)
			} else {
				t.Logf("%s: nstat %s +%d = BPF %d", ns, o.counter, d, b)
			}
		}
	}

	// Evidence: one event per reset, since the limit is far above 80.
	type side struct {
		addr netip.Addr
		port uint16 // 0: any non-zero port
	}
	const anyPort = 0
	wantEv := map[string]map[string]struct{ src, dst side }{
		l.A: {
			"sent/tcp_state":           {side{l.IPA, anyPort}, side{l.IPB, anyPort}},
			"sent/tcp_abort_on_linger": {side{l.IPA, anyPort}, side{l.IPB, anyPort}},
			"received/syn_sent":        {side{l.IPB, l.ClosedPort}, side{l.IPA, anyPort}},
			"received/established":     {side{l.IPB, anyPort}, side{l.IPA, anyPort}},
		},
		l.B: {
			"sent/no_socket":          {side{l.IPB, l.ClosedPort}, side{l.IPA, anyPort}},
			"sent/tcp_abort_on_close": {side{l.IPB, anyPort}, side{l.IPA, anyPort}},
			"received/established":    {side{l.IPA, anyPort}, side{l.IPB, anyPort}},
			"received/close_wait":     {side{l.IPA, anyPort}, side{l.IPB, anyPort}},
		},
	}
	match := func(ap netip.AddrPort, s side) bool {
		return ap.Addr() == s.addr && ap.Port() != 0 && (s.port == anyPort || ap.Port() == s.port)
	}
	tuples := map[string]map[Direction]map[string]int{} // ns -> direction -> "src>dst" -> n
	for _, ns := range []string{l.A, l.B} {
		events := collectors[ns].stop(t, 4*n)
		byName := map[string]uint64{}
		for _, e := range events {
			name := eventName(e)
			byName[name]++
			w, ok := wantEv[ns][name]
			switch {
			case !ok:
				t.Errorf("%s: unexpected event %+v", ns, e)
				continue
			case e.Netns != l.Inode(t, ns):
				t.Errorf("%s: event netns %d, want %d", ns, e.Netns, l.Inode(t, ns))
			case !match(e.Src, w.src) || !match(e.Dst, w.dst):
				t.Errorf("%s %s: event %s -> %s, want %v -> %v", ns, name, e.Src, e.Dst, w.src, w.dst)
			case e.Time.Before(start.Add(-time.Second)) || e.Time.After(time.Now().Add(time.Second)):
				t.Errorf("%s %s: event time %s outside the test (%s..now)", ns, name, e.Time, start)
			}
			if tuples[ns] == nil {
				tuples[ns] = map[Direction]map[string]int{DirectionSent: {}, DirectionReceived: {}}
			}
			tuples[ns][e.Direction][e.Src.String()+">"+e.Dst.String()]++
		}
		if fmt.Sprint(byName) != fmt.Sprint(want[ns]) {
			t.Errorf("%s events by kind = %v, want %v", ns, byName, want[ns])
		}
	}
	// Every reset one side sent is one the other received, and both
	// events show the RST packet's own 4-tuple: the socket path, the
	// header path (NO_SOCKET) and the received path must agree exactly.
	if a, b := tuples[l.A][DirectionReceived], tuples[l.B][DirectionSent]; len(a) != 2*n || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("RSTs B sent %v\n    != RSTs A received %v", b, a)
	}
	if a, b := tuples[l.A][DirectionSent], tuples[l.B][DirectionReceived]; len(a) != 2*n || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("RSTs A sent %v\n    != RSTs B received %v", a, b)
	}
	for ns, p := range probes {
		if s, err := p.Stats(); err != nil || s != (Stats{}) {
			t.Errorf("%s: Stats() = %+v, %v; want no losses", ns, s, err)
		}
	}
}

// TestNetnsFilter checks that a probe sees only its namespace, in both
// address families, including resets that never leave a namespace
// (loopback), and that an unfiltered probe splits namespaces correctly,
// with its per-CPU table of namespaces and without it (the hash behind).
func TestNetnsFilter(t *testing.T) {
	const n = 5
	l := netlab.New(t)
	inoA, inoB := l.Inode(t, l.A), l.Inode(t, l.B)
	pA := load(t, Options{NetnsInode: inoA, EvidencePerSecond: 1000})
	pB := load(t, Options{NetnsInode: inoB, EvidencePerSecond: 1000})
	pAll := load(t, Options{EvidencePerSecond: 1000})
	pHash := load(t, Options{EvidencePerSecond: 1000, noNetnsTable: true})

	tests := []struct {
		name     string
		from     string
		dst      netip.AddrPort
		wantA    map[string]uint64
		wantB    map[string]uint64
		src, to  netip.Addr // the NO_SOCKET reset's addresses
		evidence *Probe     // the probe that sees the NO_SOCKET reset
		events   int        // events that probe gets
	}{
		{
			name: "IPv4 loopback inside B", from: l.B,
			dst:   netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), l.ClosedPort),
			wantA: map[string]uint64{},
			wantB: map[string]uint64{"sent/no_socket": n, "received/syn_sent": n},
			src:   netip.MustParseAddr("127.0.0.1"), to: netip.MustParseAddr("127.0.0.1"), evidence: pB, events: 2 * n,
		},
		{
			name: "IPv6 loopback inside B", from: l.B,
			dst:   netip.AddrPortFrom(netip.IPv6Loopback(), l.ClosedPort),
			wantA: map[string]uint64{},
			wantB: map[string]uint64{"sent/no_socket": n, "received/syn_sent": n},
			src:   netip.IPv6Loopback(), to: netip.IPv6Loopback(), evidence: pB, events: 2 * n,
		},
		{
			name: "IPv6 from A to B", from: l.A,
			dst:   netip.AddrPortFrom(l.IP6B, l.ClosedPort),
			wantA: map[string]uint64{"received/syn_sent": n},
			wantB: map[string]uint64{"sent/no_socket": n},
			src:   l.IP6B, to: l.IP6A, evidence: pB, events: n,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			baseA, baseB := named(t, pA), named(t, pB)
			all0, err := pAll.CountsByNetns()
			if err != nil {
				t.Fatal(err)
			}
			hash0, err := pHash.CountsByNetns()
			if err != nil {
				t.Fatal(err)
			}
			c := collect(tt.evidence)
			l.ConnectRefused(t, tt.from, tt.dst, n)
			events := c.stop(t, tt.events)

			for _, s := range []struct {
				ns         string
				p          *Probe
				base, want map[string]uint64
			}{{l.A, pA, baseA, tt.wantA}, {l.B, pB, baseB, tt.wantB}} {
				delta := map[string]uint64{}
				for k, v := range named(t, s.p) {
					if d := v - s.base[k]; d != 0 {
						delta[k] = d
					}
				}
				if fmt.Sprint(delta) != fmt.Sprint(s.want) {
					t.Errorf("%s probe counted %v, want %v", s.ns, delta, s.want)
				}
			}

			// The unfiltered probes attribute the same counts per namespace.
			for _, u := range []struct {
				name string
				p    *Probe
				base map[uint32]map[Key]uint64
			}{{"unfiltered probe", pAll, all0}, {"unfiltered probe without its table", pHash, hash0}} {
				all1, err := u.p.CountsByNetns()
				if err != nil {
					t.Fatal(err)
				}
				for ns, want := range map[uint32]map[string]uint64{inoA: tt.wantA, inoB: tt.wantB} {
					delta := map[string]uint64{}
					for k, v := range all1[ns] {
						if d := v - u.base[ns][k]; d != 0 {
							delta[keyName(u.p.Names(), k)] = d
						}
					}
					if fmt.Sprint(delta) != fmt.Sprint(want) {
						t.Errorf("%s, netns %d: counted %v, want %v", u.name, ns, delta, want)
					}
				}
			}

			var sent int
			for _, e := range events {
				if e.Direction != DirectionSent {
					continue
				}
				sent++
				if e.Reason != "no_socket" || e.State != "" || e.Src != netip.AddrPortFrom(tt.src, l.ClosedPort) ||
					e.Dst.Addr() != tt.to || e.Dst.Port() == 0 {
					t.Errorf("NO_SOCKET event %+v, want %s:%d -> %s:*", e, tt.src, l.ClosedPort, tt.to)
				}
			}
			if sent != n {
				t.Errorf("%d NO_SOCKET events, want %d", sent, n)
			}
		})
	}
}

// TestEvidenceRateLimit floods one namespace with bursts of resets, each more
// than a second after the last, under a small evidence limit: the bucket
// (limit tokens, refilled at limit a second) is full again for each burst,
// so each gets the limit, and no span gets more than the limit plus its
// refill; every reset is accounted for as an event, a suppression or a
// ring-full loss.
func TestEvidenceRateLimit(t *testing.T) {
	const (
		limit  = 5
		bursts = 3
		burst  = 100
	)
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B), EvidencePerSecond: limit})
	c := collect(p)
	start := time.Now()
	for i := 0; i < bursts; i++ {
		if i > 0 {
			// 1.1 s refills more than the whole bucket.
			time.Sleep(1100 * time.Millisecond)
		}
		l.ResetNoSocket(t, burst)
	}
	elapsed := time.Since(start)
	events := c.stop(t, bursts*limit)

	counts, err := p.Counts()
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, v := range counts {
		total += v
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	suppressed, err := p.Suppressed()
	if err != nil {
		t.Fatal(err)
	}
	minEvents, maxEvents := limit*bursts, limit+int(math.Ceil(limit*elapsed.Seconds()))
	t.Logf("%d resets in %s: %d events (want %d..%d), %d suppressed, %d ring full",
		total, elapsed.Round(time.Millisecond), len(events), minEvents, maxEvents, suppressed, st.RingFull)
	if total != bursts*burst {
		t.Errorf("counted %d resets, want %d", total, bursts*burst)
	}
	if len(events) < minEvents || len(events) > maxEvents {
		t.Errorf("%d events, want %d..%d", len(events), minEvents, maxEvents)
	}
	if suppressed == 0 || suppressed != st.Suppressed {
		t.Errorf("Suppressed() = %d, Stats().Suppressed = %d, want equal and > 0", suppressed, st.Suppressed)
	}
	if got := uint64(len(events)) + suppressed + st.RingFull; got != total {
		t.Errorf("events %d + suppressed %d + ring full %d = %d, want every reset (%d)",
			len(events), suppressed, st.RingFull, got, total)
	}
}

// TestEvidenceStorm is a sustained storm at the default rate: resets at 30
// a second for 4 s against 20 evidence events a second. The kept events are
// the bucket (20) plus 20 a second of the storm, within one event either
// way, and the rest are suppressed: nothing is lost to the ring.
func TestEvidenceStorm(t *testing.T) {
	const (
		rate     = 30
		duration = 4 * time.Second
	)
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B)})
	c := collect(p)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var first, last time.Time
	n := 0
	for start := time.Now(); time.Since(start) < duration; n++ {
		<-tick.C
		if n == 0 {
			first = time.Now()
		}
		l.ResetNoSocket(t, 1)
		last = time.Now()
	}
	// Wait until every reset is an event read or a suppression (or 5 s).
	var st Stats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if st, err = p.Stats(); err != nil {
			t.Fatal(err)
		}
		if uint64(c.len())+st.Suppressed+st.RingFull >= uint64(n) {
			break
		}
	}
	events := c.stop(t, 0)
	// The kernel stamps each reset between first and last; bound the
	// storm's span by those times.
	span := last.Sub(first).Seconds()
	want := DefaultEvidencePerSecond + DefaultEvidencePerSecond*span
	t.Logf("%d resets over %.2fs: %d events (want %.1f ±1), %d suppressed, %d ring full",
		n, span, len(events), want, st.Suppressed, st.RingFull)
	if math.Abs(float64(len(events))-want) > 1.5 {
		t.Errorf("%d events, want %.1f ±1 (the bucket plus the rate times the storm)", len(events), want)
	}
	if st.RingFull != 0 {
		t.Errorf("%d events lost to a full ring", st.RingFull)
	}
	if got := uint64(len(events)) + st.Suppressed; got != uint64(n) {
		t.Errorf("events %d + suppressed %d = %d, want every reset (%d)", len(events), st.Suppressed, got, n)
	}
}

// TestEvidenceWithoutWakeup checks that evidence is submitted without a
// wakeup, and still reaches ReadEvents within evidence.PollPeriod. A reader
// blocked on the ring with no deadline is not woken by a reset (it finds
// the record only when flushed); ReadEvents has it one poll later at most.
func TestEvidenceWithoutWakeup(t *testing.T) {
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B)})

	rd, err := ringbuf.NewReader(p.objs.RstEvents)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		var rec ringbuf.Record
		got <- rd.ReadInto(&rec)
	}()
	time.Sleep(100 * time.Millisecond) // let the reader block
	l.ResetNoSocket(t, 1)
	select {
	case err := <-got:
		t.Errorf("a blocked reader was woken by one event (%v): it was submitted with a wakeup", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("flushed reader: %v, want the record", err)
	}
	rd.Close()

	// ReadEvents: each reset's evidence within a poll period, plus
	// scheduling slack on a loaded machine.
	c := collect(p)
	for !p.ring.Reading() {
		time.Sleep(time.Millisecond)
	}
	const n = 5
	var worst time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(evidence.PollPeriod / 3) // land anywhere in a poll period
		before := c.len()
		l.ResetNoSocket(t, 1)
		at := time.Now()
		for c.len() == before && time.Since(at) < 2*time.Second {
			time.Sleep(time.Millisecond)
		}
		worst = max(worst, time.Since(at))
	}
	events := c.stop(t, n)
	t.Logf("%d events, slowest %s after its reset (poll period %s)", len(events), worst, evidence.PollPeriod)
	if len(events) != n {
		t.Errorf("%d events, want %d", len(events), n)
	}
	if limit := evidence.PollPeriod + 50*time.Millisecond; worst > limit {
		t.Errorf("an event took %s to arrive, want at most %s", worst, limit)
	}
}

// TestReadEventsStops checks the ways ReadEvents ends: ctx cancel and Close
// both return nil; a second concurrent reader is refused; calls after Close
// fail.
func TestReadEventsStops(t *testing.T) {
	p, err := Load(Options{})
	if err != nil {
		netlab.SkipOrFail(t, "tcpreset: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.ReadEvents(ctx, func(Event) {}) }()

	waitReading(t, p)
	if err := p.ReadEvents(context.Background(), func(Event) {}); err == nil {
		t.Error("second concurrent ReadEvents: no error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ReadEvents after cancel = %v, want nil", err)
	}

	// Again, this time ended by Close.
	go func() { done <- p.ReadEvents(context.Background(), func(Event) {}) }()
	waitReading(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ReadEvents after Close = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadEvents did not return after Close")
	}
	if err := p.ReadEvents(context.Background(), func(Event) {}); err == nil {
		t.Error("ReadEvents after Close: no error")
	}
	if _, err := p.Counts(); err == nil {
		t.Error("Counts after Close: no error")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

// waitReading waits until a ReadEvents call has its reader open.
func waitReading(t *testing.T, p *Probe) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		running := p.ring.Reading()
		if running {
			return
		}
	}
	t.Fatal("ReadEvents did not start")
}

func TestPrograms(t *testing.T) {
	p := load(t, Options{})
	progs := p.Programs()
	for _, name := range []string{"tcp_send_reset", "tcp_receive_reset"} {
		prog := progs[name]
		if prog == nil {
			t.Errorf("Programs()[%q] missing (have %v)", name, progs)
			continue
		}
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, _ := info.VerifiedInstructions()
		jited, _ := info.JitedSize()
		t.Logf("%s: %s, %d instructions verified, %d bytes JITed", name, info.Name, insns, jited)
	}
}

// TestEvidenceWakesAtAQuarter: at a rate whose records could fill a quarter
// of the ring between two polls (here 100,000 a second), the program asks
// the ring how full it is and wakes a blocked reader once a quarter of it
// is waiting, so a storm cannot fill it before the next poll; at the
// default rate (TestEvidenceWithoutWakeup) it never wakes it.
func TestEvidenceWakesAtAQuarter(t *testing.T) {
	l := netlab.New(t)
	p := load(t, Options{NetnsInode: l.Inode(t, l.B), EvidencePerSecond: 100_000})
	rd, err := ringbuf.NewReader(p.objs.RstEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := make(chan error, 1)
	go func() {
		var rec ringbuf.Record
		got <- rd.ReadInto(&rec)
	}()
	time.Sleep(100 * time.Millisecond) // let the reader block
	quarter := uint64(p.objs.RstEvents.MaxEntries()) / 4 / evidence.RecordSize(int(unsafe.Sizeof(tcpresetNbsRstEvent{})))
	l.ResetNoSocket(t, int(quarter)/2)
	select {
	case err := <-got:
		t.Fatalf("woken with an eighth of the ring waiting (%v), want a quarter", err)
	case <-time.After(300 * time.Millisecond):
	}
	l.ResetNoSocket(t, int(quarter)/2+20)
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("woken reader: %v, want the first record", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("a blocked reader was not woken with a quarter of the ring (%d records) waiting", quarter)
	}
}
