// Package ping sends ICMP echo requests to one target at a fixed rate and
// times each echo four ways from kernel socket timestamps (SO_TIMESTAMPING),
// so the time the network takes can be told apart from the time this host
// adds:
//
//	sendto ──send──▶ SCHED ──qdisc──▶ SND ══kernel RTT══▶ RX ──receive──▶ recvmsg
//	└──────────────────────────── user RTT ─────────────────────────────┘
//
// SCHED is stamped when the request enters the device's queueing layer, SND
// when the driver takes it (veth and most drivers call skb_tx_timestamp), RX
// when the reply enters the stack. Host delay is user RTT minus kernel RTT:
// send + qdisc + receive. No BPF is needed: unprivileged ICMP datagram
// sockets carry these stamps (net.ipv4.ping_group_range must include the
// agent's group); as root the pinger falls back to a raw ICMP socket when
// that range forbids it.
package ping

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/netns"
)

// Mode is the kind of socket a pinger uses.
type Mode int

const (
	// ModeDgram is an unprivileged ICMP datagram socket: the kernel owns
	// the echo id and checksum and hands this socket only its own replies.
	ModeDgram Mode = iota + 1
	// ModeRaw is a raw ICMP socket (needs CAP_NET_RAW): used when
	// ping_group_range forbids datagram sockets.
	ModeRaw
)

func (m Mode) String() string {
	switch m {
	case ModeDgram:
		return "icmp datagram socket"
	case ModeRaw:
		return "raw icmp socket"
	}
	return "none"
}

// Options configure a Pinger.
type Options struct {
	// Netns is where the socket lives (and so which routes and addresses
	// the echoes use).
	Netns  netns.Handle
	Target netip.Addr
	// Interval spaces echo requests, like ping -i (default 1s).
	Interval time.Duration
	// Timeout after which an unanswered echo counts as lost (default 3s,
	// at least one Interval).
	Timeout time.Duration
	// Size is the ICMP payload in bytes, like ping -s (default 56).
	Size int
	// Count stops the pinger after this many echoes, like ping -c: Run
	// returns once the last is answered or lost. 0 pings until ctx ends.
	Count int
	// Raw forces a raw socket even where a datagram socket would work
	// (tests; needs CAP_NET_RAW).
	Raw bool
}

// Result is one echo's outcome. Durations are zero where the kernel gave no
// timestamp; the Has* fields say which ones exist.
type Result struct {
	Seq  uint16
	Sent time.Time
	// Lost: no reply within the timeout (LocalDrop implies Lost).
	Lost bool
	// LocalDrop: sendto failed with ENOBUFS or EPERM; the request never
	// left this host (a full qdisc, or a local firewall rule).
	LocalDrop bool
	// UserRTT is sendto to recvmsg, what ping(8) -U and applications see.
	UserRTT time.Duration
	// KernelRTT is the driver's TX stamp to the reply's RX stamp: the
	// network and the peer, without this host's queues and scheduling.
	KernelRTT time.Duration
	// HostDelay is UserRTT - KernelRTT, split into Send (sendto to SCHED),
	// Qdisc (SCHED to SND) and Receive (RX stamp to recvmsg).
	HostDelay, Send, Qdisc, Receive time.Duration
	HasKernel                       bool // KernelRTT and HostDelay are set
	HasSched                        bool // Send and Qdisc are set
}

// Counts are a pinger's cumulative totals since it started.
type Counts struct {
	Sent       uint64 // requests handed to the kernel (including local drops)
	Replies    uint64
	Lost       uint64 // including local drops
	LocalDrops uint64
	// Late replies arrived after their echo had been declared lost.
	Late uint64
	// Unmatched TX timestamps that could not be tied to an echo; their
	// echoes are reported without kernel timings.
	Unmatched uint64
}

// Pinger pings one target. Run drives it; Close releases the socket.
type Pinger struct {
	opts  Options
	mode  Mode
	fd    int
	wake  int // eventfd: Run's poll returns when ctx ends
	v6    bool
	id    uint16 // echo id (raw mode; the kernel sets it for datagram sockets)
	dst   unix.Sockaddr
	count struct {
		sent, replies, lost, localDrops, late, unmatched atomic.Uint64
	}
	running atomic.Bool
	// countedKeys is set once the kernel turned out not to honour
	// SCM_TS_OPT_ID, so TX stamps are matched by counting sends.
	countedKeys atomic.Bool
}

// Open creates the socket inside opts.Netns. Without permission for a
// datagram socket and without CAP_NET_RAW it fails with an error that says
// which setting to change.
func Open(opts Options) (*Pinger, error) {
	if !opts.Target.IsValid() {
		return nil, errors.New("ping: no target address")
	}
	opts.Target = opts.Target.Unmap()
	if opts.Target.Zone() != "" {
		return nil, fmt.Errorf("ping %s: scoped addresses are not supported", opts.Target)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	opts.Timeout = max(opts.Timeout, opts.Interval)
	if opts.Size <= 0 {
		opts.Size = 56
	}
	if opts.Size > 65000 {
		return nil, fmt.Errorf("ping %s: payload %d bytes is too large", opts.Target, opts.Size)
	}
	p := &Pinger{opts: opts, fd: -1, wake: -1, v6: opts.Target.Is6(), id: uint16(rand.Uint32())}
	if p.v6 {
		p.dst = &unix.SockaddrInet6{Addr: opts.Target.As16()}
	} else {
		p.dst = &unix.SockaddrInet4{Addr: opts.Target.As4()}
	}
	err := opts.Netns.Do(func() error {
		fd, mode, err := openSocket(p.v6, opts.Raw)
		if err != nil {
			return err
		}
		p.fd, p.mode = fd, mode
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ping %s: %w", opts.Target, err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(p.fd)
		return nil, fmt.Errorf("ping %s: eventfd: %w", opts.Target, err)
	}
	p.wake = wake
	return p, nil
}

// Mode says which kind of socket Open got.
func (p *Pinger) Mode() Mode { return p.mode }

// Target is the address pinged.
func (p *Pinger) Target() netip.Addr { return p.opts.Target }

// Counts returns the totals so far; safe from any goroutine.
func (p *Pinger) Counts() Counts {
	return Counts{
		Sent: p.count.sent.Load(), Replies: p.count.replies.Load(), Lost: p.count.lost.Load(),
		LocalDrops: p.count.localDrops.Load(), Late: p.count.late.Load(), Unmatched: p.count.unmatched.Load(),
	}
}

// StampKeys says how TX timestamps are matched to echoes: "opt_id" (each
// send names its key, Linux 6.13+) or "counted" (the kernel's per-socket
// counter, followed here; exact unless a send fails in an unforeseen way).
func (p *Pinger) StampKeys() string {
	if p.countedKeys.Load() {
		return "counted"
	}
	return "opt_id"
}

// Close releases the socket; call it after Run has returned.
func (p *Pinger) Close() error {
	if p.running.Load() {
		return errors.New("ping: Close while Run is running")
	}
	var errs []error
	if p.fd >= 0 {
		errs = append(errs, unix.Close(p.fd))
		p.fd = -1
	}
	if p.wake >= 0 {
		errs = append(errs, unix.Close(p.wake))
		p.wake = -1
	}
	return errors.Join(errs...)
}

// Run sends echoes every Interval and calls emit (on Run's goroutine) once
// per echo, when it is answered or lost, until ctx ends (or Count echoes are
// done). Echoes still in
// flight then are dropped without a Result. A send error other than a local
// drop is retried at the next interval, not returned: a route that is
// missing now may exist later. Run returns only for a broken socket.
func (p *Pinger) Run(ctx context.Context, emit func(Result)) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("ping: Run called twice")
	}
	defer p.running.Store(false)
	stop := context.AfterFunc(ctx, func() {
		var one [8]byte
		one[0] = 1 // little-endian 1: wakes the poll below
		_, _ = unix.Write(p.wake, one[:])
	})
	defer stop()
	l := newLoop(p, emit)
	return l.run(ctx)
}
