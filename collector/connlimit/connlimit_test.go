package connlimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Clients dial from addresses of their own on the loopback network
// (127.0.0.2, 127.0.0.3, …), which Linux answers without configuration.

type server struct {
	addr string
	lis  *Listener
	m    *Metrics
	// release lets the requests for /hold answer.
	release chan struct{}
}

// serve runs an HTTP server under lim whose handler answers "ok", for
// /hold once release is closed.
func serve(t *testing.T, lim Limits) server {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics("test")
	lim.States = true
	l := New(inner, lim, m)
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}),
		ConnState: l.ConnState, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
		<-done
	})
	return server{addr: inner.Addr().String(), lis: l, m: m, release: release}
}

// dial connects from 127.0.0.<from>.
func dial(t *testing.T, s server, from byte) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one keep-alive request on c and reads its answer: the
// connection is idle afterwards.
func get(c net.Conn) error {
	if err := send(c, "/"); err != nil {
		return err
	}
	return answer(c)
}

// hold sends a request for /hold, which keeps c busy until release.
func hold(c net.Conn) error { return send(c, "/hold") }

func send(c net.Conn, path string) error {
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	return err
}

// answer reads the answer to a request sent on c.
func answer(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "ok" {
		return fmt.Errorf("answer %q, %v", b, err)
	}
	return nil
}

// closedByServer reports whether the server closed c (within a moment).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitIdle waits until n connections are idle.
func waitIdle(t *testing.T, l *Listener, n int) { t.Helper(); waitState(t, l, stateIdle, n) }

// waitActive waits until n connections are serving a request.
func waitActive(t *testing.T, l *Listener, n int) { t.Helper(); waitState(t, l, stateActive, n) }

func waitState(t *testing.T, l *Listener, st state, n int) {
	t.Helper()
	k := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		k = 0
		for c := range l.conns {
			if c.state == st {
				k++
			}
		}
		l.mu.Unlock()
		if k == n {
			return
		}
	}
	t.Fatalf("%d connections in state %d, want %d", k, st, n)
}

func TestPerAddress(t *testing.T) {
	s := serve(t, Limits{Max: 100, PerAddress: 3})
	var held []net.Conn
	for i := range 3 {
		c := dial(t, s, 2)
		if err := get(c); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, s.lis, i+1) // in order, as in TestFullClosesIdleFirst
		held = append(held, c)
	}
	// The address's own least recently used idle connection makes room.
	if err := get(held[1]); err != nil { // held[0] is now the least recently used
		t.Fatal(err)
	}
	waitIdle(t, s.lis, 3)
	fourth := dial(t, s, 2)
	if err := get(fourth); err != nil {
		t.Fatalf("a fourth connection from an address at its bound with idle ones: %v", err)
	}
	if !closedByServer(held[0]) {
		t.Error("the least recently used idle connection was not closed")
	}
	for _, c := range held[1:] {
		if err := get(c); err != nil {
			t.Errorf("a more recently used connection was closed: %v", err)
		}
	}
	if got := value(s.m.closed.WithLabelValues("address_idle")); got != 1 {
		t.Errorf("closed{address_idle} = %v, want 1", got)
	}

	// None idle: each busy with a request, a new connection from the
	// address is refused, another address's is not.
	for _, c := range append(held[1:], fourth) {
		if err := hold(c); err != nil {
			t.Fatal(err)
		}
	}
	waitActive(t, s.lis, 3)
	if refused := dial(t, s, 2); !closedByServer(refused) {
		t.Error("a connection past the address's bound, none idle, was not refused")
	}
	if got := value(s.m.refused); got != 1 {
		t.Errorf("refused = %v, want 1", got)
	}
	if err := get(dial(t, s, 3)); err != nil {
		t.Errorf("another address: %v", err)
	}
}

func TestFullClosesIdleFirst(t *testing.T) {
	s := serve(t, Limits{Max: 4, PerAddress: 4})
	var idle []net.Conn
	for i := range 4 {
		c := dial(t, s, 2)
		if err := get(c); err != nil {
			t.Fatal(err)
		}
		// The client has its answer before the server marks the
		// connection idle: wait for it, so idle[0] is the least recently
		// used (two in flight at once could go idle in either order).
		waitIdle(t, s.lis, i+1)
		idle = append(idle, c)
	}
	newcomer := dial(t, s, 3)
	if err := get(newcomer); err != nil {
		t.Fatalf("a newcomer to a server full of idle connections: %v", err)
	}
	if !closedByServer(idle[0]) {
		t.Error("the least recently used idle connection was not closed")
	}
	if got := value(s.m.closed.WithLabelValues("idle")); got != 1 {
		t.Errorf("closed{idle} = %v, want 1", got)
	}
}

func TestFullClosesStalled(t *testing.T) {
	s := serve(t, Limits{Max: 4, PerAddress: 4})
	// Connections that never send a byte: a TLS handshake never finished
	// looks the same to the listener.
	var stalled []net.Conn
	for range 4 {
		stalled = append(stalled, dial(t, s, 2))
	}
	start := time.Now()
	if err := get(dial(t, s, 3)); err != nil {
		t.Fatalf("a newcomer to a server full of stalled connections: %v", err)
	}
	if took := time.Since(start); took > NewGrace+3*time.Second {
		t.Errorf("the newcomer waited %s", took)
	}
	if got := value(s.m.closed.WithLabelValues("stalled")); got < 1 {
		t.Errorf("closed{stalled} = %v, want at least 1", got)
	}
	closed := 0
	for _, c := range stalled {
		if closedByServer(c) {
			closed++
		}
	}
	if closed < 1 {
		t.Error("no stalled connection was closed")
	}
}

func TestFullOfActiveWaits(t *testing.T) {
	s := serve(t, Limits{Max: 2, PerAddress: 2})
	var busy []net.Conn
	for range 2 {
		c := dial(t, s, 2)
		if err := hold(c); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
	}
	waitActive(t, s.lis, 2)
	waiting := dial(t, s, 3)
	answered := make(chan error, 1)
	go func() { answered <- get(waiting) }()
	select {
	case err := <-answered:
		t.Fatalf("a connection was served past the bound while every one was busy: %v", err)
	case <-time.After(NewGrace + 500*time.Millisecond):
	}
	// The requests finish and their connections go idle: one makes room.
	close(s.release)
	for _, c := range busy {
		if err := answer(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-answered; err != nil {
		t.Fatalf("the waiting connection, once one went idle: %v", err)
	}
}

func TestExempt(t *testing.T) {
	proxy := netip.MustParseAddr("127.0.0.2")
	s := serve(t, Limits{Max: 100, PerAddress: 1, Exempt: func(a netip.Addr) bool { return a == proxy }})
	for i := range 5 {
		if err := hold(dial(t, s, 2)); err != nil {
			t.Fatal(err)
		}
		waitActive(t, s.lis, i+1)
	}
	if err := get(dial(t, s, 2)); err != nil {
		t.Errorf("an exempt address past the per-address bound: %v", err)
	}
	if got := value(s.m.refused); got != 0 {
		t.Errorf("refused = %v, want 0", got)
	}
}

func TestMetricNames(t *testing.T) {
	m := NewMetrics("http")
	m.closed.WithLabelValues("idle").Inc()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, want := range []string{"nbs_collector_http_connections", "nbs_collector_http_connections_refused_total", "nbs_collector_http_connections_closed_total"} {
		if !got[want] {
			t.Errorf("no metric %s among %v", want, got)
		}
	}
}

// value is a counter's value.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// A listener whose server reports no states (gRPC) closes nothing for a
// newcomer when full: its connections are busy as far as it knows, and
// the newcomer waits for one to close.
func TestWithoutStatesFullWaits(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, Limits{Max: 2, PerAddress: 2}, NewMetrics("test"))
	defer l.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	s := server{addr: inner.Addr().String()}
	first, second := dial(t, s, 2), dial(t, s, 3)
	_, _ = first, second
	held := []net.Conn{<-accepted, <-accepted}
	time.Sleep(NewGrace + 200*time.Millisecond) // long enough to look stalled
	third := dial(t, s, 4)
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted past the bound")
	case <-time.After(NewGrace + 500*time.Millisecond):
	}
	for _, c := range []net.Conn{first, second} {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
			t.Errorf("a held connection was closed for the newcomer: %v", err)
		}
	}
	held[0].Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted once one closed")
	}
	_ = third
	held[1].Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestClientOf(t *testing.T) {
	for _, c := range []struct {
		addr string
		bits int
		want string
	}{
		{"127.0.0.2", 64, "127.0.0.2"},
		{"::ffff:10.0.0.1", 64, "10.0.0.1"}, // addrOf unmaps first; an IPv4 stays whole
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::"},
		{"2001:db8:1:2::1", 64, "2001:db8:1:2::"},
		{"2001:db8:1:3::1", 64, "2001:db8:1:3::"},
		{"2001:db8:1:2::1", 128, "2001:db8:1:2::1"},
		{"2001:db8:1:2::1", 0, "2001:db8:1:2::1"},
	} {
		a := netip.MustParseAddr(c.addr).Unmap()
		if got := clientOf(a, c.bits); got.String() != c.want {
			t.Errorf("clientOf(%s, %d) = %s, want %s", c.addr, c.bits, got, c.want)
		}
	}
}
