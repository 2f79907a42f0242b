package e2e

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// pingExpand asks the collector to stream a node's full tree for a while,
// as the UI does when an operator opens the node.
func pingExpand(t *testing.T, c *collector, node string, secs int) {
	t.Helper()
	if code, body := c.call(t, http.MethodPost, "/api/v1/nodes/"+node+"/expand", fmt.Sprintf(`{"seconds": %d}`, secs)); code != http.StatusAccepted {
		t.Fatalf("expand %s: HTTP %d %s", node, code, body)
	}
}

func pingTree(t *testing.T, c *collector, node string) treeResp {
	t.Helper()
	var tr treeResp
	if code := c.getJSON(t, "/api/v1/nodes/"+node+"/tree", &tr); code != http.StatusOK {
		t.Fatalf("tree of %s: HTTP %d", node, code)
	}
	return tr
}

func pingState(tr treeResp, id string) string {
	if n := tr.find(id); n != nil {
		return n.State
	}
	return "absent"
}

func pingValue(tr treeResp, id string) string {
	if n := tr.find(id); n != nil && n.Value != nil {
		return fmt.Sprintf("%.3f", *n.Value)
	}
	return "-"
}

// Two agents that only announce their ping address form a ping mesh through
// the collector (no targets are listed anywhere): each gets the other as a
// peer in its Config, pings it, and ping/<peer> appears in its tree through
// the API. Then bufferbloat in A's qdisc (tbf + bulk TCP A→B) turns A's
// ping root WARN through host_delay (A's own queue), while B, whose
// replies from A wait in that same queue, sees it in kernel_rtt: the
// network's part, from where B stands.
func TestPingMeshEndToEnd(t *testing.T) {
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	for _, n := range []struct {
		name, ns string
		addr     netip.Addr
	}{{"lab-a", lab.A, lab.IPA}, {"lab-b", lab.B, lab.IPB}} {
		startAgent(t, n.name, n.ns, col.grpcAddr, func(c *agentapp.Config) {
			c.BPF = false // ICMP and kernel timestamps only
			c.PingAddress, c.PingInterval = n.addr.String(), 100*time.Millisecond
		})
	}
	waitNode(t, col, "lab-a")
	waitNode(t, col, "lab-b")
	pingExpand(t, col, "lab-a", 120)
	pingExpand(t, col, "lab-b", 120)

	children := []string{"", "/kernel_rtt", "/host_delay", "/host_delay/send", "/host_delay/qdisc", "/host_delay/receive",
		"/loss", "/jitter", "/local_drops", "/sent", "/lost"}
	for _, c := range []struct{ node, peer string }{{"lab-a", "ping/lab-b"}, {"lab-b", "ping/lab-a"}} {
		eventually(t, 30*time.Second, func() string {
			tr := pingTree(t, col, c.node)
			for _, suffix := range children {
				n := tr.find(c.peer + suffix)
				if n == nil || n.Value == nil {
					return fmt.Sprintf("%s's tree has no value for %s%s yet", c.node, c.peer, suffix)
				}
				if n.State != "ok" {
					return fmt.Sprintf("%s%s is %s on the idle lab", c.peer, suffix, n.State)
				}
			}
			if st := pingState(tr, "ping"); st != "ok" {
				return fmt.Sprintf("%s's ping root is %s", c.node, st)
			}
			return ""
		})
	}
	tr := pingTree(t, col, "lab-a")
	if v := tr.find("ping/lab-b/kernel_rtt").Value; *v <= 0 || *v > 10 {
		t.Errorf("lab-a → lab-b kernel RTT p99 %.3f ms on the idle lab", *v)
	}
	if tr.find("ping/clock") == nil {
		t.Error("lab-a's tree has no ping/clock")
	}

	// Let the baselines settle before the fault.
	time.Sleep(5 * time.Second)
	lab.Exec(t, lab.A, "tc", "qdisc", "replace", "dev", "vA", "root", "tbf", "rate", "10mbit", "burst", "1mbit", "latency", "400ms")
	stop := lab.Flood(t, 4)
	defer stop()
	var a, b treeResp
	eventually(t, 30*time.Second, func() string {
		a, b = pingTree(t, col, "lab-a"), pingTree(t, col, "lab-b")
		if st := pingState(a, "ping"); st != "warn" && st != "crit" {
			return fmt.Sprintf("lab-a's ping root is %s; host_delay p99 %s ms (%s)", st,
				pingValue(a, "ping/lab-b/host_delay"), pingState(a, "ping/lab-b/host_delay"))
		}
		if st := pingState(b, "ping/lab-a/kernel_rtt"); st != "warn" && st != "crit" {
			return fmt.Sprintf("lab-b's kernel_rtt to lab-a is %s (%s ms)", st, pingValue(b, "ping/lab-a/kernel_rtt"))
		}
		return ""
	})
	t.Logf("under bloat: lab-a root %s, host_delay %s ms (%s), qdisc %s ms (%s), kernel_rtt %s ms (%s); lab-b root %s, kernel_rtt to lab-a %s ms (%s), host_delay %s ms (%s)",
		pingState(a, "ping"), pingValue(a, "ping/lab-b/host_delay"), pingState(a, "ping/lab-b/host_delay"),
		pingValue(a, "ping/lab-b/host_delay/qdisc"), pingState(a, "ping/lab-b/host_delay/qdisc"),
		pingValue(a, "ping/lab-b/kernel_rtt"), pingState(a, "ping/lab-b/kernel_rtt"),
		pingState(b, "ping"), pingValue(b, "ping/lab-a/kernel_rtt"), pingState(b, "ping/lab-a/kernel_rtt"),
		pingValue(b, "ping/lab-a/host_delay"), pingState(b, "ping/lab-a/host_delay"))
	for _, c := range []struct {
		tr   treeResp
		id   string
		want []string
		why  string
	}{
		{a, "ping/lab-b/host_delay", []string{"warn", "crit"}, "the bloat is in lab-a's own qdisc"},
		{a, "ping/lab-b/host_delay/qdisc", []string{"warn", "crit"}, "the qdisc stage explains it"},
		{a, "ping/lab-b/kernel_rtt", []string{"ok"}, "lab-a's requests wait before the driver stamps them: not the network"},
		{b, "ping/lab-a/host_delay", []string{"ok"}, "lab-b's own host is not queueing"},
	} {
		if st := pingState(c.tr, c.id); !slices.Contains(c.want, st) {
			t.Errorf("%s is %s, want %s: %s", c.id, st, strings.Join(c.want, " or "), c.why)
		}
	}
}
