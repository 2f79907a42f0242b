// Package tcpreset counts the TCP resets a host sends (by the kernel's reset
// reason) and receives (by the state of the socket that got them), per
// network namespace, and streams rate-limited evidence events naming the
// flows involved.
//
// It attaches tp_btf programs to the tcp_send_reset and tcp_receive_reset
// tracepoints (bpf/tcpreset.bpf.c). Counting and the evidence rate limit
// happen in the kernel; user space only reads.
package tcpreset

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/evidence"
)

// DefaultEvidencePerSecond is the evidence rate when Options leaves it 0.
const DefaultEvidencePerSecond = 20

// Direction says whether this host sent or received a reset.
type Direction uint8

// The values are those of enum nbs_rst_direction in the BPF program; 0 is
// deliberately not a direction so a zero Key is recognisably empty.
const (
	DirectionSent     Direction = 1
	DirectionReceived Direction = 2
)

func (d Direction) String() string {
	switch d {
	case DirectionSent:
		return "sent"
	case DirectionReceived:
		return "received"
	}
	return fmt.Sprintf("direction_%d", uint8(d))
}

// Key identifies one counter. Code is an enum sk_rst_reason value for sent
// resets and a TCP state for received ones; name it with Names.
type Key struct {
	Direction Direction
	Code      uint32
}

// Options configure Load.
type Options struct {
	// NetnsInode restricts counting and evidence to one network namespace
	// (its inode, as netns.Handle.Inode); 0 counts every namespace.
	NetnsInode uint32
	// EvidencePerSecond caps evidence events over all CPUs; 0 means
	// DefaultEvidencePerSecond. Resets beyond it are still counted.
	EvidencePerSecond uint32
	Logger            *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
	// PinDir is this probe's own bpffs directory: its maps and links are
	// pinned there and outlive the agent, and the next agent adopts them
	// (see bpfload). Empty pins nothing.
	PinDir string
	// noNetnsTable turns the per-CPU table of (namespace, code) counters
	// off, so tests drive the hash behind it.
	noNetnsTable bool
}

// Event is one reset as evidence. Src and Dst are those of the RST packet:
// for a sent reset Src is this host's end, for a received one Src is the
// peer that sent it. They are the zero AddrPort if the kernel had neither a
// socket nor readable headers.
type Event struct {
	Time      time.Time
	Netns     uint32
	Direction Direction
	// Reason is the kernel's reset reason for sent resets ("no_socket");
	// empty for received ones, for which the kernel gives none.
	Reason string
	// State is the socket's TCP state when the reset was sent or received
	// ("established"); empty when no socket was involved (no_socket).
	State    string
	Src, Dst netip.AddrPort
}

// Stats are the probe's own losses, cumulative, summed over CPUs.
type Stats struct {
	// Suppressed evidence events, withheld by the kernel-side rate limit.
	Suppressed uint64
	// RingFull evidence events lost because the reader lagged.
	RingFull uint64
	// CountErrors are resets that could not be counted (counter map full).
	CountErrors uint64
}

// Probe is a loaded and attached pair of reset programs.
type Probe struct {
	objs  tcpresetObjects
	bpf   bpfload.Guarded
	names Names
	log   *slog.Logger
	clock evidence.Clock // kernel stamps to wall time
	ring  *evidence.Ring
	netns uint32 // the namespace counted, 0 for every one
}

// Load loads and attaches both programs; its error says whether this
// kernel can run them (see bpfload).
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := opts.EvidencePerSecond
	if limit == 0 {
		limit = DefaultEvidencePerSecond
	}

	names, err := LoadNames(opts.BTF)
	if err != nil {
		return nil, fmt.Errorf("load tcp_reset names: %w", err)
	}
	spec, err := loadTcpreset()
	if err != nil {
		return nil, fmt.Errorf("parse tcp_reset object: %w", err)
	}
	p := &Probe{netns: opts.NetnsInode, names: names, log: log, clock: evidence.NewClock(), bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "tcp_reset", Log: log, BTF: opts.BTF, PinDir: opts.PinDir,
		Needs: "a kernel (6.10+) with BTF tracepoint tcp_send_reset(sk, skb, reason)",
	}}}
	vars := bpfload.Vars{tcpresetVarTargetNetns: opts.NetnsInode, tcpresetVarEvidencePerSec: limit, tcpresetVarNetnsTable: !opts.noNetnsTable}
	// A slot of rst_cpus for every CPU the kernel may run the programs on.
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count the possible CPUs: %w", err)
	}
	spec.Maps[tcpresetMapRstCpus].MaxEntries = uint32(cpus)
	if err := p.bpf.Load(spec, vars, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		bpfload.Tracepoint("tcp_send_reset", p.objs.NbsRstSend),
		bpfload.Tracepoint("tcp_receive_reset", p.objs.NbsRstRecv),
	}
	if err := p.bpf.AttachOrClose(); err != nil {
		return nil, err
	}
	log.Info("tcp_reset probe counting", "netns", opts.NetnsInode, "evidence_per_sec", limit)
	p.ring = evidence.GuardedRing(&p.bpf, "tcp_reset", p.objs.RstEvents)
	return p, nil
}

// Detach detaches both programs; they stay loaded and the maps keep what
// they counted (bench/evidencecost attaches one program at a time).
func (p *Probe) Detach() error { return p.bpf.Detach() }

// Attach attaches the programs again after Detach.
func (p *Probe) Attach() error { return p.bpf.Attach() }

// Continued says whether the counters continue those of a previous
// agent: every pinned map was adopted.
func (p *Probe) Continued() bool { return p.bpf.Continued() }

// Names returns the reason and state names read from the kernel at load.
func (p *Probe) Names() Names { return p.names }

// Programs returns the attached programs by tracepoint name, e.g. for
// run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Counts returns cumulative reset counts, summed over CPUs and, when the
// probe counts every namespace, over namespaces (see CountsByNetns).
func (p *Probe) Counts() (map[Key]uint64, error) {
	out := map[Key]uint64{}
	err := p.iterate(func(_ uint32, k Key, v uint64) { out[k] += v })
	return out, err
}

// CountsByNetns is Counts split by network-namespace inode.
func (p *Probe) CountsByNetns() (map[uint32]map[Key]uint64, error) {
	out := map[uint32]map[Key]uint64{}
	err := p.iterate(func(ns uint32, k Key, v uint64) {
		if out[ns] == nil {
			out[ns] = map[Key]uint64{}
		}
		out[ns][k] += v
	})
	return out, err
}

// slots returns every CPU's slots: rst_cpus, which the programs write, and
// rst_percpu, which holds what agents before it counted (an adopted pinned
// map; zero otherwise). Call it under p.bpf.Do.
func (p *Probe) slots() ([]tcpresetNbsRstPercpu, error) {
	var per []tcpresetNbsRstPercpu
	if err := p.objs.RstPercpu.Lookup(uint32(0), &per); err != nil {
		return nil, err
	}
	var c tcpresetNbsRstCpu
	for cpu := range p.objs.RstCpus.MaxEntries() {
		if err := p.objs.RstCpus.Lookup(cpu, &c); err != nil {
			return nil, err
		}
		per = append(per, c.C)
	}
	return per, nil
}

// iterate calls fn for every count: the CPUs' slots (slots), then the hash
// behind them, which also holds what agents before the slots counted (an
// adopted pinned map). A reset is counted in one place only, so the reads
// need no common snapshot.
func (p *Probe) iterate(fn func(netns uint32, k Key, v uint64)) error {
	var per []tcpresetNbsRstPercpu
	err := p.bpf.Do("read tcp_reset counts", func() (err error) {
		if per, err = p.slots(); err != nil {
			return err
		}
		return bpfload.EachSum(p.objs.RstCounts, func(k tcpresetNbsRstKey, sum uint64) {
			fn(k.Netns, Key{Direction: Direction(k.Direction), Code: k.Code}, sum)
		})
	})
	if err != nil {
		return err
	}
	for _, pc := range per {
		for d := range pc.Count {
			dir := Direction(d + 1)
			for code, v := range pc.Count[d] {
				if v != 0 {
					fn(p.netns, Key{Direction: dir, Code: uint32(code)}, v)
				}
			}
			for _, c := range pc.Cache[d] {
				if c.Key != 0 && c.Count != 0 { // a slot being taken: its count is read next time
					fn(uint32(c.Key>>32), Key{Direction: dir, Code: uint32(c.Key) - 1}, c.Count)
				}
			}
		}
	}
	return nil
}

// Suppressed returns how many evidence events the kernel-side rate limit
// has withheld, cumulative.
func (p *Probe) Suppressed() (uint64, error) {
	s, err := p.Stats()
	return s.Suppressed, err
}

// Stats returns the probe's own losses.
func (p *Probe) Stats() (Stats, error) {
	var (
		old tcpresetNbsRstStats // what agents before rst_percpu counted (adopted pins)
		pc  tcpresetNbsRstPercpu
	)
	err := p.bpf.Do("read tcp_reset stats", func() (err error) {
		if old, err = bpfload.LookupSum[tcpresetNbsRstStats](p.objs.RstStats, uint32(0)); err != nil {
			return err
		}
		per, err := p.slots()
		if err != nil {
			return err
		}
		for _, c := range per {
			pc.Suppressed += c.Suppressed
			pc.RingFull += c.RingFull
			pc.CountErrors += c.CountErrors
		}
		return nil
	})
	if err != nil {
		return Stats{}, err
	}
	return Stats{Suppressed: old.Suppressed + pc.Suppressed, RingFull: old.RingFull + pc.RingFull,
		CountErrors: old.CountErrors + pc.CountErrors}, nil
}

// Consumed returns how many evidence records readers have taken from the
// ring since it was created (see evidence.Ring.Consumed): with a pinned
// ring, those of every agent before this one too.
func (p *Probe) Consumed() (uint64, error) {
	return p.ring.Consumed(int(unsafe.Sizeof(tcpresetNbsRstEvent{})))
}

// ReadEvents calls fn for each evidence event until ctx is done or the probe
// is closed, then returns nil. Only one ReadEvents may run at a time: the
// ring has a single consumer position. fn runs on the calling goroutine and
// should be quick; while it blocks, the kernel drops evidence (Stats.RingFull).
func (p *Probe) ReadEvents(ctx context.Context, fn func(Event)) error {
	return evidence.ReadDecoded(ctx, p.ring, p.log, p.decode, fn)
}

// SyncEvents returns once the running ReadEvents has handed fn every event
// the kernel wrote before this call (see evidence.Ring.Sync).
func (p *Probe) SyncEvents(ctx context.Context) error { return p.ring.Sync(ctx) }

func (p *Probe) decode(raw []byte) (Event, error) {
	r, err := evidence.Decode[tcpresetNbsRstEvent](raw)
	if err != nil {
		return Event{}, err
	}
	ev := Event{
		Time:      p.clock.Time(r.TsNs),
		Netns:     r.Netns,
		Direction: Direction(r.Direction),
		Src:       evidence.AddrPort(r.Family, r.Saddr, r.Sport),
		Dst:       evidence.AddrPort(r.Family, r.Daddr, r.Dport),
	}
	if ev.Direction == DirectionSent {
		ev.Reason = p.names.Reason(r.Reason)
	}
	if r.State != 0 { // 0 is no TCP state: the kernel had no socket
		ev.State = p.names.State(uint32(r.State))
	}
	return ev, nil
}

// Close detaches the programs, frees the maps and ends a running ReadEvents.
// No Counts or Stats call can be using a map descriptor while it is closed.
func (p *Probe) Close() error { return p.bpf.Close() }
