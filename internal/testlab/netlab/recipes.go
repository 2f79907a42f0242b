package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/netns"
)

// Each recipe causes exactly n resets with one known kernel reason, and
// waits, by socket state rather than by sleeping, until every reset has been
// both sent and processed by its receiver. Counters read right after a
// recipe returns are therefore final. Expected effects (Linux 6.18, see
// docs/kernel.md, "Reset and drop reasons"):
//
//	recipe              sender  sk_rst_reason        nstat at sender          receiver state
//	ResetNoSocket       B       NO_SOCKET            TcpOutRsts               A syn_sent
//	ResetAbortOnClose   B       TCP_ABORT_ON_CLOSE   TcpExtTCPAbortOnClose    A established
//	ResetLingerZero     A       TCP_STATE            TcpExtTCPAbortOnData     B established
//	ResetAbortOnLinger  A       TCP_ABORT_ON_LINGER  TcpExtTCPAbortOnLinger   B close_wait

// How long a recipe waits for any one step before failing the test.
const stepTimeout = 5 * time.Second

// TCP states as in TCP_INFO's tcpi_state (include/net/tcp_states.h).
const (
	stateFinWait2  = 5
	stateClose     = 7
	stateCloseWait = 8
)

// ResetNoSocket connects n times from A to B's ClosedPort over IPv4: B
// answers each SYN with a NO_SOCKET reset, which A receives in SYN_SENT.
func (l *Lab) ResetNoSocket(t testing.TB, n int) {
	t.Helper()
	l.ConnectRefused(t, l.A, netip.AddrPortFrom(l.IPB, l.ClosedPort), n)
}

// ConnectRefused connects n times from namespace from to dst, where nothing
// may listen: dst's namespace answers each SYN with a NO_SOCKET reset. A dst
// on from's own loopback keeps every reset inside from.
func (l *Lab) ConnectRefused(t testing.TB, from string, dst netip.AddrPort, n int) {
	t.Helper()
	h, err := l.handle(from)
	if err != nil {
		t.Fatal(err)
	}
	ConnectRefusedIn(t, h, dst, n)
}

// ConnectRefusedIn is ConnectRefused from any namespace, such as one only a
// process holds.
func ConnectRefusedIn(t testing.TB, h netns.Handle, dst netip.AddrPort, n int) {
	t.Helper()
	err := h.Do(func() error {
		for i := 0; i < n; i++ {
			fd, err := newSocket(dst.Addr())
			if err != nil {
				return err
			}
			err = connect(fd, sockaddr(dst))
			unix.Close(fd)
			if !errors.Is(err, unix.ECONNREFUSED) {
				return fmt.Errorf("connect %d to %s: got %v, want ECONNREFUSED", i, dst, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("netlab: ConnectRefused from %s: %v", h.Path, err)
	}
}

// ResetAbortOnClose makes B close n accepted connections with unread data:
// B sends TCP_ABORT_ON_CLOSE resets (TcpExtTCPAbortOnClose), A receives them
// in ESTABLISHED.
func (l *Lab) ResetAbortOnClose(t testing.TB, n int) {
	t.Helper()
	l.pairs(t, n, func(c, s *sock) error {
		if _, err := unix.Write(c.fd, []byte("never read")); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := waitReadable(s.fd); err != nil {
			return err
		}
		if err := s.close(); err != nil {
			return fmt.Errorf("close server: %w", err)
		}
		return waitState(c.fd, stateClose)
	})
}

// ResetLingerZero makes A close n established connections with
// SO_LINGER{on, 0}: A sends resets with reason TCP_STATE and counts
// TcpExtTCPAbortOnData (not AbortOnLinger: this goes through
// tcp_disconnect); B receives them in ESTABLISHED.
func (l *Lab) ResetLingerZero(t testing.TB, n int) {
	t.Helper()
	l.pairs(t, n, func(c, s *sock) error {
		if err := unix.SetsockoptLinger(c.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
			return fmt.Errorf("SO_LINGER: %w", err)
		}
		if err := c.close(); err != nil {
			return fmt.Errorf("close client: %w", err)
		}
		return waitState(s.fd, stateClose)
	})
}

// ResetAbortOnLinger makes A half-close n connections, wait in FIN_WAIT2,
// then close with TCP_LINGER2 = -1: A sends TCP_ABORT_ON_LINGER resets
// (TcpExtTCPAbortOnLinger); B receives them in CLOSE_WAIT.
func (l *Lab) ResetAbortOnLinger(t testing.TB, n int) {
	t.Helper()
	l.pairs(t, n, func(c, s *sock) error {
		if err := unix.Shutdown(c.fd, unix.SHUT_WR); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		if err := waitState(c.fd, stateFinWait2); err != nil {
			return err
		}
		if err := waitState(s.fd, stateCloseWait); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(c.fd, unix.IPPROTO_TCP, unix.TCP_LINGER2, -1); err != nil {
			return fmt.Errorf("TCP_LINGER2: %w", err)
		}
		if err := c.close(); err != nil {
			return fmt.Errorf("close client: %w", err)
		}
		return waitState(s.fd, stateClose)
	})
}

// sock is a socket that knows whether it was closed, so that cleanup never
// closes a descriptor number the process may have reused meanwhile.
type sock struct {
	fd   int
	open bool
}

func (s *sock) close() error {
	if !s.open {
		return nil
	}
	s.open = false
	return unix.Close(s.fd)
}

// pairs runs step n times on a fresh established IPv4 connection from A
// (client c) to a listener in B (accepted s). step may close either; pairs
// closes whatever is left, which sends nothing more: by then both sockets
// are closed by a reset.
func (l *Lab) pairs(t testing.TB, n int, step func(c, s *sock) error) {
	t.Helper()
	lfd := -1
	err := l.Do(l.B, func() error {
		fd, err := newSocket(l.IPB)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(l.IPB, 0))); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind: %w", err)
		}
		if err := unix.Listen(fd, 16); err != nil {
			unix.Close(fd)
			return fmt.Errorf("listen: %w", err)
		}
		lfd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("netlab: listen in %s: %v", l.B, err)
	}
	defer unix.Close(lfd)
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatalf("netlab: getsockname: %v", err)
	}
	dst := netip.AddrPortFrom(l.IPB, uint16(sa.(*unix.SockaddrInet4).Port))

	for i := 0; i < n; i++ {
		c := -1
		err := l.Do(l.A, func() error {
			var err error
			if c, err = newSocket(dst.Addr()); err != nil {
				return err
			}
			return connect(c, sockaddr(dst))
		})
		if err != nil {
			if c >= 0 {
				unix.Close(c)
			}
			t.Fatalf("netlab: connect %d from %s to %s: %v", i, l.A, dst, err)
		}
		s, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			unix.Close(c)
			t.Fatalf("netlab: accept %d in %s: %v", i, l.B, err)
		}
		if err := setTimeouts(s); err != nil {
			unix.Close(c)
			unix.Close(s)
			t.Fatalf("netlab: %v", err)
		}
		cs, ss := &sock{fd: c, open: true}, &sock{fd: s, open: true}
		err = step(cs, ss)
		cs.close()
		ss.close()
		if err != nil {
			t.Fatalf("netlab: connection %d: %v", i, err)
		}
	}
}

// newSocket opens a blocking TCP socket whose connect and accept give up
// after stepTimeout instead of hanging a test.
func newSocket(a netip.Addr) (int, error) {
	family := unix.AF_INET
	if a.Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := setTimeouts(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func setTimeouts(fd int) error {
	tv := unix.NsecToTimeval(stepTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return fmt.Errorf("set socket timeout: %w", err)
		}
	}
	return nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// connect is unix.Connect that survives EINTR. A blocking connect that a
// signal (Go's preemption) interrupts keeps going in the kernel and cannot
// be restarted; its outcome is read from SO_ERROR once the socket is
// writable. Retrying instead would send a second SYN and count twice.
func connect(fd int, sa unix.Sockaddr) error {
	err := unix.Connect(fd, sa)
	if !errors.Is(err, unix.EINTR) {
		return err
	}
	if err := waitFor(fd, unix.POLLOUT); err != nil {
		return err
	}
	soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return fmt.Errorf("SO_ERROR: %w", err)
	}
	if soErr != 0 {
		return unix.Errno(soErr)
	}
	return nil
}

func waitReadable(fd int) error { return waitFor(fd, unix.POLLIN) }

func waitFor(fd int, events int16) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
	for {
		n, err := unix.Poll(fds, int(stepTimeout.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("socket not ready (events %#x) within %s", events, stepTimeout)
		}
		return nil
	}
}

// waitState polls TCP_INFO until the socket reaches state: the only way to
// know the peer's packet (FIN, RST) has been processed without sleeping
// for a guessed time.
func waitState(fd int, state uint8) error {
	deadline := time.Now().Add(stepTimeout)
	for {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return fmt.Errorf("TCP_INFO: %w", err)
		}
		if info.State == state {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("socket in TCP state %d, want %d after %s", info.State, state, stepTimeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
