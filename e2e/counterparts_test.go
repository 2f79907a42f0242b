package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// The other side of a reset: two agents, one per namespace. B answers A's
// SYNs to a closed port with NO_SOCKET resets, and an nftables rule in B
// rejects A's SYNs to another port (the rule drops the SYN and forges the
// reset, which no TCP socket of B's sends). A's received resets, read from
// A's node, name what B's kernel said about each flow: its sent reset's
// reason for the first, its netfilter drop for the second.
func TestCounterpartsEndToEnd(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-a", lab.A, col.grpcAddr)
	startAgent(t, "lab-b", lab.B, col.grpcAddr)
	waitNode(t, col, "lab-a")
	waitNode(t, col, "lab-b")

	const rejected = 7001
	lab.Nft(t, lab.B, fmt.Sprintf(`table inet nbs_reject {
	chain in {
		type filter hook input priority 0; policy accept;
		tcp dport %d counter reject with tcp reset
	}
}`, rejected))
	const n = 10
	lab.ResetNoSocket(t, n)
	lab.ConnectRefused(t, lab.A, netip.AddrPortFrom(lab.IPB, rejected), n)
	if got := lab.NftPackets(t, lab.B, "nbs_reject"); got != n {
		t.Fatalf("oracle: the reject rule matched %d SYNs, want %d", got, n)
	}

	closed := netip.AddrPortFrom(lab.IPB, lab.ClosedPort).String()
	reject := netip.AddrPortFrom(lab.IPB, rejected).String()
	type counterpart struct {
		Node   string            `json:"node"`
		Metric string            `json:"metric"`
		Fields map[string]string `json:"fields"`
	}
	var ev struct {
		Events []struct {
			Metric       string            `json:"metric"`
			Fields       map[string]string `json:"fields"`
			Counterparts []counterpart     `json:"counterparts"`
		} `json:"events"`
	}
	// Each of A's resets from B, by the port B answered on, must show B's
	// word: which node, which metric, which reason.
	want := map[string]struct{ metric, reason string }{
		closed: {"tcp_reset/sent/no_socket", "no_socket"},
		reject: {"drops/netfilter_drop", "netfilter_drop"},
	}
	eventually(t, withinTwoIntervals+2*time.Second, func() string {
		col.getJSON(t, "/api/v1/nodes/lab-a/events?metric=tcp_reset/received&limit=100", &ev)
		seen := map[string]int{}
		var problems []string
		for _, e := range ev.Events {
			w, ok := want[e.Fields["src"]]
			if !ok || e.Metric != "tcp_reset/received/syn_sent" {
				continue
			}
			found := false
			for _, c := range e.Counterparts {
				if c.Node != "lab-b" {
					problems = append(problems, fmt.Sprintf("reset %s->%s: counterpart on %s", e.Fields["src"], e.Fields["dst"], c.Node))
				}
				found = found || (c.Node == "lab-b" && c.Metric == w.metric && c.Fields["reason"] == w.reason)
			}
			if found {
				seen[e.Fields["src"]]++
			} else {
				problems = append(problems, fmt.Sprintf("reset %s->%s: counterparts %+v, want lab-b %s", e.Fields["src"], e.Fields["dst"], e.Counterparts, w.metric))
			}
		}
		if seen[closed] != n || seen[reject] != n {
			return fmt.Sprintf("resets with B's word: %v, want %d from each of %s and %s; %s", seen, n, closed, reject, strings.Join(problems, "; "))
		}
		return ""
	})
	// B sent no reset for the rejected flows (the rule forged them): their
	// counterparts are drops only.
	logged := map[string]bool{}
	for _, e := range ev.Events {
		if src := e.Fields["src"]; (src == closed || src == reject) && !logged[src] {
			logged[src] = true
			t.Logf("lab-a %s %s->%s: the other side said %+v", e.Metric, src, e.Fields["dst"], e.Counterparts)
		}
		if e.Fields["src"] != reject {
			continue
		}
		for _, c := range e.Counterparts {
			if strings.HasPrefix(c.Metric, "tcp_reset/") {
				t.Errorf("rejected flow %s->%s has a reset counterpart %+v: B's TCP sent none", e.Fields["src"], e.Fields["dst"], c)
			}
		}
	}
}
