// Package latencyrx measures receive-stack latency: how long received TCP
// and UDP data takes from the device to its socket's receive queue, and
// from there to the application's read.
//
// Its programs (bpf/latencyrx.bpf.c) run on every received packet, so the
// probe loads them once (which is also how it finds out whether this
// kernel can run them) and attaches them only on request.
package latencyrx

import (
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"

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
}

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
	Arrived uint64         // packets stamped at netif_receive_skb
	Stack   [Protos]uint64 // timed to their socket
	Read    [Protos]uint64 // timed to the application's read
	// Unmatched reached a socket without a stamp: their slot was taken by
	// another packet, or they arrived before the probe was attached.
	Unmatched uint64
	// UDPUnpaired counts UDP datagrams read whose queue time was not
	// found: more than 32 were waiting in their socket, or the datagram
	// was queued before the probe was attached.
	UDPUnpaired uint64
}

// Probe is the loaded programs, attached or not.
type Probe struct {
	objs  latencyrxObjects
	bpf   bpfload.Guarded
	epoch uint32
}

// Load loads the programs without attaching them.
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := loadLatencyrx()
	if err != nil {
		return nil, fmt.Errorf("parse receive latency object: %w", err)
	}
	p := &Probe{epoch: 1, bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "receive latency", Log: log, BTF: opts.BTF,
		Needs: "a kernel (6.10+ for sk_data_ready) with BTF tracepoints netif_receive_skb, tcp_probe, " +
			"skb_copy_datagram_iovec, sk_data_ready and sock_recv_length",
	}}}
	// A new epoch for each attachment: stamps of packets that arrived or
	// were queued before a Detach are never matched, so nothing is timed
	// across the gap.
	p.bpf.BeforeAttach = func() error {
		p.epoch++
		if err := p.objs.Epoch.Set(p.epoch); err != nil {
			return fmt.Errorf("set receive latency epoch: %w", err)
		}
		return nil
	}
	if err := p.bpf.Load(spec, bpfload.Vars{latencyrxVarTargetNetns: opts.NetnsInode}, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		// The consumers first, so no stamp is taken with nobody to
		// match it.
		bpfload.Tracepoint("sock_recv_length", p.objs.NbsRxRecv),
		bpfload.Tracepoint("skb_copy_datagram_iovec", p.objs.NbsRxCopy),
		bpfload.Tracepoint("sk_data_ready", p.objs.NbsRxReady),
		bpfload.Tracepoint("tcp_probe", p.objs.NbsRxTcp),
		bpfload.Tracepoint("netif_receive_skb", p.objs.NbsRxArrive),
	}
	return p, nil
}

// Attach starts measuring; attaching an attached probe does nothing.
func (p *Probe) Attach() error { return p.bpf.Attach() }

// Detach stops measuring; the histograms keep what they counted.
func (p *Probe) Detach() error { return p.bpf.Detach() }

// Attached says whether the programs are attached.
func (p *Probe) Attached() bool { return p.bpf.Attached() }

// Programs returns the programs by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Histograms returns the cumulative histograms.
func (p *Probe) Histograms() (*Hists, error) {
	var hs Hists
	err := p.bpf.Do("read receive latency histograms", func() error {
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

// Stats returns the probe's counts.
func (p *Probe) Stats() (Stats, error) {
	var c latencyrxNbsRxStats
	err := p.bpf.Do("read receive latency stats", func() (err error) {
		c, err = bpfload.LookupSum[latencyrxNbsRxStats](p.objs.RxStats, uint32(0))
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	return Stats{Arrived: c.Arrived, Stack: c.Stack, Read: c.Read, Unmatched: c.Unmatched, UDPUnpaired: c.UdpUnpaired}, nil
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error { return p.bpf.Close() }
