package agent

import (
	"context"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/latencyecn"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// CE marks per device and peer are attached by trouble in latency/ecn (its
// share of marked packets), not by trouble elsewhere in the latency branch
// (which attaches qdisc sojourn), nor by its own subtree (which attaches
// no triggered source).
func TestECNDevicesTriggeredByECNTrouble(t *testing.T) {
	lab := netlab.New(t)
	qd := openQdisc(t, lab)
	h, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	ecn, err := latencyecn.Open(context.Background(), latencyecn.Options{Env: source.Env{Netns: h}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ecn.Close() })
	if ecn.Programs() == nil {
		netlab.SkipOrFail(t, "agent: CE marks per device unavailable: %s", ecn.Capabilities()[0].GetReason())
	}
	s := newSelf(t, Options{Sources: []source.Source{qd, ecn}, BudgetPercent: 100, Hold: time.Second, MaxOn: time.Hour})
	ctx := context.Background()
	collect(t, s)
	t0 := time.Now()
	for i, tc := range []struct {
		own            map[string]tree.State
		wantQd, wantCE bool
	}{
		{map[string]tree.State{catalog.LatencyECNDevices + "/vb": tree.Crit}, false, false},
		{map[string]tree.State{catalog.LatencyTXQdiscToDriver: tree.Warn}, true, false},
		{map[string]tree.State{catalog.LatencyECNShare: tree.Warn}, true, true},
	} {
		// Each step starts detached: well past the previous one's hold.
		now := t0.Add(time.Duration(i) * time.Hour)
		s.Adapt(ctx, now.Add(-30*time.Minute), result(nil), time.Time{})
		s.Adapt(ctx, now, result(tc.own), time.Time{})
		if qd.Active() != tc.wantQd || ecn.Active() != tc.wantCE {
			t.Errorf("%v: qdisc sojourn attached %v, CE marks %v; want %v, %v", tc.own, qd.Active(), ecn.Active(), tc.wantQd, tc.wantCE)
		}
	}
}
