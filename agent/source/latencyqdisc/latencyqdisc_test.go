package latencyqdisc

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/sourcetest"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// Attached in lab namespace A, the branch names A's one device with
// traffic, vA, by name, its child timing every packet the parent times
// (ping's echo requests among them); detached, the branch is retired.
func TestBranchNamesTheDevice(t *testing.T) {
	lab := netlab.New(t)
	ctx := context.Background()
	s := sourcetest.ActiveIn(t, lab.A, func(h netns.Handle) (*Source, error) {
		return Open(ctx, Options{Env: source.Env{Netns: h}})
	})
	if _, err := s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	const pings = 5
	lab.Exec(t, lab.A, "ping", "-c", strconv.Itoa(pings), "-i", "0.01", "-q", lab.IPB.String())
	r, err := s.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range r.Metrics {
		ids = append(ids, m.ID)
	}
	dev := catalog.LatencyQdisc + "/va"
	if !slices.Contains(ids, dev) || r.Histograms[dev] == nil {
		t.Fatalf("%s missing: metrics %v", dev, ids)
	}
	got, all := r.Histograms[dev].Count, r.Histograms[catalog.LatencyQdisc].Count
	if got < pings || got != all {
		t.Errorf("vA timed %d packets, all devices %d: want all = vA's (A has no other traffic), at least the %d pings", got, all, pings)
	}

	if err := s.SetActive(ctx, false); err != nil {
		t.Fatal(err)
	}
	r, err = s.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.Retired, catalog.LatencyQdisc) || len(r.Metrics) != 0 {
		t.Errorf("detached: retired %v, metrics %d; want the branch retired, none", r.Retired, len(r.Metrics))
	}
}
