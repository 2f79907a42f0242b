package sourcetest

import (
	"context"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Triggered is what ActiveIn needs of a triggered source (source.Triggered).
type Triggered interface {
	Programs() map[string]*ebpf.Program
	Capabilities() []*nbsv1.Capability
	SetActive(context.Context, bool) error
	Close() error
}

// ActiveIn opens a triggered source watching namespace ns (open takes its
// handle, as source.Env's Netns), closes it with the test, and attaches it.
// A source without its programs (no BPF, a kernel too old) skips the test,
// or fails it where BPF is required (netlab.SkipOrFail).
func ActiveIn[S Triggered](t testing.TB, ns string, open func(netns.Handle) (S, error)) S {
	t.Helper()
	h, err := netns.Resolve(ns)
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Programs() == nil {
		c := s.Capabilities()[0]
		netlab.SkipOrFail(t, "%s: unavailable: %s", c.GetName(), c.GetReason())
	}
	if err := s.SetActive(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return s
}
