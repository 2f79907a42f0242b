// Package latencyqdisc measures, per network device, how long packets wait
// between dev_queue_xmit and the driver: the qdisc's queue, which is where
// bufferbloat lives on a host.
//
// Its programs (bpf/latencyqdisc.bpf.c) run on every transmitted packet,
// so the probe loads them once (which is also how it finds out whether this
// kernel can run them) and attaches them only on request.
package latencyqdisc

import (
	"fmt"
	"log/slog"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/devtable"
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

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	Queued  uint64 // packets that entered dev_queue_xmit while attached
	Matched uint64 // of which timed to the driver
	DevFull uint64 // timed but not counted: the device table is full
	// Stale: a packet met at the driver with the clock behind its queue
	// time (a step of the monotonic clock cannot happen; kept as a check).
	Stale uint64
	// Overwritten: a packet queued into an in-flight slot still held by
	// another, which is then not timed: one still queued (two packets in
	// flight hashed alike: at 2^17 slots about 0.8% of packets with 1,000
	// in flight), or one dropped in the queue, which never reached the
	// driver to free it.
	Overwritten uint64
	// Direct: of Matched, packets of devices without a qdisc, timed
	// through their CPU's last-queued entry rather than a slot.
	Direct uint64
}

// Probe is the loaded pair of programs, attached or not.
type Probe struct {
	objs  latencyqdiscObjects
	bpf   bpfload.Guarded
	epoch uint32
}

// Load loads the programs without attaching them.
func Load(opts Options) (*Probe, error) {
	spec, err := loadLatencyqdisc()
	if err != nil {
		return nil, fmt.Errorf("parse qdisc sojourn object: %w", err)
	}
	p := &Probe{epoch: 1, bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "qdisc sojourn", Log: opts.Logger, BTF: opts.BTF,
		Needs: "a kernel with BTF tracepoints net_dev_queue and net_dev_start_xmit",
	}}}
	// A new epoch for each attachment: packets queued before a Detach
	// never match their slots' tags after it, so none is timed across the
	// gap.
	p.bpf.BeforeAttach = func() error {
		p.epoch++
		if err := p.objs.Epoch.Set(p.epoch); err != nil {
			return fmt.Errorf("set qdisc sojourn epoch: %w", err)
		}
		return nil
	}
	if err := p.bpf.Load(spec, bpfload.Vars{latencyqdiscVarTargetNetns: opts.NetnsInode}, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		// The driver side first, so no packet is queued with nobody to
		// time its exit.
		bpfload.Tracepoint("net_dev_start_xmit", p.objs.NbsQdiscXmit),
		bpfload.Tracepoint("net_dev_queue", p.objs.NbsQdiscQueue),
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

// Devices returns every device's cumulative sojourn histogram (nanoseconds).
func (p *Probe) Devices() (map[Device]bpfhist.Hist, error) {
	out := map[Device]bpfhist.Hist{}
	err := p.bpf.Do("read qdisc sojourn devices", func() error {
		// Each device the programs met has an entry naming it and the
		// index of its histogram.
		return devtable.Each(p.objs.QdDevs, func(d Device, index uint32) error {
			h, err := bpfload.LookupSum[bpfhist.Hist](p.objs.QdHist, index)
			if err != nil {
				return fmt.Errorf("read the sojourn histogram of if%d: %w", d.Ifindex, err)
			}
			out[d] = h
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
	c, err := bpfload.GuardedSum[latencyqdiscNbsQdiscStats](&p.bpf, "read qdisc sojourn stats", p.objs.QdStats, uint32(0))
	if err != nil {
		return Stats{}, err
	}
	return Stats{Queued: c.Queued, Matched: c.Matched, DevFull: c.DevFull, Stale: c.Stale, Overwritten: c.Overwritten, Direct: c.Direct}, nil
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error { return p.bpf.Close() }
