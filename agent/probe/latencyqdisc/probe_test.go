package latencyqdisc

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
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
		netlab.SkipOrFail(t, "latencyqdisc: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// vA returns the cumulative histogram of device vA.
// vA is the histogram of this lab's vA; parallel tests' labs have devices
// of the same name in their own namespaces.
func vA(t *testing.T, lab *netlab.Lab, p *Probe) bpfhist.Hist {
	t.Helper()
	devs, err := p.Devices()
	if err != nil {
		t.Fatal(err)
	}
	own := lab.Inode(t, lab.A)
	for d, h := range devs {
		if d.Name == "vA" && d.Netns == own {
			return h
		}
	}
	return bpfhist.Hist{}
}

func stats(t *testing.T, p *Probe) Stats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var pingRE = regexp.MustCompile(`time=([\d.]+) ms`)

// tcQdisc reads vA's root qdisc backlog (bytes) and drop count.
func tcQdisc(t *testing.T, lab *netlab.Lab) (backlog, dropped float64) {
	t.Helper()
	out := lab.Exec(t, lab.A, "tc", "-s", "-j", "qdisc", "show", "dev", "vA")
	var qs []struct {
		Root    bool    `json:"root"`
		Backlog float64 `json:"backlog"`
		Drops   float64 `json:"drops"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatalf("tc -s -j qdisc: %v: %q", err, out)
	}
	for _, q := range qs {
		if q.Root {
			return q.Backlog, q.Drops
		}
	}
	t.Fatalf("tc -s -j qdisc: no root qdisc in %q", out)
	return 0, 0
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Bufferbloat in a tbf qdisc (10 Mbit/s, 400 ms of queue) kept full by a
// flood: the sojourn the probe measures agrees with two oracles taken over
// the same seconds, tc's backlog divided by the shaped rate and the RTT of
// iputils ping (whose echoes wait in the same queue); idle, it is a few
// microseconds; and every packet tc did not drop is timed.
func TestSojournUnderBloatMatchesOracles(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		netlab.SkipOrFail(t, "latencyqdisc: iputils ping not found: %v", err)
	}
	lab := netlab.New(t)
	p := load(t, Options{NetnsInode: lab.Inode(t, lab.A)})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}

	// Idle: veth has no qdisc (noqueue); net_dev_queue → start_xmit is
	// the call path and the TX lock.
	var d bpfhist.Delta
	d.Reset(vA(t, lab, p))
	si := stats(t, p)
	lab.Exec(t, lab.A, "ping", "-c", "20", "-i", "0.01", "-q", lab.IPB.String())
	idle := d.Next(vA(t, lab, p))
	// Without a qdisc, every packet is timed through its CPU's entry, none
	// through a slot.
	if se := stats(t, p); se.Direct-si.Direct != se.Matched-si.Matched || se.Direct-si.Direct < 20 {
		t.Errorf("idle: %d packets timed directly of %d timed; want all, 20 or more", se.Direct-si.Direct, se.Matched-si.Matched)
	}
	t.Logf("idle: %d packets, p50 %.1f µs, p99 %.1f µs", idle.Count, idle.Quantile(0.5)/1e3, idle.Quantile(0.99)/1e3)
	if idle.Count < 20 || idle.Quantile(0.99) > 1e6 {
		t.Errorf("idle: %d packets, p99 %.0f ns; want the 20 echoes under 1 ms", idle.Count, idle.Quantile(0.99))
	}

	lab.Exec(t, lab.A, "tc", "qdisc", "replace", "dev", "vA", "root", "tbf", "rate", "10mbit", "burst", "1mbit", "latency", "400ms")
	_, drop0 := tcQdisc(t, lab)
	s0 := stats(t, p)
	// 20 Mbit/s of 1200-byte datagrams into a 10 Mbit/s shaper: the queue
	// stays full and steady, and every packet is the same size, so the
	// probe's per-packet median and the oracles' per-time samples agree.
	stopFlood := txlab.UDPFlood(t, lab, lab.A, lab.B, lab.IPB, 1200, 20e6)
	time.Sleep(time.Second) // let the queue fill
	d.Reset(vA(t, lab, p))
	pingDone := make(chan string, 1)
	go func() {
		out, _ := exec.Command("ip", "netns", "exec", lab.A, "ping", "-c", "30", "-i", "0.1", lab.IPB.String()).CombinedOutput()
		pingDone <- string(out)
	}()
	var tcDelay []float64
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond)
		b, _ := tcQdisc(t, lab)
		tcDelay = append(tcDelay, b*8/10e6*1e9) // backlog bits / 10 Mbit/s, in ns
	}
	pingOut := <-pingDone
	loaded := d.Next(vA(t, lab, p))
	stopFlood()
	var rtts []float64
	for _, m := range pingRE.FindAllStringSubmatch(pingOut, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		rtts = append(rtts, v*1e6)
	}
	if len(rtts) < 10 {
		t.Fatalf("ping under load answered %d of 30: %s", len(rtts), pingOut)
	}
	got, byTC, byPing := loaded.Quantile(0.5), median(tcDelay), median(rtts)
	t.Logf("loaded: %d packets; sojourn p50 %.1f ms p99 %.1f ms; tc backlog/rate median %.1f ms; ping median %.1f ms",
		loaded.Count, got/1e6, loaded.Quantile(0.99)/1e6, byTC/1e6, byPing/1e6)
	// The queue swings with the flows' sawtooth and each oracle samples it
	// differently (tc twice a second, ping ten times, the probe every
	// packet), so they agree to a fraction, not exactly.
	// Ping's echoes wait in the same queue (their RTT adds microseconds);
	// tc's backlog/rate is how long a packet arriving at that instant will
	// wait.
	if got < 0.8*byPing || got > 1.25*byPing {
		t.Errorf("sojourn p50 %.1f ms vs ping RTT %.1f ms: outside [0.8, 1.25]x", got/1e6, byPing/1e6)
	}
	if got < 0.7*byTC || got > 1.4*byTC {
		t.Errorf("sojourn p50 %.1f ms vs tc backlog/rate %.1f ms: outside [0.7, 1.4]x", got/1e6, byTC/1e6)
	}
	if got < 100e6 {
		t.Errorf("sojourn p50 %.1f ms with a full tbf queue, want > 100 ms", got/1e6)
	}

	// Every packet is timed or dropped by tbf, once the queue has drained,
	// to within 1%: here up to 0.5% of packets leave tbf (its Sent counter
	// has them) yet never reach net_dev_start_xmit, so nothing can time
	// them.
	lab.Exec(t, lab.A, "tc", "qdisc", "replace", "dev", "vA", "root", "tbf", "rate", "1gbit", "burst", "1mbit", "latency", "400ms")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, _ := tcQdisc(t, lab); b == 0 && len(lab.Exec(t, lab.A, "ss", "-tnH", "state", "established")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("vA's queue did not drain within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, drop1 := tcQdisc(t, lab)
	s1 := stats(t, p)
	queued, matched := s1.Queued-s0.Queued, s1.Matched-s0.Matched
	t.Logf("queued %d, timed %d, tc dropped %.0f, stale %d, slots overwritten %d", queued, matched, drop1-drop0, s1.Stale-s0.Stale, s1.Overwritten-s0.Overwritten)
	// Behind tbf every packet takes a slot.
	if s1.Direct != s0.Direct {
		t.Errorf("%d packets timed directly behind a qdisc", s1.Direct-s0.Direct)
	}
	if diff := float64(queued-matched) - (drop1 - drop0); math.Abs(diff) > 2+0.01*float64(queued) {
		t.Errorf("queued %d - timed %d = %d, but tc dropped %.0f", queued, matched, queued-matched, drop1-drop0)
	}

	// Detached, it costs nothing and counts nothing.
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	before := stats(t, p)
	lab.Exec(t, lab.A, "ping", "-c", "5", "-i", "0.01", "-q", lab.IPB.String())
	if after := stats(t, p); after != before {
		t.Errorf("detached probe counted: %+v -> %+v", before, after)
	}
	if p.Attached() {
		t.Error("Attached() after Detach")
	}
	// And attaches again.
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	lab.Exec(t, lab.A, "ping", "-c", "5", "-i", "0.01", "-q", lab.IPB.String())
	if after := stats(t, p); after.Matched < before.Matched+5 {
		t.Errorf("re-attached probe: %+v -> %+v, want 5+ more timed", before, after)
	}
}

// Devices are named from the kernel, also for a namespace the probe was not
// restricted to.
func TestAllNamespaces(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	// Echoes leave by vB, replies by vA: two devices, each with its own
	// histogram whichever CPU's cache of recent devices finds it.
	lab.Exec(t, lab.B, "ping", "-c", "3", "-i", "0.01", "-q", lab.IPA.String())
	devs, err := p.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	found := map[string]uint64{}
	for d, h := range devs {
		names = append(names, d.Name)
		var dl bpfhist.Delta
		if (d.Netns == lab.Inode(t, lab.B) && d.Name == "vB") || (d.Netns == lab.Inode(t, lab.A) && d.Name == "vA") {
			found[d.Name] = dl.Next(h).Count
		}
	}
	if found["vA"] < 3 || found["vB"] < 3 {
		t.Fatalf("packets timed: %v, want 3+ on vA in %s and on vB in %s; devices: %s", found, lab.A, lab.B, strings.Join(names, ", "))
	}
}
