package latency

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// collect returns one reading's counters.
func collect(t *testing.T, s *Source) map[string]uint64 {
	t.Helper()
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r.Counters
}

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

// evaluator collects a source every interval in the background and
// evaluates the tree with the catalogue's default thresholds, as the agent
// does, remembering the worst state each metric reached.
type evaluator struct {
	mu    sync.Mutex
	worst map[string]tree.State
	errs  []error
	stop  chan struct{}
	done  chan struct{}
}

func evaluate(s *Source, interval time.Duration) *evaluator {
	e := &evaluator{worst: map[string]tree.State{}, stop: make(chan struct{}), done: make(chan struct{})}
	tr := tree.New()
	prev, err := s.Collect(context.Background())
	if err != nil {
		e.errs = append(e.errs, err)
	}
	tr.Define(prev.Metrics...)
	last := time.Now()
	go func() {
		defer close(e.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-e.stop:
				return
			case now := <-tick.C:
				cur, err := s.Collect(context.Background())
				if err != nil {
					e.mu.Lock()
					e.errs = append(e.errs, err)
					e.mu.Unlock()
					continue
				}
				tr.Define(cur.Metrics...)
				secs := now.Sub(last).Seconds()
				last = now
				values := map[string]float64{}
				for id, v := range cur.Counters {
					values[id] = float64(v-min(prev.Counters[id], v)) / secs
				}
				prev = cur
				res := tr.Evaluate(values, nil)
				e.mu.Lock()
				for id, st := range res.State {
					e.worst[id] = schema.Worse(e.worst[id], st)
				}
				e.mu.Unlock()
			}
		}
	}()
	return e
}

func (e *evaluator) finish(t *testing.T) map[string]tree.State {
	t.Helper()
	close(e.stop)
	<-e.done
	for _, err := range e.errs {
		t.Errorf("Collect: %v", err)
	}
	return e.worst
}

// TestRetransmitsUnderLoss: random loss in the lab; the source's
// latency/retransmits equals nstat TcpRetransSegs, latency/rto equals
// TcpExtTCPTimeouts and the /proc children equal their counters; with the
// default thresholds latency turns WARN or CRIT, and latency/retransmits is
// among the children that say why.
func TestRetransmitsUnderLoss(t *testing.T) {
	l := netlab.New(t)
	h, err := netns.Resolve(l.A)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: h}})
	if s.probe == nil {
		netlab.SkipOrFail(t, "latency: BPF unavailable: %s", s.bpfWhy)
	}
	before, base := l.Nstat(t, l.A), collect(t, s)
	ev := evaluate(s, time.Second)
	res := l.LossyBulk(t, 50, 4*time.Second)
	time.Sleep(1100 * time.Millisecond) // one more interval to evaluate
	worst := ev.finish(t)
	after := l.Nstat(t, l.A)
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := func(k string) uint64 { return after[k] - before[k] }
	t.Logf("%d MB sent, %d aggregates dropped; retransmits %d (nstat %d), rto %d (nstat %d), lost retransmits %d",
		res.Bytes>>20, res.Dropped, r.Counters[catalog.LatencyRetransmits], d("TcpRetransSegs"),
		r.Counters[catalog.LatencyRTO], d("TcpExtTCPTimeouts"), r.Counters[catalog.LatencyLostRetransmits])
	for id, want := range map[string]uint64{
		catalog.Latency:                d("TcpRetransSegs"),
		catalog.LatencyRetransmits:     d("TcpRetransSegs"),
		catalog.LatencyRTO:             d("TcpExtTCPTimeouts"),
		catalog.LatencyLostRetransmits: d("TcpExtTCPLostRetransmit"),
		catalog.LatencyListenOverflows: d("TcpExtListenOverflows"),
		catalog.LatencySocketRcvQ:      d("TcpExtTCPRcvQDrop"),
	} {
		// The probe's count from its load, the /proc ones since boot.
		got := r.Counters[id]
		if s.SinceBoot(id) {
			got -= base[id]
		}
		if got != want {
			t.Errorf("%s = %d, nstat says %d", id, got, want)
		}
	}
	if r.Counters[catalog.LatencyRetransmits] < 1000 {
		t.Errorf("only %d retransmits: the loss did not bite", r.Counters[catalog.LatencyRetransmits])
	}
	var raised []string
	for id, st := range worst {
		if st != tree.OK {
			raised = append(raised, fmt.Sprintf("%s=%s", id, st))
		}
	}
	t.Logf("non-OK during the run: %v", raised)
	if st := worst[catalog.Latency]; st != tree.Warn && st != tree.Crit {
		t.Errorf("latency reached %s, want WARN or CRIT", st)
	}
	if st := worst[catalog.LatencyRetransmits]; st != tree.Warn && st != tree.Crit {
		t.Errorf("latency/retransmits reached %s, want WARN or CRIT", st)
	}
	for _, id := range []string{catalog.LatencyListenOverflows, catalog.LatencyListenDrops, catalog.LatencyMemoryPressure} {
		if worst[id] != tree.OK {
			t.Errorf("%s reached %s, but nothing overflowed", id, worst[id])
		}
	}
	if progs := s.Programs(); progs["tcp_retransmit_skb"] == nil || progs["tcp_retransmit_synack"] == nil {
		t.Errorf("Programs() = %v", progs)
	}
}

// TestProcFallback: without BPF, retransmits and RTOs come from the
// namespace's own counters, and the source says why.
func TestProcFallback(t *testing.T) {
	l := netlab.New(t)
	h, err := netns.Resolve(l.A)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: h, DisableBPF: true}})
	before, base := l.Nstat(t, l.A), collect(t, s)
	l.LossyBulk(t, 50, time.Second)
	after, r := l.Nstat(t, l.A), collect(t, s)
	if got, want := r[catalog.LatencyRetransmits]-base[catalog.LatencyRetransmits], after["TcpRetransSegs"]-before["TcpRetransSegs"]; got != want || want == 0 {
		t.Errorf("retransmits %d, nstat %d (want equal, > 0)", got, want)
	}
	// On /proc every counter is the kernel's since boot: the agent counts
	// them from its start or continues a previous agent's (source.SinceBoot),
	// and none continues a pinned map.
	if got, want := r[catalog.LatencyRetransmits], after["TcpRetransSegs"]; got != want {
		t.Errorf("retransmits %d, want the kernel's since boot, %d", got, want)
	}
	for id := range r {
		if !s.SinceBoot(id) || s.Continues(id) {
			t.Errorf("%s on /proc: SinceBoot %v, Continues %v", id, s.SinceBoot(id), s.Continues(id))
		}
	}
	if s.Programs() != nil {
		t.Errorf("Programs() on /proc = %v, want nil", s.Programs())
	}
	caps := s.Capabilities()
	if len(caps) != 3 || caps[0].GetName() != capBPF || caps[0].GetAvailable() || caps[0].GetReason() == "" {
		t.Errorf("capabilities %v: want %s unavailable with a reason", caps, capBPF)
	}
	if s.Name() != "latency (/proc)" {
		t.Errorf("Name() = %q", s.Name())
	}
}

// TestSoftnet: softnet_stat's columns feed the softnet children, summed
// over CPUs, as the kernel has them (since boot).
func TestSoftnet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "softnet_stat")
	write := func(dropped, squeeze, flow uint32) {
		line := fmt.Sprintf("00001000 %08x %08x 00000000 00000000 00000000 00000000 00000000 00000000 00000000 %08x 00000000 00000000\n", dropped, squeeze, flow)
		if err := os.WriteFile(path, []byte(line+"00000010 00000001 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(5, 7, 0)
	self, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Options{Env: source.Env{Netns: self, DisableBPF: true}, SoftnetPath: path})
	write(15, 27, 2)
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]uint64{catalog.LatencySoftnetDropped: 18, catalog.LatencySoftnetSqueeze: 28, catalog.LatencySoftnet: 46} {
		if got := r.Counters[id]; got != want {
			t.Errorf("%s = %d, want %d", id, got, want)
		}
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Collect(context.Background()); err == nil {
		t.Error("Collect with a broken softnet_stat: no error")
	}
}

// Every child of latency in the catalogue is defined once, under the root,
// with an operator's description; thresholds propagate to the root.
func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range catalog.LatencyTree() {
		if seen[m.ID] {
			t.Errorf("%s defined twice", m.ID)
		}
		seen[m.ID] = true
		if m.ID != catalog.Latency && !seen[m.Parent()] {
			t.Errorf("%s defined before (or without) its parent %s", m.ID, m.Parent())
		}
		if len(m.Description) < 80 || m.Title == "" || m.Unit == "" || m.Kind != catalog.Rate {
			t.Errorf("%s: incomplete definition %+v", m.ID, m)
		}
	}
	for id := range catalog.LatencyProcCounters {
		if !seen[id] {
			t.Errorf("LatencyProcCounters feeds %s, which the tree does not define", id)
		}
	}
	// One child over its crit level: the root is CRIT, its parent too.
	tr := tree.New()
	tr.Define(catalog.LatencyTree()...)
	values := map[string]float64{}
	for id := range seen {
		values[id] = 0
	}
	values[catalog.LatencySocketRcvQ] = 500
	var res tree.Result
	for i := 0; i < 2; i++ { // hold 2
		res = tr.Evaluate(values, nil)
	}
	if res.State[catalog.Latency] != tree.Crit || res.State[catalog.LatencySocketDrops] != tree.Crit || res.State[catalog.LatencyRetransmits] != tree.OK {
		t.Errorf("states %v", res.State)
	}
}

// TestPinnedContinues: with a pin directory the probe's counters continue
// the previous source's (the agent then reports what was counted while
// none ran), the /proc children are the kernel's since boot, never the
// probe's.
func TestPinnedContinues(t *testing.T) {
	l := netlab.New(t)
	h, err := netns.Resolve(l.A)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(netlab.BPFFS(t), "nbs")
	t.Cleanup(func() {
		if err := bpfload.Unpin(dir); err != nil {
			t.Error(err)
		}
	})
	env := source.Env{Netns: h, PinDir: dir}
	first, err := Open(context.Background(), Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if first.probe == nil {
		_ = first.Close()
		netlab.SkipOrFail(t, "latency: BPF unavailable: %s", first.bpfWhy)
	}
	if first.Continues(catalog.LatencyRetransmits) {
		t.Error("a source on an empty pin directory says it continues")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := open(t, Options{Env: env})
	for id, want := range map[string][2]bool{ // Continues, SinceBoot
		catalog.Latency:                {true, false},
		catalog.LatencyRetransmits:     {true, false},
		catalog.LatencyRTO:             {true, false},
		catalog.LatencyListenOverflows: {false, true},
		catalog.LatencySoftnetDropped:  {false, true},
		catalog.LatencyECN:             {false, true},
		catalog.LatencyECNDeliveredCE:  {false, true},
	} {
		if got := [2]bool{second.Continues(id), second.SinceBoot(id)}; got != want {
			t.Errorf("%s: Continues, SinceBoot = %v, want %v", id, got, want)
		}
	}
}
