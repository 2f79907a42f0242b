// Package latencysizes measures, per network device, the sizes of the
// packets the stack hands it, of those its driver is handed, and of those
// the stack receives from it: whether segmentation and receive offloads
// (TSO/GSO, GRO) work, the shape of the netsize tool of the BPF
// Performance Tools book.
//
// Its programs (bpf/latencysizes.bpf.c) run on every packet, so the probe
// loads them once (which is also how it finds out whether this kernel can
// run them) and attaches them only on request.
package latencysizes

import (
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/devtable"
)

// Directions, the index of a device's histograms and counts
// (NBS_SIZES_SENT, _XMIT, _RECV).
const (
	Sent     = 0 // handed to the device by the stack (net_dev_queue)
	Xmit     = 1 // handed to the device's driver (net_dev_xmit)
	Received = 2 // taken in by the stack from the device (netif_receive_skb)
	dirs     = 3
)

// Names of the attach points, as the agent branch shows them; prefixed so
// they differ from latency/qdisc's and dns's programs at the same
// tracepoints.
const (
	HookQueue   = "sizes_net_dev_queue"
	HookXmit    = "sizes_net_dev_xmit"
	HookReceive = "sizes_netif_receive_skb"
)

// Options configure Load.
type Options struct {
	// NetnsInode restricts measuring to one network namespace's devices;
	// 0 measures every namespace.
	NetnsInode uint32
	Logger     *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
}

// Device is a network device as the kernel identifies it.
type Device = devtable.Device

// Counts are a direction's exact counts, cumulative, summed over CPUs.
type Counts struct {
	Packets, Bytes uint64 // what `ip -s link` counts (less the Ethernet header received)
	// GSOPackets: packets carrying a gso_size (TCP, or GRO, put more than
	// one segment in them); GSOSegs their segments. Not kept for Xmit.
	GSOPackets, GSOSegs uint64
}

// Sizes are one device's cumulative size histograms (bytes) and counts, by
// direction (Sent, Xmit, Received).
type Sizes struct {
	Hist   [dirs]bpfhist.Hist
	Counts [dirs]Counts
}

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	DevFull uint64 // packets not counted: the device table is full
}

// Probe is the loaded programs, attached or not.
type Probe struct {
	objs latencysizesObjects
	bpf  bpfload.Guarded
}

// Load loads the programs without attaching them.
func Load(opts Options) (*Probe, error) {
	spec, err := loadLatencysizes()
	if err != nil {
		return nil, fmt.Errorf("parse packet sizes object: %w", err)
	}
	p := &Probe{bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "packet sizes", Log: opts.Logger, BTF: opts.BTF,
		Needs: "a kernel with BTF tracepoints net_dev_queue, net_dev_xmit and netif_receive_skb",
	}}}
	if err := p.bpf.Load(spec, bpfload.Vars{latencysizesVarTargetNetns: opts.NetnsInode}, &p.objs, nil); err != nil {
		return nil, err
	}
	// Each program counts on its own: no order matters.
	p.bpf.Points = []bpfload.Point{
		bpfload.Tracepoint(HookQueue, p.objs.NbsSizesQueue),
		bpfload.Tracepoint(HookXmit, p.objs.NbsSizesXmit),
		bpfload.Tracepoint(HookReceive, p.objs.NbsSizesReceive),
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

// Devices returns every device's cumulative sizes.
func (p *Probe) Devices() (map[Device]*Sizes, error) {
	out := map[Device]*Sizes{}
	err := p.bpf.Do("read packet sizes devices", func() error {
		return devtable.Each(p.objs.SzDevs, func(d Device, index uint32) error {
			s := &Sizes{}
			for dir := range uint32(dirs) {
				i := index*dirs + dir
				h, err := bpfload.LookupSum[bpfhist.Hist](p.objs.SzHist, i)
				if err != nil {
					return fmt.Errorf("read the size histogram of if%d: %w", d.Ifindex, err)
				}
				c, err := bpfload.LookupSum[latencysizesNbsSizesCounts](p.objs.SzCounts, i)
				if err != nil {
					return fmt.Errorf("read the size counts of if%d: %w", d.Ifindex, err)
				}
				s.Hist[dir] = h
				s.Counts[dir] = Counts{Packets: c.Packets, Bytes: c.Bytes, GSOPackets: c.GsoPackets, GSOSegs: c.GsoSegs}
			}
			out[d] = s
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Stats returns the probe's counts.
func (p *Probe) Stats() (Stats, error) {
	c, err := bpfload.GuardedSum[latencysizesNbsSizesStats](&p.bpf, "read packet sizes stats", p.objs.SzStats, uint32(0))
	if err != nil {
		return Stats{}, err
	}
	return Stats{DevFull: c.DevFull}, nil
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error { return p.bpf.Close() }
