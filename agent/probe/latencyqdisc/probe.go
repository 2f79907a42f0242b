// Package latencyqdisc measures, per network device, how long packets wait
// between dev_queue_xmit and the driver: the qdisc's queue, which is where
// bufferbloat lives on a host.
//
// Its programs (bpf/latencyqdisc.bpf.c) run on every transmitted packet,
// so the probe loads them once (which is also how it finds out whether this
// kernel can run them) and attaches them only on request.
package latencyqdisc

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("qdisc sojourn probe closed")

// Options configure Load.
type Options struct {
	// NetnsInode restricts measuring to one network namespace's devices;
	// 0 measures every namespace.
	NetnsInode uint32
	Logger     *slog.Logger
}

// Device is a network device as the kernel identifies it.
type Device struct {
	Netns   uint32
	Ifindex uint32
	Name    string
}

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	Queued  uint64 // packets that entered dev_queue_xmit while attached
	Matched uint64 // of which timed to the driver
	DevFull uint64 // timed but not counted: the device table is full
	// Stale entries met at the driver: a packet reusing the address of one
	// dropped in the queue, or whose data moved since it was queued.
	Stale uint64
}

// Probe is the loaded pair of programs, attached or not.
type Probe struct {
	objs latencyqdiscObjects
	log  *slog.Logger

	mu     sync.Mutex
	bpf    bpfload.Object // attached and detached under mu; its Points are fixed at Load
	closed bool
}

// Load loads the programs without attaching them.
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := loadLatencyqdisc()
	if err != nil {
		return nil, fmt.Errorf("parse qdisc sojourn object: %w", err)
	}
	p := &Probe{log: log, bpf: bpfload.Object{
		Name: "qdisc sojourn", Log: log,
		Needs: "a kernel with BTF tracepoints net_dev_queue and net_dev_start_xmit",
	}}
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
// Packets queued before a previous Detach are forgotten, so none is timed
// across the gap.
func (p *Probe) Attach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("attach qdisc sojourn: %w", ErrClosed)
	}
	if p.bpf.Attached() {
		return nil
	}
	if err := emptyMap(p.objs.QdInflight); err != nil {
		return fmt.Errorf("attach qdisc sojourn: %w", err)
	}
	if err := p.bpf.Attach(); err != nil {
		return err
	}
	p.log.Info("qdisc sojourn attached")
	return nil
}

// emptyMap empties the in-flight table.
func emptyMap(m *ebpf.Map) error {
	var (
		keys []uint64
		k    uint64
		v    latencyqdiscNbsQdiscPkt
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("clear %s: %w", m, err)
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear %s: %w", m, err)
		}
	}
	return nil
}

// Detach stops measuring; the histograms keep what they counted.
func (p *Probe) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.bpf.Attached() {
		return nil
	}
	err := p.bpf.Detach()
	p.log.Info("qdisc sojourn detached")
	return err
}

// Attached says whether the programs are attached.
func (p *Probe) Attached() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bpf.Attached()
}

// Programs returns the programs by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Devices returns every device's cumulative sojourn histogram (nanoseconds).
func (p *Probe) Devices() (map[Device]bpfhist.Hist, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("read qdisc sojourn: %w", ErrClosed)
	}
	var (
		k   latencyqdiscNbsQdiscDev
		per []bpfhist.Hist
	)
	out := map[Device]bpfhist.Hist{}
	it := p.objs.QdHist.Iterate()
	for it.Next(&k, &per) {
		h, err := bpfload.Sum(per)
		if err != nil {
			return nil, fmt.Errorf("read qdisc sojourn devices: %w", err)
		}
		d := Device{Netns: k.Netns, Ifindex: k.Ifindex}
		var info latencyqdiscNbsQdiscDevInfo
		if err := p.objs.QdDevs.Lookup(k, &info); err == nil {
			d.Name = unix.ByteSliceToString(info.Name[:])
		}
		if d.Name == "" {
			d.Name = fmt.Sprintf("if%d", k.Ifindex)
		}
		out[d] = h
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read qdisc sojourn devices: %w", err)
	}
	return out, nil
}

// Stats returns the probe's counts.
func (p *Probe) Stats() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Stats{}, fmt.Errorf("read qdisc sojourn stats: %w", ErrClosed)
	}
	c, err := bpfload.LookupSum[latencyqdiscNbsQdiscStats](p.objs.QdStats, uint32(0))
	if err != nil {
		return Stats{}, fmt.Errorf("read qdisc sojourn stats: %w", err)
	}
	return Stats{Queued: c.Queued, Matched: c.Matched, DevFull: c.DevFull, Stale: c.Stale}, nil
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.bpf.Close()
}
