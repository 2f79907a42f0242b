// Package latency counts TCP retransmitted segments and retransmission
// timeouts exactly as the kernel's own counters (TcpRetransSegs,
// TcpExtTCPTimeouts) do, but for every namespace or one chosen namespace,
// whichever the agent watches.
//
// It attaches tp_btf programs to tcp_retransmit_skb and
// tcp_retransmit_synack (bpf/latency.bpf.c). Per event, the first sums the
// growth of the socket's own total_retrans and total_rto counters, keeping
// the last values in socket-local storage; see the C file for why this is
// exact where counting events or segments is not.
package latency

import (
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// Options configure Load.
type Options struct {
	// NetnsInode restricts counting to one network namespace (its inode,
	// as netns.Handle.Inode); 0 counts every namespace.
	NetnsInode uint32
	Logger     *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
	// PinDir is this probe's own bpffs directory: its maps and links are
	// pinned there, so it goes on counting between agents, and the next
	// agent adopts them (bpfload's pin.go); empty pins nothing.
	PinDir string
}

// Counts are cumulative since the maps were made (by this load, or by a
// previous agent's whose pins it adopted), summed over CPUs.
type Counts struct {
	// Segments retransmitted by full sockets (data, SYN, FIN, tail loss
	// probes), as tcp_sock.total_retrans counts them.
	Segments uint64
	// SynAcks retransmitted, mostly for half-open connections (request
	// sockets, which have no total_retrans).
	SynAcks uint64
	// RTOs are retransmission timeouts of full sockets (tcp_sock.total_rto),
	// including those of TCP Fast Open sockets seen on their SYN-ACKs.
	RTOs uint64
	// Events are tcp_retransmit_skb hits; Failed of them sent nothing
	// (err != 0, e.g. the previous copy still in a local queue).
	Events, Failed uint64
	// FirstSeen counts sockets seen for the first time; NoStorage counts
	// events whose socket storage could not be allocated (then the skb's
	// segment count was used, which can undercount).
	FirstSeen, NoStorage uint64
}

// Retransmits is what TcpRetransSegs counts: Segments + SynAcks.
func (c Counts) Retransmits() uint64 { return c.Segments + c.SynAcks }

// Probe is the loaded and attached pair of programs.
type Probe struct {
	objs latencyObjects
	bpf  bpfload.Guarded
}

// Load loads and attaches both programs; its error says whether this
// kernel can run them (see bpfload).
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := loadLatency()
	if err != nil {
		return nil, fmt.Errorf("parse retrans object: %w", err)
	}
	p := &Probe{bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "retrans", Log: log, BTF: opts.BTF, PinDir: opts.PinDir,
		Needs: "a kernel (6.7+ for tcp_sock.total_rto) with BTF tracepoints tcp_retransmit_skb and tcp_retransmit_synack and socket storage",
	}}}
	if err := p.bpf.Load(spec, bpfload.Vars{latencyVarTargetNetns: opts.NetnsInode}, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		bpfload.Tracepoint("tcp_retransmit_skb", p.objs.NbsTcpRetransmitSkb),
		bpfload.Tracepoint("tcp_retransmit_synack", p.objs.NbsTcpRetransmitSynack),
	}
	if err := p.bpf.AttachOrClose(); err != nil {
		return nil, err
	}
	log.Info("retrans probe counting", "netns", opts.NetnsInode)
	return p, nil
}

// Continued says whether the counts continue those of a previous agent:
// every pinned map was adopted. The socket storage is adopted with the
// counts, so a socket's growth while no agent ran is counted once.
func (p *Probe) Continued() bool { return p.bpf.Continued() }

// Programs returns the programs by tracepoint name, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Counts returns the cumulative counts.
func (p *Probe) Counts() (Counts, error) {
	var v latencyNbsRtxCounts
	err := p.bpf.Do("read retrans counts", func() (err error) {
		v, err = bpfload.LookupSum[latencyNbsRtxCounts](p.objs.RtxCounts, uint32(0))
		return err
	})
	if err != nil {
		return Counts{}, err
	}
	return Counts{
		Segments: v.Segs, SynAcks: v.Synack, RTOs: v.Rtos + v.SynackRtos,
		Events: v.Events, Failed: v.Failed, FirstSeen: v.FirstSeen, NoStorage: v.NoStorage,
	}, nil
}

// Close detaches the programs and frees the maps; pinned ones go on
// counting in the kernel for the next agent.
func (p *Probe) Close() error { return p.bpf.Close() }
