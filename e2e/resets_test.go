package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

const interval = time.Second

// withinTwoIntervals is the promise to users (two report intervals), plus
// slack for the database batch and this machine's noise.
const withinTwoIntervals = 2*interval + 3*time.Second

func waitNode(t testing.TB, c *collector, node string) {
	t.Helper()
	waitReportAfter(t, c, node, time.Time{})
}

// waitReportAfter waits until node's newest stored report was made after
// from: an agent started at from has attached its programs and reported.
func waitReportAfter(t testing.TB, c *collector, node string, from time.Time) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		var nodes struct {
			Nodes []struct {
				Name       string     `json:"name"`
				LastReport *time.Time `json:"last_report"`
			} `json:"nodes"`
		}
		c.getJSON(t, "/api/v1/nodes", &nodes)
		for _, n := range nodes.Nodes {
			if n.Name == node && n.LastReport != nil && n.LastReport.After(from) {
				return ""
			}
		}
		return fmt.Sprintf("node %s has no report made after %s; nodes: %+v", node, from.Format(time.RFC3339Nano), nodes.Nodes)
	})
}

// From real resets of four kernel reasons in two namespaces, through two
// agents (one per namespace, each a node), the collector and PostgreSQL, to
// the HTTP API: exact per-reason totals, equal to the resets caused and to
// the kernel's own counters.
func TestResetsByReasonEndToEnd(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr, func(c *agentapp.Config) { c.Labels = agentapp.Labels{"customer": "acme"} })
	startAgent(t, "lab-a", lab.A, col.grpcAddr)
	waitNode(t, col, "lab-a")
	waitNode(t, col, "lab-b")

	a0, b0 := lab.Nstat(t, lab.A), lab.Nstat(t, lab.B)
	const n = 20
	lab.ResetNoSocket(t, n)      // B sends NO_SOCKET
	lab.ResetAbortOnClose(t, n)  // B sends TCP_ABORT_ON_CLOSE
	lab.ResetLingerZero(t, n)    // A sends TCP_STATE
	lab.ResetAbortOnLinger(t, n) // A sends TCP_ABORT_ON_LINGER
	a1, b1 := lab.Nstat(t, lab.A), lab.Nstat(t, lab.B)
	delta := func(before, after map[string]uint64, k string) float64 { return float64(after[k] - before[k]) }

	cases := []struct {
		node, metric string
		want         float64
		oracle       string  // nstat counter that must agree, if the kernel has one
		oracleValue  float64 // its delta
	}{
		{"lab-b", "tcp_reset/sent/no_socket", n, "", 0},
		{"lab-b", "tcp_reset/sent/tcp_abort_on_close", n, "TcpExtTCPAbortOnClose", delta(b0, b1, "TcpExtTCPAbortOnClose")},
		{"lab-b", "tcp_reset/sent", 2 * n, "TcpOutRsts", delta(b0, b1, "TcpOutRsts")},
		{"lab-a", "tcp_reset/sent/tcp_state", n, "TcpExtTCPAbortOnData", delta(a0, a1, "TcpExtTCPAbortOnData")},
		{"lab-a", "tcp_reset/sent/tcp_abort_on_linger", n, "TcpExtTCPAbortOnLinger", delta(a0, a1, "TcpExtTCPAbortOnLinger")},
		{"lab-a", "tcp_reset/sent", 2 * n, "TcpOutRsts", delta(a0, a1, "TcpOutRsts")},
		{"lab-a", "tcp_reset/received/syn_sent", n, "", 0},
		{"lab-a", "tcp_reset/received/established", n, "", 0},
		{"lab-b", "tcp_reset/received/established", n, "", 0},
		{"lab-b", "tcp_reset/received/close_wait", n, "", 0},
		// Each reason split by who owns the namespace: here the lab's
		// `ip netns` names, stored exactly as the reason.
		{"lab-b", "tcp_reset/sent/no_socket/netns:" + schema.Segment(lab.B), n, "", 0},
		{"lab-a", "tcp_reset/received/syn_sent/netns:" + schema.Segment(lab.A), n, "", 0},
		{"lab-b", "tcp_reset", 4 * n, "", 0},
	}
	eventually(t, withinTwoIntervals, func() string {
		for _, c := range cases {
			if got := storedTotal(t, col, c.node, c.metric); got != c.want {
				return fmt.Sprintf("%s %s: stored total %v, want %v", c.node, c.metric, got, c.want)
			}
		}
		return ""
	})
	for _, c := range cases {
		if c.oracle != "" && c.oracleValue != c.want {
			t.Errorf("%s %s: nstat %s delta %v, want %v (the agent's count)", c.node, c.metric, c.oracle, c.oracleValue, c.want)
		}
	}

	// The tree names every reason seen, nested under sent/received.
	var tr treeResp
	if code := col.getJSON(t, "/api/v1/nodes/lab-b/tree", &tr); code != http.StatusOK {
		t.Fatalf("tree: HTTP %d", code)
	}
	for _, id := range []string{"tcp_reset", "tcp_reset/sent", "tcp_reset/sent/no_socket", "tcp_reset/sent/tcp_abort_on_close", "tcp_reset/received/close_wait"} {
		n := tr.find(id)
		if n == nil {
			t.Errorf("tree of lab-b has no %s", id)
			continue
		}
		if n.Title == "" || n.Unit != "resets/s" || n.State == "" || n.Value == nil {
			t.Errorf("tree node %s is incomplete: %+v", id, n)
		}
	}
	// The burst is over by now, but the tree's recent window still shows it.
	if nb := tr.find("tcp_reset/sent/no_socket"); nb != nil && (nb.Recent == nil || *nb.Recent != n || nb.RecentSt != "crit") {
		t.Errorf("no_socket recent: count %v state %q; want %d and crit", nb.Recent, nb.RecentSt, n)
	}
	if tr.find("tcp_reset/sent/tcp_state") != nil {
		t.Error("lab-b's tree shows tcp_state, which only lab-a sent")
	}

	// 20 resets in about a second are over the per-reason crit level
	// (10/s), and the child's state must have reached the root.
	var root seriesResp
	col.getJSON(t, fmt.Sprintf("/api/v1/nodes/lab-b/series?metric=tcp_reset&from=%d", time.Now().Add(-time.Hour).UnixMilli()), &root)
	raised := false
	for _, p := range root.Points {
		raised = raised || p.State == "crit" || p.State == "warn"
	}
	if !raised {
		t.Errorf("root tcp_reset of lab-b never left OK during the resets: %+v", root.Points)
	}

	// Evidence: the NO_SOCKET resets went from B's closed port to A.
	var ev struct {
		Events []struct {
			Metric string            `json:"metric"`
			Fields map[string]string `json:"fields"`
		} `json:"events"`
	}
	col.getJSON(t, "/api/v1/nodes/lab-b/events?metric=tcp_reset/sent/no_socket&limit=100", &ev)
	if len(ev.Events) != n {
		t.Errorf("no_socket evidence: %d events, want %d", len(ev.Events), n)
	}
	wantSrc := fmt.Sprintf("%s:%d", lab.IPB, lab.ClosedPort)
	for _, e := range ev.Events {
		// B is an `ip netns` namespace nothing runs in: its name owns it.
		if e.Fields["src"] != wantSrc || e.Fields["reason"] != "no_socket" ||
			e.Fields["owner"] != lab.B || e.Fields["owner_kind"] != "netns" {
			t.Errorf("evidence %v: want src %s, reason no_socket, owner %s (netns)", e.Fields, wantSrc, lab.B)
			break
		}
	}
}

// The collector goes away while resets happen; when it is back, every reset
// is stored exactly once.
func TestCollectorOutageLosesNothing(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	db := pgcluster.Database(t)
	addr := freeAddr(t)
	col := startCollector(t, db, addr)
	ag := startAgent(t, "lab-b", lab.B, addr)
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)

	lab.ResetNoSocket(t, 10)
	eventually(t, withinTwoIntervals, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 10 {
			return fmt.Sprintf("before the outage: stored %v, want 10", got)
		}
		return ""
	})

	col.stop()
	lab.ResetNoSocket(t, 15)
	time.Sleep(4 * interval) // reports pile up in the agent's outbox
	if ag.Pending() < 3 {
		t.Errorf("agent holds %d un-acked reports during the outage, want at least 3", ag.Pending())
	}

	col = startCollector(t, db, addr)
	eventually(t, 30*time.Second, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 25 {
			return fmt.Sprintf("after the outage: stored %v, want 25", got)
		}
		if p := ag.Pending(); p > 1 {
			return fmt.Sprintf("agent still holds %d un-acked reports", p)
		}
		return ""
	})
	if d := lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]; d != 25 {
		t.Errorf("nstat TcpOutRsts delta %d, want 25", d)
	}
	time.Sleep(2 * interval)
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 25 {
		t.Errorf("later: stored %v, want still 25 (no double counting)", got)
	}

	// No gaps: every sequence number the agent produced up to now is stored once.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var count, minSeq, maxSeq int64
	if err := conn.QueryRow(ctx, `SELECT count(*), min(seq), max(seq) FROM reports r JOIN nodes n ON n.id = r.node_id WHERE n.name = 'lab-b'`).
		Scan(&count, &minSeq, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if minSeq != 1 || count != maxSeq {
		t.Errorf("stored reports: count %d, seq %d..%d; want every sequence from 1 exactly once", count, minSeq, maxSeq)
	}
}

// Without BPF the agent still reports resets from /proc and says why.
func TestFallbackWithoutBPF(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr, func(c *agentapp.Config) { c.BPF = false })
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)
	lab.ResetNoSocket(t, 10)
	lab.ResetAbortOnClose(t, 10)
	b1 := lab.Nstat(t, lab.B)
	sent := float64(b1["TcpOutRsts"] - b0["TcpOutRsts"])
	if sent != 20 {
		t.Errorf("nstat TcpOutRsts delta %v, want 20", sent)
	}
	eventually(t, withinTwoIntervals, func() string {
		for metric, want := range map[string]float64{
			"tcp_reset/sent":                    sent,
			"tcp_reset/sent/tcp_abort_on_close": float64(b1["TcpExtTCPAbortOnClose"] - b0["TcpExtTCPAbortOnClose"]),
			"tcp_reset/sent/other":              10,
		} {
			if got := storedTotal(t, col, "lab-b", metric); got != want {
				return fmt.Sprintf("%s: stored %v, want %v", metric, got, want)
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
	col.getJSON(t, "/api/v1/nodes/lab-b", &node)
	found := false
	for _, c := range node.Capabilities {
		if c.Name == "bpf.tcp_reset" {
			found = true
			if c.Available || c.Reason == "" {
				t.Errorf("capability %+v: want unavailable with a reason", c)
			}
		}
	}
	if !found {
		t.Errorf("node capabilities %+v do not mention bpf.tcp_reset", node.Capabilities)
	}
}
