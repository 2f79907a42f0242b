package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

// The TX senders are this test binary started again inside a cgroup.
func init() { txlab.MaybeHelper() }

type txPercentiles struct {
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Samples uint64  `json:"samples"`
}

// txMerged returns a histogram metric's distribution merged over [from, to]
// as stored (in the metric's unit, ms); nil when nothing is stored.
func txMerged(t *testing.T, col *collector, node, metric string, from, to time.Time) *txPercentiles {
	t.Helper()
	var s struct {
		Points []struct {
			Percentiles *txPercentiles `json:"percentiles"`
		} `json:"points"`
	}
	url := fmt.Sprintf("/api/v1/nodes/%s/series?metric=%s&from=%d&to=%d&step=%s",
		node, metric, from.UnixMilli(), to.UnixMilli(), (to.Sub(from) + time.Hour).Round(time.Second))
	if code := col.getJSON(t, url, &s); code != http.StatusOK {
		return nil
	}
	for _, p := range s.Points {
		if p.Percentiles != nil {
			return p.Percentiles
		}
	}
	return nil
}

// txGauge returns a gauge's stored values since from, in order.
func txGauge(t *testing.T, col *collector, node, metric string, from time.Time) []float64 {
	t.Helper()
	var s seriesResp
	url := fmt.Sprintf("/api/v1/nodes/%s/series?metric=%s&from=%d", node, metric, from.UnixMilli())
	if code := col.getJSON(t, url, &s); code != http.StatusOK {
		return nil
	}
	var out []float64
	for _, p := range s.Points {
		if p.Value != nil {
			out = append(out, *p.Value)
		}
	}
	return out
}

type txEvent struct {
	Time   time.Time         `json:"t"`
	Fields map[string]string `json:"fields"`
}

func txEvents(t *testing.T, col *collector, node, metric string) []txEvent {
	t.Helper()
	var ev struct {
		Events []txEvent `json:"events"`
	}
	col.getJSON(t, fmt.Sprintf("/api/v1/nodes/%s/events?metric=%s&limit=1000", node, metric), &ev)
	slices.SortFunc(ev.Events, func(a, b txEvent) int { return a.Time.Compare(b.Time) })
	return ev.Events
}

func txTree(t *testing.T, col *collector, node string) treeResp {
	t.Helper()
	var tr treeResp
	col.getJSON(t, "/api/v1/nodes/"+node+"/tree", &tr)
	return tr
}

// txExpand asks the collector to stream the node's full tree (and attach
// its triggered sources) for secs seconds.
func txExpand(t *testing.T, col *collector, node string, secs int) {
	t.Helper()
	body, _ := json.Marshal(map[string]int{"seconds": secs})
	if code, out := col.call(t, http.MethodPost, "/api/v1/nodes/"+node+"/expand", string(body)); code/100 != 2 {
		t.Fatalf("expand %s: HTTP %d %s", node, code, out)
	}
}

// txActions lists a triggered source's attach/detach evidence.
func txActions(t *testing.T, col *collector, node, source string) []txEvent {
	t.Helper()
	return txEvents(t, col, node, "agent/triggered/"+source)
}

func txMedian(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

var txPingRE = regexp.MustCompile(`time=([\d.]+) ms`)

// tcBacklogDelay samples vA's root qdisc backlog over d and returns the
// median delay it implies at the shaped 10 Mbit/s, in ms.
func tcBacklogDelay(t *testing.T, lab *netlab.Lab, d time.Duration) float64 {
	t.Helper()
	var delays []float64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		var qs []struct {
			Root    bool    `json:"root"`
			Backlog float64 `json:"backlog"`
		}
		if err := json.Unmarshal([]byte(lab.Exec(t, lab.A, "tc", "-s", "-j", "qdisc", "show", "dev", "vA")), &qs); err != nil {
			t.Fatalf("tc -s -j qdisc: %v", err)
		}
		for _, q := range qs {
			if q.Root {
				delays = append(delays, q.Backlog*8/10e6*1e3)
			}
		}
	}
	return txMedian(delays)
}

// One node, its agent watching lab namespace A and sampling every TCP
// connection of a cgroup the test made (where it runs its senders).
// Healthy children are streamed only in snapshots or while an operator has
// the node expanded, so the test expands it to look.
//
//  1. Healthy: no triggered program is attached until an operator expands
//     the node, and they are detached --triggered.hold after the expand
//     ends. Spaced writes meanwhile: the three TX stages are stored, one
//     value per write, ordered (no leg longer than the whole), and their
//     medians match the kernel's SO_TIMESTAMPING stamps the sender read
//     from its own socket.
//  2. Bufferbloat (tbf 10 Mbit/s, 400 ms) and a flood (TCP, and UDP at half
//     the rate): qdisc_to_driver
//     turns the latency branch red, which attaches qdisc sojourn and
//     per-flow sampling; latency/qdisc/va's median agrees with tc's
//     backlog/rate and with ping; the flows' smoothed RTT shows the queue.
//  3. The bloat goes: after --triggered.hold the programs are detached.
//
// Throughout, the agent branch carries each BPF program's ns/run and runs/s.
func TestLatencyTXEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		netlab.SkipOrFail(t, "iputils ping not found: %v", err)
	}
	lab := netlab.New(t)
	cg := txlab.NewCgroup(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	const node = "lab-tx"
	start := time.Now()
	startAgent(t, node, lab.A, col.grpcAddr, func(c *agentapp.Config) {
		c.CgroupPath, c.TxSample, c.SnapshotEvery = cg.Path, 1, interval
		c.OverheadBudget, c.TriggeredHold, c.TriggeredMax = 50, 3*time.Second, time.Hour
	})
	waitNode(t, col, node)
	sink := txlab.NewSink(t, lab, lab.B, lab.IPB)

	// 1. Healthy: nothing triggered; then an operator looks.
	time.Sleep(3 * interval)
	if ev := txActions(t, col, node, "latency_qdisc"); len(ev) != 0 {
		t.Fatalf("qdisc sojourn attached on a healthy, unexpanded node: %+v", ev)
	}
	p1 := time.Now()
	txExpand(t, col, node, 5)
	const n = 300
	res := cg.Send(t, lab.A, txlab.SendSpec{Dst: sink.Addr, Messages: n, Size: 1000, Gap: 2 * time.Millisecond})
	var oracle = map[string][]float64{}
	for _, s := range res.Stamps {
		if s.Sched == 0 || s.Snd == 0 || s.Ack == 0 {
			t.Fatalf("oracle lacks a stamp: %+v", s)
		}
		oracle["latency/tx/sendmsg_to_qdisc"] = append(oracle["latency/tx/sendmsg_to_qdisc"], float64(s.Sched-s.Write)/1e6)
		oracle["latency/tx/qdisc_to_driver"] = append(oracle["latency/tx/qdisc_to_driver"], float64(s.Snd-s.Sched)/1e6)
		oracle["latency/tx/driver_to_ack"] = append(oracle["latency/tx/driver_to_ack"], float64(s.Ack-s.Snd)/1e6)
	}
	stages := []string{"latency/tx", "latency/tx/sendmsg_to_qdisc", "latency/tx/qdisc_to_driver", "latency/tx/driver_to_ack"}
	got := map[string]*txPercentiles{}
	eventually(t, withinTwoIntervals+2*time.Second, func() string {
		for _, m := range stages {
			got[m] = txMerged(t, col, node, m, p1, time.Now())
			if got[m] == nil || got[m].Samples != n {
				return fmt.Sprintf("%s: stored %+v, want %d values", m, got[m], n)
			}
		}
		return ""
	})
	for _, m := range stages {
		t.Logf("%s: p50 %.4f ms p99 %.4f ms (%d)", m, got[m].P50, got[m].P99, got[m].Samples)
	}
	// Ordered: sendmsg → driver holds both of its legs. Within 7%: the
	// median bucket's width.
	whole := got["latency/tx"].P50 * 1.07
	if got["latency/tx/sendmsg_to_qdisc"].P50 > whole || got["latency/tx/qdisc_to_driver"].P50 > whole {
		t.Errorf("a leg's median exceeds sendmsg→driver's %.4f ms: %+v %+v", got["latency/tx"].P50,
			got["latency/tx/sendmsg_to_qdisc"], got["latency/tx/qdisc_to_driver"])
	}
	for m, vs := range oracle {
		want := txMedian(vs)
		t.Logf("%s median: stored %.4f ms, SO_TIMESTAMPING %.4f ms", m, got[m].P50, want)
		// sendmsg_to_qdisc starts in the kernel, after the syscall entry the
		// oracle's user-space clock includes: it may only be shorter.
		tol := 0.1*want + 0.003
		if m == "latency/tx/sendmsg_to_qdisc" && got[m].P50 <= want+tol {
			continue
		}
		if math.Abs(got[m].P50-want) > tol {
			t.Errorf("%s median %.4f ms, SO_TIMESTAMPING %.4f ms", m, got[m].P50, want)
		}
	}
	if got["latency/tx/qdisc_to_driver"].P99 > 1 || got["latency/tx/driver_to_ack"].P50 > 10 {
		t.Errorf("healthy veth: qdisc→driver p99 %.3f ms, driver→ack p50 %.3f ms", got["latency/tx/qdisc_to_driver"].P99, got["latency/tx/driver_to_ack"].P50)
	}
	for _, src := range []string{"latency_qdisc", "latency_flows"} {
		eventually(t, 15*time.Second, func() string {
			ev := txActions(t, col, node, src)
			if len(ev) != 2 || ev[0].Fields["action"] != "attached" || !strings.Contains(ev[0].Fields["reason"], "expanded") ||
				ev[1].Fields["action"] != "detached" || !strings.HasPrefix(ev[1].Fields["reason"], "no trouble") {
				return fmt.Sprintf("%s: want attached by the expand, then detached once it ended: %+v", src, ev)
			}
			if ev[0].Time.Before(p1) {
				return fmt.Sprintf("%s attached before the expand: %+v", src, ev)
			}
			return ""
		})
	}

	// 2. Bufferbloat and a flood.
	lab.Exec(t, lab.A, "tc", "qdisc", "replace", "dev", "vA", "root", "tbf", "rate", "10mbit", "burst", "1mbit", "latency", "400ms")
	flood, err := cg.StartSend(lab.A, txlab.SendSpec{Dst: sink.Addr, Conns: 4, Size: 64 << 10, Duration: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Wait()
	// Half the shaped rate in small, evenly spaced datagrams: most packets
	// in the queue then sample it evenly in time, as ping and tc do, rather
	// than in the TCP flows' sawtooth (whose packet count and size swing
	// with it).
	stopUDP := txlab.UDPFlood(t, lab, lab.A, lab.B, lab.IPB, 1200, 5e6)
	eventually(t, 15*time.Second, func() string {
		ev := txActions(t, col, node, "latency_qdisc")
		if len(ev) != 3 || ev[2].Fields["action"] != "attached" || !strings.HasPrefix(ev[2].Fields["reason"], "triggered: latency") {
			return fmt.Sprintf("the bloat did not attach qdisc sojourn: %+v", ev)
		}
		t.Logf("attached: %s", ev[2].Fields["reason"])
		return ""
	})
	// Look at the whole tree for the measurement window.
	txExpand(t, col, node, 8)
	w0 := time.Now()
	pingOut := make(chan string, 1)
	go func() {
		out, _ := exec.Command("ip", "netns", "exec", lab.A, "ping", "-c", "35", "-i", "0.1", lab.IPB.String()).CombinedOutput()
		pingOut <- string(out)
	}()
	byTC := tcBacklogDelay(t, lab, 3500*time.Millisecond)
	var rtts []float64
	for _, m := range txPingRE.FindAllStringSubmatch(<-pingOut, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		rtts = append(rtts, v)
	}
	w1 := time.Now()
	time.Sleep(interval + time.Second) // the report holding the window's end reaches the store
	if len(rtts) < 10 {
		t.Fatalf("ping under bloat: %d answers", len(rtts))
	}
	byPing := txMedian(rtts)
	// Reports are stamped at the end of their interval.
	sojourn := txMerged(t, col, node, "latency/qdisc/va", w0, w1.Add(interval))
	srtt := txMerged(t, col, node, "latency/flows/srtt", w0, w1.Add(interval))
	tx := txMerged(t, col, node, "latency/tx/qdisc_to_driver", w0, w1.Add(interval))
	if sojourn == nil || srtt == nil || tx == nil {
		t.Fatalf("stored under bloat: sojourn %+v, flows srtt %+v, tx %+v", sojourn, srtt, tx)
	}
	t.Logf("bloat: qdisc sojourn p50 %.1f ms p99 %.1f ms (%d); tc backlog/rate %.1f ms; ping %.1f ms; "+
		"tx qdisc→driver p50 %.1f ms; flows srtt p50 %.1f ms (%d flow samples)",
		sojourn.P50, sojourn.P99, sojourn.Samples, byTC, byPing, tx.P50, srtt.P50, srtt.Samples)
	// Ping's echoes wait in the same queue as the flood; tc's backlog
	// divided by the rate is how long a packet arriving at that instant will
	// wait. Both sample the queue evenly in time, the probe per packet.
	if sojourn.P50 < 0.7*byPing || sojourn.P50 > 1.4*byPing {
		t.Errorf("qdisc sojourn median %.1f ms vs ping %.1f ms: outside [0.7, 1.4]x", sojourn.P50, byPing)
	}
	if sojourn.P50 < 0.6*byTC || sojourn.P50 > 1.6*byTC {
		t.Errorf("qdisc sojourn median %.1f ms vs tc backlog/rate %.1f ms: outside [0.6, 1.6]x", sojourn.P50, byTC)
	}
	// The sampled writes wait in the same queue, but only a few of a TCP
	// flow's writes are timed (8 in flight per socket), at moments its
	// sawtooth chooses.
	if tx.P50 < 0.3*sojourn.P50 || tx.P50 > 3*sojourn.P50 {
		t.Errorf("tx qdisc→driver median %.1f ms vs qdisc sojourn %.1f ms", tx.P50, sojourn.P50)
	}
	// A flow's smoothed RTT includes the queue its data waits in.
	if srtt.P50 < 0.25*byPing || srtt.P50 > 4*byPing {
		t.Errorf("flows' smoothed RTT median %.1f ms vs ping %.1f ms", srtt.P50, byPing)
	}
	if tr := txTree(t, col, node); tr.find("latency") == nil || tr.find("latency").State == "ok" {
		t.Errorf("latency root not raised under bloat: %+v", tr.find("latency"))
	}

	// 3. The bloat goes; the triggered programs follow after the hold.
	stopUDP()
	if _, err := flood.Wait(); err != nil {
		t.Fatal(err)
	}
	lab.Exec(t, lab.A, "tc", "qdisc", "del", "dev", "vA", "root")
	eventually(t, 30*time.Second, func() string {
		ev := txActions(t, col, node, "latency_qdisc")
		if len(ev) != 4 || ev[3].Fields["action"] != "detached" {
			return fmt.Sprintf("qdisc sojourn not detached after the bloat: %+v", ev)
		}
		return ""
	})
	// The agent branch: every program's cost per run and runs per second.
	tr := txTree(t, col, node)
	bpf := tr.find("agent/bpf")
	if bpf == nil {
		t.Fatal("no agent/bpf in the tree")
	}
	var progs []string
	for _, c := range bpf.Children {
		progs = append(progs, strings.TrimPrefix(c.ID, "agent/bpf/"))
	}
	t.Logf("programs in the agent branch: %s", strings.Join(progs, ", "))
	for _, p := range []string{"sockops_tx_timestamping", "tcp_sendmsg_locked", "net_dev_queue", "net_dev_start_xmit", "tcp_probe"} {
		ns := txGauge(t, col, node, "agent/bpf/"+p+"/ns_per_run", start)
		runs := txGauge(t, col, node, "agent/bpf/"+p+"/runs_per_sec", start)
		if len(ns) == 0 || slices.Max(ns) <= 0 || len(runs) == 0 || slices.Max(runs) <= 0 {
			t.Errorf("agent/bpf/%s: ns/run %v, runs/s %v", p, ns, runs)
			continue
		}
		t.Logf("%s: up to %.0f ns/run, up to %.0f runs/s", p, slices.Max(ns), slices.Max(runs))
	}
	for _, p := range []string{"tcp_send_reset", "tcp_receive_reset"} {
		if !slices.Contains(progs, p) {
			t.Errorf("the tcp_reset programs are missing from the agent branch: %v", progs)
		}
	}
}

// With a budget that the always-on programs fit in but a flood through the
// per-packet ones does not, qdisc sojourn is attached (an operator's expand)
// and the next interval detaches it, with the reason in the evidence.
func TestTriggeredDetachedOverBudgetEndToEnd(t *testing.T) {
	lab := netlab.New(t)
	cg := txlab.NewCgroup(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	const node = "lab-budget"
	startAgent(t, node, lab.A, col.grpcAddr, func(c *agentapp.Config) {
		c.OverheadBudget, c.TriggeredHold, c.TriggeredMax = 0.2, 2*time.Second, time.Hour
		// The always-on programs must fit in the budget; TX timestamping's
		// run on every send of the flood, sampled connection or not.
		c.TxSample = 0
	})
	waitNode(t, col, node)
	sink := txlab.NewSink(t, lab, lab.B, lab.IPB)
	flood, err := cg.StartSend(lab.A, txlab.SendSpec{Dst: sink.Addr, Conns: 2, Size: 16 << 10, Duration: 12 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Wait()
	time.Sleep(interval)
	txExpand(t, col, node, 60)
	eventually(t, 12*time.Second, func() string {
		ev := txActions(t, col, node, "latency_qdisc")
		var actions []string
		for _, e := range ev {
			actions = append(actions, e.Fields["action"]+": "+e.Fields["reason"])
		}
		// The expand attaches it (unless the flood's retransmits raised the
		// latency branch first, which attaches it too).
		if len(ev) < 2 || ev[0].Fields["action"] != "attached" ||
			ev[1].Fields["action"] != "detached" || !strings.Contains(ev[1].Fields["reason"], "over budget") {
			return fmt.Sprintf("latency_qdisc: %q, want attached, then detached over the budget", actions)
		}
		t.Logf("latency_qdisc: %q", actions)
		return ""
	})
}
