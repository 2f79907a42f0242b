// Package latencyecn counts the ECN codepoints of received packets per
// device and per peer (source address): the congestion-experienced (CE)
// marks the network set on them, and the ECN-capable packets it could have
// marked, the per-packet detail behind latency/ecn's /proc counters.
//
// Its program (bpf/latencyecn.bpf.c) runs on every received packet, so the
// probe loads it once (which is also how it finds out whether this kernel
// can run it) and attaches it only on request.
package latencyecn

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/devtable"
)

// Hook names the attach point as the agent branch shows it; prefixed so
// it differs from the other programs at netif_receive_skb.
const Hook = "ecn_netif_receive_skb"

// Options configure Load.
type Options struct {
	// NetnsInode restricts counting to one network namespace's devices;
	// 0 counts every namespace.
	NetnsInode uint32
	Logger     *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
}

// Peer is a source address as received by one device.
type Peer struct {
	Netns   uint32
	Ifindex uint32
	Device  string
	Addr    netip.Addr
}

// Counts are a peer's cumulative counts, summed over CPUs.
type Counts struct {
	ECT uint64 // ECN-capable packets not marked (ECT(0), ECT(1))
	CE  uint64 // packets marked CE
	// CESegments: the segments of the CE packets (GRO merges a flow's
	// segments into one packet; the kernel's InCEPkts counts each).
	CESegments uint64
}

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	ECN uint64 // ECN-capable IP packets in scope
}

// Probe is the loaded program, attached or not.
type Probe struct {
	objs latencyecnObjects
	bpf  bpfload.Guarded
}

// Load loads the program without attaching it.
func Load(opts Options) (*Probe, error) {
	spec, err := loadLatencyecn()
	if err != nil {
		return nil, fmt.Errorf("parse ECN marks object: %w", err)
	}
	p := &Probe{bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "ECN marks", Log: opts.Logger, BTF: opts.BTF,
		Needs: "a kernel with BTF tracepoint netif_receive_skb and the kfunc bpf_rdonly_cast",
	}}}
	if err := p.bpf.Load(spec, bpfload.Vars{latencyecnVarTargetNetns: opts.NetnsInode}, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{bpfload.Tracepoint(Hook, p.objs.NbsEcnReceive)}
	return p, nil
}

// Attach starts counting; attaching an attached probe does nothing.
func (p *Probe) Attach() error { return p.bpf.Attach() }

// Detach stops counting; the counts are kept.
func (p *Probe) Detach() error { return p.bpf.Detach() }

// Attached says whether the program is attached.
func (p *Probe) Attached() bool { return p.bpf.Attached() }

// Programs returns the program by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Peers returns every peer's cumulative counts. A peer the table evicted
// (the least recently seen, past 4,096) is absent until it sends again,
// from zero.
func (p *Probe) Peers() (map[Peer]Counts, error) {
	out := map[Peer]Counts{}
	err := p.bpf.Do("read ECN peers", func() error {
		names := map[uint64]string{}
		var (
			dk   uint64
			info latencyecnNbsEcnDevInfo
		)
		dit := p.objs.EcnDevs.Iterate()
		for dit.Next(&dk, &info) {
			names[dk] = unix.ByteSliceToString(info.Name[:])
		}
		if err := dit.Err(); err != nil {
			return fmt.Errorf("read ECN devices: %w", err)
		}
		var (
			k   latencyecnNbsEcnKey
			per []latencyecnNbsEcnCounts
		)
		it := p.objs.EcnPeers.Iterate()
		for it.Next(&k, &per) {
			c, err := bpfload.Sum(per)
			if err != nil {
				return err
			}
			pr := Peer{Netns: k.Netns, Ifindex: k.Ifindex, Device: devtable.Name(names[uint64(k.Netns)<<32|uint64(k.Ifindex)], k.Ifindex)}
			if k.Family == unix.AF_INET {
				pr.Addr = netip.AddrFrom4([4]byte(k.Addr[:4]))
			} else {
				pr.Addr = netip.AddrFrom16(k.Addr)
			}
			out[pr] = Counts{ECT: c.Ect, CE: c.Ce, CESegments: c.CeSegs}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read ECN peers: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Stats returns the probe's counts.
func (p *Probe) Stats() (Stats, error) {
	c, err := bpfload.GuardedSum[latencyecnNbsEcnStats](&p.bpf, "read ECN stats", p.objs.EcnStats, uint32(0))
	if err != nil {
		return Stats{}, err
	}
	return Stats{ECN: c.Ecn}, nil
}

// Close detaches the program and frees it and its maps.
func (p *Probe) Close() error { return p.bpf.Close() }
