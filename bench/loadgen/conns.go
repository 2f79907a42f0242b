package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// The fleet's shared connections (Config.NodesPerConn > 1) are the
// SubConns of one gRPC ClientConn, not each a ClientConn of its own: a
// ClientConn holds three goroutines of its own (its resolver's, its
// balancer's and its state's callbacks) and about 6 KiB of heap beside
// its connection's, which came to about 3 KiB a node at four a connection
// (BENCHMARKS.md, "The simulator's memory per node"). Each connection is
// still its own TCP connection and HTTP/2 transport, dialled when its
// first node's stream needs it, and carries the streams of the same
// nodes for the run: a balancer of this package's (slotsBalancer) picks a
// stream's connection by its node's slot, which the stream's context
// carries.

// slotsBalancer names the balancer in gRPC's registry: a ClientConn's
// service config can name a balancer only by its registered name.
const slotsBalancer = "nbs_loadgen_slots"

// registerSlots registers slotsBuilder once for the process: gRPC has no
// way to hand a ClientConn a balancer but its registry, which must not
// be written while a ClientConn reads it.
var registerSlots sync.Once

// connKey is the context key of a stream's connection index.
type connKey struct{}

// dialsKey is the resolver attribute that carries the fleet's count of
// connections dialled (Stats.Dials).
type dialsKey struct{}

// sharedConn is the ClientConn whose SubConns are the fleet's shared
// connections.
func sharedConn(addr string, dials *atomic.Uint64) (*grpc.ClientConn, error) {
	registerSlots.Do(func() { balancer.Register(slotsBuilder{}) })
	r := manual.NewBuilderWithScheme("nbs-loadgen")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: addr}},
		Attributes: attributes.New(dialsKey{}, dials)})
	conn, err := grpc.NewClient(r.Scheme()+":///collector", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig": [{%q: {}}]}`, slotsBalancer)),
		// Idle, the ClientConn would close its connections and dial anew.
		grpc.WithIdleTimeout(0))
	if err != nil {
		return nil, fmt.Errorf("loadgen: shared connections: %w", err)
	}
	return conn, nil
}

// onConn is ctx for a stream on shared connection i.
func onConn(ctx context.Context, i int) context.Context { return context.WithValue(ctx, connKey{}, i) }

type slotsBuilder struct{}

func (slotsBuilder) Name() string { return slotsBalancer }

func (slotsBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &slots{cc: cc, conns: map[int]*slot{}}
}

// slots is the balancer: connection i is a SubConn made when a stream
// first asks for it, connected when a stream finds it idle (at first, and
// after the collector closed it), and each stream waits for its own.
type slots struct {
	cc balancer.ClientConn

	mu     sync.Mutex
	addr   resolver.Address
	dials  *atomic.Uint64
	conns  map[int]*slot
	ready  int
	closed bool
}

type slot struct {
	sc    balancer.SubConn
	state connectivity.State
	err   error
}

func (b *slots) UpdateClientConnState(s balancer.ClientConnState) error {
	addrs := s.ResolverState.Addresses
	if len(addrs) == 0 && len(s.ResolverState.Endpoints) > 0 {
		addrs = s.ResolverState.Endpoints[0].Addresses
	}
	if len(addrs) == 0 {
		return balancer.ErrBadResolverState
	}
	b.mu.Lock()
	b.addr = resolver.Address{Addr: addrs[0].Addr}
	b.dials, _ = s.ResolverState.Attributes.Value(dialsKey{}).(*atomic.Uint64)
	b.mu.Unlock()
	b.publish()
	return nil
}

// publish gives the ClientConn a new picker: streams waiting for a
// connection pick again.
func (b *slots) publish() {
	b.mu.Lock()
	state := connectivity.Connecting
	if b.ready > 0 {
		state = connectivity.Ready
	}
	b.mu.Unlock()
	b.cc.UpdateState(balancer.State{ConnectivityState: state, Picker: &picker{b}})
}

func (b *slots) ResolverError(error) {}

func (b *slots) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {} // StateListener's

func (b *slots) ExitIdle() {}

func (b *slots) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, s := range b.conns {
		s.sc.Shutdown()
	}
	b.conns = nil
}

// changed follows connection i's state.
func (b *slots) changed(i int, st balancer.SubConnState) {
	b.mu.Lock()
	s := b.conns[i]
	if s == nil || st.ConnectivityState == connectivity.Shutdown {
		b.mu.Unlock()
		return
	}
	if s.state == connectivity.Ready {
		b.ready--
	}
	s.state, s.err = st.ConnectivityState, st.ConnectionError
	if s.state == connectivity.Ready {
		b.ready++
	}
	b.mu.Unlock()
	b.publish()
}

type picker struct{ b *slots }

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	i, ok := info.Ctx.Value(connKey{}).(int)
	if !ok {
		return balancer.PickResult{}, status.Error(codes.Internal, "loadgen: a stream without its connection")
	}
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return balancer.PickResult{}, status.Error(codes.Unavailable, "loadgen: connections closed")
	}
	s := b.conns[i]
	if s == nil {
		sc, err := b.cc.NewSubConn([]resolver.Address{b.addr}, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) { b.changed(i, st) }})
		if err != nil {
			return balancer.PickResult{}, status.Errorf(codes.Unavailable, "loadgen: connection %d: %v", i, err)
		}
		s = &slot{sc: sc, state: connectivity.Idle}
		b.conns[i] = s
		if b.dials != nil {
			b.dials.Add(1)
		}
	}
	switch s.state {
	case connectivity.Ready:
		return balancer.PickResult{SubConn: s.sc}, nil
	case connectivity.Idle:
		// Connecting now; its listener says when it is ready.
		s.sc.Connect()
		s.state = connectivity.Connecting
	case connectivity.TransientFailure:
		// As pick_first fails a stream that does not wait for ready.
		return balancer.PickResult{}, status.Errorf(codes.Unavailable, "loadgen: connection %d: %v", i, s.err)
	}
	return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
}
