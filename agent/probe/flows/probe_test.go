package flows

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/drops"
	"github.com/nbs-project/nbs/agent/probe/tcpreset"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

func load(t *testing.T, opts Options) *Probe {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "flows: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := p.Attach(); err != nil {
		netlab.SkipOrFail(t, "flows: %v", err)
	}
	return p
}

// totals sums what Collect returned for the namespaces of one lab, edge by
// edge, across collections.
type totals struct {
	p     *Probe
	netns map[uint32]bool
	edges map[Key]*Counts
}

func newTotals(p *Probe, inodes ...uint32) *totals {
	tt := &totals{p: p, netns: map[uint32]bool{}, edges: map[Key]*Counts{}}
	for _, i := range inodes {
		tt.netns[i] = true
	}
	return tt
}

func (tt *totals) collect(t *testing.T) Interval {
	t.Helper()
	iv, err := tt.p.Collect()
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if iv.EdgesLost+iv.DetailsLost > 0 {
		t.Fatalf("tables full in a test: %d edges, %d details lost", iv.EdgesLost, iv.DetailsLost)
	}
	for _, e := range iv.Edges {
		if !tt.netns[e.Netns] {
			continue // another test's connections
		}
		c := tt.edges[e.Key]
		if c == nil {
			c = &Counts{}
			tt.edges[e.Key] = c
		}
		add(c, e.Counts)
		for _, d := range []struct {
			dst *map[uint32]uint64
			src map[uint32]uint64
		}{{&c.RTTBuckets, e.RTTBuckets}, {&c.ResetsSent, e.ResetsSent}, {&c.ResetsReceived, e.ResetsReceived}, {&c.Drops, e.Drops}} {
			for k, v := range d.src {
				if *d.dst == nil {
					*d.dst = map[uint32]uint64{}
				}
				(*d.dst)[k] += v
			}
		}
	}
	return iv
}

// until collects until cond holds of the totals, or fails after 10 s.
func (tt *totals) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tt.collect(t)
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 10s; edges: %s", what, tt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tt *totals) get(k Key) Counts {
	if c := tt.edges[k]; c != nil {
		return *c
	}
	return Counts{}
}

func (tt *totals) String() string {
	s := ""
	for k, c := range tt.edges {
		s += fmt.Sprintf("\n  %+v: %+v", k, *c)
	}
	return s
}

// serve accepts in ns at addr; each connection reads req bytes, writes
// resp bytes, then reads to EOF and closes. It returns the listening
// address and a wait for n handled connections.
func serve(t *testing.T, lab *netlab.Lab, ns string, addr netip.AddrPort, req, resp int64) (netip.AddrPort, func(n int)) {
	t.Helper()
	var ln net.Listener
	if err := lab.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan error, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.CopyN(io.Discard, c, req); err != nil {
					done <- fmt.Errorf("read request: %w", err)
					return
				}
				if _, err := io.CopyN(c, zeros{}, resp); err != nil {
					done <- fmt.Errorf("write response: %w", err)
					return
				}
				_, err := io.Copy(io.Discard, c)
				done <- err
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()), func(n int) {
		t.Helper()
		for range n {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("server: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("server: connection not handled in 10s")
			}
		}
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// exchange connects from ns to dst, writes req bytes, reads resp, closes.
func exchange(lab *netlab.Lab, ns string, dst netip.AddrPort, req, resp int64) error {
	var c net.Conn
	if err := lab.Do(ns, func() (err error) {
		c, err = net.DialTimeout("tcp", dst.String(), 5*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	if _, err := io.CopyN(c, zeros{}, req); err != nil {
		return err
	}
	_, err := io.CopyN(io.Discard, c, resp)
	return err
}

func names(t *testing.T) tcpreset.Names {
	n, err := tcpreset.LoadNames(nil)
	if err != nil {
		netlab.SkipOrFail(t, "names: %v", err)
	}
	return n
}

func code(t *testing.T, f func(string) (uint32, bool), name string) uint32 {
	t.Helper()
	c, ok := f(name)
	if !ok {
		t.Fatalf("no code for %q", name)
	}
	return c
}

// Connections opened, failed and closed, bytes each way and resets by
// reason, at both ends, against what the test's own client and server did.
func TestEdgesCountWhatTheClientAndServerDid(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	nm := names(t)
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	tt := newTotals(p, a, b)
	tt.collect(t)

	const conns, refused, req, resp = 7, 4, 3000, 50000
	srv, wait := serve(t, lab, lab.B, netip.AddrPortFrom(lab.IPB, 0), req, resp)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() { errs <- exchange(lab, lab.A, srv, req, resp) })
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		ok++
	}
	wait(conns)
	lab.ResetNoSocket(t, refused)

	client := Key{Netns: a, Role: Client, Local: lab.IPA, Peer: lab.IPB, PeerPort: srv.Port()}
	server := Key{Netns: b, Role: Server, Local: lab.IPB, LocalPort: srv.Port(), Peer: lab.IPA}
	failedKey := Key{Netns: a, Role: Client, Local: lab.IPA, Peer: lab.IPB, PeerPort: lab.ClosedPort}
	refusedKey := Key{Netns: b, Role: Server, Local: lab.IPB, LocalPort: lab.ClosedPort, Peer: lab.IPA}
	tt.until(t, "every connection closed at both ends", func() bool {
		return tt.get(client).Closed == conns && tt.get(server).Closed == conns && tt.get(failedKey).Failed == refused
	})
	tt.collect(t) // nothing more may come

	c, s := tt.get(client), tt.get(server)
	want := Counts{Opened: uint64(ok), Closed: uint64(ok), BytesSent: conns * req, BytesReceived: conns * resp, RTTCount: conns}
	if c.Opened != want.Opened || c.Closed != want.Closed || c.Failed != 0 || c.BytesSent != want.BytesSent ||
		c.BytesReceived != want.BytesReceived || c.RTTCount != want.RTTCount {
		t.Errorf("client edge: %+v, want %+v", c, want)
	}
	if s.Opened != conns || s.Closed != conns || s.BytesSent != conns*resp || s.BytesReceived != conns*req || s.RTTCount != conns {
		t.Errorf("server edge: %+v; want %d opened and closed, %d bytes sent, %d received, %d RTT samples", s, conns, conns*resp, conns*req, conns)
	}
	var inBuckets uint64
	for _, n := range c.RTTBuckets {
		inBuckets += n
	}
	if inBuckets != c.RTTCount || c.RTTSum <= 0 {
		t.Errorf("client RTT: %d samples in buckets, %d counted, sum %v", inBuckets, c.RTTCount, c.RTTSum)
	}
	f := tt.get(failedKey)
	if f.Failed != refused || f.Opened != 0 || f.ResetsReceived[code(t, nm.StateCode, "syn_sent")] != refused {
		t.Errorf("refused connects' edge: %+v, want %d failed with %d resets received in syn_sent", f, refused, refused)
	}
	r := tt.get(refusedKey)
	if r.ResetsSent[code(t, nm.ReasonCode, "no_socket")] != refused || r.Opened != 0 {
		t.Errorf("closed port's server edge: %+v, want %d no_socket resets sent", r, refused)
	}
	if len(tt.edges) != 4 {
		t.Errorf("%d edges, want 4: %s", len(tt.edges), tt)
	}
}

var (
	ssRTT   = regexp.MustCompile(`\brtt:([\d.]+)/`)
	ssAcked = regexp.MustCompile(`\bbytes_acked:(\d+)`)
)

// A live connection's bytes count in the interval they are sent, and its
// RTT sample is the socket's smoothed RTT, as ss -ti shows it.
func TestLiveConnectionCountsInItsInterval(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	if p.LiveReason() != "" {
		t.Fatalf("live connections not read: %s", p.LiveReason())
	}
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	tt := newTotals(p, a, b)

	var ln net.Listener
	if err := lab.Do(lab.B, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(lab.IPB, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan int64, 8)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		var n int64
		for {
			m, err := c.Read(buf)
			n += int64(m)
			read <- n
			if err != nil {
				return
			}
		}
	}()
	var c net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := netip.MustParseAddrPort(ln.Addr().String())
	client := Key{Netns: a, Role: Client, Local: lab.IPA, Peer: lab.IPB, PeerPort: srv.Port()}
	local := netip.MustParseAddrPort(c.LocalAddr().String())

	var total int64
	for i, n := range []int64{100000, 250000} {
		tt.edges = map[Key]*Counts{}
		if _, err := io.CopyN(c, zeros{}, n); err != nil {
			t.Fatal(err)
		}
		total += n
		for got := int64(0); got < total; {
			got = <-read
		}
		tt.until(t, fmt.Sprintf("interval %d's bytes", i), func() bool { return tt.get(client).BytesSent >= uint64(n) })
		got := tt.get(client)
		if got.BytesSent != uint64(n) || got.Opened != boolU(i == 0) || got.Closed != 0 {
			t.Errorf("interval %d: %+v, want %d bytes sent, opened %d, not closed", i, got, n, boolU(i == 0))
		}
	}
	// One more write: once ss shows it acknowledged, the smoothed RTT
	// stays as ss shows it until the interval's end samples it.
	tt.collect(t)
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	total++
	var out string
	deadline := time.Now().Add(5 * time.Second)
	for {
		out = lab.Exec(t, lab.A, "ss", "-tinH", "state", "established", fmt.Sprintf("sport = :%d", local.Port()))
		if m := ssAcked.FindStringSubmatch(out); m != nil && m[1] == strconv.FormatInt(total+1, 10) { // the SYN counts one
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write not acknowledged in 5s: %q", out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := ssRTT.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rtt in ss output %q", out)
	}
	ms, _ := strconv.ParseFloat(m[1], 64)
	tt.edges = map[Key]*Counts{}
	tt.collect(t)
	got := tt.get(client)
	if got.RTTCount != 1 || got.BytesSent != 1 {
		t.Fatalf("one live connection that sent a byte gave %d RTT samples: %+v", got.RTTCount, got)
	}
	ns := uint64(ms * 1e6)
	wantBucket := loglinear.Index(ns)
	if got.RTTBuckets[wantBucket] != 1 {
		// ss prints the RTT in ms with 3 decimals: allow the neighbour.
		if got.RTTBuckets[wantBucket-1]+got.RTTBuckets[wantBucket+1] != 1 {
			t.Errorf("RTT sample %v (buckets %v), ss says %.3f ms (bucket %d)", got.RTTSum, got.RTTBuckets, ms, wantBucket)
		}
	}
	// Idle: no bytes, no sample.
	tt.edges = map[Key]*Counts{}
	tt.collect(t)
	if got := tt.get(client); got.RTTCount != 0 || got.BytesSent != 0 {
		t.Errorf("an idle connection's interval: %+v, want nothing", got)
	}
}

func boolU(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// Retransmits per edge equal the kernel's TcpRetransSegs for the namespace.
func TestRetransmitsEqualTcpRetransSegs(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	tt := newTotals(p, a, b)
	before := lab.Nstat(t, lab.A)["TcpRetransSegs"]
	res := lab.LossyBulk(t, 30, 2*time.Second)
	after := lab.Nstat(t, lab.A)["TcpRetransSegs"]
	if res.Dropped == 0 || after == before {
		t.Fatalf("no loss made (dropped %d, retrans %d)", res.Dropped, after-before)
	}
	key := Key{Netns: a, Role: Client, Local: lab.IPA, Peer: lab.IPB, PeerPort: netlab.BulkPort}
	tt.until(t, "bulk closed", func() bool { return tt.get(key).Closed == 1 })
	if got := tt.get(key); got.Retransmits != after-before || got.BytesSent != uint64(res.Bytes) {
		t.Errorf("edge %+v: %d retransmits, %d bytes sent; TcpRetransSegs +%d, %d bytes sent", key, got.Retransmits, got.BytesSent, after-before, res.Bytes)
	}
}

// A full edge table loses no count: what finds no room goes to overflow.
func TestFullTableOverflowsWithoutLoss(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{MaxEdges: 1})
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	const conns = 3
	srv, wait := serve(t, lab, lab.B, netip.AddrPortFrom(lab.IPB, 0), 10, 10)
	var opened, lost uint64
	var edges []Edge
	for range conns {
		if err := exchange(lab, lab.A, srv, 10, 10); err != nil {
			t.Fatal(err)
		}
	}
	wait(conns)
	deadline := time.Now().Add(10 * time.Second)
	for opened < 2*conns && time.Now().Before(deadline) {
		iv, err := p.Collect()
		if err != nil {
			t.Fatal(err)
		}
		// Other tests' connections share the table: count ours, and the
		// overflow, which must then hold at least what ours lack.
		for _, e := range iv.Edges {
			if e.Netns == a || e.Netns == b {
				opened += e.Opened
				edges = append(edges, e)
			}
		}
		opened += iv.Overflow.Opened
		lost += iv.EdgesLost
		time.Sleep(20 * time.Millisecond)
	}
	if opened < 2*conns || lost == 0 || len(edges) > 1 {
		t.Errorf("with one edge of room: %d opened counted (want ≥ %d), %d lost to overflow (want > 0), edges %+v", opened, 2*conns, lost, edges)
	}
}

// With the edge table full, a reset's edge finds no room: the reset goes
// to the overflow record by its reason (sent) and state (received), with
// the edge counted lost, none dropped.
func TestFullTableKeepsResetsInOverflow(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{MaxEdges: 1})
	nm := names(t)
	noSocket, synSent := code(t, nm.ReasonCode, "no_socket"), code(t, nm.StateCode, "syn_sent")
	if _, err := p.Collect(); err != nil {
		t.Fatal(err)
	}
	// A connection's edge takes the one entry (if nothing else did) until
	// the next Collect: every reset after it overflows.
	srv, wait := serve(t, lab, lab.B, netip.AddrPortFrom(lab.IPB, 0), 10, 10)
	if err := exchange(lab, lab.A, srv, 10, 10); err != nil {
		t.Fatal(err)
	}
	wait(1)
	const refused = 5
	lab.ResetNoSocket(t, refused)
	iv, err := p.Collect()
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' resets may overflow too: at least ours.
	o := iv.Overflow
	if o.ResetsSent[noSocket] < refused || o.ResetsReceived[synSent] < refused || o.Failed < refused || iv.EdgesLost < 3*refused {
		t.Errorf("overflow: %d no_socket resets sent, %d received in syn_sent, %d failed, %d edges lost; want ≥ %d, %d, %d, %d (edges %+v)",
			o.ResetsSent[noSocket], o.ResetsReceived[synSent], o.Failed, iv.EdgesLost, refused, refused, refused, 3*refused, iv.Edges)
	}
}

// Packets of a connection dropped by a netfilter rule count on the
// receiving server's edge, by reason, as many as the rule's counter.
func TestDropsOnTheEdgeEqualTheRulesCounter(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	dn, err := drops.LoadNames(nil)
	if err != nil {
		netlab.SkipOrFail(t, "drop names: %v", err)
	}
	nfDrop, ok := dn.ReasonCode("netfilter_drop")
	if !ok {
		t.Fatal("no netfilter_drop reason")
	}
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	tt := newTotals(p, a, b)
	const n = 2 << 20
	srv, wait := serve(t, lab, lab.B, netip.AddrPortFrom(lab.IPB, 0), n, 1)
	// Established first: the rule drops every 8th data segment, each of which
	// IP's early demux has tied to the server's socket.
	var c net.Conn
	if err := lab.Do(lab.A, func() (err error) {
		c, err = net.DialTimeout("tcp", srv.String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const table = "nbs_flowdrop"
	lab.Nft(t, lab.B, fmt.Sprintf(`table inet %s {
	chain in {
		type filter hook input priority 0; policy accept;
		ip saddr %s tcp dport %d meta length > 200 numgen inc mod 8 == 0 counter drop
	}
}`, table, lab.IPA, srv.Port()))
	if _, err := io.CopyN(c, zeros{}, n); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, c, 1); err != nil {
		t.Fatal(err)
	}
	dropped := lab.NftPackets(t, lab.B, table)
	lab.NftDelete(t, lab.B, table)
	c.Close()
	wait(1)
	server := Key{Netns: b, Role: Server, Local: lab.IPB, LocalPort: srv.Port(), Peer: lab.IPA}
	tt.until(t, "closed", func() bool { return tt.get(server).Closed == 1 })
	if dropped == 0 {
		t.Fatal("the rule dropped nothing")
	}
	if got := tt.get(server); got.Drops[nfDrop] != dropped {
		t.Errorf("server edge drops %v, want %d netfilter_drop (the rule's counter)", got.Drops, dropped)
	}
}

func TestSockStateBytesIsTheStructsSize(t *testing.T) {
	if n := binary.Size(flowsNbsFsock{}); n != SockStateBytes {
		t.Errorf("struct nbs_fsock is %d bytes, SockStateBytes says %d", n, SockStateBytes)
	}
}

// A socket disconnected (connect with AF_UNSPEC) and connected again is a
// second connection, counted as one.
func TestReconnectedSocketCountsTwice(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	tt := newTotals(p, a, b)
	// The disconnect aborts (a reset, not a FIN): the server's last read
	// fails, as it should.
	var ln net.Listener
	if err := lab.Do(lab.B, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(lab.IPB, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.CopyN(io.Discard, c, 10); err == nil {
					_, _ = c.Write(make([]byte, 10))
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	srv := netip.MustParseAddrPort(ln.Addr().String())
	sa := &unix.SockaddrInet4{Port: int(srv.Port()), Addr: srv.Addr().As4()}
	err := lab.Do(lab.A, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		buf := make([]byte, 10)
		for i := range 2 {
			if err := unix.Connect(fd, sa); err != nil {
				return fmt.Errorf("connect %d: %w", i, err)
			}
			if _, err := unix.Write(fd, buf); err != nil {
				return err
			}
			for got := 0; got < len(buf); {
				n, err := unix.Read(fd, buf[got:])
				if err != nil || n == 0 {
					return fmt.Errorf("read %d: %d, %v", i, n, err)
				}
				got += n
			}
			// Disconnect: the socket aborts the connection and may
			// connect again.
			unspec := unix.RawSockaddr{Family: unix.AF_UNSPEC}
			if _, _, errno := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&unspec)), unsafe.Sizeof(unspec)); errno != 0 {
				return fmt.Errorf("disconnect %d: %w", i, errno)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	client := Key{Netns: a, Role: Client, Local: lab.IPA, Peer: lab.IPB, PeerPort: srv.Port()}
	tt.until(t, "both connections closed", func() bool { return tt.get(client).Closed >= 2 })
	if got := tt.get(client); got.Opened != 2 || got.Closed != 2 || got.BytesSent != 20 || got.BytesReceived != 20 {
		t.Errorf("client edge %+v, want 2 opened and closed, 20 bytes each way", got)
	}
}

// IPv6 connections make IPv6 edges at both ends.
func TestIPv6Edges(t *testing.T) {
	lab := netlab.New(t)
	p := load(t, Options{})
	a, b := lab.Inode(t, lab.A), lab.Inode(t, lab.B)
	tt := newTotals(p, a, b)
	srv, wait := serve(t, lab, lab.B, netip.AddrPortFrom(lab.IP6B, 0), 100, 200)
	for range 2 {
		if err := exchange(lab, lab.A, srv, 100, 200); err != nil {
			t.Fatal(err)
		}
	}
	wait(2)
	client := Key{Netns: a, Role: Client, Local: lab.IP6A, Peer: lab.IP6B, PeerPort: srv.Port()}
	server := Key{Netns: b, Role: Server, Local: lab.IP6B, LocalPort: srv.Port(), Peer: lab.IP6A}
	tt.until(t, "closed at both ends", func() bool { return tt.get(client).Closed == 2 && tt.get(server).Closed == 2 })
	if c, s := tt.get(client), tt.get(server); c.Opened != 2 || c.BytesSent != 200 || c.BytesReceived != 400 || s.BytesSent != 400 {
		t.Errorf("client %+v, server %+v", c, s)
	}
}
