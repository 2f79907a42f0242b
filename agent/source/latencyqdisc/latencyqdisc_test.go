package latencyqdisc

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/triggeredtest"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// Attached in lab namespace A, the branch names A's one device with
// traffic, vA, by name, its child timing every packet the parent times
// (ping's echo requests among them); detached, the branch is retired.
func TestBranchNamesTheDevice(t *testing.T) {
	lab := netlab.New(t)
	ctx := context.Background()
	s := triggeredtest.Active(t, lab.A, func(env source.Env) (*Source, error) {
		return Open(ctx, Options{Env: env})
	})
	triggeredtest.Collect(t, s)
	const pings = 5
	lab.Exec(t, lab.A, "ping", "-c", strconv.Itoa(pings), "-i", "0.01", "-q", lab.IPB.String())
	r, ids := triggeredtest.Collect(t, s)
	dev := catalog.LatencyQdisc + "/va"
	if !slices.Contains(ids, dev) || r.Histograms[dev] == nil {
		t.Fatalf("%s missing: metrics %v", dev, ids)
	}
	got, all := r.Histograms[dev].Count, r.Histograms[catalog.LatencyQdisc].Count
	if got < pings || got != all {
		t.Errorf("vA timed %d packets, all devices %d: want all = vA's (A has no other traffic), at least the %d pings", got, all, pings)
	}

	triggeredtest.DetachRetires(t, s, catalog.LatencyQdisc)
}
