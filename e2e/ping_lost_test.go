package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// While an nftables rule in B drops every echo request from A, A's ping
// root has no value (every echo lost: no round trip, not 0 ms), and history
// keeps it so: the series API's steps of those intervals have no value but
// the root's raised state, and no step reads 0 ms.
func TestPingAllLostHasNoValueInSeries(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("nft is not installed")
	}
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-a", lab.A, col.grpcAddr, func(c *agentapp.Config) {
		c.BPF = false // ICMP and kernel timestamps only
		c.PingAddress, c.PingTargets, c.PingInterval = "none", "b="+lab.IPB.String(), 100*time.Millisecond
	})
	waitNode(t, col, "lab-a")
	from := time.Now().Add(-time.Minute)
	eventually(t, 30*time.Second, func() string {
		if v := pingValue(pingTree(t, col, "lab-a"), "ping"); v == "-" {
			return "lab-a's ping root has no value yet"
		}
		return ""
	})

	lab.Exec(t, lab.B, "nft", "add", "table", "inet", "nbslost")
	lab.Exec(t, lab.B, "nft", "add", "chain", "inet", "nbslost", "in", "{ type filter hook input priority 0; policy accept; }")
	lab.Exec(t, lab.B, "nft", "add", "rule", "inet", "nbslost", "in", "ip", "saddr", lab.IPA.String(), "icmp", "type", "echo-request", "drop")
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "exec", lab.B, "nft", "delete", "table", "inet", "nbslost").Run()
	})

	// Live first: the root loses its value once a whole interval's echoes
	// are given up on.
	eventually(t, 30*time.Second, func() string {
		tr := pingTree(t, col, "lab-a")
		if v, st := pingValue(tr, "ping"), pingState(tr, "ping"); v != "-" || st == "ok" {
			return fmt.Sprintf("lab-a's ping root reads %s, %s; want no value, raised", v, st)
		}
		return ""
	})
	// Then history: the series at the agent's interval has steps without
	// a value in the raised state, steps with values before, and never 0.
	eventually(t, 30*time.Second, func() string {
		var s seriesResp
		path := fmt.Sprintf("/api/v1/nodes/lab-a/series?metric=ping&step=1s&from=%d", from.UnixMilli())
		if code := col.getJSON(t, path, &s); code != http.StatusOK {
			t.Fatalf("%s: HTTP %d", path, code)
		}
		var gaps, values int
		for _, p := range s.Points {
			switch {
			case p.Value != nil && *p.Value <= 0:
				t.Fatalf("ping at %s reads %v ms in %s: an interval without an answer is no value, never 0", p.T, *p.Value, p.State)
			case p.Value != nil:
				values++
			case p.State == "crit" || p.State == "warn":
				gaps++
			}
		}
		if gaps < 2 || values == 0 {
			return fmt.Sprintf("series of ping: %d steps without a value in a raised state, %d with a value; want 2+ and 1+", gaps, values)
		}
		return ""
	})
}
