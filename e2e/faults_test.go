package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// resetsAtRate makes n no-socket resets in B, one every gap, and returns
// when the last is made; the kernel's TcpOutRsts is the oracle.
func resetsAtRate(t *testing.T, lab *netlab.Lab, n int, gap time.Duration) {
	t.Helper()
	for range n {
		lab.ResetNoSocket(t, 1)
		time.Sleep(gap)
	}
}

// storedExactly waits until the stored no-socket total is want and the
// kernel agrees, then checks it stays want (nothing counted twice).
func storedExactly(t *testing.T, col *collector, lab *netlab.Lab, b0 map[string]uint64, want float64, within time.Duration) {
	t.Helper()
	eventually(t, within, func() string {
		if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != want {
			return fmt.Sprintf("stored %v, want %v", got, want)
		}
		return ""
	})
	if d := lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"]; float64(d) != want {
		t.Errorf("nstat TcpOutRsts delta %d, want %v (the stored total must equal it)", d, want)
	}
	time.Sleep(2 * interval)
	if got := storedTotal(t, col, "lab-b", "tcp_reset/sent/no_socket"); got != want {
		t.Errorf("later: stored %v, want still %v (no double counting)", got, want)
	}
}

// The collector is gone for 60 s while resets happen at a known rate; the
// agent holds its reports, and once a collector is back on the same address
// and database every reset is counted exactly once.
func TestFaultCollectorDown60s(t *testing.T) {
	t.Parallel()
	lab := netlab.New(t)
	db := pgcluster.Database(t)
	addr := freeAddr(t)
	col := startCollector(t, db, addr)
	startAgent(t, "lab-b", lab.B, addr)
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)

	resetsAtRate(t, lab, 5, 200*time.Millisecond)
	col.stop()
	start := time.Now()
	resetsAtRate(t, lab, 30, 2*time.Second) // one every 2 s through the outage
	time.Sleep(60*time.Second - time.Since(start))
	col = startCollector(t, db, addr)
	storedExactly(t, col, lab, b0, 35, 60*time.Second)
}

// PostgreSQL restarts while the agent reports; the collector answers
// Unavailable meanwhile and every report lands exactly once. The test has
// a cluster of its own: stopping the shared one would break its neighbours.
func TestFaultPostgresRestartedMidStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	opts := pgcluster.Options{Dir: pgcluster.ClusterDir(t), Logger: testLogger(t, "pg")}
	pg, err := pgcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start a dedicated PostgreSQL cluster: %v", err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	opts.Port = pg.Port() // the collector's URL names it

	lab := netlab.New(t)
	col := startCollector(t, pg.URL(), "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr)
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)

	resetsAtRate(t, lab, 5, 200*time.Millisecond)
	if err := pg.Stop(ctx); err != nil {
		t.Fatalf("stop PostgreSQL: %v", err)
	}
	resetsAtRate(t, lab, 10, time.Second) // 10 s without a database
	if pg, err = pgcluster.Start(ctx, opts); err != nil {
		t.Fatalf("restart PostgreSQL on port %d: %v", opts.Port, err)
	}
	resetsAtRate(t, lab, 5, 200*time.Millisecond)
	storedExactly(t, col, lab, b0, 20, 60*time.Second)
}

// The agent↔collector path is cut for 30 s with an nftables rule that drops
// every packet to and from the collector's port, then restored; the resets
// made meanwhile are counted exactly once. The agent's gRPC connection runs
// in the root namespace (its --netns only chooses what it watches), so the
// rule is a table of its own there, on that one port, removed at the end.
func TestFaultPathCutByNftables30s(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("nft is not installed")
	}
	lab := netlab.New(t)
	addr := freeAddr(t)
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	col := startCollector(t, pgcluster.Database(t), addr)
	startAgent(t, "lab-b", lab.B, addr)
	waitNode(t, col, "lab-b")
	b0 := lab.Nstat(t, lab.B)

	table := fmt.Sprintf("nbs_fault_%d", time.Now().UnixNano())
	nft := func(script string) error {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft: %v: %s", err, out)
		}
		return nil
	}
	cut := fmt.Sprintf("table inet %s {\n chain out { type filter hook output priority -10; policy accept;\n  tcp dport %s drop\n  tcp sport %s drop\n }\n}\n", table, port, port)
	restore := "delete table inet " + table + "\n"
	resetsAtRate(t, lab, 5, 200*time.Millisecond)
	if err := nft(cut); err != nil {
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = nft(restore)
		}
	})
	start := time.Now()
	resetsAtRate(t, lab, 15, 2*time.Second)
	time.Sleep(30*time.Second - time.Since(start))
	if err := nft(restore); err != nil {
		t.Fatal(err)
	}
	removed = true
	storedExactly(t, col, lab, b0, 20, 90*time.Second)
}
