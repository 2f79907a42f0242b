package latencyflows

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

func TestMain(m *testing.M) {
	txlab.MaybeHelper()
	os.Exit(m.Run())
}

func load(t *testing.T, opts Options) *Probe {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "latencyflows: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

var (
	ssRTT     = regexp.MustCompile(`\brtt:([\d.]+)/([\d.]+)`)
	ssRetrans = regexp.MustCompile(`\bretrans:\d+/(\d+)`)
	ssCwnd    = regexp.MustCompile(`\bcwnd:(\d+)`)
	ssAcked   = regexp.MustCompile(`\bbytes_acked:(\d+)`)
)

type ssInfo struct {
	srtt, rttvar time.Duration
	retrans      uint32
	cwnd         uint32
	acked        int64
}

// ssFlow reads `ss -ti` for the connection from local port sport in ns.
func ssFlow(t *testing.T, lab *netlab.Lab, ns string, sport uint16) (ssInfo, bool) {
	t.Helper()
	out := lab.Exec(t, ns, "ss", "-tinH", "state", "established", fmt.Sprintf("sport = :%d", sport))
	if strings.TrimSpace(out) == "" {
		return ssInfo{}, false
	}
	var in ssInfo
	if m := ssRTT.FindStringSubmatch(out); m != nil {
		a, _ := strconv.ParseFloat(m[1], 64)
		b, _ := strconv.ParseFloat(m[2], 64)
		in.srtt, in.rttvar = time.Duration(a*1e6), time.Duration(b*1e6)
	}
	if m := ssRetrans.FindStringSubmatch(out); m != nil {
		v, _ := strconv.ParseUint(m[1], 10, 32)
		in.retrans = uint32(v)
	}
	if m := ssCwnd.FindStringSubmatch(out); m != nil {
		v, _ := strconv.ParseUint(m[1], 10, 32)
		in.cwnd = uint32(v)
	}
	if m := ssAcked.FindStringSubmatch(out); m != nil {
		in.acked, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return in, true
}

// A flow losing 5% of its data segments (nftables on the receiver): once
// it is idle, the probe's last sample agrees with what `ss -ti` shows for
// the socket — smoothed RTT, its variation, congestion window — and its
// retransmits equal both ss's and nstat's TcpRetransSegs, the flow being
// the namespace's only sender.
func TestFlowMatchesSS(t *testing.T) {
	lab := netlab.New(t)
	cg := txlab.NewCgroup(t)
	p := load(t, Options{NetnsInode: lab.Inode(t, lab.A), MinGap: time.Millisecond})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	sink := txlab.NewSink(t, lab, lab.B, lab.IPB)
	// Drop only segments carrying data, so the handshake and FIN are never
	// lost and every retransmit is of data.
	rule := fmt.Sprintf("table inet nbsloss {\n chain in {\n type filter hook input priority 0; policy accept;\n"+
		" ip saddr %s tcp dport %d meta length > 200 numgen random mod 100 < 5 counter drop\n }\n}\n", lab.IPA, sink.Addr.Port())
	cmd := exec.Command("ip", "netns", "exec", lab.B, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rule)
	if out, err := cmd.CombinedOutput(); err != nil {
		netlab.SkipOrFail(t, "latencyflows: nft: %v: %s", err, out)
	}

	before := lab.Nstat(t, lab.A)
	const n, size = 400, 1000
	sender, err := cg.StartSend(lab.A, txlab.SendSpec{Dst: sink.Addr, Messages: n, Size: size, Gap: time.Millisecond, Linger: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Wait()

	// Wait until everything is ACKed and the socket is idle.
	var port uint16
	var ss ssInfo
	deadline := time.Now().Add(15 * time.Second)
	for {
		flows, err := p.Flows()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			if f.Dst == sink.Addr {
				port = f.Src.Port()
			}
		}
		if port != 0 {
			if in, ok := ssFlow(t, lab, lab.A, port); ok && in.acked >= n*size {
				ss = in
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("flow to %s not fully ACKed within 15s (port %d)", sink.Addr, port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The final ACK may fall inside the per-flow rate limit and go
	// unsampled; a segment arriving now, after the flow went idle, is
	// sampled and changes neither RTT nor window.
	time.Sleep(10 * time.Millisecond)
	if err := sink.Poke(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	after := lab.Nstat(t, lab.A)
	var f Flow
	flows, err := p.Flows()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range flows {
		if x.Dst == sink.Addr {
			f = x
		}
	}
	again, _ := ssFlow(t, lab, lab.A, port)
	again.acked = ss.acked // the poke's ACK does not acknowledge A's data; compare the rest
	if again != ss {
		t.Fatalf("socket still changing: %+v then %+v", ss, again)
	}
	t.Logf("bpf: srtt %v rttvar %v cwnd %d retrans %d (first %d) samples %d; ss: %+v; nstat TcpRetransSegs +%d",
		f.SRTT, f.RTTVar, f.Cwnd, f.TotalRetrans, f.FirstRetrans, f.Samples, ss, after["TcpRetransSegs"]-before["TcpRetransSegs"])
	if f.Src.Addr() != lab.IPA || f.Src.Port() != port || f.Netns != lab.Inode(t, lab.A) {
		t.Errorf("flow %+v: want source %s:%d in netns %d", f, lab.IPA, port, lab.Inode(t, lab.A))
	}
	// tcp_probe fires as a segment arrives, before TCP processes it, so
	// the last sample is the state before the last ACK: RTT and window lag
	// by that one ACK's update. Retransmits are counted when sent and every
	// retransmit is ACKed later, so they are exact.
	near := func(got, want, rel, abs float64) bool { return got >= want*(1-rel)-abs && got <= want*(1+rel)+abs }
	if !near(float64(f.SRTT), float64(ss.srtt), 0.1, 3e3) {
		t.Errorf("srtt %v, ss %v", f.SRTT, ss.srtt)
	}
	if !near(float64(f.RTTVar), float64(ss.rttvar), 0.5, 5e3) {
		t.Errorf("rttvar %v, ss %v", f.RTTVar, ss.rttvar)
	}
	if !near(float64(f.Cwnd), float64(ss.cwnd), 0.1, 2) {
		t.Errorf("cwnd %d, ss %d", f.Cwnd, ss.cwnd)
	}
	if f.TotalRetrans != ss.retrans || uint64(f.TotalRetrans) != after["TcpRetransSegs"]-before["TcpRetransSegs"] {
		t.Errorf("retransmits %d, ss %d, nstat %d", f.TotalRetrans, ss.retrans, after["TcpRetransSegs"]-before["TcpRetransSegs"])
	}
	if f.TotalRetrans == 0 {
		t.Error("no retransmits at 5% loss: the loss rule did not work")
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Sampled == 0 || st.Sampled > st.Considered || st.Considered > st.Seen {
		t.Errorf("stats %+v", st)
	}

	if err := p.Forget(func(Flow) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if flows, _ := p.Flows(); len(flows) != 0 {
		t.Errorf("%d flows after forgetting all", len(flows))
	}
}

// The per-CPU cap holds: with a cap of 5 samples per second per CPU, a
// one-second busy flow yields at most 5 samples per CPU-second, however
// many segments it receives.
func TestRateLimit(t *testing.T) {
	lab := netlab.New(t)
	cg := txlab.NewCgroup(t)
	p := load(t, Options{NetnsInode: lab.Inode(t, lab.A), MinGap: time.Nanosecond, SamplesPerSec: 5})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	sink := txlab.NewSink(t, lab, lab.B, lab.IPB)
	start := time.Now()
	cg.Send(t, lab.A, txlab.SendSpec{Dst: sink.Addr, Conns: 2, Size: 64 << 10, Duration: time.Second})
	secs := time.Since(start).Seconds() + 1
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v over %.1fs", st, secs)
	limit := uint64(5 * float64(runtime.NumCPU()) * (secs + 1))
	if st.Sampled > limit || st.Suppressed == 0 || st.Seen < 100 {
		t.Errorf("sampled %d (limit %d), suppressed %d, seen %d", st.Sampled, limit, st.Suppressed, st.Seen)
	}
	// The tick gate: a bulk flow is considered at most once a tick (HZ is
	// at most 1000) per socket, far fewer times than it receives segments.
	if ticks := uint64(2 * 1000 * 2 * (secs + 1)); st.Considered > ticks || st.Considered >= st.Seen/2 || st.Sampled > st.Considered {
		t.Errorf("considered %d of %d seen (at most %d ticks of 2 sockets each side), sampled %d", st.Considered, st.Seen, ticks, st.Sampled)
	}
}

// Flows reads the table in batches as it reads it one by one, past one
// batch and empty; Delete forgets the cookies given, one of them gone
// already, and leaves the rest.
func TestFlowsInBatchesAndDelete(t *testing.T) {
	p := load(t, Options{})
	const n = 2*256 + 37 // past two batches (bpfload.Batch)
	for i := range uint64(n) {
		v := latencyflowsNbsFlow{Sport: uint16(i), Dport: 80, Family: 2, Netns: 7, SrttUs: uint32(100 + i), LastNs: 1000 + i, Samples: i}
		v.Saddr[0], v.Daddr[0] = 10, byte(i)
		if err := p.objs.Flows.Put(i+1, &v); err != nil {
			t.Fatal(err)
		}
	}
	oneByOne := func() []Flow {
		var out []Flow
		if err := bpfload.Each(p.objs.Flows, func(k uint64, v *latencyflowsNbsFlow) { out = append(out, decode(k, v)) }); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out, func(a, b Flow) int { return cmp.Compare(a.Cookie, b.Cookie) })
		return out
	}
	batched := func() []Flow {
		fs, err := p.Flows()
		if err != nil {
			t.Fatal(err)
		}
		fs = slices.Clone(fs)
		slices.SortFunc(fs, func(a, b Flow) int { return cmp.Compare(a.Cookie, b.Cookie) })
		return fs
	}
	if got, want := batched(), oneByOne(); len(got) != n || !slices.Equal(got, want) {
		t.Fatalf("batched %d flows, one by one %d (equal: %v)", len(got), len(want), slices.Equal(got, want))
	}
	var del []uint64
	for c := uint64(1); c <= n; c += 2 {
		del = append(del, c)
	}
	if err := p.objs.Flows.Delete(del[3]); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(del); err != nil {
		t.Fatal(err)
	}
	got := batched()
	if len(got) != n/2 {
		t.Fatalf("%d flows left, want %d", len(got), n/2)
	}
	for _, f := range got {
		if f.Cookie%2 != 0 {
			t.Fatalf("flow %d left, which was deleted", f.Cookie)
		}
	}
	if err := p.Delete(slices.Collect(func(yield func(uint64) bool) {
		for _, f := range got {
			if !yield(f.Cookie) {
				return
			}
		}
	})); err != nil {
		t.Fatal(err)
	}
	if got := batched(); len(got) != 0 {
		t.Fatalf("%d flows left after deleting all", len(got))
	}
}
