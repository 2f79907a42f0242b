package netlab

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/netns"
)

// Traffic recipes for the latency and drops branches: nftables rules as
// fault injectors (this kernel has no netem: docs/kernel.md, "The lab"), a
// lossy bulk TCP transfer and UDP senders.

// BulkPort is the port B listens on in LossyBulk; the loss rule matches it.
const BulkPort = 5201

// Nft loads an nftables ruleset into ns (`nft -f -`). The tables die with
// the lab's namespaces.
func (l *Lab) Nft(t testing.TB, ns, ruleset string) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		SkipOrFail(t, "netlab: nftables `nft` not found: %v", err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("netlab: nft in %s: %v: %s\nruleset:\n%s", ns, err, out, ruleset)
	}
}

// NftDelete removes an inet table from ns.
func (l *Lab) NftDelete(t testing.TB, ns, table string) {
	t.Helper()
	l.Exec(t, ns, "nft", "delete", "table", "inet", table)
}

var nftCounterRE = regexp.MustCompile(`counter packets (\d+) bytes \d+`)

// NftPackets sums the packet counters of every rule in an inet table of ns:
// the oracle for drops by a netfilter rule.
func (l *Lab) NftPackets(t testing.TB, ns, table string) uint64 {
	t.Helper()
	out := l.Exec(t, ns, "nft", "list", "table", "inet", table)
	var sum uint64
	for _, m := range nftCounterRE.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			t.Fatalf("netlab: nft counter %q: %v", m[0], err)
		}
		sum += v
	}
	return sum
}

// LossTable is the nftables table LossyBulk installs in B.
const LossTable = "nbs_loss"

// AddLoss drops a random permille/1000 of the TCP segments A sends to
// B's BulkPort, at B's input hook, with a counter (NftPackets(B, LossTable)).
func (l *Lab) AddLoss(t testing.TB, permille int) {
	t.Helper()
	l.Nft(t, l.B, fmt.Sprintf(`table inet %s {
	chain in {
		type filter hook input priority 0; policy accept;
		ip saddr %s tcp dport %d numgen random mod 1000 < %d counter drop
	}
}`, LossTable, l.IPA, BulkPort, permille))
}

// BulkResult describes one LossyBulk transfer.
type BulkResult struct {
	Bytes int64
	// Dropped is the loss rule's counter: segments (GSO aggregates, with
	// offloads on) the rule threw away.
	Dropped uint64
}

// LossyBulk sends from A to B's BulkPort for d while dropping a random
// permille/1000 of A's segments (AddLoss), so A retransmits. It returns only
// once every retransmission is over: it waits until B has acknowledged all
// data, removes the loss rule, then closes both ends cleanly and waits for
// both sockets to reach CLOSE. Counters read right after are final, in both
// namespaces.
func (l *Lab) LossyBulk(t testing.TB, permille int, d time.Duration) BulkResult {
	t.Helper()
	lfd := -1
	if err := l.Do(l.B, func() error {
		fd, err := newSocket(l.IPB)
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(l.IPB, BulkPort))); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind: %w", err)
		}
		if err := unix.Listen(fd, 4); err != nil {
			unix.Close(fd)
			return fmt.Errorf("listen: %w", err)
		}
		lfd = fd
		return nil
	}); err != nil {
		t.Fatalf("netlab: bulk listener in %s: %v", l.B, err)
	}
	defer unix.Close(lfd)

	c := -1
	if err := l.Do(l.A, func() error {
		var err error
		if c, err = newSocket(l.IPB); err != nil {
			return err
		}
		return connect(c, sockaddr(netip.AddrPortFrom(l.IPB, BulkPort)))
	}); err != nil {
		if c >= 0 {
			unix.Close(c)
		}
		t.Fatalf("netlab: bulk connect from %s: %v", l.A, err)
	}
	client := &sock{fd: c, open: true}
	defer client.close()
	s, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatalf("netlab: bulk accept in %s: %v", l.B, err)
	}
	server := &sock{fd: s, open: true}
	defer server.close()
	if err := setTimeouts(s); err != nil {
		t.Fatalf("netlab: %v", err)
	}

	// The loss starts once the handshake is over. A dropped handshake ACK
	// (and the first data behind it) would let B's SYN-ACK timer fire, which
	// the kernel counts in TCPTimeouts although no socket had an RTO: a test
	// comparing RTOs with TCPTimeouts would fail by chance a few runs in 100.
	l.AddLoss(t, permille)
	removed := false
	defer func() {
		if !removed {
			l.NftDelete(t, l.B, LossTable)
		}
	}()

	// B reads until A's FIN.
	readDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := unix.Read(s, buf)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if err != nil {
				readDone <- fmt.Errorf("bulk read: %w", err)
				return
			}
			if n == 0 {
				readDone <- nil
				return
			}
		}
	}()

	var res BulkResult
	buf := make([]byte, 256<<10)
	for end := time.Now().Add(d); time.Now().Before(end); {
		n, err := unix.Write(c, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			t.Fatalf("netlab: bulk write: %v", err)
		}
		res.Bytes += int64(n)
	}
	// Wait until B acknowledged everything: then nothing is left to
	// retransmit, and the loss can go without changing the count.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := unix.GetsockoptTCPInfo(c, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			t.Fatalf("netlab: TCP_INFO: %v", err)
		}
		outq, err := unix.IoctlGetInt(c, unix.SIOCOUTQ)
		if err != nil {
			t.Fatalf("netlab: SIOCOUTQ: %v", err)
		}
		if info.Unacked == 0 && outq == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("netlab: bulk data still unacknowledged after 30s (unacked %d, outq %d)", info.Unacked, outq)
		}
		time.Sleep(time.Millisecond)
	}
	res.Dropped = l.NftPackets(t, l.B, LossTable)
	l.NftDelete(t, l.B, LossTable)
	removed = true

	// Clean close: A's FIN, B's EOF and FIN, A's last ACK.
	if err := unix.Shutdown(c, unix.SHUT_WR); err != nil {
		t.Fatalf("netlab: bulk shutdown: %v", err)
	}
	select {
	case err := <-readDone:
		if err != nil {
			t.Fatalf("netlab: %v", err)
		}
	case <-time.After(stepTimeout):
		t.Fatalf("netlab: bulk receiver saw no EOF within %s", stepTimeout)
	}
	if err := unix.Shutdown(s, unix.SHUT_WR); err != nil {
		t.Fatalf("netlab: bulk shutdown of the receiver: %v", err)
	}
	for _, fd := range []int{s, c} {
		if err := waitState(fd, stateClose); err != nil {
			t.Fatalf("netlab: bulk close: %v", err)
		}
	}
	return res
}

// SendUDP sends n datagrams of size bytes from namespace from to dst,
// gap apart. Each send must succeed locally; what happens to them at dst is
// the test's to check.
func (l *Lab) SendUDP(t testing.TB, from string, dst netip.AddrPort, n, size int, gap time.Duration) {
	t.Helper()
	h, err := l.handle(from)
	if err != nil {
		t.Fatal(err)
	}
	SendUDPIn(t, h, dst, n, size, gap)
}

// SendUDPIn is SendUDP from any namespace, such as one only a process holds.
func SendUDPIn(t testing.TB, h netns.Handle, dst netip.AddrPort, n, size int, gap time.Duration) {
	t.Helper()
	err := h.Do(func() error {
		family := unix.AF_INET
		if dst.Addr().Is6() {
			family = unix.AF_INET6
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		buf := make([]byte, size)
		for i := 0; i < n; i++ {
			if err := unix.Sendto(fd, buf, 0, sockaddr(dst)); err != nil {
				return fmt.Errorf("sendto %d to %s: %w", i, dst, err)
			}
			if gap > 0 {
				time.Sleep(gap)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("netlab: SendUDP from %s: %v", h.Path, err)
	}
}

// Flood sends TCP from A to B as fast as it goes over conns connections
// until the returned stop is called (also at the end of the test): a load
// that keeps a shaped queue in A full.
func (l *Lab) Flood(t testing.TB, conns int) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := l.Do(l.B, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(l.IPB, 0).String())
		return err
	}); err != nil {
		t.Fatalf("netlab: flood listener in %s: %v", l.B, err)
	}
	var wg sync.WaitGroup
	drain := func(c net.Conn, rw func([]byte) (int, error)) {
		defer c.Close()
		buf := make([]byte, 1<<16)
		for {
			if _, err := rw(buf); err != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { drain(c, c.Read) })
		}
	})
	var cs []net.Conn
	for range conns {
		if err := l.Do(l.A, func() error {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err == nil {
				cs = append(cs, c)
			}
			return err
		}); err != nil {
			ln.Close()
			t.Fatalf("netlab: flood connection from %s: %v", l.A, err)
		}
	}
	for _, c := range cs {
		wg.Go(func() { drain(c, c.Write) })
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, c := range cs {
				c.Close()
			}
			ln.Close()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return stop
}
