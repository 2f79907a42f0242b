// Package latencytx measures where the host spends a TCP write's time on its
// way out — sendmsg → qdisc → driver → ACK — with BPF TX timestamping
// (Linux 6.15+) for a sample of connections.
//
// A cgroup sockops program (bpf/latencytx.bpf.c) picks 1 in SampleEvery
// connections of the cgroup's processes when they are established and turns
// timestamping on for those only; a tp_btf program on tcp_sendmsg_locked
// marks when each write starts. Stage latencies are counted in kernel
// histograms in the shared log-linear layout; user space only reads.
package latencytx

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// Stage is one leg of a write's way out.
type Stage int

// The values are enum nbs_tx_stage of the BPF program.
const (
	SendmsgToQdisc  Stage = iota // start of the write → dev_queue_xmit (TCP write queue, cwnd, pacing)
	QdiscToDriver                // dev_queue_xmit → driver (qdisc queueing, device busy)
	DriverToAck                  // driver → the peer's ACK (network and peer)
	SendmsgToDriver              // start of the write → driver: the host's share
	Stages
)

func (s Stage) String() string {
	switch s {
	case SendmsgToQdisc:
		return "sendmsg_to_qdisc"
	case QdiscToDriver:
		return "qdisc_to_driver"
	case DriverToAck:
		return "driver_to_ack"
	case SendmsgToDriver:
		return "sendmsg_to_driver"
	}
	return fmt.Sprintf("stage_%d", int(s))
}

// Options configure Load.
type Options struct {
	// CgroupPath is the cgroup v2 directory whose processes' connections
	// are sampled (with its descendants); cgroupv2.Root covers the node.
	CgroupPath string
	// NetnsInode restricts sampling to one network namespace; 0 samples
	// every namespace.
	NetnsInode uint32
	// SampleEvery times 1 in this many connections (1 = every one).
	SampleEvery uint32
	Logger      *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
}

// Stats are the probe's event counts, cumulative, summed over CPUs. The
// fields are those of struct nbs_tx_stats in bpf/latencytx.bpf.c.
type Stats latencytxNbsTxStats

// objects are the parts of the BPF object every kernel with TX timestamping
// can load; the sendmsg tracepoint is loaded apart because it is newer.
type objects struct {
	Sockops *ebpf.Program `ebpf:"nbs_tx_sockops"`
	latencytxMaps
}

func (o *objects) Close() error { return errors.Join(o.Sockops.Close(), o.latencytxMaps.Close()) }

type sendmsgObjects struct {
	Sendmsg *ebpf.Program `ebpf:"nbs_tx_sendmsg"`
}

func (o *sendmsgObjects) Close() error { return o.Sendmsg.Close() }

// Probe is the loaded and attached pair of programs.
type Probe struct {
	objs    objects
	bpf     bpfload.Guarded // with the sendmsg program when the kernel has tcp_sendmsg_locked
	partial string
}

// Load checks the kernel, loads the programs and attaches them. A kernel
// without BPF TX timestamping gets an error saying so; one without the
// tcp_sendmsg_locked tracepoint gets a probe that starts each write's clock
// at the end of sendmsg instead (see Partial).
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.SampleEvery == 0 {
		return nil, errors.New("load tcp tx timestamping: SampleEvery must be at least 1")
	}
	if opts.CgroupPath == "" {
		return nil, errors.New("load tcp tx timestamping: no cgroup path")
	}
	kernel, err := opts.BTF.Spec()
	if err != nil {
		return nil, fmt.Errorf("load tcp tx timestamping: read kernel BTF: %w", err)
	}
	var fn *btf.Func
	if err := kernel.TypeByName("bpf_sock_ops_enable_tx_tstamp", &fn); err != nil {
		return nil, fmt.Errorf("load tcp tx timestamping: kernel has no BPF TX timestamping (kfunc bpf_sock_ops_enable_tx_tstamp, Linux 6.15+): %w", err)
	}
	var tp *btf.Typedef
	haveSendmsg := kernel.TypeByName("btf_trace_tcp_sendmsg_locked", &tp) == nil

	spec, err := loadLatencytx()
	if err != nil {
		return nil, fmt.Errorf("parse tcp tx object: %w", err)
	}
	p := &Probe{bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "tcp tx", Log: log, BTF: opts.BTF, Caps: "CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON",
		Needs: "a kernel (6.15+) with BPF TX timestamping and cgroup v2",
	}}}
	vars := bpfload.Vars{latencytxVarTargetNetns: opts.NetnsInode, latencytxVarSampleEvery: opts.SampleEvery}
	if err := p.bpf.Load(spec, vars, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		bpfload.Cgroup("sockops_tx_timestamping", opts.CgroupPath, ebpf.AttachCGroupSockOps, p.objs.Sockops),
	}
	if haveSendmsg {
		var so sendmsgObjects
		err := p.bpf.Load(spec, nil, &so, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
			latencytxMapTxSock: p.objs.TxSock, latencytxMapTxHist: p.objs.TxHist, latencytxMapTxStats: p.objs.TxStats,
		}})
		if err != nil {
			return nil, err
		}
		p.bpf.Points = append(p.bpf.Points, bpfload.Tracepoint("tcp_sendmsg_locked", so.Sendmsg))
	} else {
		p.partial = "kernel has no tcp_sendmsg_locked tracepoint (Linux 6.11+): writes are timed from the end of sendmsg, so sendmsg_to_qdisc misses the copy"
		log.Warn("tcp tx timestamping: " + p.partial)
	}
	if err := p.bpf.AttachOrClose(); err != nil {
		return nil, err
	}
	log.Info("tcp tx timestamping sampling", "cgroup", opts.CgroupPath, "netns", opts.NetnsInode, "sample_every", opts.SampleEvery)
	return p, nil
}

// Partial says what the probe cannot measure on this kernel; empty when
// everything works.
func (p *Probe) Partial() string { return p.partial }

// Programs returns the loaded programs by attach point, for run-time
// statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Histograms returns each stage's cumulative histogram, summed over CPUs.
func (p *Probe) Histograms() ([Stages]bpfhist.Hist, error) {
	var out [Stages]bpfhist.Hist
	err := p.bpf.Do("read tcp tx histograms", func() error {
		for s := Stage(0); s < Stages; s++ {
			h, _, err := bpfhist.Lookup(p.objs.TxHist, uint32(s))
			if err != nil {
				return fmt.Errorf("stage %s: %w", s, err)
			}
			out[s] = h
		}
		return nil
	})
	return out, err
}

// Stats returns the probe's event counts.
func (p *Probe) Stats() (Stats, error) {
	var sum Stats
	err := p.bpf.Do("read tcp tx stats", func() (err error) {
		sum, err = bpfload.LookupSum[Stats](p.objs.TxStats, uint32(0))
		return err
	})
	return sum, err
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error { return p.bpf.Close() }
