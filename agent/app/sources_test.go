package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/agent"
	"github.com/nbs-project/nbs/internal/netns"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// fakeSource records how often it is closed.
type fakeSource struct {
	name   string
	closed int
}

func (f *fakeSource) Name() string                                    { return f.name }
func (f *fakeSource) Collect(context.Context) (source.Reading, error) { return source.Reading{}, nil }
func (f *fakeSource) Capabilities() []*nbsv1.Capability               { return nil }
func (f *fakeSource) Close() error                                    { f.closed++; return nil }

// fakePing is a source the collector's peers reach: it retires the
// targets in retire at the next SetPeers.
type fakePing struct {
	fakeSource
	retire []string
}

func (f *fakePing) SetPeers([]string) []string {
	r := f.retire
	f.retire = nil
	return r
}

// TestOpenSources: the sources open in the table's order with the agent
// branch last; a constructor that fails closes, once each, the sources
// opened before it, opens none after it, and leaves no agent branch or ping
// handle behind.
func TestOpenSources(t *testing.T) {
	const n = 4
	errBroken := errors.New("broken")
	for failAt := range n + 1 { // n: none fails
		t.Run(fmt.Sprintf("fail at %d", failAt), func(t *testing.T) {
			a := New(Config{BufferReports: 10}, slog.New(slog.DiscardHandler))
			var made []*fakeSource       // to count closes
			var returned []source.Source // in the order opened
			ping := &fakePing{fakeSource: fakeSource{name: "ping"}}
			var branches []opener
			for i := range n {
				branches = append(branches, func(context.Context, source.Env) (source.Source, error) {
					if i == failAt {
						return nil, fmt.Errorf("source %d: %w", i, errBroken)
					}
					if i == 1 {
						made, returned = append(made, &ping.fakeSource), append(returned, ping)
						return ping, nil
					}
					f := &fakeSource{name: fmt.Sprint(i)}
					made, returned = append(made, f), append(returned, f)
					return f, nil
				})
			}
			opened, err := a.openSources(context.Background(), source.Env{}, branches)
			t.Cleanup(func() {
				for _, s := range opened {
					if err := s.Close(); err != nil {
						t.Errorf("close %s: %v", s.Name(), err)
					}
				}
			})

			if failAt < n {
				if !errors.Is(err, errBroken) || opened != nil {
					t.Fatalf("openSources = %v, %v; want the constructor's error", opened, err)
				}
				if len(made) != failAt {
					t.Errorf("%d sources opened, want the %d before the failing one", len(made), failAt)
				}
				for _, s := range made {
					if s.closed != 1 {
						t.Errorf("source %s closed %d times, want once", s.name, s.closed)
					}
				}
				if a.self != nil || a.ping != nil {
					t.Errorf("after a failure: agent branch %v, ping %v; want neither", a.self, a.ping)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(opened) != n+1 {
				t.Fatalf("%d sources, want %d and the agent branch", len(opened), n)
			}
			if !slices.Equal(opened[:n], returned) {
				t.Errorf("sources %v, want %v in the table's order", opened[:n], returned)
			}
			for _, s := range made {
				if s.closed != 0 {
					t.Errorf("source %s closed on success", s.name)
				}
			}
			if self, ok := opened[n].(*agent.Source); !ok || self != a.self {
				t.Errorf("last source %s, want the agent branch", opened[n].Name())
			}
			if a.ping != peers(ping) {
				t.Errorf("ping handle %v, want the ping source", a.ping)
			}
		})
	}
}

// countingRead counts reads by path.
type countingRead struct {
	ns netns.Handle
	mu sync.Mutex
	n  map[string]int
}

func (c *countingRead) read(path string) ([]byte, error) {
	c.mu.Lock()
	c.n[path]++
	c.mu.Unlock()
	return c.ns.ReadFile(path)
}

func (c *countingRead) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// TestProcReadOncePerCollect: with BPF off, the tcp_reset, latency and drops
// branches all count from the watched namespace's SNMP files; each
// collection reads each file once.
func TestProcReadOncePerCollect(t *testing.T) {
	ns, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{BufferReports: 10, BPF: false}, slog.New(slog.DiscardHandler))
	// What Run does before it opens the sources: the agent branch counts
	// the outbox.
	spooled, _ := a.openSpool()
	t.Cleanup(func() { _ = spooled.Close() })
	a.outbox = spooled
	reads := &countingRead{ns: ns, n: map[string]int{}}
	env := a.env(ns)
	env.Proc = procnet.NewReader(reads.read)
	a.proc = env.Proc
	sources, err := a.openSources(context.Background(), env, a.branches())
	if err != nil {
		t.Fatal(err)
	}
	a.sources = sources
	t.Cleanup(func() {
		for _, s := range sources {
			if err := s.Close(); err != nil {
				t.Errorf("close %s: %v", s.Name(), err)
			}
		}
	})
	t.Logf("reads while opening: %v", reads.take())
	for i := range 3 {
		r := a.collect(context.Background(), newLedger())
		got := reads.take()
		want := map[string]int{procnet.SNMPPath: 1, procnet.NetstatPath: 1, procnet.SNMP6Path: 1}
		if len(got) != len(want) {
			t.Errorf("collection %d read %v, want %v", i, got, want)
		}
		for path, n := range want {
			if got[path] != n {
				t.Errorf("collection %d read %s %d times, want %d", i, path, got[path], n)
			}
		}
		// Every branch that counts from the files reported: none failed
		// and so read less.
		for _, id := range []string{catalog.TCPResetSent, catalog.LatencyListenOverflows, catalog.Drops} {
			if _, ok := r.counters[id]; !ok {
				t.Errorf("collection %d has no %s: its source did not collect (%v)", i, id, slices.Sorted(maps.Keys(r.counters)))
			}
		}
	}
}

// A ping peer the collector no longer gives is forgotten when its Config
// is applied, not at the next collection: a Hello sent meanwhile (the
// stream the collector ended when the node changed tenant reconnects at
// once) names only the peers the node still has.
func TestPeersTakenAwayAreForgottenAtOnce(t *testing.T) {
	a := New(Config{BufferReports: 10}, slog.New(slog.DiscardHandler))
	ping := &fakePing{fakeSource: fakeSource{name: "ping"}}
	a.ping = ping
	a.tree.Define(catalog.PingTree()...)
	a.tree.Define(catalog.PingTarget("ping/globex-db-1", "10.77.0.21", "the collector's mesh")...)
	a.tree.Define(catalog.PingTarget("ping/acme-2", "198.18.0.2", "the collector's mesh")...)
	helloNames := func() []string {
		var ids []string
		for _, m := range a.Hello().GetMetrics() {
			ids = append(ids, m.GetId())
		}
		return ids
	}
	if ids := helloNames(); !slices.Contains(ids, "ping/globex-db-1/kernel_rtt") {
		t.Fatalf("before the Config the Hello lacks the old peer: %v", ids)
	}
	ping.retire = []string{"ping/globex-db-1"}
	a.ApplyConfig(&nbsv1.Config{Version: 2, PingTargets: []string{"acme-2=198.18.0.2"}})
	for _, id := range helloNames() {
		if strings.HasPrefix(id, "ping/globex-db-1") {
			t.Errorf("the Hello after the Config still defines %s", id)
		}
	}
	if _, ok := a.tree.Metric("ping/acme-2/loss"); !ok {
		t.Error("the peer the node keeps was forgotten too")
	}
}
