package nodeconfig

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// nodePusher records which nodes configs were pushed to.
type nodePusher struct {
	mu    sync.Mutex
	nodes []string
}

func (p *nodePusher) PushConfig(_ context.Context, nodes ...string) {
	p.mu.Lock()
	p.nodes = append(p.nodes, nodes...)
	p.mu.Unlock()
}

func (p *nodePusher) pushed(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.nodes, node)
}

// A change announced on one collector reaches another through LISTEN, also
// after the listener's connection was cut and reopened.
func TestListenFollowsOtherCollectors(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	announcer := New(st, slog.New(slog.DiscardHandler))
	announcer.SetPusher(&nodePusher{})
	follower := New(st, slog.New(slog.DiscardHandler))
	push := &nodePusher{}
	follower.SetPusher(push)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { follower.Listen(runCtx, st.Pool()); close(done) }()
	defer func() { cancel(); <-done }()

	// Announce until the follower applies it: its LISTEN may not be in
	// place yet, and notifications before it are not delivered.
	expand := func(node string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !push.pushed(node) {
			if time.Now().After(deadline) {
				t.Fatalf("the follower never applied the expand of %s", node)
			}
			announcer.announce(ctx, change{Kind: "expand", Node: node, Until: time.Now().Add(time.Minute).UnixNano()})
			time.Sleep(100 * time.Millisecond)
		}
		cfg, err := follower.ConfigFor(ctx, store.Node{Name: node})
		if err != nil || cfg.ExpandUntilUnixNano == 0 {
			t.Fatalf("follower's config for %s: %+v, %v; want it expanded", node, cfg, err)
		}
	}
	expand("web-1")

	var killed bool
	if err := st.Pool().QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = 'nbs-collector config listener'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("cut the listener's connection: %v %v", killed, err)
	}
	expand("web-2")
	var listeners int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'nbs-collector config listener'`).Scan(&listeners); err != nil || listeners != 1 {
		t.Errorf("%d listener connections after the cut (%v), want 1", listeners, err)
	}
}

// A change is announced to the other collectors even when the request that
// made it was cancelled: the change is committed, so they must hear of it.
func TestAnnounceSurvivesACancelledRequest(t *testing.T) {
	ctx := t.Context()
	st := storetest.Open(t)
	announcer := New(st, slog.New(slog.DiscardHandler))
	announcer.SetPusher(&nodePusher{})
	follower := New(st, slog.New(slog.DiscardHandler))
	push := &nodePusher{}
	follower.SetPusher(push)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { follower.Listen(runCtx, st.Pool()); close(done) }()
	defer func() { cancel(); <-done }()

	cancelled, cancelReq := context.WithCancel(ctx)
	cancelReq()
	deadline := time.Now().Add(10 * time.Second)
	for !push.pushed("web-1") {
		if time.Now().After(deadline) {
			t.Fatal("a change announced with a cancelled request's context never reached the other collector")
		}
		announcer.announce(cancelled, change{Kind: "expand", Node: "web-1", Until: time.Now().Add(time.Minute).UnixNano()})
		time.Sleep(100 * time.Millisecond)
	}
}
