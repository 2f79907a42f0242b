package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// gatheringAuth waits, in each Authenticate, until want Hellos are in it at
// once (or a while has passed), and records the most it saw at once.
type gatheringAuth struct {
	want int
	wait time.Duration // at most, for the others
	mu   sync.Mutex
	in   int
	most int
	all  chan struct{}
}

func (a *gatheringAuth) Authenticate(ctx context.Context, _ *nbsv1.Hello) (Grant, error) {
	a.mu.Lock()
	a.in++
	a.most = max(a.most, a.in)
	if a.in == a.want {
		close(a.all)
	}
	a.mu.Unlock()
	select {
	case <-a.all:
	case <-time.After(a.wait):
	case <-ctx.Done():
	}
	a.mu.Lock()
	a.in--
	a.mu.Unlock()
	return Grant{}, nil
}

// boundedAuth says it bounds its own database use.
type boundedAuth struct{ *gatheringAuth }

func (boundedAuth) BoundsItsConnections() {}

// An Authenticator that bounds its own database use (SelfBounded) gets the
// Hellos waiting at once, so that it can share its reads among them; any
// other runs one Hello at a time in the server's authentication slot.
func TestSelfBoundedAuthenticatorSeesHellosTogether(t *testing.T) {
	const hellos = 4
	for _, c := range []struct {
		name string
		auth func(*gatheringAuth) Authenticator
		wait time.Duration
		most int
	}{
		{"self-bounded", func(g *gatheringAuth) Authenticator { return boundedAuth{g} }, 15 * time.Second, hellos},
		// Each waits in vain: the next gets in only once it left.
		{"one at a time", func(g *gatheringAuth) Authenticator { return g }, 100 * time.Millisecond, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &gatheringAuth{want: hellos, wait: c.wait, all: make(chan struct{})}
			_, _, client := startServerWith(t, ServerOptions{Auth: c.auth(g)})
			var wg sync.WaitGroup
			errs := make([]error, hellos)
			for i := range hellos {
				wg.Go(func() {
					_, _, errs[i] = open(t, client, fmt.Sprintf("n%d", i), nil, uint64(i+1), nil)
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("hello %d: %v", i, err)
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.most != c.most {
				t.Errorf("%d Hellos in Authenticate at once, want %d", g.most, c.most)
			}
		})
	}
}
