package loadgen

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// conns are the fleet's connections to the collector. With NodesPerConn
// above 1, connection i carries the streams of nodes i*NodesPerConn on:
// dialled when its first node's stream needs it and again only once the
// collector ended it, so the same nodes share it for the run. Otherwise
// each session dials a connection of its own and closes it when it ends,
// as an agent does.
type conns struct {
	addr    string
	perConn int
	dials   func() // counts a connection made (Stats.Dials)
	mu      sync.Mutex
	closed  bool
	bySlot  map[int]*connSlot
	live    map[*h2conn]struct{} // every connection not yet ended, for close
}

type connSlot struct {
	mu sync.Mutex // held while its connection is dialled: its other nodes wait for it
	c  *h2conn
}

func newConns(addr string, perConn int, dials func()) *conns {
	return &conns{addr: addr, perConn: perConn, dials: dials, bySlot: map[int]*connSlot{}, live: map[*h2conn]struct{}{}}
}

var errConnsClosed = status.Error(codes.Unavailable, "loadgen: the fleet's connections are closed")

// dial makes a connection, kept in live until it ends.
func (p *conns) dial(ctx context.Context) (*h2conn, error) {
	c, err := dialH2(ctx, p.addr, func(c *h2conn) {
		p.mu.Lock()
		delete(p.live, c)
		p.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return nil, errConnsClosed
	}
	p.live[c] = struct{}{}
	p.mu.Unlock()
	p.dials()
	return c, nil
}

// get returns the connection node slot's next stream goes on, and what
// its session calls when it ends.
func (p *conns) get(ctx context.Context, slot int) (*h2conn, func(), error) {
	if p.perConn <= 1 {
		c, err := p.dial(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c, c.close, nil
	}
	i := slot / p.perConn
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, errConnsClosed
	}
	s := p.bySlot[i]
	if s == nil {
		s = &connSlot{}
		p.bySlot[i] = s
	}
	p.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil && s.c.usable() {
		return s.c, func() {}, nil
	}
	// An old connection going away keeps its streams until the
	// collector closes it.
	c, err := p.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.c = c
	return c, func() {}, nil
}

// close closes every connection, which ends every stream, and any
// dialled later.
func (p *conns) close() {
	p.mu.Lock()
	p.closed = true
	all := make([]*h2conn, 0, len(p.live))
	for c := range p.live {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}
