package latencyrx

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// attached builds a lab and attaches a probe restricted to its namespace
// B, where the tests' readers are, timing every read (no sample) so counts
// compare exactly with the readers'.
func attached(t *testing.T) (*netlab.Lab, *Probe) {
	return attachedSampling(t, 1)
}

func attachedSampling(t *testing.T, sample int) (*netlab.Lab, *Probe) {
	t.Helper()
	lab := netlab.New(t)
	p, err := Load(Options{NetnsInode: lab.Inode(t, lab.B), ReadSample: sample})
	if err != nil {
		netlab.SkipOrFail(t, "latencyrx: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	return lab, p
}

// snapshot is the probe's state at one instant, to take differences of.
type snapshot struct {
	hs *Hists
	st Stats
}

func snap(t *testing.T, p *Probe) snapshot {
	t.Helper()
	hs, err := p.Histograms()
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{hs, st}
}

// since returns what the histogram of proto and kind gained after s0.
func since(s0, s1 snapshot, proto Proto, kind Kind) *loglinear.Histogram {
	var d bpfhist.Delta
	d.Reset(s0.hs[proto][kind])
	return d.Next(s1.hs[proto][kind])
}

// socketIn makes a socket in namespace ns of the lab, closed with the test.
func socketIn(t *testing.T, lab *netlab.Lab, ns string, typ int, bind netip.AddrPort) int {
	t.Helper()
	var fd int
	err := lab.Do(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		// No test read or write waits for ever.
		tv := unix.Timeval{Sec: 3}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		if bind.IsValid() {
			return unix.Bind(fd, &unix.SockaddrInet4{Addr: bind.Addr().As4(), Port: int(bind.Port())})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("socket in %s: %v", ns, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
}

// rxSoftwareStamp returns the kernel's software RX timestamp of a datagram
// from the control messages of recvmsg (SO_TIMESTAMPING).
func rxSoftwareStamp(oob []byte) (time.Time, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, err
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPING && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return time.Unix(sec, nsec), nil
		}
	}
	return time.Time{}, fmt.Errorf("no SO_TIMESTAMPING in %d control messages", len(msgs))
}

// The two oracles of a slow reader. A UDP receiver waits readDelay before
// each read: the probe's read latency is that wait and its stack latency
// stays small. Its arrival-to-read time agrees, datagram by datagram, with
// what the receiver measures itself: the kernel's software RX timestamp
// (SO_TIMESTAMPING, taken as the packet enters the receive path) against
// the time its recvmsg returned. And every datagram is timed exactly once.
func TestUDPSlowReaderMatchesTimestamps(t *testing.T) {
	const (
		datagrams = 40
		readDelay = 20 * time.Millisecond
	)
	lab, p := attached(t)
	dst := netip.AddrPortFrom(lab.IPB, 9100)
	rx := socketIn(t, lab, lab.B, unix.SOCK_DGRAM, dst)
	if err := unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_TIMESTAMPING,
		unix.SOF_TIMESTAMPING_RX_SOFTWARE|unix.SOF_TIMESTAMPING_SOFTWARE); err != nil {
		t.Fatalf("SO_TIMESTAMPING: %v", err)
	}
	tx := socketIn(t, lab, lab.A, unix.SOCK_DGRAM, netip.AddrPort{})
	buf, oob := make([]byte, 2048), make([]byte, 512)
	// The kernel turns RX timestamps on host-wide from a work queue: the
	// first datagrams after the setsockopt may come without a stamp.
	deadline := time.Now().Add(5 * time.Second)
	for stamped := false; !stamped; {
		if time.Now().After(deadline) {
			t.Fatal("no datagram carried an RX software timestamp within 5 s")
		}
		if err := unix.Sendto(tx, []byte("warm-up"), 0, sockaddr(dst)); err != nil {
			t.Fatalf("sendto: %v", err)
		}
		_, oobn, _, _, err := unix.Recvmsg(rx, buf, oob, 0)
		if err != nil {
			t.Fatalf("recvmsg: %v", err)
		}
		_, err = rxSoftwareStamp(oob[:oobn])
		stamped = err == nil
	}

	var own []float64 // ns from the RX timestamp to recvmsg's return
	recv := func(i int) {
		_, oobn, _, _, err := unix.Recvmsg(rx, buf, oob, 0)
		returned := time.Now()
		if err != nil {
			t.Fatalf("recvmsg %d: %v", i, err)
		}
		stamp, err := rxSoftwareStamp(oob[:oobn])
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		own = append(own, float64(returned.Sub(stamp).Nanoseconds()))
	}
	send := func(i int) {
		if err := unix.Sendto(tx, []byte(fmt.Sprintf("datagram %d", i)), 0, sockaddr(dst)); err != nil {
			t.Fatalf("sendto: %v", err)
		}
	}

	s0 := snap(t, p)
	for i := range datagrams {
		send(i)
		time.Sleep(readDelay)
		recv(i)
	}
	s1 := snap(t, p)

	stack, read, total := since(s0, s1, UDP, Stack), since(s0, s1, UDP, Read), since(s0, s1, UDP, Total)
	t.Logf("udp: stack n=%d p50 %.1f µs p99 %.1f µs; read n=%d p50 %.2f ms p90 %.2f ms; total n=%d p50 %.2f ms p90 %.2f ms; own RX stamp to recvmsg return p50 %.2f ms",
		stack.Count, stack.Quantile(0.5)/1e3, stack.Quantile(0.99)/1e3, read.Count, read.Quantile(0.5)/1e6, read.Quantile(0.9)/1e6,
		total.Count, total.Quantile(0.5)/1e6, total.Quantile(0.9)/1e6, quantile(own, 0.5)/1e6)
	t.Logf("stats: %+v -> %+v", s0.st, s1.st)
	for _, c := range []struct {
		name string
		got  uint64
	}{
		{"stack histogram", stack.Count}, {"read histogram", read.Count}, {"total histogram", total.Count},
		{"stack count", s1.st.Stack[UDP] - s0.st.Stack[UDP]}, {"read count", s1.st.Read[UDP] - s0.st.Read[UDP]},
	} {
		if c.got != datagrams {
			t.Errorf("%s: %d observations, want exactly the %d datagrams received", c.name, c.got, datagrams)
		}
	}
	slowReader(t, stack, read, readDelay)
	// The receiver's own view ends when recvmsg has returned to it, the
	// probe's as the kernel leaves recvmsg: they differ by one return to
	// user space, so 1 ms of tolerance beyond the bucket width.
	for _, q := range []float64{0.5, 0.9} {
		got := total.Quantile(q)
		ownQ := quantile(own, q)
		if math.Abs(got-ownQ) > ownQ/16+1e6 {
			t.Errorf("arrival to read p%.0f: probe %.3f ms, receiver's SO_TIMESTAMPING %.3f ms: more than 1/16 + 1 ms apart",
				q*100, got/1e6, ownQ/1e6)
		}
	}

	// A burst read slowly waits in the socket's queue: the i-th datagram
	// is read after i delays, so reads spread from 5 to 80 ms; each is
	// still paired with its own queue time.
	const burst, step = 16, 5 * time.Millisecond
	own = own[:0]
	for i := range burst {
		send(i)
	}
	for i := range burst {
		time.Sleep(step)
		recv(i)
	}
	s2 := snap(t, p)
	total = since(s1, s2, UDP, Total)
	t.Logf("burst: total n=%d p10 %.2f p50 %.2f p90 %.2f ms; own p10 %.2f p50 %.2f p90 %.2f ms; stats %+v",
		total.Count, total.Quantile(0.1)/1e6, total.Quantile(0.5)/1e6, total.Quantile(0.9)/1e6,
		quantile(own, 0.1)/1e6, quantile(own, 0.5)/1e6, quantile(own, 0.9)/1e6, s2.st)
	if total.Count != burst || s2.st.Read[UDP]-s1.st.Read[UDP] != burst {
		t.Errorf("burst: %d timed (%d reads counted), want exactly %d", total.Count, s2.st.Read[UDP]-s1.st.Read[UDP], burst)
	}
	for _, q := range []float64{0.1, 0.5, 0.9} {
		got, ownQ := total.Quantile(q), quantile(own, q)
		if math.Abs(got-ownQ) > ownQ/16+1e6 {
			t.Errorf("burst, arrival to read p%.0f: probe %.3f ms, receiver's SO_TIMESTAMPING %.3f ms: more than 1/16 + 1 ms apart",
				q*100, got/1e6, ownQ/1e6)
		}
	}
}

// slowReader checks what a reader that waits delay before each read must
// see: a stack under a millisecond on an idle receiver, and reads that take
// the delay, less the microseconds the packet took to arrive, plus a little
// from the scheduler of a shared 2-core machine and the histogram's bucket
// width (1/16 of the value).
func slowReader(t *testing.T, stack, read *loglinear.Histogram, delay time.Duration) {
	t.Helper()
	if stack.Quantile(0.99) > 1e6 {
		t.Errorf("stack p99 %.1f µs, want under 1 ms", stack.Quantile(0.99)/1e3)
	}
	lo, hi := 0.95*float64(delay), float64(delay)*(1+1.0/16)+3e6
	if r := read.Quantile(0.5); r < lo || r > hi {
		t.Errorf("read p50 %.2f ms, want the reader's %v delay: [%.2f, %.2f] ms", r/1e6, delay, lo/1e6, hi/1e6)
	}
}

// quantile is the q-quantile of vs by the rule loglinear uses (the value
// of rank ceil(q*n)), so the two are compared sample for sample.
func quantile(vs []float64, q float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

// TCP: each message written with TCP_NODELAY and read before the next is
// one data segment and one read, so both are counted exactly; the read
// latency is the reader's delay; pure ACKs and the handshake are not
// timed. Detached, the probe counts nothing; attached again, it does.
func TestTCPReader(t *testing.T) {
	const (
		messages  = 30
		readDelay = 10 * time.Millisecond
	)
	lab, p := attached(t)
	dst := netip.AddrPortFrom(lab.IPB, 9101)
	ln := socketIn(t, lab, lab.B, unix.SOCK_STREAM, dst)
	if err := unix.Listen(ln, 1); err != nil {
		t.Fatal(err)
	}
	c := socketIn(t, lab, lab.A, unix.SOCK_STREAM, netip.AddrPort{})
	if err := unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		t.Fatal(err)
	}
	s0 := snap(t, p)
	if err := unix.Connect(c, sockaddr(dst)); err != nil {
		t.Fatalf("connect: %v", err)
	}
	srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { unix.Close(srv) })
	tv := unix.Timeval{Sec: 3}
	if err := unix.SetsockoptTimeval(srv, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}

	exchange := func(n int) {
		msg, buf := make([]byte, 100), make([]byte, 100)
		for i := range n {
			if _, err := unix.Write(c, msg); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			time.Sleep(readDelay)
			for got := 0; got < len(buf); {
				m, err := unix.Read(srv, buf[got:])
				if err != nil || m == 0 {
					t.Fatalf("read %d: %d, %v", i, m, err)
				}
				got += m
			}
		}
	}
	exchange(messages)
	s1 := snap(t, p)
	stack, read := since(s0, s1, TCP, Stack), since(s0, s1, TCP, Read)
	t.Logf("tcp: stack n=%d p50 %.1f µs p99 %.1f µs; read n=%d p50 %.2f ms; stats %+v -> %+v",
		stack.Count, stack.Quantile(0.5)/1e3, stack.Quantile(0.99)/1e3, read.Count, read.Quantile(0.5)/1e6, s0.st, s1.st)
	if stack.Count != messages || read.Count != messages {
		t.Errorf("timed %d segments to the socket and %d reads, want exactly the %d messages", stack.Count, read.Count, messages)
	}
	slowReader(t, stack, read, readDelay)
	if u := since(s0, s1, UDP, Stack).Count; u != 0 {
		t.Errorf("%d UDP datagrams timed in a TCP-only namespace", u)
	}

	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	before := snap(t, p)
	exchange(3)
	if after := snap(t, p); after.st != before.st {
		t.Errorf("detached probe counted: %+v -> %+v", before.st, after.st)
	}
	if err := p.Attach(); err != nil {
		t.Fatal(err)
	}
	exchange(3)
	if after := snap(t, p); after.st.Read[TCP] != before.st.Read[TCP]+3 {
		t.Errorf("attached again: %d reads timed, want 3", after.st.Read[TCP]-before.st.Read[TCP])
	}
}

// UDP reads are paired with their datagrams by position, counted back from
// the datagrams still waiting: with more than 32 waiting only the newest 32
// are timed, and a datagram queued before the probe was detached or while
// it was is never paired, with its own queue time or a later one's.
func TestUDPPairingByPosition(t *testing.T) {
	lab, p := attached(t)
	dst := netip.AddrPortFrom(lab.IPB, 9102)
	rx := socketIn(t, lab, lab.B, unix.SOCK_DGRAM, dst)
	tx := socketIn(t, lab, lab.A, unix.SOCK_DGRAM, netip.AddrPort{})
	send := func(n int) {
		for i := range n {
			if err := unix.Sendto(tx, []byte("queued"), 0, sockaddr(dst)); err != nil {
				t.Fatalf("sendto %d: %v", i, err)
			}
		}
	}
	recv := func(n int) {
		buf := make([]byte, 64)
		for i := range n {
			if _, _, err := unix.Recvfrom(rx, buf, 0); err != nil {
				t.Fatalf("recvfrom %d: %v", i, err)
			}
		}
	}
	delta := func(s0, s1 snapshot) (stack, read, unpaired uint64) {
		return s1.st.Stack[UDP] - s0.st.Stack[UDP], s1.st.Read[UDP] - s0.st.Read[UDP], s1.st.UDPUnpaired - s0.st.UDPUnpaired
	}
	for _, c := range []struct {
		name                    string
		before, detached, after int // sent before, while detached, after reattaching
		stack, read, unpaired   uint64
	}{
		{name: "40 waiting", before: 40, stack: 40, read: 32, unpaired: 8},
		// Queued before the gap or during it: not timed across it.
		{name: "5 queued while detached", before: 3, detached: 5, after: 4, stack: 7, read: 4, unpaired: 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			s0 := snap(t, p)
			send(c.before)
			if c.detached > 0 {
				if err := p.Detach(); err != nil {
					t.Fatal(err)
				}
				send(c.detached)
				if err := p.Attach(); err != nil {
					t.Fatal(err)
				}
			}
			send(c.after)
			recv(c.before + c.detached + c.after)
			stack, read, unpaired := delta(s0, snap(t, p))
			if stack != c.stack || read != c.read || unpaired != c.unpaired {
				t.Errorf("timed %d to the socket, %d reads, %d unpaired; want %d, %d, %d", stack, read, unpaired, c.stack, c.read, c.unpaired)
			}
		})
	}
}

// With a read sample (the agent's default), packets are timed to their
// socket for 1 in N (by their stamp; for TCP the segments whose queue time
// is kept), queue times are kept, and reads timed, for those TCP segments
// and for every datagram of 1 in N UDP sockets (by their addresses): each
// kept queue time is read exactly once, and the sample's distribution still
// meets the unsampled oracle's bounds (a stack under a millisecond, the
// read p50 at the reader's delay).
func TestReadSample(t *testing.T) {
	const (
		messages  = 240
		sockets   = 256
		readDelay = 2 * time.Millisecond
	)
	lab, p := attachedSampling(t, DefaultReadSample)
	if p.ReadSample() != DefaultReadSample {
		t.Fatalf("read sample %d, want %d", p.ReadSample(), DefaultReadSample)
	}
	// Between 1/8 and 4 times the expected share, so a sample that kept everything or
	// nothing fails (binomial: far outside either bound by chance).
	inSample := func(what string, kept, of uint64) {
		t.Helper()
		lo, hi := of/DefaultReadSample/8, 4*of/DefaultReadSample
		if kept < max(lo, 1) || kept > hi {
			t.Errorf("%s: %d of %d kept, want about 1 in %d: [%d, %d]", what, kept, of, DefaultReadSample, max(lo, 1), hi)
		}
	}

	dst := netip.AddrPortFrom(lab.IPB, 9103)
	ln := socketIn(t, lab, lab.B, unix.SOCK_STREAM, dst)
	if err := unix.Listen(ln, 1); err != nil {
		t.Fatal(err)
	}
	c := socketIn(t, lab, lab.A, unix.SOCK_STREAM, netip.AddrPort{})
	if err := unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(c, sockaddr(dst)); err != nil {
		t.Fatalf("connect: %v", err)
	}
	srv, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { unix.Close(srv) })
	s0 := snap(t, p)
	msg, buf := make([]byte, 100), make([]byte, 100)
	for i := range messages {
		if _, err := unix.Write(c, msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		time.Sleep(readDelay)
		for got := 0; got < len(buf); {
			m, err := unix.Read(srv, buf[got:])
			if err != nil || m == 0 {
				t.Fatalf("read %d: %d, %v", i, m, err)
			}
			got += m
		}
	}
	s1 := snap(t, p)
	stack, read := since(s0, s1, TCP, Stack), since(s0, s1, TCP, Read)
	kept := s1.st.Sampled[TCP] - s0.st.Sampled[TCP]
	t.Logf("tcp: %d segments timed to the socket, %d queue times kept, %d reads timed (p50 %.2f ms)",
		stack.Count, kept, read.Count, read.Quantile(0.5)/1e6)
	inSample("tcp segments", kept, messages)
	if stack.Count != kept {
		t.Errorf("timed %d segments to the socket, want the %d whose queue time was kept", stack.Count, kept)
	}
	if read.Count != kept || since(s0, s1, TCP, Total).Count != kept {
		t.Errorf("%d reads and %d totals timed, want one for each of the %d kept", read.Count, since(s0, s1, TCP, Total).Count, kept)
	}
	if read.Count > 0 {
		slowReader(t, stack, read, readDelay)
	}

	// UDP: one datagram to each of many sockets.
	tx := socketIn(t, lab, lab.A, unix.SOCK_DGRAM, netip.AddrPort{})
	rxs := make([]int, sockets)
	for i := range rxs {
		rxs[i] = socketIn(t, lab, lab.B, unix.SOCK_DGRAM, netip.AddrPortFrom(lab.IPB, uint16(9200+i)))
		tv := unix.Timeval{Sec: 3}
		if err := unix.SetsockoptTimeval(rxs[i], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
	}
	for i, rx := range rxs {
		if err := unix.Sendto(tx, []byte("sampled?"), 0, sockaddr(netip.AddrPortFrom(lab.IPB, uint16(9200+i)))); err != nil {
			t.Fatalf("sendto %d: %v", i, err)
		}
		if _, _, err := unix.Recvfrom(rx, buf, 0); err != nil {
			t.Fatalf("recvfrom %d: %v", i, err)
		}
	}
	s2 := snap(t, p)
	ustack, uread := since(s1, s2, UDP, Stack), since(s1, s2, UDP, Read)
	ukept := s2.st.Sampled[UDP] - s1.st.Sampled[UDP]
	t.Logf("udp: %d datagrams timed to the socket, %d queue times kept, %d reads timed", ustack.Count, ukept, uread.Count)
	inSample("udp datagrams timed to their socket", ustack.Count, sockets)
	if ustack.Count > 0 && ustack.Quantile(0.99) > 1e6 {
		t.Errorf("udp stack p99 %.1f µs, want under 1 ms", ustack.Quantile(0.99)/1e3)
	}
	inSample("udp sockets", ukept, sockets)
	if uread.Count != ukept {
		t.Errorf("%d reads timed, want one for each of the %d kept", uread.Count, ukept)
	}
}

// The 1-in-N choice of UDP sockets hides a slow socket outside it; an
// operator's expand (SetReadSample(1), what source.Expandable does while it
// lasts) times it, every datagram, and the end of the expand (0: back to
// the loaded sample) leaves it out again, without reloading the programs.
func TestExpandTimesTheSocketTheSampleSkips(t *testing.T) {
	const (
		datagrams = 5
		readDelay = 20 * time.Millisecond
	)
	lab, p := attachedSampling(t, DefaultReadSample)
	tx := socketIn(t, lab, lab.A, unix.SOCK_DGRAM, netip.AddrPort{})
	buf := make([]byte, 64)
	// exchange sends n datagrams to dst and reads each after delay.
	exchange := func(rx int, dst netip.AddrPort, n int, delay time.Duration) {
		t.Helper()
		for i := range n {
			if err := unix.Sendto(tx, []byte("slow?"), 0, sockaddr(dst)); err != nil {
				t.Fatalf("sendto %v: %v", dst, err)
			}
			time.Sleep(delay)
			if _, _, err := unix.Recvfrom(rx, buf, 0); err != nil {
				t.Fatalf("recvfrom %v, datagram %d: %v", dst, i, err)
			}
		}
	}
	// A socket out of the sample: one whose datagram kept no queue time.
	var (
		slow int
		dst  netip.AddrPort
	)
	for i := range 64 {
		ap := netip.AddrPortFrom(lab.IPB, uint16(9400+i))
		rx := socketIn(t, lab, lab.B, unix.SOCK_DGRAM, ap)
		s0 := snap(t, p)
		exchange(rx, ap, 1, 0)
		if snap(t, p).st.Sampled[UDP] == s0.st.Sampled[UDP] {
			slow, dst = rx, ap
			break
		}
	}
	if !dst.IsValid() {
		t.Fatalf("every one of 64 UDP sockets was in a 1 in %d sample", DefaultReadSample)
	}
	reads := func(s0, s1 snapshot) *loglinear.Histogram { return since(s0, s1, UDP, Read) }

	s0 := snap(t, p)
	exchange(slow, dst, datagrams, readDelay)
	s1 := snap(t, p)
	if n := reads(s0, s1).Count; n != 0 {
		t.Fatalf("sampled: %d reads of the socket out of the sample timed, want 0", n)
	}

	if err := p.SetReadSample(1); err != nil {
		t.Fatal(err)
	}
	if p.ReadSample() != 1 {
		t.Fatalf("read sample %d while expanded, want 1", p.ReadSample())
	}
	exchange(slow, dst, datagrams, readDelay)
	s2 := snap(t, p)
	r := reads(s1, s2)
	t.Logf("expanded: %d reads timed, p50 %.2f ms", r.Count, r.Quantile(0.5)/1e6)
	if r.Count != datagrams {
		t.Fatalf("expanded: %d reads of the slow socket timed, want all %d", r.Count, datagrams)
	}
	if q := r.Quantile(0.5); q < 0.95*float64(readDelay) {
		t.Errorf("expanded: read p50 %.2f ms, want at least the reader's %v", q/1e6, readDelay)
	}

	if err := p.SetReadSample(0); err != nil {
		t.Fatal(err)
	}
	if p.ReadSample() != DefaultReadSample {
		t.Fatalf("read sample %d after the expand, want %d", p.ReadSample(), DefaultReadSample)
	}
	exchange(slow, dst, datagrams, 0)
	if n := reads(s2, snap(t, p)).Count; n != 0 {
		t.Errorf("after the expand: %d reads of the socket out of the sample timed, want 0", n)
	}
	if err := p.SetReadSample(3); err == nil {
		t.Error("SetReadSample(3): no error, want one (not a power of two)")
	}
}
