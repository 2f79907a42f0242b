package e2e

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// raised reports whether a metric's stored series ever left OK.
func raised(t *testing.T, c *collector, node, metric string) (bool, []string) {
	t.Helper()
	var s seriesResp
	c.getJSON(t, fmt.Sprintf("/api/v1/nodes/%s/series?metric=%s&from=%d", node, metric, time.Now().Add(-time.Hour).UnixMilli()), &s)
	var states []string
	up := false
	for _, p := range s.Points {
		states = append(states, p.State)
		up = up || p.State == "warn" || p.State == "crit"
	}
	return up, states
}

// Random loss in the lab (nftables) under a bulk transfer: through agent,
// collector and PostgreSQL, the stored retransmits equal the kernel's
// TcpRetransSegs exactly, RTOs equal TCPTimeouts, and with the default
// thresholds the latency root turns WARN/CRIT because of
// latency/retransmits, which the tree names.
func TestLatencyRetransmitsEndToEnd(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-a", lab.A, col.grpcAddr)
	waitNode(t, col, "lab-a")

	a0 := lab.Nstat(t, lab.A)
	res := lab.LossyBulk(t, 50, 4*time.Second)
	a1 := lab.Nstat(t, lab.A)
	segs := float64(a1["TcpRetransSegs"] - a0["TcpRetransSegs"])
	rtos := float64(a1["TcpExtTCPTimeouts"] - a0["TcpExtTCPTimeouts"])
	t.Logf("%d MB through 5%% loss: nstat TcpRetransSegs +%v, TcpExtTCPTimeouts +%v", res.Bytes>>20, segs, rtos)
	if segs < 1000 {
		t.Fatalf("only %v retransmitted segments: the loss did not bite", segs)
	}
	eventually(t, withinTwoIntervals, func() string {
		for metric, want := range map[string]float64{"latency": segs, "latency/retransmits": segs, "latency/rto": rtos} {
			if got := storedTotal(t, col, "lab-a", metric); got != want {
				return fmt.Sprintf("%s: stored total %v, want %v (nstat)", metric, got, want)
			}
		}
		return ""
	})
	for _, metric := range []string{"latency", "latency/retransmits"} {
		if up, states := raised(t, col, "lab-a", metric); !up {
			t.Errorf("%s never left OK during the lossy transfer: %v", metric, states)
		}
	}
	// Nothing overflowed a listen queue: that child must not take the blame.
	if up, states := raised(t, col, "lab-a", "latency/listen_overflows"); up {
		t.Errorf("latency/listen_overflows raised without overflows: %v", states)
	}

	var tr treeResp
	if code := col.getJSON(t, "/api/v1/nodes/lab-a/tree", &tr); code != http.StatusOK {
		t.Fatalf("tree: HTTP %d", code)
	}
	for _, id := range []string{"latency", "latency/retransmits", "latency/rto"} {
		n := tr.find(id)
		if n == nil {
			t.Errorf("tree of lab-a has no %s", id)
			continue
		}
		if n.Title == "" || n.Unit == "" || n.State == "" {
			t.Errorf("tree node %s is incomplete: %+v", id, n)
		}
	}
	// The transfer is over by now and the newest interval may be quiet:
	// the tree names the child through its recent window's worst state.
	if n := tr.find("latency/retransmits"); n != nil && n.RecentSt != "warn" && n.RecentSt != "crit" {
		t.Errorf("tree names latency/retransmits as %q over its recent window (now %q), want warn or crit", n.RecentSt, n.State)
	}
}

// A netfilter drop rule and UDP to a closed port in B: the stored
// drops/netfilter_drop equals the rule's own counter, drops/no_socket equals
// UdpNoPorts, drops turns WARN/CRIT through drops/netfilter_drop, and the
// evidence names the dropped packets.
func TestDropsByReasonEndToEnd(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr)
	waitNode(t, col, "lab-b")
	lab.Nft(t, lab.B, `table inet nbs_drop {
	chain in {
		type filter hook input priority 0; policy accept;
		udp dport 7777 counter drop
	}
}`)

	b0 := lab.Nstat(t, lab.B)
	// 300 over about 3 s: 100/s, several intervals over the levels.
	lab.SendUDP(t, lab.A, netip.AddrPortFrom(lab.IPB, 7777), 300, 64, 10*time.Millisecond)
	lab.SendUDP(t, lab.A, netip.AddrPortFrom(lab.IPB, 9999), 40, 64, 0)
	time.Sleep(50 * time.Millisecond)
	b1 := lab.Nstat(t, lab.B)
	rule := float64(lab.NftPackets(t, lab.B, "nbs_drop"))
	noPorts := float64(b1["UdpNoPorts"] + b1["Udp6NoPorts"] - b0["UdpNoPorts"] - b0["Udp6NoPorts"])
	if rule != 300 || noPorts != 40 {
		t.Errorf("oracles: nft counter %v (sent 300), UdpNoPorts +%v (sent 40)", rule, noPorts)
	}
	eventually(t, withinTwoIntervals, func() string {
		owner := "/netns:" + schema.Segment(lab.B) // who owns B: its `ip netns` name
		for metric, want := range map[string]float64{"drops/netfilter_drop": rule, "drops/no_socket": noPorts,
			"drops/netfilter_drop" + owner: rule, "drops/no_socket" + owner: noPorts} {
			if got := storedTotal(t, col, "lab-b", metric); got != want {
				return fmt.Sprintf("%s: stored total %v, want %v (oracle)", metric, got, want)
			}
		}
		return ""
	})
	for _, metric := range []string{"drops", "drops/netfilter_drop"} {
		if up, states := raised(t, col, "lab-b", metric); !up {
			t.Errorf("%s never left OK while the rule dropped 100 packets/s: %v", metric, states)
		}
	}
	if total := storedTotal(t, col, "lab-b", "drops"); total < rule+noPorts {
		t.Errorf("drops root stored %v, below its children %v", total, rule+noPorts)
	}

	var ev struct {
		Events []struct {
			Metric string            `json:"metric"`
			Fields map[string]string `json:"fields"`
		} `json:"events"`
	}
	col.getJSON(t, "/api/v1/nodes/lab-b/events?metric=drops/netfilter_drop&limit=500", &ev)
	if len(ev.Events) == 0 {
		t.Fatal("no evidence for drops/netfilter_drop")
	}
	wantDst := netip.AddrPortFrom(lab.IPB, 7777).String()
	for _, e := range ev.Events {
		if e.Fields["reason"] != "netfilter_drop" || e.Fields["protocol"] != "udp" || e.Fields["dst"] != wantDst || e.Fields["function"] == "" ||
			e.Fields["owner"] != lab.B || e.Fields["owner_kind"] != "netns" {
			t.Errorf("evidence %v: want reason netfilter_drop, udp to %s, a function, owner %s (netns)", e.Fields, wantDst, lab.B)
			break
		}
	}
}

// Without BPF both branches still report from /proc, and say why.
func TestLatencyDropsFallbackWithoutBPF(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-a", lab.A, col.grpcAddr, func(c *agentapp.Config) { c.BPF = false })
	waitNode(t, col, "lab-a")
	a0 := lab.Nstat(t, lab.A)
	lab.LossyBulk(t, 50, time.Second)
	lab.SendUDP(t, lab.B, netip.AddrPortFrom(lab.IPA, 9999), 25, 64, 0)
	time.Sleep(50 * time.Millisecond)
	a1 := lab.Nstat(t, lab.A)
	eventually(t, withinTwoIntervals, func() string {
		for metric, want := range map[string]float64{
			"latency/retransmits": float64(a1["TcpRetransSegs"] - a0["TcpRetransSegs"]),
			"drops/no_socket":     float64(a1["UdpNoPorts"] - a0["UdpNoPorts"]),
		} {
			if got := storedTotal(t, col, "lab-a", metric); got != want || want == 0 {
				return fmt.Sprintf("%s: stored %v, want %v (nstat, > 0)", metric, got, want)
			}
		}
		return ""
	})
	var node struct {
		Capabilities []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
		} `json:"capabilities"`
	}
	col.getJSON(t, "/api/v1/nodes/lab-a", &node)
	seen := map[string]bool{}
	for _, c := range node.Capabilities {
		switch c.Name {
		case "bpf.drops", "bpf.latency.retransmits":
			seen[c.Name] = true
			if c.Available || c.Reason == "" {
				t.Errorf("capability %+v: want unavailable with a reason", c)
			}
		case "proc.drops", "proc.latency":
			seen[c.Name] = c.Available
		case "proc.latency.ecn":
			// The lab's namespaces keep the kernel's default, 2.
			seen[c.Name] = c.Available && strings.Contains(c.Reason, "net.ipv4.tcp_ecn=2")
		}
	}
	if len(seen) != 5 || !seen["proc.latency.ecn"] || !seen["bpf.drops"] || !seen["bpf.latency.retransmits"] || !seen["proc.drops"] || !seen["proc.latency"] {
		t.Errorf("capabilities %+v: want bpf.drops, bpf.latency.retransmits unavailable and proc.drops, proc.latency, proc.latency.ecn (tcp_ecn=2) available", node.Capabilities)
	}
}
