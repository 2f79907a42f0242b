// Package triggeredtest is what the tests of triggered sources
// (source.Triggered) share: a source attached in a lab namespace, its
// readings, and its branch retired on detaching.
package triggeredtest

import (
	"context"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Source is what the helpers need of a triggered source.
type Source interface {
	Programs() map[string]*ebpf.Program
	Capabilities() []*nbsv1.Capability
	SetActive(context.Context, bool) error
	Collect(context.Context) (source.Reading, error)
	Close() error
}

// Active opens a triggered source watching namespace ns, closes it with
// the test, and attaches it. A source without its programs (no BPF, a
// kernel too old) skips the test, or fails it where BPF is required
// (netlab.SkipOrFail).
func Active[S Source](t testing.TB, ns string, open func(source.Env) (S, error)) S {
	t.Helper()
	h, err := netns.Resolve(ns)
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(source.Env{Netns: h})
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

// Collect returns a reading of s and the ids of its metrics, failing the
// test on an error.
func Collect(t testing.TB, s Source) (source.Reading, []string) {
	t.Helper()
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(r.Metrics))
	for _, m := range r.Metrics {
		ids = append(ids, m.ID)
	}
	return r, ids
}

// DetachRetires detaches s and checks that its next reading retires
// branch and has no metric.
func DetachRetires(t testing.TB, s Source, branch string) {
	t.Helper()
	if err := s.SetActive(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	r, _ := Collect(t, s)
	if !slices.Contains(r.Retired, branch) || len(r.Metrics) != 0 {
		t.Errorf("detached: retired %v, metrics %d; want the branch retired, none", r.Retired, len(r.Metrics))
	}
}
