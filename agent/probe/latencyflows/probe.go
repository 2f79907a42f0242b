// Package latencyflows samples each TCP flow's smoothed RTT, congestion window
// and retransmit total from the tcp_probe tracepoint, rate-limited per flow
// and per CPU in the kernel (bpf/latencyflows.bpf.c). It is the latency
// branch's per-flow detail: which flows retransmit most, and how slow they
// are.
//
// tcp_probe fires for every received segment, so the probe loads its
// program once and attaches it only on request.
package latencyflows

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/evidence"
)

// Defaults for Options left zero.
const (
	DefaultMinGap        = 100 * time.Millisecond
	DefaultSamplesPerSec = 1000
)

// Options configure Load.
type Options struct {
	// NetnsInode restricts sampling to one network namespace; 0 samples
	// every namespace.
	NetnsInode uint32
	// MinGap is the shortest time between two samples of one flow.
	MinGap time.Duration
	// SamplesPerSec caps samples per second on each CPU.
	SamplesPerSec uint32
	Logger        *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
}

// Flow is one flow's latest sample. Src is this host's end.
type Flow struct {
	Cookie   uint64
	Netns    uint32
	Src, Dst netip.AddrPort
	SRTT     time.Duration
	RTTVar   time.Duration
	MinRTT   time.Duration
	Cwnd     uint32
	// TotalRetrans counts segments retransmitted over the flow's life;
	// FirstRetrans is what it was when the probe first sampled the flow.
	TotalRetrans uint32
	FirstRetrans uint32
	// LastNs is when it was last sampled (CLOCK_MONOTONIC nanoseconds).
	LastNs  uint64
	Samples uint64
}

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	Seen       uint64 // tcp_probe hits in scope while attached
	Considered uint64 // of which past the once-a-tick gate, to the per-flow gap
	Sampled    uint64
	Suppressed uint64 // samples withheld by the per-CPU rate limit
	TableFull  uint64
}

// Probe is the loaded program, attached or not.
type Probe struct {
	objs latencyflowsObjects
	bpf  bpfload.Guarded

	// read reads the table in batches (bpfload.Batch): it is read whole
	// every collection while the probe is attached, up to 8,192 flows on
	// a busy node, which read one by one (a key, then its value) was two
	// system calls a flow, and the flows were a slice of their own.
	read bpfload.Batch[uint64, latencyflowsNbsFlow]
	// noBatch is set where the kernel has no batch delete (before 5.6).
	noBatch bool
}

// Load loads the program without attaching it.
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.MinGap <= 0 {
		opts.MinGap = DefaultMinGap
	}
	if opts.SamplesPerSec == 0 {
		opts.SamplesPerSec = DefaultSamplesPerSec
	}
	spec, err := loadLatencyflows()
	if err != nil {
		return nil, fmt.Errorf("parse tcp flows object: %w", err)
	}
	p := &Probe{bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "tcp flows", Log: log, BTF: opts.BTF,
		Needs: "a kernel with the BTF tracepoint tcp_probe and socket storage",
	}}}
	// Each attachment starts with an empty flow table.
	p.bpf.BeforeAttach = func() error { return p.forget(func(Flow) bool { return true }) }
	vars := bpfload.Vars{
		latencyflowsVarTargetNetns:   opts.NetnsInode,
		latencyflowsVarMinGapNs:      uint64(opts.MinGap.Nanoseconds()),
		latencyflowsVarSamplesPerSec: opts.SamplesPerSec,
	}
	if err := p.bpf.Load(spec, vars, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{bpfload.Tracepoint("tcp_probe", p.objs.NbsFlowProbe)}
	return p, nil
}

// Attach starts sampling, with an empty flow table; attaching an attached
// probe does nothing.
func (p *Probe) Attach() error { return p.bpf.Attach() }

// Detach stops sampling.
func (p *Probe) Detach() error { return p.bpf.Detach() }

// Attached says whether the program is attached.
func (p *Probe) Attached() bool { return p.bpf.Attached() }

// Programs returns the program by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Flows returns every flow in the table.
func (p *Probe) Flows() ([]Flow, error) {
	var out []Flow
	err := p.EachFlow(func(f Flow) { out = append(out, f) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachFlow calls fn with every flow in the table, without a slice of them
// (a full table is 8,192 flows, read every collection).
func (p *Probe) EachFlow(fn func(Flow)) error {
	return p.bpf.Do("read tcp flows", func() error {
		return p.read.Each(p.objs.Flows, func(k uint64, v *latencyflowsNbsFlow) { fn(decode(k, v)) })
	})
}

// Delete removes flows by their cookies (flows an earlier Flows listed that
// were not sampled for a while), with one system call where the kernel
// can: a caller that just read the table needs no second pass over it, as
// Forget makes.
func (p *Probe) Delete(cookies []uint64) error {
	if len(cookies) == 0 {
		return nil
	}
	return p.bpf.Do("forget tcp flows", func() error {
		if !p.noBatch {
			// Where one went meanwhile (ENOENT), the batch stops there:
			// the rest one by one.
			_, err := p.objs.Flows.BatchDelete(cookies, nil)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, ebpf.ErrKeyNotExist):
			case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EINVAL):
				p.noBatch = true
			default:
				return fmt.Errorf("forget tcp flows: %w", err)
			}
		}
		for _, c := range cookies {
			if err := p.objs.Flows.Delete(c); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("forget tcp flows: %w", err)
			}
		}
		return nil
	})
}

func decode(cookie uint64, v *latencyflowsNbsFlow) Flow {
	return Flow{
		Cookie: cookie, Netns: v.Netns,
		Src:  evidence.AddrPort(v.Family, v.Saddr, v.Sport),
		Dst:  evidence.AddrPort(v.Family, v.Daddr, v.Dport),
		SRTT: time.Duration(v.SrttUs) * time.Microsecond, RTTVar: time.Duration(v.RttvarUs) * time.Microsecond,
		MinRTT: time.Duration(v.MinRttUs) * time.Microsecond, Cwnd: v.SndCwnd,
		TotalRetrans: v.TotalRetrans, FirstRetrans: v.FirstRetrans, LastNs: v.LastNs, Samples: v.Samples,
	}
}

// Forget removes the flows for which drop returns true (ones not sampled
// for a while), so reading the table stays cheap.
func (p *Probe) Forget(drop func(Flow) bool) error {
	return p.bpf.Do("forget tcp flows", func() error { return p.forget(drop) })
}

func (p *Probe) forget(drop func(Flow) bool) error {
	return bpfload.DeleteIf(p.objs.Flows, func(k uint64, v *latencyflowsNbsFlow) bool { return drop(decode(k, v)) })
}

// Stats returns the probe's counts.
func (p *Probe) Stats() (Stats, error) {
	var c latencyflowsNbsFlowStats
	err := p.bpf.Do("read tcp flows stats", func() (err error) {
		c, err = bpfload.LookupSum[latencyflowsNbsFlowStats](p.objs.FlowStats, uint32(0))
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	return Stats{Seen: c.Seen, Considered: c.Considered, Sampled: c.Sampled, Suppressed: c.Suppressed, TableFull: c.TableFull}, nil
}

// Close detaches the program and frees it and its maps.
func (p *Probe) Close() error { return p.bpf.Close() }
