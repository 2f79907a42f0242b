package e2e

import (
	"fmt"
	"math"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// A sustained reset storm at the agent's defaults (--evidence.per-second 20,
// --interval 10s, --evidence.per-interval from them): 600 resets at 30 a
// second. Stored: every reset counted (= the namespace's TcpOutRsts), the
// evidence the documented rate lets through (the bucket of 20 plus 20 a
// second of the storm, ±1), and every other event counted as given up by
// the rate limit, none by the ring or the per-interval cap.
func TestEvidenceStormAtDefaults(t *testing.T) {
	const (
		resets  = 600
		rate    = 30
		perSec  = 20
		metric  = "tcp_reset/sent/no_socket"
		dropped = "agent/evidence/dropped/tcp_reset"
	)
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-b", lab.B, col.grpcAddr, func(c *agentapp.Config) {
		d := agentapp.DefaultConfig()
		c.Interval, c.EvidencePerSecond, c.EvidencePerInterval = d.Interval, d.EvidencePerSecond, d.EvidencePerInterval
	})
	waitNode(t, col, "lab-b")

	b0 := lab.Nstat(t, lab.B)
	tick := time.NewTicker(time.Second / rate)
	var first, last time.Time
	for i := range resets {
		<-tick.C
		lab.ResetNoSocket(t, 1)
		if i == 0 {
			first = time.Now()
		}
		last = time.Now()
	}
	tick.Stop()
	outRsts := float64(lab.Nstat(t, lab.B)["TcpOutRsts"] - b0["TcpOutRsts"])
	span := last.Sub(first).Seconds()
	want := perSec + perSec*span

	events := func(metric string) int {
		var ev struct {
			Events []struct{} `json:"events"`
		}
		col.getJSON(t, "/api/v1/nodes/lab-b/events?metric="+metric+"&limit=1000", &ev)
		return len(ev.Events)
	}
	var kept int
	eventually(t, 45*time.Second, func() string {
		kept = events(metric)
		got, gave := storedTotal(t, col, "lab-b", metric), storedTotal(t, col, "lab-b", dropped)
		if got != resets || float64(kept)+gave != resets {
			return fmt.Sprintf("stored %v resets (want %d), %d events + %v given up (want %d together)", got, resets, kept, gave, resets)
		}
		return ""
	})
	t.Logf("%d resets over %.2fs (TcpOutRsts +%v): %d events stored (want %.1f ±1), %v given up",
		resets, span, outRsts, kept, want, storedTotal(t, col, "lab-b", dropped))
	if outRsts != resets {
		t.Errorf("nstat TcpOutRsts +%v, want %d", outRsts, resets)
	}
	if math.Abs(float64(kept)-want) > 1.5 {
		t.Errorf("%d events stored, want %.1f ±1 (the bucket of %d plus %d a second)", kept, want, perSec, perSec)
	}
	caps := map[string]float64{"rate_limit": resets - float64(kept), "ring_full": 0, "interval_cap": 0}
	for c, v := range caps {
		if got := storedTotal(t, col, "lab-b", dropped+"/"+c); got != v {
			t.Errorf("%s/%s stored %v, want %v", dropped, c, got, v)
		}
	}
	// Each refused SYN is also a drop (no_socket), with evidence of its own.
	if got, all := storedTotal(t, col, "lab-b", "agent/evidence"), kept+events("drops"); got != float64(all) {
		t.Errorf("agent/evidence stored %v, want the %d reset and drop events stored", got, all)
	}
}
