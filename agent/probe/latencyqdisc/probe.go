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
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
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
	links  []link.Link
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
	if err := spec.Variables[latencyqdiscVarTargetNetns].Set(opts.NetnsInode); err != nil {
		return nil, fmt.Errorf("set target_netns: %w", err)
	}
	p := &Probe{log: log}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			log.Debug("qdisc sojourn verifier log", "log", fmt.Sprintf("%+v", ve))
		}
		return nil, fmt.Errorf("load qdisc sojourn programs: %w (%s)", err, hint(err))
	}
	return p, nil
}

func hint(err error) string {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return "needs CAP_BPF and CAP_PERFMON, or root"
	}
	return "needs CAP_BPF/root and a kernel with BTF tracepoints net_dev_queue and net_dev_start_xmit"
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
	if len(p.links) > 0 {
		return nil
	}
	if err := emptyMap(p.objs.QdInflight); err != nil {
		return fmt.Errorf("attach qdisc sojourn: %w", err)
	}
	for _, a := range []struct {
		tp   string
		prog *ebpf.Program
	}{
		// The driver side first, so no packet is queued with nobody to
		// time its exit.
		{"net_dev_start_xmit", p.objs.NbsQdiscXmit},
		{"net_dev_queue", p.objs.NbsQdiscQueue},
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: a.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			p.detach()
			return fmt.Errorf("attach %s: %w (%s)", a.tp, err, hint(err))
		}
		p.links = append(p.links, l)
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
	if len(p.links) == 0 {
		return nil
	}
	err := p.detach()
	p.log.Info("qdisc sojourn detached")
	return err
}

func (p *Probe) detach() error {
	var errs []error
	for _, l := range p.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach qdisc sojourn program: %w", err))
		}
	}
	p.links = nil
	return errors.Join(errs...)
}

// Attached says whether the programs are attached.
func (p *Probe) Attached() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links) > 0
}

// Programs returns the programs by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		"net_dev_queue":      p.objs.NbsQdiscQueue,
		"net_dev_start_xmit": p.objs.NbsQdiscXmit,
	}
}

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
		var h bpfhist.Hist
		for i := range per {
			for b, n := range per[i] {
				h[b] += n
			}
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
	var per []latencyqdiscNbsQdiscStats
	if err := p.objs.QdStats.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("read qdisc sojourn stats: %w", err)
	}
	var s Stats
	for _, c := range per {
		s.Queued += c.Queued
		s.Matched += c.Matched
		s.DevFull += c.DevFull
		s.Stale += c.Stale
	}
	return s, nil
}

// Close detaches the programs and frees them and their maps.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return errors.Join(p.detach(), p.objs.Close())
}
