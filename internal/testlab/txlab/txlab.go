// Package txlab runs TCP senders for tests of the TX latency probes: inside
// a cgroup v2 made for the test (sockops programs see only their cgroup's
// sockets) and inside a netlab namespace, with the kernel's own socket
// timestamps (SO_TIMESTAMPING: SCHED, SND, ACK) as the independent oracle.
//
// A sender is the test binary itself, started again in helper mode: a
// cgroup holds processes, not threads, so the sender cannot be a goroutine
// of the test. Every test binary that uses Send must call MaybeHelper first
// thing (from TestMain or an init function).
package txlab

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

const helperEnv = "NBS_TXLAB_HELPER"

// Cgroup is a cgroup v2 directory made for one test, in which senders run.
type Cgroup struct{ *netlab.Cgroup }

// NewCgroup makes a cgroup for the test (netlab.NewCgroup).
func NewCgroup(t testing.TB) *Cgroup {
	t.Helper()
	return &Cgroup{netlab.NewCgroup(t)}
}

// SendSpec is what one sender does.
type SendSpec struct {
	Dst netip.AddrPort
	// Messages of Size bytes, Gap apart, on one connection, each stamped
	// with SO_TIMESTAMPING. With Duration set instead, Conns connections
	// write Size-byte chunks as fast as they can for that long, unstamped.
	Messages int
	Size     int
	Gap      time.Duration
	Duration time.Duration
	Conns    int
	// Linger keeps a stamped sender's connection open, idle, this long
	// after its last ACK (for oracles that read live sockets: ss -ti).
	Linger time.Duration
}

// Stamped is one message's oracle: the user-space time just before write()
// and the kernel's software stamps, all CLOCK_REALTIME nanoseconds (0 when
// a stamp did not arrive).
type Stamped struct {
	Write, Sched, Snd, Ack int64
}

// SendResult is what a sender reports.
type SendResult struct {
	Stamps []Stamped
	Bytes  int64
	// LocalPorts of the sender's connections.
	LocalPorts []uint16
}

// Send runs a sender in the cgroup and netns ns, waits for it and returns
// its report.
func (c *Cgroup) Send(t testing.TB, ns string, spec SendSpec) SendResult {
	t.Helper()
	p, err := c.StartSend(ns, spec)
	if err != nil {
		t.Fatalf("txlab: %v", err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatalf("txlab: %v", err)
	}
	return res
}

// Sender is a running sender.
type Sender struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
}

// StartSend starts a sender without waiting for it.
func (c *Cgroup) StartSend(ns string, spec SendSpec) (*Sender, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find test binary: %w", err)
	}
	s := &Sender{}
	s.cmd = c.Command(ns, self, "-test.run=^$")
	s.cmd.Env = append(os.Environ(), helperEnv+"="+string(js))
	s.cmd.Stdout, s.cmd.Stderr = &s.stdout, &s.stderr
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sender: %w", err)
	}
	return s, nil
}

// Wait waits for the sender and decodes its report.
func (s *Sender) Wait() (SendResult, error) {
	var res SendResult
	if err := s.cmd.Wait(); err != nil {
		return res, fmt.Errorf("sender: %v: %s", err, strings.TrimSpace(s.stderr.String()))
	}
	if err := json.Unmarshal(s.stdout.Bytes(), &res); err != nil {
		return res, fmt.Errorf("sender report %q: %w", s.stdout.String(), err)
	}
	return res, nil
}

// MaybeHelper runs the sender and exits when this process was started as
// one; otherwise it returns at once.
func MaybeHelper() {
	js := os.Getenv(helperEnv)
	if js == "" {
		return
	}
	var spec SendSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "txlab helper: bad spec: %v\n", err)
		os.Exit(2)
	}
	var res SendResult
	var err error
	if spec.Duration > 0 {
		res, err = flood(spec)
	} else {
		res, err = stamped(spec)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "txlab helper: %v\n", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	os.Exit(0)
}

func dial(dst netip.AddrPort) (*net.TCPConn, error) {
	c, err := net.DialTimeout("tcp", dst.String(), 5*time.Second)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// stamped writes spec.Messages messages on one connection and collects the
// kernel's SCHED, SND and ACK stamps of each from the socket's error queue.
func stamped(spec SendSpec) (SendResult, error) {
	var res SendResult
	conn, err := dial(spec.Dst)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	if err := conn.SetNoDelay(true); err != nil {
		return res, err
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return res, err
	}
	res.LocalPorts = []uint16{uint16(conn.LocalAddr().(*net.TCPAddr).Port)}
	const flags = unix.SOF_TIMESTAMPING_TX_SCHED | unix.SOF_TIMESTAMPING_TX_SOFTWARE | unix.SOF_TIMESTAMPING_TX_ACK |
		unix.SOF_TIMESTAMPING_SOFTWARE | unix.SOF_TIMESTAMPING_OPT_ID | unix.SOF_TIMESTAMPING_OPT_TSONLY
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPING, flags)
	}); err != nil || serr != nil {
		return res, fmt.Errorf("SO_TIMESTAMPING: %v %v", err, serr)
	}
	res.Stamps = make([]Stamped, spec.Messages)
	msg := make([]byte, spec.Size)
	drain := func() error {
		var derr error
		err := raw.Control(func(fd uintptr) { derr = drainErrqueue(int(fd), spec.Size, res.Stamps) })
		return errors.Join(err, derr)
	}
	for i := 0; i < spec.Messages; i++ {
		res.Stamps[i].Write = time.Now().UnixNano()
		if _, err := conn.Write(msg); err != nil {
			return res, fmt.Errorf("write %d: %w", i, err)
		}
		res.Bytes += int64(len(msg))
		time.Sleep(spec.Gap)
		if err := drain(); err != nil {
			return res, err
		}
	}
	// The last ACKs take a round trip.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && res.Stamps[spec.Messages-1].Ack == 0 {
		time.Sleep(5 * time.Millisecond)
		if err := drain(); err != nil {
			return res, err
		}
	}
	time.Sleep(spec.Linger)
	return res, nil
}

// drainErrqueue reads every queued timestamp without blocking. With
// OPT_ID a TCP stamp's id is the byte offset of the write's last byte, so
// message i of size bytes has id (i+1)*size-1.
func drainErrqueue(fd, size int, out []Stamped) error {
	buf := make([]byte, 64)
	oob := make([]byte, 512)
	for {
		_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read error queue: %w", err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return fmt.Errorf("parse stamps: %w", err)
		}
		var ts int64
		var info, id uint32
		var haveErr bool
		for _, m := range msgs {
			switch {
			case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPING && len(m.Data) >= 16:
				sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
				nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
				ts = sec*1e9 + nsec
			case (m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) ||
				(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR):
				if len(m.Data) >= 16 {
					// struct sock_extended_err: errno u32, origin u8, type u8, code u8, pad u8, info u32, data u32
					info = binary.NativeEndian.Uint32(m.Data[8:12])
					id = binary.NativeEndian.Uint32(m.Data[12:16])
					haveErr = true
				}
			}
		}
		if !haveErr || ts == 0 {
			continue
		}
		i := int((id + 1) / uint32(size))
		if (id+1)%uint32(size) != 0 || i < 1 || i > len(out) {
			continue
		}
		s := &out[i-1]
		switch info {
		case unix.SCM_TSTAMP_SCHED:
			if s.Sched == 0 {
				s.Sched = ts
			}
		case unix.SCM_TSTAMP_SND:
			if s.Snd == 0 {
				s.Snd = ts
			}
		case unix.SCM_TSTAMP_ACK:
			if s.Ack == 0 {
				s.Ack = ts
			}
		}
	}
}

// flood writes as fast as the connections take it for spec.Duration.
func flood(spec SendSpec) (SendResult, error) {
	var res SendResult
	conns := max(spec.Conns, 1)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	stop := time.Now().Add(spec.Duration)
	for i := 0; i < conns; i++ {
		conn, err := dial(spec.Dst)
		if err != nil {
			return res, err
		}
		res.LocalPorts = append(res.LocalPorts, uint16(conn.LocalAddr().(*net.TCPAddr).Port))
		wg.Go(func() {
			defer conn.Close()
			buf := make([]byte, max(spec.Size, 1))
			var n int64
			for time.Now().Before(stop) {
				_ = conn.SetWriteDeadline(stop)
				w, err := conn.Write(buf)
				n += int64(w)
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					break
				}
			}
			mu.Lock()
			res.Bytes += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// Sink accepts connections in namespace ns and reads and discards all they
// send, until the test ends. Its sockets are the test process's, outside
// any test cgroup.
type Sink struct {
	Addr netip.AddrPort
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// NewSink listens on addr:0 inside ns.
func NewSink(t testing.TB, lab *netlab.Lab, ns string, addr netip.Addr) *Sink {
	t.Helper()
	var ln net.Listener
	err := lab.Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	})
	if err != nil {
		t.Fatalf("txlab: listen in %s: %v", ns, err)
	}
	s := &Sink{Addr: ln.Addr().(*net.TCPAddr).AddrPort(), ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// Poke writes one byte back on every accepted connection. The sender's
// socket then receives a segment after it went idle, so a probe that samples
// on received segments under a rate limit sees the socket's settled state.
func (s *Sink) Poke() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if _, err := c.Write([]byte{0}); err != nil {
			return fmt.Errorf("poke %s: %w", c.RemoteAddr(), err)
		}
	}
	return nil
}

// UDPFlood sends datagrams of size bytes from namespace from to a reader
// it opens at addr in namespace to, at rate bits per second, until the
// returned stop is called (or the test ends). Unlike TCP, which backs off
// and refills a shaped queue in a sawtooth and changes its packet sizes
// with it, a flood above the shaper's rate keeps the queue full and steady,
// so time-sampled oracles (ping, tc's backlog) and the per-packet probe see
// the same delay.
func UDPFlood(t testing.TB, lab *netlab.Lab, from, to string, addr netip.Addr, size int, rate float64) (stop func()) {
	t.Helper()
	var rd, wr *net.UDPConn
	if err := lab.Do(to, func() error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		rd = c
		return err
	}); err != nil {
		t.Fatalf("txlab: UDP reader in %s: %v", to, err)
	}
	dst := rd.LocalAddr().(*net.UDPAddr)
	if err := lab.Do(from, func() error {
		c, err := net.DialUDP("udp", nil, dst)
		if err != nil {
			return err
		}
		wr = c
		// A send buffer larger than the shaper's queue, so the queue (not the
		// socket) is what fills: tbf drops the excess.
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)
		}); err != nil {
			return err
		}
		return serr
	}); err != nil {
		rd.Close()
		t.Fatalf("txlab: UDP sender in %s: %v", from, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := rd.Read(buf); err != nil {
				return
			}
		}
	})
	done := make(chan struct{})
	wg.Go(func() {
		msg := make([]byte, size)
		perMs := rate / 8 / float64(size) / 1000 // datagrams per millisecond
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		start, sent := time.Now(), 0.0
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				due := float64(now.Sub(start).Milliseconds()+1) * perMs
				for ; sent < due; sent++ {
					_, _ = wr.Write(msg) // ENOBUFS when the qdisc is full: that is the point
				}
			}
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			wr.Close()
			rd.Close()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return stop
}
