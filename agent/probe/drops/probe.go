// Package drops counts the packets the kernel drops, by the kernel's own drop
// reason (enum skb_drop_reason, named from BTF), and streams rate-limited
// evidence events naming the packets and the code that dropped them.
//
// It attaches one tp_btf program to the kfree_skb tracepoint
// (bpf/drops.bpf.c). Restricted to one namespace, counting happens in a
// per-CPU array indexed by reason, so a drop costs one array lookup and one
// increment; counting every namespace, by namespace and reason in slots of
// the same per-CPU value, a per-CPU hash for what does not fit
// (CountsByNetns). The evidence rate limit is enforced in the kernel.
package drops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/evidence"
)

// DefaultEvidencePerSecond is the evidence rate when Options leaves it 0.
const DefaultEvidencePerSecond = 20

// Slots is the number of reason codes the kernel-side table holds; codes at
// or above Overflow share the last slot.
const (
	Slots    = 512
	Overflow = Slots - 1
)

// Options configure Load.
type Options struct {
	// NetnsInode restricts counting and evidence to one network namespace
	// (its inode, as netns.Handle.Inode); 0 counts every namespace.
	NetnsInode uint32
	// EvidencePerSecond caps evidence events over all CPUs; 0 means
	// DefaultEvidencePerSecond, negative means none.
	EvidencePerSecond int
	Logger            *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
	// PinDir is this probe's own bpffs directory: its maps and links are
	// pinned there and outlive the agent, and the next agent adopts them
	// (see bpfload). Empty pins nothing.
	PinDir string
	// noNetnsTable turns the per-CPU table of (namespace, reason) counters
	// off, so tests drive the hash behind it.
	noNetnsTable bool
}

// Counts are cumulative drops since load, summed over CPUs.
type Counts struct {
	// ByReason maps an enum skb_drop_reason value below Overflow to its count.
	ByReason map[uint32]uint64
	// Overflow counts drops whose reason is Overflow or above: reasons this
	// table has no slot for (subsystem reasons, or a far newer kernel).
	// Their evidence events carry the exact reason.
	Overflow uint64
}

// Event is one drop as evidence. Src and Dst are those of the dropped packet
// (Src sent it), the zero AddrPort when its headers were not readable, with
// port 0 for protocols without ports.
type Event struct {
	Time  time.Time
	Netns uint32
	// Reason is the kernel's drop reason ("netfilter_drop"), Code its value.
	Reason string
	Code   uint32
	// Protocol is "tcp", "udp", "icmp", ... for IP packets, else the
	// ethertype ("ethertype_0x0806").
	Protocol string
	Src, Dst netip.AddrPort
	// Ifindex is the device the packet arrived on (or was on), 0 if none.
	Ifindex uint32
	// Location is the kernel address that dropped the packet; Functions
	// names it.
	Location uint64
}

// Stats are the probe's own losses, cumulative, summed over CPUs.
type Stats struct {
	// Suppressed evidence events, withheld by the kernel-side rate limit.
	Suppressed uint64
	// RingFull evidence events lost because the reader lagged.
	RingFull uint64
}

// Probe is the loaded and attached kfree_skb program.
type Probe struct {
	netns uint32 // the one namespace counted, 0 for all
	objs  dropsObjects
	bpf   bpfload.Guarded
	names Names
	syms  *ksyms
	log   *slog.Logger
	clock evidence.Clock // kernel stamps to wall time
	ring  *evidence.Ring
}

// Load loads and attaches the program; its error says whether this kernel
// can run it (see bpfload).
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := uint32(DefaultEvidencePerSecond)
	switch {
	case opts.EvidencePerSecond < 0:
		limit = 0
	case opts.EvidencePerSecond > 0:
		limit = uint32(opts.EvidencePerSecond)
	}

	names, err := LoadNames(opts.BTF)
	if err != nil {
		return nil, fmt.Errorf("load drop reason names: %w", err)
	}
	if names.Max() >= Overflow {
		log.Warn("kernel has more drop reasons than the probe has slots; the rest are counted as overflow",
			"reasons", names.Max(), "slots", Overflow)
	}
	spec, err := loadDrops()
	if err != nil {
		return nil, fmt.Errorf("parse drops object: %w", err)
	}
	p := &Probe{netns: opts.NetnsInode, names: names, log: log, clock: evidence.NewClock(), bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "drops", Log: log, BTF: opts.BTF, PinDir: opts.PinDir,
		Needs: "a kernel (5.17+, rx_sk argument 6.12+) with BTF tracepoint kfree_skb(skb, location, reason, rx_sk)",
	}}}
	vars := bpfload.Vars{dropsVarTargetNetns: opts.NetnsInode, dropsVarEvidencePerSec: limit, dropsVarNetnsTable: !opts.noNetnsTable}
	if err := p.bpf.Load(spec, vars, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{bpfload.Tracepoint("kfree_skb", p.objs.NbsKfreeSkb)}
	if err := p.bpf.AttachOrClose(); err != nil {
		return nil, err
	}
	p.syms = newKsyms(nil)
	if p.syms.err != nil {
		log.Warn("drop sites will not be named", "err", p.syms.err)
	}
	log.Info("drops probe counting", "netns", opts.NetnsInode, "evidence_per_sec", limit)
	p.ring = evidence.GuardedRing(&p.bpf, "drop", p.objs.DropEvents)
	return p, nil
}

// Continued says whether the counters continue those of a previous
// agent: every pinned map was adopted.
func (p *Probe) Continued() bool { return p.bpf.Continued() }

// Names returns the reason names read from the kernel at load.
func (p *Probe) Names() Names { return p.names }

// Programs returns the attached program by tracepoint name, for run-time
// statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// percpu returns the kernel's counters, summed over CPUs.
func (p *Probe) percpu(what string) (sum dropsNbsDropPercpu, err error) {
	err = p.bpf.Do(what, func() (err error) {
		sum, err = bpfload.LookupSum[dropsNbsDropPercpu](p.objs.DropPercpu, uint32(0))
		return err
	})
	return sum, err
}

// Functions names drop locations (Event.Location) as "function+0xoffset"
// with the kernel's symbol lookup; addresses it cannot name (code since
// unloaded) are left out, and all of them when the lookup cannot run (its
// error was logged at load).
func (p *Probe) Functions(locations []uint64) map[uint64]string {
	return p.syms.names(locations)
}

// Counts returns cumulative drops by reason, over every namespace counted.
func (p *Probe) Counts() (Counts, error) {
	byNetns, err := p.CountsByNetns()
	if err != nil {
		return Counts{}, err
	}
	c := Counts{ByReason: map[uint32]uint64{}}
	for _, nc := range byNetns {
		c.add(nc)
	}
	return c, nil
}

// CountsByNetns is Counts by network-namespace inode. Counting one
// namespace, everything is that namespace's. Counting every namespace,
// drops the kernel could not split (its tables of namespaces were full)
// are under inode 0.
func (p *Probe) CountsByNetns() (map[uint32]Counts, error) {
	out := map[uint32]Counts{}
	count := func(ns, code uint32, v uint64) {
		c, ok := out[ns]
		if !ok {
			c = Counts{ByReason: map[uint32]uint64{}}
		}
		c.add(Counts{ByReason: map[uint32]uint64{code: v}})
		out[ns] = c
	}
	// A drop is counted in one place only (a CPU's table, the hash or the
	// array), so the reads need no common snapshot.
	var per []dropsNbsDropPercpu
	err := p.bpf.Do("read drop counts", func() error {
		if err := p.objs.DropPercpu.Lookup(uint32(0), &per); err != nil {
			return err
		}
		return bpfload.EachSum(p.objs.DropNetnsCounts, func(k dropsNbsDropKey, sum uint64) { count(k.Netns, k.Reason, sum) })
	})
	if err != nil {
		return nil, err
	}
	for _, pc := range per {
		for _, c := range pc.Cache {
			if c.Key != 0 && c.Count != 0 { // a slot being taken: its count is read next time
				count(uint32(c.Key>>32), uint32(c.Key)-1, c.Count)
			}
		}
	}
	sum, err := bpfload.Sum(per)
	if err != nil {
		return nil, err
	}
	for code, v := range sum.Reason {
		if v != 0 {
			count(p.netns, uint32(code), v)
		}
	}
	return out, nil
}

// add adds d's counts to c, sorting codes into slots as the kernel does.
func (c *Counts) add(d Counts) {
	c.Overflow += d.Overflow
	for code, v := range d.ByReason {
		if code >= Overflow {
			c.Overflow += v
			continue
		}
		c.ByReason[code] += v
	}
}

// Stats returns the probe's own losses.
func (p *Probe) Stats() (Stats, error) {
	sum, err := p.percpu("read drops stats")
	if err != nil {
		return Stats{}, err
	}
	return Stats{Suppressed: sum.Suppressed, RingFull: sum.RingFull}, nil
}

// Consumed returns how many evidence records readers have taken from the
// ring since it was created (see evidence.Ring.Consumed): with a pinned
// ring, those of every agent before this one too.
func (p *Probe) Consumed() (uint64, error) {
	return p.ring.Consumed(int(unsafe.Sizeof(dropsNbsDropEvent{})))
}

// ReadEvents calls fn for each evidence event until ctx is done or the probe
// is closed, then returns nil. Only one ReadEvents may run at a time. fn runs
// on the calling goroutine and should be quick; while it blocks, the kernel
// drops evidence (Stats.RingFull).
func (p *Probe) ReadEvents(ctx context.Context, fn func(Event)) error {
	return evidence.ReadDecoded(ctx, p.ring, p.log, p.decode, fn)
}

// SyncEvents returns once the running ReadEvents has handed fn every event
// the kernel wrote before this call (see evidence.Ring.Sync).
func (p *Probe) SyncEvents(ctx context.Context) error { return p.ring.Sync(ctx) }

func (p *Probe) decode(raw []byte) (Event, error) {
	r, err := evidence.Decode[dropsNbsDropEvent](raw)
	if err != nil {
		return Event{}, err
	}
	ev := Event{
		Time:     p.clock.Time(r.TsNs),
		Netns:    r.Netns,
		Reason:   p.names.Reason(r.Reason),
		Code:     r.Reason,
		Protocol: protocol(r.L3proto, r.Family, r.L4proto),
		Src:      evidence.AddrPort(r.Family, r.Saddr, r.Sport),
		Dst:      evidence.AddrPort(r.Family, r.Daddr, r.Dport),
		Ifindex:  r.Ifindex,
		Location: r.Location,
	}
	return ev, nil
}

func protocol(l3 uint16, family uint16, l4 uint8) string {
	if family == 0 {
		switch l3 {
		case 0:
			return ""
		case unix.ETH_P_IP:
			return "ipv4"
		case unix.ETH_P_IPV6:
			return "ipv6"
		case unix.ETH_P_ARP:
			return "arp"
		}
		return fmt.Sprintf("ethertype_0x%04x", l3)
	}
	switch l4 {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	case unix.IPPROTO_SCTP:
		return "sctp"
	case unix.IPPROTO_UDPLITE:
		return "udplite"
	case unix.IPPROTO_GRE:
		return "gre"
	case unix.IPPROTO_ESP:
		return "esp"
	}
	return fmt.Sprintf("ipproto_%d", l4)
}

// Close detaches the program, frees the maps and ends a running ReadEvents.
func (p *Probe) Close() error {
	return errors.Join(p.bpf.Close(), p.syms.close())
}
