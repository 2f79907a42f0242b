package flows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/owner"
	probe "github.com/nbs-project/nbs/agent/probe/flows"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func openSource(t *testing.T, opts Options) *Source {
	t.Helper()
	opts.Env = source.Env{AllNetns: true, Owners: owner.New(owner.Options{})}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.probe == nil {
		netlab.SkipOrFail(t, "flows: %s", s.why)
	}
	return s
}

func ownerID(ns string) string { return owner.Owner{Kind: owner.Netns, NetnsName: ns}.ID() }

// edgeSum adds up the edges of the lab's owners over collections.
type edgeSum struct {
	owners map[string]bool
	edges  map[string]*nbsv1.FlowEdge
	other  []*nbsv1.FlowEdge
}

func edgeName(e *nbsv1.FlowEdge) string {
	if e.GetRole() == nbsv1.FlowRole_FLOW_ROLE_SERVER {
		return fmt.Sprintf("%s server %s:%d <- %s", e.GetLocal().GetId(), e.GetLocalAddress(), e.GetLocalPort(), e.GetPeerAddress())
	}
	k := fmt.Sprintf("%s client %s -> %s:%d", e.GetLocal().GetId(), e.GetLocalAddress(), e.GetPeerAddress(), e.GetPeerPort())
	if e.GetPeerTranslatedAddress() != "" {
		k += fmt.Sprintf(" (%s:%d)", e.GetPeerTranslatedAddress(), e.GetPeerTranslatedPort())
	}
	return k
}

func (es *edgeSum) add(t *testing.T, r source.Reading) {
	t.Helper()
	for _, e := range r.Flows {
		if e.GetOther() {
			es.other = append(es.other, e)
			continue
		}
		if !es.owners[e.GetLocal().GetId()] {
			continue
		}
		k := edgeName(e)
		s := es.edges[k]
		if s == nil {
			s = &nbsv1.FlowEdge{Local: e.GetLocal(), Role: e.GetRole(), LocalAddress: e.GetLocalAddress(), LocalPort: e.GetLocalPort(),
				PeerAddress: e.GetPeerAddress(), PeerPort: e.GetPeerPort(), PeerTranslatedAddress: e.GetPeerTranslatedAddress(),
				PeerTranslatedPort: e.GetPeerTranslatedPort(), ResetsSent: map[string]uint64{}, ResetsReceived: map[string]uint64{}}
			es.edges[k] = s
		}
		s.Opened += e.GetOpened()
		s.Failed += e.GetFailed()
		s.Closed += e.GetClosed()
		s.Retransmits += e.GetRetransmits()
		s.BytesSent += e.GetBytesSent()
		s.BytesReceived += e.GetBytesReceived()
		for k, v := range e.GetResetsSent() {
			s.ResetsSent[k] += v
		}
		for k, v := range e.GetResetsReceived() {
			s.ResetsReceived[k] += v
		}
		if e.GetRtt() != nil {
			if s.Rtt == nil {
				s.Rtt = &nbsv1.Histogram{}
			}
			s.Rtt.Count += e.GetRtt().GetCount()
		}
	}
}

func (es *edgeSum) get(k string) *nbsv1.FlowEdge {
	if e := es.edges[k]; e != nil {
		return e
	}
	return &nbsv1.FlowEdge{}
}

// listen accepts in l's namespace on port; each connection is handled by fn.
func listen(t *testing.T, l leaf, port uint16, fn func(net.Conn)) {
	t.Helper()
	var ln net.Listener
	if err := l.h.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(l.addr, port).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fn(c)
		}
	}()
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

func dial(l leaf, dst netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := l.h.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", dst.String(), 5*time.Second)
		return err
	})
	return c, err
}

// Several owners on each side: each edge's connections, bytes and resets
// by reason equal what the lab's clients and servers did and the kernel's
// own counters (nstat) of each namespace; every owner's address is held by
// it.
func TestEdgesOfSeveralOwnersEqualTheLabsCounts(t *testing.T) {
	lab := newStar(t)
	c1, c2 := lab.add(t, "c1", 11), lab.add(t, "c2", 12)
	s1, s2 := lab.add(t, "s1", 21), lab.add(t, "s2", 22)
	src := openSource(t, Options{Top: 1000})
	es := &edgeSum{owners: map[string]bool{}, edges: map[string]*nbsv1.FlowEdge{}}
	for _, l := range []leaf{c1, c2, s1, s2} {
		es.owners[ownerID(l.ns)] = true
	}
	collect := func() source.Reading {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		es.add(t, r)
		return r
	}
	collect()

	const echoPort, abortPort, closedPort = 8080, 8081, 9
	const req, resp = 1000, 20000
	handled := make(chan error, 100)
	echo := func(c net.Conn) {
		defer c.Close()
		_, err := io.CopyN(io.Discard, c, req)
		if err == nil {
			_, err = io.CopyN(c, zeros{}, resp)
		}
		if err == nil {
			_, err = io.Copy(io.Discard, c)
		}
		handled <- err
	}
	listen(t, s1, echoPort, echo)
	listen(t, s2, echoPort, echo)
	// Closes with the request unread: the kernel aborts with a reset
	// (TCP_ABORT_ON_CLOSE) instead of a FIN.
	listen(t, s2, abortPort, func(c net.Conn) {
		buf := make([]byte, 1)
		_, err := c.Read(buf)
		time.Sleep(50 * time.Millisecond) // the rest of the request arrives
		c.Close()
		handled <- err
	})

	type plan struct {
		from  leaf
		to    leaf
		port  uint16
		conns int
	}
	plans := []plan{{c1, s1, echoPort, 3}, {c1, s2, echoPort, 2}, {c2, s1, echoPort, 4}}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for _, p := range plans {
		for range p.conns {
			wg.Go(func() {
				c, err := dial(p.from, netip.AddrPortFrom(p.to.addr, p.port))
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				if _, err := io.CopyN(c, zeros{}, req); err != nil {
					errs <- err
					return
				}
				_, err = io.CopyN(io.Discard, c, resp)
				errs <- err
			})
		}
	}
	// Aborted by the server: the client's own count of resets it saw.
	const aborts = 3
	var resetSeen int
	var mu sync.Mutex
	for range aborts {
		wg.Go(func() {
			c, err := dial(c2, netip.AddrPortFrom(s2.addr, abortPort))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := c.Write(make([]byte, 4000)); err != nil {
				errs <- err
				return
			}
			_, err = io.Copy(io.Discard, c)
			if errors.Is(err, unix.ECONNRESET) {
				mu.Lock()
				resetSeen++
				mu.Unlock()
				err = nil
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("client: %v", err)
		}
	}
	for range 3 + 2 + 4 + aborts {
		select {
		case err := <-handled:
			if err != nil {
				t.Fatalf("server: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("servers did not handle every connection")
		}
	}
	// Refused: nothing listens on closedPort in s1.
	const refused = 2
	netlab.ConnectRefusedIn(t, c2.h, netip.AddrPortFrom(s1.addr, closedPort), refused)

	key := func(l leaf, role string, peer leaf, port uint16) string {
		if role == "server" {
			return fmt.Sprintf("%s server %s:%d <- %s", ownerID(l.ns), l.addr, port, peer.addr)
		}
		return fmt.Sprintf("%s client %s -> %s:%d", ownerID(l.ns), l.addr, peer.addr, port)
	}
	waitFor(t, "every connection closed at both ends", func() bool {
		collect()
		for _, p := range plans {
			if es.get(key(p.from, "client", p.to, p.port)).Closed != uint64(p.conns) ||
				es.get(key(p.to, "server", p.from, p.port)).Closed != uint64(p.conns) {
				return false
			}
		}
		return es.get(key(c2, "server", s2, abortPort)).Closed == 0 && es.get(key(s2, "server", c2, abortPort)).Closed == aborts &&
			es.get(key(c2, "client", s2, abortPort)).Closed == aborts && es.get(key(c2, "client", s1, closedPort)).Failed == refused
	})
	r := collect()

	for _, p := range plans {
		n := uint64(p.conns)
		c, s := es.get(key(p.from, "client", p.to, p.port)), es.get(key(p.to, "server", p.from, p.port))
		if c.Opened != n || c.Failed != 0 || c.BytesSent != n*req || c.BytesReceived != n*resp || c.GetRtt().GetCount() != n {
			t.Errorf("%s: %v; want %d opened and closed, %d bytes sent, %d received, %d RTT samples", key(p.from, "client", p.to, p.port), c, n, n*req, n*resp, n)
		}
		if s.Opened != n || s.BytesSent != n*resp || s.BytesReceived != n*req {
			t.Errorf("%s: %v; want %d opened, %d bytes sent, %d received", key(p.to, "server", p.from, p.port), s, n, n*resp, n*req)
		}
		if c.Local.GetKind() != "netns" || c.Local.GetName() != p.from.ns {
			t.Errorf("client owner %v, want netns %s", c.Local, p.from.ns)
		}
	}
	// Resets by reason at both ends, against the client's own count and
	// each namespace's kernel counters.
	if resetSeen == 0 {
		t.Fatal("no client saw a reset from the aborting server")
	}
	abortSrv := es.get(key(s2, "server", c2, abortPort))
	abortCli := es.get(key(c2, "client", s2, abortPort))
	ns2, nc2, ns1 := nstat(t, s2.ns), nstat(t, c2.ns), nstat(t, s1.ns)
	if got := abortSrv.ResetsSent["tcp_abort_on_close"]; got != ns2["TcpExtTCPAbortOnClose"] || got != aborts {
		t.Errorf("server resets sent %v; nstat TCPAbortOnClose %d, %d aborts", abortSrv.ResetsSent, ns2["TcpExtTCPAbortOnClose"], aborts)
	}
	var sentS2, sentS1, recvC2 uint64
	for _, e := range es.edges {
		switch e.GetLocal().GetId() {
		case ownerID(s2.ns):
			for _, v := range e.ResetsSent {
				sentS2 += v
			}
		case ownerID(s1.ns):
			for _, v := range e.ResetsSent {
				sentS1 += v
			}
		case ownerID(c2.ns):
			for _, v := range e.ResetsReceived {
				recvC2 += v
			}
		}
	}
	if sentS2 != ns2["TcpOutRsts"] || sentS1 != ns1["TcpOutRsts"] {
		t.Errorf("resets sent: s2 %d (nstat %d), s1 %d (nstat %d)", sentS2, ns2["TcpOutRsts"], sentS1, ns1["TcpOutRsts"])
	}
	// Every reset c2 received: the refused connects' and the aborts'.
	if want := uint64(refused) + uint64(resetSeen); recvC2 < want || abortCli.ResetsReceived["established"]+abortCli.ResetsReceived["close_wait"]+abortCli.ResetsReceived["fin_wait1"]+abortCli.ResetsReceived["fin_wait2"] != uint64(resetSeen) {
		t.Errorf("c2 received %d resets (abort edge %v), clients saw %d, refused %d", recvC2, abortCli.ResetsReceived, resetSeen, refused)
	}
	refusedCli := es.get(key(c2, "client", s1, closedPort))
	if refusedCli.Failed != refused || refusedCli.ResetsReceived["syn_sent"] != refused || es.get(key(s1, "server", c2, closedPort)).ResetsSent["no_socket"] != refused {
		t.Errorf("refused: client %v, server %v; want %d failed with syn_sent resets, %d no_socket sent", refusedCli, es.get(key(s1, "server", c2, closedPort)), refused, refused)
	}
	if opens := nc2["TcpActiveOpens"]; opens != 4+aborts+refused {
		t.Errorf("c2 TcpActiveOpens %d, want %d", opens, 4+aborts+refused)
	}

	// Address holders: each leaf's address is held by its own owner.
	// Other labs on the machine may use the same addresses: the pair is
	// what must be there.
	held := map[[2]string]bool{}
	for _, h := range r.AddressHolders {
		held[[2]string{h.GetAddress(), h.GetOwner().GetId()}] = true
	}
	for _, l := range []leaf{c1, c2, s1, s2} {
		if !held[[2]string{l.addr.String(), ownerID(l.ns)}] {
			t.Errorf("address %s not held by %s: %v", l.addr, ownerID(l.ns), r.AddressHolders)
		}
	}
	for _, h := range r.AddressHolders {
		if a := netip.MustParseAddr(h.GetAddress()); a.IsLoopback() {
			t.Errorf("loopback address %s listed", a)
		}
	}
}

// Pod IP reuse: a namespace is deleted and another takes its address; the
// holders name the new owner, and the old one only for the interval it went.
func TestAddressHoldersFollowAReusedAddress(t *testing.T) {
	lab := newStar(t)
	old := lab.add(t, "old", 50)
	src, err := Open(context.Background(), Options{Env: source.Env{AllNetns: true, DisableBPF: true, Owners: owner.New(owner.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	holderOf := func(addr netip.Addr) []string {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range r.AddressHolders {
			// Only this lab's: another on the machine may use the address.
			if h.GetAddress() == addr.String() && strings.HasPrefix(h.GetOwner().GetName(), lab.prefix) {
				ids = append(ids, h.GetOwner().GetId())
			}
		}
		return ids
	}
	if got := holderOf(old.addr); len(got) != 1 || got[0] != ownerID(old.ns) {
		t.Fatalf("before: %s held by %v, want %s", old.addr, got, ownerID(old.ns))
	}
	lab.del(t, "old")
	nu := lab.add(t, "new", 50)
	if nu.addr != old.addr {
		t.Fatalf("lab gave %s, want the reused %s", nu.addr, old.addr)
	}
	// The interval the old namespace went in: both held it.
	got := holderOf(nu.addr)
	if len(got) != 2 {
		t.Errorf("interval of the change: %s held by %v, want both %s and %s", nu.addr, got, ownerID(old.ns), ownerID(nu.ns))
	}
	if got := holderOf(nu.addr); len(got) != 1 || got[0] != ownerID(nu.ns) {
		t.Errorf("after: %s held by %v, want only %s", nu.addr, got, ownerID(nu.ns))
	}
}

// The top-K keeps the worst then busiest edges, and the "other" edge holds
// exactly the rest.
func TestTopKFoldsTheRestExactly(t *testing.T) {
	s := &Source{resolver: owner.New(owner.Options{Proc: t.TempDir(), NetnsDirs: []string{}}), top: 2}
	iv := probeInterval()
	out, folded := s.edges(iv, nil)
	if len(out) != 3 || folded != 2 || !out[2].GetOther() || out[2].GetEdgesFolded() != 2 {
		t.Fatalf("got %d edges, %d folded: %v", len(out), folded, out)
	}
	if out[0].GetFailed() != 5 || out[1].GetOpened() != 100 {
		t.Errorf("order: %v then %v; want the failing edge, then the busiest", out[0], out[1])
	}
	var opened, failed, bytes uint64
	for _, e := range out {
		opened += e.GetOpened()
		failed += e.GetFailed()
		bytes += e.GetBytesSent()
	}
	var wOpened, wFailed, wBytes uint64
	for _, e := range iv.Edges {
		wOpened += e.Opened
		wFailed += e.Failed
		wBytes += e.BytesSent
	}
	wOpened += iv.Overflow.Opened
	if opened != wOpened || failed != wFailed || bytes != wBytes {
		t.Errorf("totals opened %d failed %d bytes %d, want %d %d %d", opened, failed, bytes, wOpened, wFailed, wBytes)
	}
}

// With --flows.every, the intervals between two reports that carry edges
// are summed, edge by edge: the report carries what one interval would
// have, added up, with the per-connection edges of one backend as one and
// the overflow summed; and it comes on the grid of every.
func TestHeldIntervalsAddUp(t *testing.T) {
	s := &Source{resolver: owner.New(owner.Options{Proc: t.TempDir(), NetnsDirs: []string{}}), top: 10, every: time.Minute}
	a, svc := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.96.0.1")
	backend := netip.MustParseAddrPort("10.0.2.1:8080")
	// Two connections to a Service address, each its own per-connection
	// edge in the probe, translated to the same backend.
	conn := func(port uint16) probe.Edge {
		return probe.Edge{Key: probe.Key{Netns: 1, Role: probe.Client, DNAT: true, Local: a, LocalPort: port, Peer: svc, PeerPort: 80}, Counts: probe.Counts{Opened: 1}}
	}
	for i := range 3 {
		iv := probeInterval()
		iv.Edges = append(iv.Edges, conn(uint16(40000+i)), conn(uint16(41000+i)))
		n := len(iv.Edges)
		s.hold(iv, map[int]netip.AddrPort{n - 2: backend, n - 1: backend})
	}
	if got := len(s.pending.Edges); got != 5 {
		t.Fatalf("%d edges wait after 3 intervals of the same 5, want 5 (summed as they come)", got)
	}
	out, folded := s.edges(s.pending, s.pendingXlat)
	if folded != 0 || len(out) != 6 {
		t.Fatalf("%d edges (%d folded): %v", len(out), folded, out)
	}
	byPeer := map[string]*nbsv1.FlowEdge{}
	for _, e := range out {
		byPeer[e.GetPeerAddress()+"/"+e.GetPeerTranslatedAddress()] = e
	}
	for _, c := range []struct {
		peer           string
		opened, failed uint64
	}{{"10.0.1.1/", 9, 0}, {"10.0.1.2/", 300, 0}, {"10.0.1.3/", 0, 15}, {"10.0.1.4/", 3, 0}, {"10.96.0.1/10.0.2.1", 6, 0}, {"/", 27, 0}} {
		e := byPeer[c.peer]
		if e == nil || e.GetOpened() != c.opened || e.GetFailed() != c.failed {
			t.Errorf("edge to %s: %v, want opened %d failed %d", c.peer, e, c.opened, c.failed)
		}
	}
	// The addresses held in any interval since the last report with edges,
	// each once: a pod that came and went between two is named too.
	pod := func(addr, id string) *nbsv1.AddressHolder {
		return &nbsv1.AddressHolder{Address: addr, Owner: &nbsv1.FlowOwner{Id: id}}
	}
	s.holdAddresses([]*nbsv1.AddressHolder{pod("10.0.0.5", "pod:a.x"), pod("10.0.0.6", "pod:a.y")})
	s.holdAddresses([]*nbsv1.AddressHolder{pod("10.0.0.5", "pod:a.x"), pod("10.0.0.5", "pod:b.z")})
	if len(s.heldAddrs) != 3 {
		t.Errorf("held %v, want the three (address, owner) pairs once each", s.heldAddrs)
	}

	// The grid: the first report carries what is there, the next on the
	// next minute boundary.
	s = &Source{every: time.Minute}
	t0 := time.Date(2026, 11, 29, 10, 0, 5, 0, time.UTC)
	for _, c := range []struct {
		at  time.Duration
		due string
	}{{0, "10:01:00"}, {10 * time.Second, "10:01:00"}, {50 * time.Second, "10:01:00"}, {65 * time.Second, "10:02:00"}} {
		if _, err := s.collect(context.Background(), t0.Add(c.at)); err != nil {
			t.Fatal(err)
		}
		if got := s.due.Format("15:04:05"); got != c.due {
			t.Errorf("after a collection at %s: next report with edges at %s, want %s", t0.Add(c.at).Format("15:04:05"), got, c.due)
		}
	}
}

func probeInterval() probe.Interval {
	a := netip.MustParseAddr("10.0.0.1")
	peer := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 1, i}) }
	return probe.Interval{
		Edges: []probe.Edge{
			{Key: probe.Key{Netns: 1, Role: probe.Client, Local: a, Peer: peer(1), PeerPort: 80}, Counts: probe.Counts{Opened: 3, BytesSent: 10}},
			{Key: probe.Key{Netns: 1, Role: probe.Client, Local: a, Peer: peer(2), PeerPort: 80}, Counts: probe.Counts{Opened: 100, BytesSent: 20}},
			{Key: probe.Key{Netns: 2, Role: probe.Client, Local: a, Peer: peer(3), PeerPort: 80}, Counts: probe.Counts{Failed: 5}},
			{Key: probe.Key{Netns: 2, Role: probe.Server, Local: a, LocalPort: 443, Peer: peer(4)}, Counts: probe.Counts{Opened: 1, BytesSent: 7}},
		},
		Overflow: probe.Counts{Opened: 9},
	}
}

// An agent watching one namespace (--netns) is that namespace's node: it
// lists that namespace's addresses only.
func TestAddressHoldersOfOneWatchedNamespace(t *testing.T) {
	lab := newStar(t)
	a, b := lab.add(t, "a", 31), lab.add(t, "b", 32)
	src, err := Open(context.Background(), Options{Env: source.Env{Netns: a.h, DisableBPF: true, Owners: owner.New(owner.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.AddressHolders) != 1 || r.AddressHolders[0].GetAddress() != a.addr.String() || r.AddressHolders[0].GetOwner().GetId() != ownerID(a.ns) {
		t.Errorf("holders %v; want only %s held by %s (not %s's %s)", r.AddressHolders, a.addr, ownerID(a.ns), b.ns, b.addr)
	}
}

// Two backends behind one address and port (DNAT in the client's
// namespace): two client edges, each naming its backend, with the
// connections each backend's server counted.
func TestDNATSplitsAClientEdgeByBackend(t *testing.T) {
	lab := newStar(t)
	c := lab.add(t, "c", 11)
	s1, s2 := lab.add(t, "s1", 21), lab.add(t, "s2", 22)
	vip := netip.AddrPortFrom(netip.AddrFrom4([4]byte{lab.net[0], lab.net[1], lab.net[2], 100}), 80)
	const backendPort = 8080
	rules := fmt.Sprintf(`table ip nbs_dnat {
	chain out {
		type nat hook output priority -100; policy accept;
		ip daddr %s tcp dport %d dnat ip to numgen inc mod 2 map { 0 : %s . %d, 1 : %s . %d }
	}
}`, vip.Addr(), vip.Port(), s1.addr, backendPort, s2.addr, backendPort)
	cmd := exec.Command("ip", "netns", "exec", c.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		netlab.SkipOrFail(t, "nft dnat: %v: %s", err, out)
	}
	src := openSource(t, Options{Top: 1000})
	served := map[string]int{}
	var mu sync.Mutex
	for _, l := range []leaf{s1, s2} {
		listen(t, l, backendPort, func(conn net.Conn) {
			defer conn.Close()
			_, _ = io.Copy(io.Discard, conn)
			mu.Lock()
			served[l.ns]++
			mu.Unlock()
		})
	}
	connect := func(n int) {
		for range n {
			conn, err := dial(c, vip)
			if err != nil {
				t.Fatalf("connect to %s: %v", vip, err)
			}
			conn.Close()
		}
	}
	es := &edgeSum{owners: map[string]bool{ownerID(c.ns): true}, edges: map[string]*nbsv1.FlowEdge{}}
	collect := func() {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		es.add(t, r)
	}
	// The first connection shows the peer is translated; the edges to it
	// are kept per connection from the next one on.
	connect(1)
	waitFor(t, "the first connection counted", func() bool {
		collect()
		for _, e := range es.edges {
			if e.GetPeerAddress() == vip.Addr().String() && e.Closed == 1 {
				return true
			}
		}
		return false
	})
	mu.Lock()
	before := map[string]int{s1.ns: served[s1.ns], s2.ns: served[s2.ns]}
	mu.Unlock()
	es.edges = map[string]*nbsv1.FlowEdge{}
	const conns = 6
	connect(conns)
	byBackend := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, e := range es.edges {
			if e.GetPeerAddress() == vip.Addr().String() && e.GetPeerPort() == uint32(vip.Port()) {
				m[fmt.Sprintf("%s:%d", e.GetPeerTranslatedAddress(), e.GetPeerTranslatedPort())] += e.GetClosed()
			}
		}
		return m
	}
	waitFor(t, "the connections counted", func() bool {
		collect()
		var n uint64
		for _, v := range byBackend() {
			n += v
		}
		return n == conns
	})
	waitFor(t, "the servers done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return served[s1.ns]+served[s2.ns]-before[s1.ns]-before[s2.ns] == conns
	})
	got := byBackend()
	mu.Lock()
	want := map[string]uint64{
		fmt.Sprintf("%s:%d", s1.addr, backendPort): uint64(served[s1.ns] - before[s1.ns]),
		fmt.Sprintf("%s:%d", s2.addr, backendPort): uint64(served[s2.ns] - before[s2.ns]),
	}
	mu.Unlock()
	if len(got) != 2 || got[fmt.Sprintf("%s:%d", s1.addr, backendPort)] != want[fmt.Sprintf("%s:%d", s1.addr, backendPort)] ||
		got[fmt.Sprintf("%s:%d", s2.addr, backendPort)] != want[fmt.Sprintf("%s:%d", s2.addr, backendPort)] {
		t.Errorf("client edges to %s by backend %v, want %v (what each backend served)", vip, got, want)
	}
}

// A namespace found under another path with a known inode is taken for a
// new one (the kernel reuses the inodes of namespaces that went): here the
// same namespace, renamed, which the owners' resolver would otherwise keep
// naming by its old name for half a minute.
func TestAddressHoldersFollowAnInodeToItsNewOwner(t *testing.T) {
	lab := newStar(t)
	x := lab.add(t, "x", 60)
	src, err := Open(context.Background(), Options{Env: source.Env{AllNetns: true, DisableBPF: true, Owners: owner.New(owner.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	holders := func() []string {
		r, err := src.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range r.AddressHolders {
			if h.GetAddress() == x.addr.String() && strings.HasPrefix(h.GetOwner().GetName(), lab.prefix) {
				ids = append(ids, h.GetOwner().GetId())
			}
		}
		slices.Sort(ids)
		return ids
	}
	if got := holders(); !slices.Equal(got, []string{ownerID(x.ns)}) {
		t.Fatalf("before: %v", got)
	}
	y := lab.prefix + "-y"
	yPath := "/run/netns/" + y
	if err := os.WriteFile(yPath, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(yPath, unix.MNT_DETACH)
		_ = os.Remove(yPath)
	})
	if err := unix.Mount("/run/netns/"+x.ns, yPath, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "del", x.ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	delete(lab.leaves, "x") // gone by that name; y holds it
	want := []string{ownerID(x.ns), ownerID(y)}
	slices.Sort(want)
	if got := holders(); !slices.Equal(got, want) {
		t.Errorf("the interval of the change: %v, want %v", got, want)
	}
	if got := holders(); !slices.Equal(got, []string{ownerID(y)}) {
		t.Errorf("after: %v, want only %s", got, ownerID(y))
	}
}

// A namespace that comes is read alone: the others' addresses are not read
// again until refreshEvery (a netlink dump in each namespace of a busy node,
// where namespaces come and go nearly every interval).
func TestANewNamespaceIsReadAlone(t *testing.T) {
	lab := newStar(t)
	a := lab.add(t, "a", 70)
	src, err := Open(context.Background(), Options{Env: source.Env{AllNetns: true, DisableBPF: true, Owners: owner.New(owner.Options{})}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	read := func(ns string) time.Time {
		t.Helper()
		for k, v := range src.holders.known {
			if filepath.Base(k.path) == ns {
				return v.read
			}
		}
		t.Fatalf("namespace %s not known", ns)
		return time.Time{}
	}
	if _, err := src.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := read(a.ns)
	b := lab.add(t, "b", 71)
	r, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := read(a.ns); !got.Equal(before) {
		t.Errorf("a's addresses read again (%v, before %v) when b came", got, before)
	}
	if read(b.ns).IsZero() {
		t.Errorf("b's addresses not read")
	}
	var held bool
	for _, h := range r.AddressHolders {
		held = held || h.GetAddress() == b.addr.String() && h.GetOwner().GetName() == b.ns
	}
	if !held {
		t.Errorf("holders %v: %s not held by %s", r.AddressHolders, b.addr, b.ns)
	}
}

// A namespace's addresses from one dump of its addresses are those
// net.InterfaceAddrs lists (which dumps its links too), less loopback,
// link-local and unspecified ones: in the agent's own namespace and in a
// leaf's, with an IPv6 address and a point-to-point one added.
func TestReadAddrsAsInterfaceAddrs(t *testing.T) {
	lab := newStar(t)
	a := lab.add(t, "a", 80)
	for _, cmd := range [][]string{
		{"ip", "-n", a.ns, "addr", "add", "fd00:77::5/64", "dev", "lo"},
		{"ip", "-n", a.ns, "addr", "add", "10.99.0.1", "peer", "10.99.0.2", "dev", "lo"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	viaNet := func() ([]netip.Addr, error) {
		as, err := net.InterfaceAddrs()
		if err != nil {
			return nil, err
		}
		var out []netip.Addr
		for _, x := range as {
			ip, ok := netip.AddrFromSlice(x.(*net.IPNet).IP)
			if ip = ip.Unmap(); ok && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				out = append(out, ip)
			}
		}
		slices.SortFunc(out, netip.Addr.Compare)
		return slices.Compact(out), nil
	}
	own, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []netns.Handle{own, a.h} {
		got, err := readAddrs(h)
		if err != nil {
			t.Fatal(err)
		}
		var want []netip.Addr
		if err := h.Do(func() (err error) { want, err = viaNet(); return err }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) || len(got) == 0 {
			t.Errorf("netns %q: %v, want %v", h.Path, got, want)
		}
	}
	got, _ := readAddrs(a.h)
	for _, w := range []string{a.addr.String(), "fd00:77::5", "10.99.0.1"} {
		if !slices.Contains(got, netip.MustParseAddr(w)) {
			t.Errorf("leaf's addresses %v: no %s", got, w)
		}
	}
	if slices.Contains(got, netip.MustParseAddr("10.99.0.2")) {
		t.Errorf("leaf's addresses %v: the point-to-point peer 10.99.0.2 listed", got)
	}
}
