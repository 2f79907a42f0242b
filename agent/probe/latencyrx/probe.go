// Package latencyrx measures receive-stack latency: how long received TCP
// and UDP data takes from the kernel's receive timestamp to its socket's
// receive queue, and from there to the application's read.
//
// Its programs (bpf/latencyrx.bpf.c) compare the kernel's own software RX
// timestamp (skb->tstamp) with the real-time clock where a packet reaches
// its socket and where it is read, as netstacklat does; the probe keeps a
// socket with SOF_TIMESTAMPING_RX_SOFTWARE open while attached, which makes
// the kernel stamp every received packet on the host.
package latencyrx

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// Options configure Load.
type Options struct {
	// NetnsInode restricts measuring to packets arriving in one network
	// namespace; 0 measures every namespace.
	NetnsInode uint32
	Logger     *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
	// ReadSample keeps the queue time, and so times the read, for 1 in
	// ReadSample TCP segments and UDP sockets, and times packets to their
	// socket (the Stack histograms) for 1 in ReadSample by a hash of their
	// RX stamp (for TCP the same segments): a power of two from 1 (every
	// one, the oracle tests' exact mode) to MaxReadSample; 0 means
	// DefaultReadSample.
	ReadSample int
}

// DefaultReadSample is the sample the agent runs with: keeping a queue
// time (a slot write for TCP, a socket-storage lookup and FIFO write for
// UDP) is the work beyond netstacklat's, and filing a time in the
// log-linear histogram touches more cache lines than netstacklat's log2
// one; at 1 in 16 tcp_probe costs about half the netstacklat-shaped peer's
// run (BENCHMARKS.md), while a busy TCP connection still gives its
// percentiles within seconds. UDP is sampled by socket (pairing by
// position needs every datagram of one), salted at each load.
const DefaultReadSample = 16

// MaxReadSample bounds ReadSample.
const MaxReadSample = 1024

// Proto is a transport protocol the probe times.
type Proto int

const (
	TCP Proto = iota
	UDP
	Protos
)

func (p Proto) String() string { return [...]string{"tcp", "udp"}[p] }

// Kind is what a histogram times.
type Kind int

const (
	Stack Kind = iota // arrival (netif_receive_skb) to the socket's receive queue
	Read              // the socket's receive queue to the application's read
	Total             // arrival to the read, for data whose arrival was seen
	Kinds
)

// Hists are the cumulative histograms (nanoseconds) by protocol and kind.
type Hists [Protos][Kinds]bpfhist.Hist

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	Stack [Protos]uint64 // timed to their socket (the sample's)
	Read  [Protos]uint64 // timed to the application's read
	// Unstamped reached a socket without a real-time RX timestamp: the
	// kernel had not yet turned timestamps on, or the field still held a
	// sender's monotonic delivery time.
	Unstamped uint64
	// Overwritten counts sampled TCP reads whose queue time was lost: a
	// newer sampled segment took its slot (more than 256 sampled data
	// skbs, about 256 × the read sample of all, were waiting in the
	// namespace's receive queues, or two shared a slot), or it was queued
	// before the probe was attached.
	Overwritten uint64
	// UDPUnpaired counts UDP datagrams read whose queue time was not
	// found: more than 32 were waiting in their socket, or the datagram
	// was queued before the probe was attached.
	UDPUnpaired uint64
	// Sampled counts the queue times kept (TCP data segments, datagrams
	// of sampled UDP sockets): Read counts those of them timed to a read.
	Sampled [Protos]uint64
	// Scoped says Runs are counted: with Options.NetnsInode only, since
	// without it every run is in scope and the kernel's count of every
	// run (Program.Stats) is the source's work.
	Scoped bool
	// Runs are each program's runs in scope (past its namespace test), in
	// the order of Hooks, when Scoped.
	Runs [len(Hooks)]uint64
}

// Hooks are the programs' attach points, in the order of Stats.Runs (runs[]
// in bpf/latencyrx.bpf.c).
var Hooks = [...]string{"tcp_probe", "skb_copy_datagram_iovec", "sk_data_ready", "sock_recv_length"}

// Probe is the loaded programs, attached or not.
type Probe struct {
	objs   latencyrxObjects
	bpf    bpfload.Guarded
	epoch  uint32
	scoped bool
	sample int // the sample Load was given
	now    int // the sample the programs run with (SetReadSample)
	log    *slog.Logger
	// stamps is the socket with RX software timestamps on that makes the
	// kernel stamp every received packet; -1 while detached.
	stamps int
}

// Load loads the programs without attaching them.
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sample := opts.ReadSample
	if sample == 0 {
		sample = DefaultReadSample
	}
	if sample < 1 || sample > MaxReadSample || sample&(sample-1) != 0 {
		return nil, fmt.Errorf("receive latency read sample %d: want a power of two from 1 to %d", opts.ReadSample, MaxReadSample)
	}
	spec, err := loadLatencyrx()
	if err != nil {
		return nil, fmt.Errorf("parse receive latency object: %w", err)
	}
	p := &Probe{epoch: 1, log: log, stamps: -1, scoped: opts.NetnsInode != 0, sample: sample, now: sample, bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "receive latency", Log: log, BTF: opts.BTF,
		Needs: "a kernel (6.10+ for sk_data_ready) with BTF tracepoints tcp_probe, " +
			"skb_copy_datagram_iovec, sk_data_ready and sock_recv_length",
	}}}
	// A new epoch for each attachment: queue times of packets queued
	// before a Detach are never matched, so nothing is timed across the
	// gap. The kernel's RX timestamps go on first.
	p.bpf.BeforeAttach = func() error {
		if err := p.setTAIOffset(); err != nil {
			return err
		}
		p.epoch++
		if err := p.objs.Epoch.Set(p.epoch); err != nil {
			return fmt.Errorf("set receive latency epoch: %w", err)
		}
		return p.enableStamps()
	}
	p.bpf.BeforeClose = func() error { p.disableStamps(); return nil }
	if err := p.bpf.Load(spec, bpfload.Vars{
		latencyrxVarTargetNetns: opts.NetnsInode, latencyrxVarReadSampleMask: uint32(sample - 1),
		latencyrxVarReadSampleSalt: rand.Uint64()}, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		// The consumers first, so no queue time is kept with nobody to
		// match it.
		bpfload.Tracepoint("sock_recv_length", p.objs.NbsRxRecv),
		bpfload.Tracepoint("skb_copy_datagram_iovec", p.objs.NbsRxCopy),
		bpfload.Tracepoint("sk_data_ready", p.objs.NbsRxReady),
		bpfload.Tracepoint("tcp_probe", p.objs.NbsRxTcp),
	}
	return p, nil
}

// setTAIOffset gives the programs CLOCK_TAI - CLOCK_REALTIME, which turns
// the TAI clock they read into skb->tstamp's real-time one. It changes
// only with a leap second; Histograms sets it again at every collection.
func (p *Probe) setTAIOffset() error {
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("read the TAI offset (adjtimex): %w", err)
	}
	if err := p.objs.TaiOffsetNs.Set(int64(tx.Tai) * int64(time.Second)); err != nil {
		return fmt.Errorf("set the TAI offset: %w", err)
	}
	return nil
}

// stampWait bounds how long Attach waits for the kernel to start stamping
// received packets (a static key it flips from a work queue).
const stampWait = time.Second

// enableStamps opens a socket with software RX timestamps on: while any
// socket asks for them, the kernel stamps every packet it receives, on
// every namespace (Documentation/networking/timestamping.rst). It then
// waits, at most stampWait, until a datagram to itself on loopback comes
// back stamped, so packets right after Attach are timed; without loopback
// it logs and goes on.
func (p *Probe) enableStamps() error {
	if p.stamps >= 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open the RX timestamping socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING,
		unix.SOF_TIMESTAMPING_RX_SOFTWARE|unix.SOF_TIMESTAMPING_SOFTWARE); err != nil {
		unix.Close(fd)
		return fmt.Errorf("turn RX software timestamps on (SO_TIMESTAMPING): %w", err)
	}
	p.stamps = fd
	if err := waitStamped(fd, stampWait); err != nil {
		p.log.Warn("receive latency: could not see the kernel's RX timestamps come on; the first packets may go untimed", "err", err)
	}
	return nil
}

// waitStamped sends datagrams to fd over loopback until one comes back with
// a software RX timestamp.
func waitStamped(fd int, limit time.Duration) error {
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("bind to loopback: %w", err)
	}
	self, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	buf, oob := make([]byte, 16), make([]byte, 256)
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err := unix.Sendto(fd, []byte("stamp?"), 0, self); err != nil {
			return fmt.Errorf("send to self: %w", err)
		}
		for {
			_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				return fmt.Errorf("receive from self: %w", err)
			}
			if stamped(oob[:oobn]) {
				return nil
			}
		}
	}
	return fmt.Errorf("no stamped datagram within %s", limit)
}

// stamped says whether control messages carry a non-zero software stamp.
func stamped(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPING && len(m.Data) >= 16 {
			for _, b := range m.Data[:16] {
				if b != 0 {
					return true
				}
			}
		}
	}
	return false
}

// disableStamps closes the timestamping socket: the kernel stops stamping
// once no socket on the host asks for it.
func (p *Probe) disableStamps() {
	if p.stamps >= 0 {
		unix.Close(p.stamps)
		p.stamps = -1
	}
}

// Attach turns the kernel's RX timestamps on and starts measuring;
// attaching an attached probe does nothing. If the programs cannot attach,
// the timestamps go off again.
func (p *Probe) Attach() error {
	err := p.bpf.Attach()
	if err != nil && !p.bpf.Attached() {
		_ = p.bpf.Do("close the RX timestamping socket", func() error { p.disableStamps(); return nil })
	}
	return err
}

// Detach stops measuring and gives up the kernel's RX timestamps; the
// histograms keep what they counted. Attach and Detach are not called
// concurrently (source.Triggered holds its lock around both).
func (p *Probe) Detach() error {
	err := p.bpf.Detach()
	_ = p.bpf.Do("close the RX timestamping socket", func() error { p.disableStamps(); return nil })
	return err
}

// ReadSample is the 1-in-N rate every histogram samples (UDP's read and
// total by socket, the rest by packet) now: Options.ReadSample, or what
// SetReadSample set.
func (p *Probe) ReadSample() int {
	var n int
	_ = p.bpf.Do("read the receive latency sample", func() error { n = p.now; return nil })
	return n
}

// SetReadSample changes the sample while the programs run, without
// reloading them: 1 times every packet and every UDP socket (an operator's
// expand, so the one slow socket the 1-in-16 choice left out is timed);
// Options.ReadSample's value goes back to the sample. n is a power of two
// from 1 to MaxReadSample; 0 means the sample Load was given.
//
// The change takes a new epoch, as an attachment does: queue times kept
// under the old sample are never matched under the new one, so a UDP
// socket that enters the sample with datagrams already waiting (kept by
// nobody) is never paired with the wrong one; reads in flight at the
// switch go untimed (or, for TCP, counted as Overwritten).
func (p *Probe) SetReadSample(n int) error {
	if n == 0 {
		n = p.sample
	}
	if n < 1 || n > MaxReadSample || n&(n-1) != 0 {
		return fmt.Errorf("receive latency read sample %d: want a power of two from 1 to %d", n, MaxReadSample)
	}
	return p.bpf.Do("set the receive latency sample", func() error {
		if n == p.now {
			return nil
		}
		if err := p.objs.ReadSampleMask.Set(uint32(n - 1)); err != nil {
			return fmt.Errorf("set the receive latency sample: %w", err)
		}
		p.epoch++
		if err := p.objs.Epoch.Set(p.epoch); err != nil {
			return fmt.Errorf("set receive latency epoch: %w", err)
		}
		p.now = n
		return nil
	})
}

// Attached says whether the programs are attached.
func (p *Probe) Attached() bool { return p.bpf.Attached() }

// Programs returns the programs by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Histograms returns the cumulative histograms.
func (p *Probe) Histograms() (*Hists, error) {
	var hs Hists
	err := p.bpf.Do("read receive latency histograms", func() error {
		// A leap second changes the offset: catch it once per collection.
		if err := p.setTAIOffset(); err != nil {
			p.log.Warn("receive latency: TAI offset not refreshed", "err", err)
		}
		for proto := range Protos {
			for kind := range Kinds {
				h, _, err := bpfhist.Lookup(p.objs.RxHist, uint32(int(proto)*int(Kinds)+int(kind)))
				if err != nil {
					return err
				}
				hs[proto][kind] = h
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &hs, nil
}

// Stats returns the probe's counts. What was timed is counted by the
// histograms (the programs keep no counter on the path every packet takes).
func (p *Probe) Stats() (Stats, error) {
	var c latencyrxNbsRxStats
	err := p.bpf.Do("read receive latency stats", func() (err error) {
		c, err = bpfload.LookupSum[latencyrxNbsRxStats](p.objs.RxStats, uint32(0))
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	hs, err := p.Histograms()
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Unstamped: c.Unstamped, Overwritten: c.Overwritten, UDPUnpaired: c.UdpUnpaired,
		Sampled: c.Sampled, Scoped: p.scoped, Runs: c.Runs}
	for proto := range Protos {
		st.Stack[proto] = total(&hs[proto][Stack])
		st.Read[proto] = total(&hs[proto][Read])
	}
	return st, nil
}

// Scoped says whether the probe counts one namespace, so that Stats'
// Runs count runs in scope apart from all.
func (p *Probe) Scoped() bool { return p.scoped }

// total is a histogram's count.
func total(h *bpfhist.Hist) uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error { return p.bpf.Close() }
