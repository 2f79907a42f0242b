package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// tunTxDropped is `ip -s -s link`'s tx dropped of dev in ns.
func tunTxDropped(t *testing.T, lab *netlab.Lab, ns, dev string) uint64 {
	t.Helper()
	var links []struct {
		Stats struct {
			TX struct {
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(lab.Exec(t, ns, "ip", "-s", "-s", "-j", "link", "show", "dev", dev)), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -s -s -j link show dev %s: %v (%d links)", dev, err, len(links))
	}
	return links[0].Stats.TX.Dropped
}

// Packets routed into a tun device no process reads are dropped by the
// device (its tx_dropped), before, during and after a SIGKILL of the agent
// and its restart: the stored drops/device/tx_dropped equals
// `ip -s -s link`'s delta over the whole test, the drops while no agent ran
// included (the second agent continues the first's count: same boot, same
// namespace, counted.json). The device's own child counts from each
// agent's start: it has what each agent saw, not the gap between them.
func TestDeviceDropsAcrossAgentRestart(t *testing.T) {
	t.Parallel()
	const before, gap, after = 20, 15, 10
	lab := netlab.New(t)
	h, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	lab.Exec(t, lab.A, "ip", "tuntap", "add", "dev", "nbstun", "mode", "tun")
	lab.Exec(t, lab.A, "ip", "addr", "add", "192.0.2.1/30", "dev", "nbstun")
	lab.Exec(t, lab.A, "ip", "link", "set", "nbstun", "up")
	into := netip.MustParseAddrPort("192.0.2.2:9")
	bin := buildAgent(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	state := t.TempDir()
	args := []string{"--collector.address", col.grpcAddr, "--node.name", "lab-a", "--netns", lab.A, "--interval", interval.String(),
		"--snapshot.every", "1h", "--spool.dir", filepath.Join(state, "spool"),
		"--node.credential-file", filepath.Join(state, "node-credential"), "--log.level", "info"}
	parent, child := catalog.DropsDevice+"/tx_dropped", catalog.DropsDevice+"/tx_dropped/nbstun"

	b0 := tunTxDropped(t, lab, lab.A, "nbstun")
	first := startAgentProcess(t, "agent 1", bin, args...)
	waitNode(t, col, "lab-a")
	time.Sleep(2 * interval) // it has reported its baseline
	netlab.SendUDPIn(t, h, into, before, 64, 0)
	stored := func(phase string, wantParent, wantChild float64) {
		t.Helper()
		eventually(t, withinTwoIntervals, func() string {
			p, c := storedTotal(t, col, "lab-a", parent), storedTotal(t, col, "lab-a", child)
			if p != wantParent || c != wantChild {
				return fmt.Sprintf("%s: stored %s %v, %s %v; want %v and %v", phase, parent, p, child, c, wantParent, wantChild)
			}
			return ""
		})
	}
	stored("agent 1", before, before)
	first.kill(t)
	netlab.SendUDPIn(t, h, into, gap, 64, 0)
	second := startAgentProcess(t, "agent 2", bin, args...)
	// Its first report is stored, so its baseline is taken: the gap is in
	// the parent (counted.json continues the first agent's count), not in
	// the device's child. Waiting on that, not on a fixed sleep, keeps a
	// slow start on a busy machine from taking the drops after it as its
	// baseline.
	stored("agent 2's first report", before+gap, before)
	netlab.SendUDPIn(t, h, into, after, 64, 0)
	d := float64(tunTxDropped(t, lab, lab.A, "nbstun") - b0)
	if d != before+gap+after {
		t.Fatalf("ip -s -s link: nbstun tx dropped +%v, sent %d into it", d, before+gap+after)
	}
	stored("after the SIGKILL and restart", d, before+after)
	second.signal(t, syscall.SIGTERM, 10*time.Second)
	t.Logf("nbstun tx dropped +%v (ip -s -s link), every one stored in %s, %d of them while no agent ran", d, parent, gap)
}
