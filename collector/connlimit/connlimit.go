// Package connlimit bounds the connections a listener holds, in all and
// from one address, so that no address can hold a server against the
// others: one address holding 1,024 idle TLS connections once locked every
// other user out of the UI for as long as it kept reconnecting.
//
// Past the per-address bound a new connection from that address closes the
// address's own least recently used idle connection, or is refused (closed
// at once). Past the total bound it closes the least recently used idle
// connection of anyone, else the oldest that has not finished its TLS
// handshake or first request within NewGrace, else it waits, in the
// kernel's backlog, for a connection to close. "Idle" is what an
// http.Server reports through ConnState (a kept-alive connection between
// requests); a listener without that hook (gRPC) has no idle connections,
// so it only refuses and waits.
package connlimit

import (
	"container/list"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/mem"
)

// NewGrace is how long a connection may take to finish its TLS handshake
// and send the first byte of a request before a full server may close it
// for a newcomer: a handshake takes milliseconds, a client that holds one
// open does it to take a place.
const NewGrace = time.Second

// Limits bound a listener's connections.
type Limits struct {
	// Max is the open connections in all.
	Max int
	// PerAddress is the open connections from one address: an IPv4
	// address, or IPv6 addresses sharing their first IPv6Bits.
	PerAddress int
	// IPv6Bits is how much of an IPv6 address names one client: 64 where
	// a host is given a whole /64 and could take a new address for every
	// connection (browsers), 128 (or 0) where many hosts share one /64
	// (a fleet's servers).
	IPv6Bits int
	// Exempt, when set, says which addresses count only against Max: the
	// reverse proxies and load balancers that carry many clients' requests.
	Exempt func(netip.Addr) bool
	// States says the server reports each connection's state through
	// ConnState (an http.Server does): only then are idle and stalled
	// connections closed for newcomers. Without it (gRPC) every
	// connection would look stalled.
	States bool
}

// Metrics count what a listener refused and closed; Collectors registers
// them.
type Metrics struct {
	open    prometheus.Gauge
	refused prometheus.Counter
	closed  *prometheus.CounterVec
}

// NewMetrics names the metrics after the listener ("http", "grpc"):
// nbs_collector_<name>_connections and the _refused_total and
// _closed_total counters beside it.
func NewMetrics(name string) *Metrics {
	return &Metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nbs_collector_" + name + "_connections",
			Help: "Open " + name + " connections."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "nbs_collector_" + name + "_connections_refused_total",
			Help: "New " + name + " connections closed at once: their address held its maximum of connections and none of them was idle."}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_" + name + "_connections_closed_total",
			Help: "Open " + name + " connections closed to let a new one in, by reason: idle (an idle keep-alive connection, least recently used first, when the server was full), " +
				"address_idle (its address's own idle connection, when the address held its maximum), stalled (no request within a second of connecting, when the server was full and none was idle)."},
			[]string{"reason"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.open, m.refused, m.closed}
}

type state uint8

const (
	stateNew state = iota
	stateActive
	stateIdle
)

// Listener is a net.Listener under Limits.
type Listener struct {
	net.Listener
	lim Limits
	m   *Metrics
	now func() time.Time

	mu      sync.Mutex
	open    int
	perAddr map[netip.Addr]int
	conns   map[*conn]struct{}
	idle    *list.List // of *conn, least recently idle first
	changed chan struct{}
	done    chan struct{}
	closing sync.Once
}

// New limits inner's connections.
func New(inner net.Listener, lim Limits, m *Metrics) *Listener {
	if m == nil {
		m = NewMetrics("unnamed")
	}
	return &Listener{Listener: inner, lim: lim, m: m, now: time.Now, perAddr: map[netip.Addr]int{},
		conns: map[*conn]struct{}{}, idle: list.New(), changed: make(chan struct{}), done: make(chan struct{})}
}

// Close closes the listener; an Accept waiting for room returns.
func (l *Listener) Close() error {
	l.closing.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Accept waits for a connection there is room for.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit makes room for nc, or refuses it (closed, nil).
func (l *Listener) admit(nc net.Conn) *conn {
	peer := addrOf(nc.RemoteAddr())
	c := &conn{Conn: nc, l: l, addr: clientOf(peer, l.lim.IPv6Bits)}
	c.exempt = l.lim.Exempt != nil && l.lim.Exempt(peer)
	var victims []*conn
	defer func() {
		for _, v := range victims {
			v.Conn.Close()
		}
	}()
	l.mu.Lock()
	if !c.exempt && l.perAddr[c.addr] >= l.lim.PerAddress {
		v := l.oldestIdle(c.addr)
		if v == nil {
			l.mu.Unlock()
			l.m.refused.Inc()
			nc.Close()
			return nil
		}
		l.releaseLocked(v)
		victims = append(victims, v)
		l.m.closed.WithLabelValues("address_idle").Inc()
	}
	for l.open >= l.lim.Max {
		if v, why := l.victim(); v != nil {
			l.releaseLocked(v)
			victims = append(victims, v)
			l.m.closed.WithLabelValues(why).Inc()
			continue
		}
		changed := l.changed
		l.mu.Unlock()
		for _, v := range victims {
			v.Conn.Close()
		}
		victims = nil
		// Woken by a connection closing or going idle, or when the
		// newest connection may have stalled.
		t := time.NewTimer(NewGrace)
		select {
		case <-changed:
		case <-t.C:
		case <-l.done:
			t.Stop()
			nc.Close()
			return nil
		}
		t.Stop()
		l.mu.Lock()
	}
	l.open++
	if !c.exempt {
		l.perAddr[c.addr]++
	}
	c.since = l.now()
	l.conns[c] = struct{}{}
	l.m.open.Set(float64(l.open))
	l.mu.Unlock()
	return c
}

// victim is the connection a full server closes for a newcomer, and why:
// the least recently used idle one, else the oldest stalled one; none
// when the server reports no states.
func (l *Listener) victim() (*conn, string) {
	if !l.lim.States {
		return nil, ""
	}
	if v := l.oldestIdle(netip.Addr{}); v != nil {
		return v, "idle"
	}
	if v := l.oldestStalled(); v != nil {
		return v, "stalled"
	}
	return nil, ""
}

// oldestIdle is the least recently idle connection (of addr, when valid).
func (l *Listener) oldestIdle(addr netip.Addr) *conn {
	for e := l.idle.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*conn); !addr.IsValid() || c.addr == addr {
			return c
		}
	}
	return nil
}

// oldestStalled is the oldest connection that has not started a request
// within NewGrace of connecting.
func (l *Listener) oldestStalled() *conn {
	var oldest *conn
	cutoff := l.now().Add(-NewGrace)
	for c := range l.conns {
		if c.state == stateNew && c.since.Before(cutoff) && (oldest == nil || c.since.Before(oldest.since)) {
			oldest = c
		}
	}
	return oldest
}

// releaseLocked forgets c (once); an Accept waiting for room looks again.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	delete(l.conns, c)
	l.open--
	if !c.exempt {
		if l.perAddr[c.addr]--; l.perAddr[c.addr] <= 0 {
			delete(l.perAddr, c.addr)
		}
	}
	l.m.open.Set(float64(l.open))
	l.signalLocked()
}

func (l *Listener) signalLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// ConnState is the http.Server's ConnState hook: it tells the listener
// which connections are idle.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c := unwrap(nc)
	if c == nil || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.released {
		return
	}
	switch s {
	case http.StateIdle:
		c.state = stateIdle
		if c.elem == nil {
			c.elem = l.idle.PushBack(c)
		} else {
			l.idle.MoveToBack(c.elem)
		}
		l.signalLocked()
	case http.StateActive, http.StateHijacked:
		c.state = stateActive
		if c.elem != nil {
			l.idle.Remove(c.elem)
			c.elem = nil
		}
	}
}

// unwrap finds the listener's connection under a TLS one.
func unwrap(nc net.Conn) *conn {
	for {
		switch v := nc.(type) {
		case *conn:
			return v
		case interface{ NetConn() net.Conn }:
			nc = v.NetConn()
		default:
			return nil
		}
	}
}

func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// clientOf is what the per-address bound counts: an IPv4 address, or an
// IPv6 address's first bits (Limits.IPv6Bits).
func clientOf(a netip.Addr, bits int) netip.Addr {
	if a.Is6() && bits > 0 && bits < 128 {
		p, _ := a.Prefix(bits)
		return p.Addr()
	}
	return a
}

// conn is an accepted connection; its fields but Conn are guarded by the
// listener's mu.
type conn struct {
	net.Conn
	l        *Listener
	addr     netip.Addr // clientOf its peer's address
	exempt   bool
	state    state
	since    time.Time
	elem     *list.Element
	released bool

	// The reader's own (ReadOnReady): only gRPC's one reading goroutine
	// touches them.
	raw     syscall.RawConn
	rawErr  error
	rd      readState
	doRead  func(fd uintptr) bool
	rawOnce bool
}

// readState is one ReadOnReady's request and result, kept in the conn so
// that its callback allocates nothing per read.
type readState struct {
	size int
	pool mem.BufferPool
	buf  *[]byte
	n    int
	err  error
}

// ReadOnReady waits until the connection is readable, then takes a buffer
// of size bytes from pool and reads into it. It is grpc-go's
// readyreader.Reader, which its transport looks for by this method: for a
// connection that has it, gRPC holds a read buffer only while bytes wait
// in it. gRPC recognises *net.TCPConn itself, not a wrapper like conn, and
// gave each of the listener's connections a 32 KiB bufio.Reader for its
// whole life instead (30 MB live at 1,000 agent connections, twice that
// in RSS between collections: most of what a connected node cost more
// once gRPC's listener was limited).
func (c *conn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	if !c.rawOnce {
		c.rawOnce = true
		// Only a plain TCP connection is read at its descriptor: a
		// connection of another kind (a test's pipe) may not have one
		// that carries its bytes.
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			c.raw, c.rawErr = tc.SyscallConn()
		} else {
			c.rawErr = errors.ErrUnsupported
		}
		c.doRead = func(fd uintptr) bool {
			r := &c.rd
			r.buf = r.pool.Get(r.size)
			r.n, r.err = syscall.Read(int(fd), *r.buf)
			if r.err != nil {
				r.pool.Put(r.buf)
				r.buf = nil
			}
			return r.err != syscall.EAGAIN && r.err != syscall.EWOULDBLOCK
		}
	}
	if c.rawErr != nil {
		buf := pool.Get(size)
		n, err := c.Conn.Read(*buf)
		if n == 0 {
			pool.Put(buf)
			if err == nil {
				err = io.ErrNoProgress
			}
			return nil, 0, err
		}
		// Bytes first: the error comes again with the next read.
		return buf, n, nil
	}
	c.rd = readState{size: size, pool: pool}
	err := c.raw.Read(c.doRead)
	r := c.rd
	c.rd = readState{}
	switch {
	case err != nil:
		if r.buf != nil {
			pool.Put(r.buf)
		}
		return nil, 0, err
	case r.err != nil:
		return nil, 0, r.err
	case r.n == 0:
		// read(2) returns 0 at the peer's end of stream.
		pool.Put(r.buf)
		return nil, 0, io.EOF
	}
	return r.buf, r.n, nil
}

// Close closes the connection and frees its place.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}
