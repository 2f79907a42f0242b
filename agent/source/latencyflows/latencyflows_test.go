package latencyflows

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	"github.com/nbs-project/nbs/internal/testlab/txlab"
)

func TestMain(m *testing.M) {
	txlab.MaybeHelper()
	os.Exit(m.Run())
}

// The sampling's own caps show as evidence losses (agent/evidence/dropped):
// a busy flow against a rate limit of 5 samples a second per CPU has
// samples withheld, exactly as many as the kernel counted; a source whose
// probe cannot load has no evidence.
func TestEvidenceCountsTheSamplingCaps(t *testing.T) {
	off, err := Open(context.Background(), Options{Env: source.Env{DisableBPF: true}})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := off.EvidenceCounts(); err != nil || c.Dropped != nil {
		t.Errorf("without BPF: %+v, %v; want no evidence", c, err)
	}

	lab := netlab.New(t)
	cg := txlab.NewCgroup(t)
	s, err := Open(context.Background(), Options{Env: source.Env{AllNetns: true}, MinGap: time.Nanosecond, SamplesPerSec: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if s.Programs() == nil {
		netlab.SkipOrFail(t, "latency/flows probe unavailable: %v", s.Capabilities())
	}
	if err := s.SetActive(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	sink := txlab.NewSink(t, lab, lab.B, lab.IPB)
	cg.Send(t, lab.A, txlab.SendSpec{Dst: sink.Addr, Conns: 2, Size: 64 << 10, Duration: time.Second})
	if err := s.SetActive(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c, err := s.EvidenceCounts()
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if c.Branch != catalog.LatencyFlows || c.Dropped[source.CapRateLimit] == 0 ||
		c.Dropped[source.CapRateLimit] != st.Suppressed || c.Dropped[CapTableFull] != st.TableFull {
		t.Errorf("evidence counts %+v, kernel %+v: want rate_limit = the kernel's suppressed (> 0), table_full its table_full", c, st)
	}
}
