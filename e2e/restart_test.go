package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// upgradeFrom is the commit the upgrade test builds the "old" agent from:
// the last one before agents pinned their counters, so it cannot leave
// pins for the new one, and what it collected must simply carry over.
const upgradeFrom = "ceba5a0"

// buildAgentAt builds nbs-agent as it was at commit, once per machine (the
// binary is kept in the user's cache directory, by commit).
func buildAgentAt(t *testing.T, commit string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "nbs-e2e", "nbs-agent-"+commit)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive --format=tar `+commit+" | tar -x -C "+src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s (the upgrade test needs the repository's history): %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin+".tmp", "./agent/cmd/nbs-agent")
	build.Dir, build.Env = src, append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build nbs-agent at %s: %v\n%s", commit, err, out)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// resetStorm sends NO_SOCKET resets from A to B, about a hundred a second, until
// stopped.
type resetStorm struct {
	stop chan struct{}
	done sync.WaitGroup
}

func startStorm(t *testing.T, lab *netlab.Lab) *resetStorm {
	s := &resetStorm{stop: make(chan struct{})}
	s.done.Go(func() {
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			lab.ResetNoSocket(t, 5)
			time.Sleep(40 * time.Millisecond)
		}
	})
	return s
}

func (s *resetStorm) end() {
	close(s.stop)
	s.done.Wait()
}

// signal sends sig (SIGTERM: the agent flushes) and waits for the agent
// to exit.
func (p *agentProcess) signal(t *testing.T, sig syscall.Signal, within time.Duration) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal agent: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("agent still running %s after %s", within, sig)
	}
}

// An upgrade, then a SIGKILL in a reset storm, then a SIGTERM: the stored
// total of resets equals the namespace's own TcpOutRsts delta exactly at
// each step.
//
//  1. The old agent (built from upgradeFrom, which pins nothing) counts a
//     storm and is killed once it has reported it; the new agent starts
//     on its spool and credential.
//  2. The new agent, pinning in a bpffs of the test's own, is killed with
//     SIGKILL while the storm goes on; the storm goes on for 3 s with no
//     agent, then a new agent of the same binary starts: it adopts the
//     pinned programs and maps and reports what was counted after the
//     last report and while none ran.
//  3. A burst just before a SIGTERM: the stopping agent reports the last,
//     partial interval, and the total is exact when it has exited.
func TestAgentUpgradeAndRestartsLoseNoReset(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	oldBin := buildAgentAt(t, upgradeFrom)
	bin := buildAgent(t)
	db := pgcluster.Database(t)
	col := startCollector(t, db, "127.0.0.1:0")
	state := t.TempDir()
	pins := filepath.Join(netlab.BPFFS(t), "nbs", "lab-b")
	args := []string{"--collector.address", col.grpcAddr, "--node.name", "lab-b", "--netns", lab.B, "--interval", interval.String(),
		"--snapshot.every", "1h", "--evidence.per-second", "1000", "--spool.dir", filepath.Join(state, "spool"),
		"--node.credential-file", filepath.Join(state, "node-credential"), "--log.level", "info"}
	newArgs := append([]string{"--bpf.pin-dir", pins}, args...)
	b0 := lab.Nstat(t, lab.B)
	exact := func(phase string, within time.Duration) {
		t.Helper()
		eventually(t, within, func() string {
			want := float64(lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"])
			// Every reset B sends is the storm's NO_SOCKET, in B's own
			// namespace: the reason and its owner child are exact too.
			for _, metric := range []string{"tcp_reset/sent", "tcp_reset/sent/no_socket", "tcp_reset/sent/no_socket/netns:" + schema.Segment(lab.B)} {
				if got := storedTotal(t, col, "lab-b", metric); got != want {
					return fmt.Sprintf("%s: stored %s %v, nstat TcpOutRsts delta %v", phase, metric, got, want)
				}
			}
			return ""
		})
	}

	// 1. The upgrade.
	old := startAgentProcess(t, "old agent", oldBin, args...)
	waitNode(t, col, "lab-b")
	s := startStorm(t, lab)
	time.Sleep(2 * time.Second)
	s.end()
	exact("old agent", withinTwoIntervals)
	old.kill(t)
	// From here the evidence books balance (checked at the end): no reset
	// is made until the storm starts again.
	booksFrom := time.Now()
	sentAtBooks := storedTotal(t, col, "lab-b", "tcp_reset/sent")
	droppedAtBooks := max(storedTotal(t, col, "lab-b", "agent/evidence/dropped/tcp_reset"), 0) // -1: the old agent had no such metric

	// 2. SIGKILL in a storm; 3 s later a new agent.
	firstFrom := time.Now()
	first := startAgentProcess(t, "new agent 1", bin, newArgs...)
	// Its programs count from their attach: a storm before it would make
	// resets nstat sees and no agent could. On a loaded machine loading
	// them takes seconds, so wait for its first report, not a fixed time.
	waitReportAfter(t, col, "lab-b", firstFrom)
	time.Sleep(interval)
	s = startStorm(t, lab)
	time.Sleep(2500 * time.Millisecond)
	first.kill(t)
	gapFrom, resetsAtKill := time.Now(), lab.Nstat(t, lab.B)["TcpOutRsts"]
	time.Sleep(3 * time.Second) // the pinned programs count alone
	resetsAtStart, gapTo := lab.Nstat(t, lab.B)["TcpOutRsts"], time.Now()
	second := startAgentProcess(t, "new agent 2", bin, newArgs...)
	time.Sleep(2 * time.Second)
	s.end()
	// The second agent has to start first (load and adopt the pinned
	// programs), which takes seconds more on a loaded machine.
	exact("after the SIGKILL and restart", withinTwoIntervals+15*time.Second)
	t.Logf("%d resets sent by B so far (nstat TcpOutRsts), every one stored", lab.Nstat(t, lab.B)["TcpOutRsts"]-b0["TcpOutRsts"])

	// The evidence of the resets made while no agent ran waited in the
	// pinned ring for the second agent (the storm is far below the
	// evidence rate and the ring's size), which reports it with the counts
	// of the gap: one event each, up to the evidence kept per interval
	// (the source's cap, 100 here; they all arrive in the first interval,
	// and it keeps the oldest, some of which were made while the killed
	// agent was exiting, before the window). The window's edges are read
	// apart from the storm, so they may be off by a few batches.
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var inGap int64
	q := `SELECT count(*) FROM events e JOIN nodes n ON n.id = e.node_id JOIN metric_paths m ON m.id = e.metric_id
	      WHERE n.name = 'lab-b' AND m.path = 'tcp_reset/sent/no_socket' AND e.ts >= $1 AND e.ts < $2`
	if err := conn.QueryRow(context.Background(), q, gapFrom, gapTo).Scan(&inGap); err != nil {
		t.Fatal(err)
	}
	made := int64(resetsAtStart - resetsAtKill)
	if made < 100 || inGap < min(made, 100)-15 || inGap > made+5 {
		t.Errorf("%d resets while no agent ran, %d evidence events stored for them; want one each up to 100 (less 15 at the edges)", made, inGap)
	}
	t.Logf("%d resets while no agent ran: %d evidence events stored", made, inGap)
	if n := float64(lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]); n < 300 {
		t.Errorf("only %v resets in all; the storm was too weak to test anything", n)
	}

	// 3. A burst, then SIGTERM before the next collection can take it.
	time.Sleep(interval / 2)
	lab.ResetNoSocket(t, 20)
	second.signal(t, syscall.SIGTERM, 10*time.Second)
	want := float64(lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"])
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent"); got != want {
		t.Errorf("when the agent stopped on SIGTERM: stored %v, nstat TcpOutRsts delta %v (the last interval was not flushed)", got, want)
	}
	time.Sleep(2 * interval)
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent"); got != want {
		t.Errorf("later: stored %v, want still %v", got, want)
	}

	// The evidence books balance from the new agents' start: each reset
	// B sent (all NO_SOCKET, exact as above) emitted an evidence event, or
	// one was counted as given up under agent/evidence/dropped/tcp_reset —
	// withheld by the rate limit, lost in a full ring, beyond the
	// per-interval cap (the second agent's first interval holds the gap's
	// events), or read by the killed agent and never reported
	// (agent_down, from the pinned ring's read position). The storm is
	// far below the rate limit and the ring, so the last two carry it.
	var events int64
	q = `SELECT count(*) FROM events e JOIN nodes n ON n.id = e.node_id JOIN metric_paths m ON m.id = e.metric_id
	      WHERE n.name = 'lab-b' AND m.path LIKE 'tcp_reset/%' AND e.ts >= $1`
	if err := conn.QueryRow(context.Background(), q, booksFrom).Scan(&events); err != nil {
		t.Fatal(err)
	}
	sent := storedTotal(t, col, "lab-b", "tcp_reset/sent") - sentAtBooks
	dropped := storedTotal(t, col, "lab-b", "agent/evidence/dropped/tcp_reset") - droppedAtBooks
	down := storedTotal(t, col, "lab-b", "agent/evidence/dropped/tcp_reset/agent_down")
	capped := storedTotal(t, col, "lab-b", "agent/evidence/dropped/tcp_reset/interval_cap")
	t.Logf("evidence books since the new agents started: %v resets sent, %d events stored, %v given up (agent_down %v, interval_cap %v)",
		sent, events, dropped, down, capped)
	if float64(events)+dropped != sent {
		t.Errorf("evidence books: %d events stored + %v given up = %v, want the %v resets sent", events, dropped, float64(events)+dropped, sent)
	}
}

// The in-process agent stopped (as SIGTERM stops nbs-agent) in the middle
// of a long interval: its final report holds the partial interval, stored
// before Run returns, with the evidence of every reset it counts (read
// from the ring by the final collection, not left for a poll).
func TestAgentStopFlushesFinalReport(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	ag := startAgent(t, "lab-b", lab.B, col.grpcAddr, func(c *agentapp.Config) { c.Interval = 4 * time.Second })
	waitNode(t, col, "lab-b")
	reports := ag.Reports()
	b0 := lab.Nstat(t, lab.B)
	lab.ResetNoSocket(t, 15)
	ag.stop()
	if ag.Reports() != reports+1 {
		t.Errorf("%d reports during the test, want only the final one (the interval was not over)", ag.Reports()-reports)
	}
	if d := lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]; d != 15 {
		t.Errorf("nstat TcpOutRsts delta %d, want 15", d)
	}
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != 15 {
		t.Errorf("stored %v when the agent had stopped, want 15", got)
	}
	// 15 is within the rate limit's bucket (--evidence.per-second 20).
	var ev struct {
		Events []struct{} `json:"events"`
	}
	col.getJSON(t, "/api/v1/nodes/lab-b/events?metric=tcp_reset/sent/no_socket&limit=100", &ev)
	if len(ev.Events) != 15 {
		t.Errorf("%d events stored when the agent had stopped, want one for each of the 15 resets", len(ev.Events))
	}
}
