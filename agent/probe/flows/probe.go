// Package flows counts TCP connections by edge (network namespace, role,
// local address and port, peer address and port) per interval, from state
// changes, retransmits and resets only: no program runs per packet
// (bpf/flows.bpf.c). Each interval, Collect closes the kernel's generation
// and returns its edges.
package flows

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// DefaultMaxEdges is the edge table's size, both generations together.
const DefaultMaxEdges = 16384

// Role says which end of its connections the local owner is.
type Role uint8

const (
	Client Role = 1
	Server Role = 2
)

func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "server"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Key is an edge. LocalPort is set for server edges, PeerPort for client
// edges (the other end's ephemeral port is left out). A client edge to a
// peer marked translated (MarkTranslated) is one connection's: DNAT is set
// and LocalPort is the connection's, so that user space can look up what
// the connection tracking translated it to.
type Key struct {
	Netns     uint32
	Role      Role
	DNAT      bool
	Local     netip.Addr
	LocalPort uint16
	Peer      netip.Addr
	PeerPort  uint16
}

// Counts are one interval's counts of an edge (or of the overflow record).
type Counts struct {
	Opened, Failed, Closed, Retransmits uint64
	BytesSent, BytesReceived            uint64
	// RTTCount samples of the connections' smoothed RTT, summing to RTTSum;
	// RTTBuckets counts them by log-linear bucket (internal/loglinear) of
	// their value in nanoseconds.
	RTTCount   uint64
	RTTSum     time.Duration
	RTTBuckets map[uint32]uint64
	// ResetsSent by enum sk_rst_reason, ResetsReceived by the socket's
	// state (tcpreset.Names name both).
	ResetsSent     map[uint32]uint64
	ResetsReceived map[uint32]uint64
	// Drops of the connections' packets by enum skb_drop_reason.
	Drops map[uint32]uint64
}

// Edge is one edge's counts in an interval.
type Edge struct {
	Key
	Counts
}

// Interval is what Collect returns: the edges, and what found the kernel's
// tables full, summed (its counts are in Overflow; EdgesLost and
// DetailsLost say how many updates went there).
type Interval struct {
	Edges                  []Edge
	Overflow               Counts
	EdgesLost, DetailsLost uint64
	// Live says whether live connections were read at the interval's end
	// (the iterator ran); without it their bytes count when they retransmit
	// or close.
	Live bool
}

// Options configure Load.
type Options struct {
	// NetnsInode restricts counting to one network namespace; 0 counts in
	// every namespace.
	NetnsInode uint32
	// MaxEdges sizes the edge table (both generations); DefaultMaxEdges
	// when 0. The detail table (resets by reason, RTT buckets) is twice it.
	MaxEdges uint32
	Logger   *slog.Logger
	BTF      *bpfload.KernelBTF
}

// Probe is the loaded flow program.
type Probe struct {
	objs flowsObjects
	bpf  bpfload.Guarded
	log  *slog.Logger
	iter *link.Iter // nil when the kernel cannot iterate socket storage
	gen  uint32
	// iterWhy says why live connections are not read, "" when they are.
	iterWhy string

	// Reused by each interval's drain, so an interval allocates its edges
	// only: the keys read (to delete), the edges by key, the overflow
	// records; bounded by the tables' sizes. lastEdges sizes the next
	// interval's edges.
	keys  []flowsNbsFedgeKey
	dkeys []flowsNbsFdetailKey
	// edgesRead and detailsRead read the tables in batches.
	edgesRead   bpfload.Batch[flowsNbsFedgeKey, flowsNbsFedgeVal]
	detailsRead bpfload.Batch[flowsNbsFdetailKey, uint64]
	idx         map[flowsNbsFedgeKey]int
	over        []flowsNbsFover
	zero        []flowsNbsFover
	lastEdges   int
}

// Load loads the programs and the iterator of live connections; Attach
// starts counting.
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := loadFlows()
	if err != nil {
		return nil, fmt.Errorf("parse tcp flow-map object: %w", err)
	}
	n := opts.MaxEdges
	if n == 0 {
		n = DefaultMaxEdges
	}
	spec.Maps["flow_edges"].MaxEntries = n
	spec.Maps["flow_details"].MaxEntries = 2 * n
	p := &Probe{log: log, bpf: bpfload.Guarded{Object: bpfload.Object{
		Name: "tcp flow map", Log: log, BTF: opts.BTF,
		Needs: "a kernel (6.12+) with BTF tracepoints inet_sock_set_state, tcp_retransmit_skb, tcp_send_reset(sk, skb, reason), tcp_receive_reset, kfree_skb(skb, location, reason, rx_sk) and socket storage",
	}}}
	vars := bpfload.Vars{flowsVarTargetNetns: opts.NetnsInode}
	if err := p.bpf.Load(spec, vars, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		// Named apart from the tcp_reset probe's programs on the same
		// tracepoints: the agent branch names each program's cost by it.
		bpfload.Tracepoint("flows_inet_sock_set_state", p.objs.NbsFlowState),
		bpfload.Tracepoint("flows_tcp_retransmit_skb", p.objs.NbsFlowRetrans),
		bpfload.Tracepoint("flows_tcp_send_reset", p.objs.NbsFlowRstSend),
		bpfload.Tracepoint("flows_tcp_receive_reset", p.objs.NbsFlowRstRecv),
		bpfload.Tracepoint("flows_kfree_skb", p.objs.NbsFlowDrop),
	}
	it, err := link.AttachIter(link.IterOptions{Program: p.objs.NbsFlowIter, Map: p.objs.FlowSock})
	if err != nil {
		p.iterWhy = fmt.Sprintf("the kernel cannot iterate socket storage (%v): a live connection's bytes count when it retransmits or closes", err)
		log.Warn("flows: live connections are not read at each interval's end", "err", err)
	} else {
		p.iter = it
	}
	return p, nil
}

// SockStateBytes is the socket storage the program keeps per connection.
const SockStateBytes = 80

// Maps returns the probe's tables but the socket storage (whose elements
// belong to the sockets), for memory accounting.
func (p *Probe) Maps() []*ebpf.Map {
	return []*ebpf.Map{p.objs.FlowEdges, p.objs.FlowDetails, p.objs.FlowOver, p.objs.FlowDnatPeers}
}

// LiveReason says why live connections are not read at each interval's
// end, "" when they are.
func (p *Probe) LiveReason() string { return p.iterWhy }

// Attach starts counting; attaching an attached probe does nothing.
func (p *Probe) Attach() error { return p.bpf.Attach() }

// Programs returns the programs by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// MarkTranslated makes the client edges to peer in namespace netns
// per-connection from now on (Key.DNAT). It fails when the table of
// translated peers is full.
func (p *Probe) MarkTranslated(netns uint32, peer netip.AddrPort) error {
	k := flowsNbsFpeer{Netns: netns, Port: peer.Port()}
	a := peer.Addr()
	if a.Is4() {
		k.Family = unix.AF_INET
		b := a.As4()
		copy(k.Addr[:], b[:])
	} else {
		k.Family = unix.AF_INET6
		k.Addr = a.As16()
	}
	return p.bpf.Do("mark a translated peer", func() error {
		if err := p.objs.FlowDnatPeers.Update(&k, uint8(1), ebpf.UpdateAny); err != nil {
			return err
		}
		return p.objs.DnatMarked.Set(uint32(1))
	})
}

// Close detaches and frees everything.
func (p *Probe) Close() error {
	var errs []error
	if p.iter != nil {
		errs = append(errs, p.iter.Close())
	}
	errs = append(errs, p.bpf.Close())
	return errors.Join(errs...)
}

// Collect ends the interval: it reads the live connections into it, moves
// new counts to the other generation, waits until no program can still
// count in this one, and returns and deletes its entries.
func (p *Probe) Collect() (Interval, error) {
	var out Interval
	err := p.bpf.Do("read tcp flows", func() error {
		old := p.gen
		if p.iter != nil {
			if err := p.runIter(); err != nil {
				return err
			}
			out.Live = true
		}
		p.gen ^= 1
		if err := p.objs.Gen.Set(p.gen); err != nil {
			p.gen = old
			return fmt.Errorf("switch generation: %w", err)
		}
		quiesce()
		return p.drain(old, &out)
	})
	return out, err
}

// runIter reads the iterator to its end: the program accounts each live
// socket as it is visited and writes nothing.
func (p *Probe) runIter() error {
	r, err := p.iter.Open()
	if err != nil {
		return fmt.Errorf("open live-connection iterator: %w", err)
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("read live-connection iterator: %w", err)
	}
	return nil
}

// quiesce waits until every BPF program that may have read the previous
// generation has returned: tracing programs run inside an RCU read-side
// section, and a global membarrier waits for a grace period. Where the
// kernel has no membarrier, a pause far longer than any program runs.
func quiesce() {
	const membarrierCmdGlobal = 1
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); errno != 0 {
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *Probe) drain(gen uint32, out *Interval) error {
	if p.idx == nil {
		p.idx = map[flowsNbsFedgeKey]int{}
	}
	clear(p.idx)
	idx, keys := p.idx, p.keys[:0]
	out.Edges = make([]Edge, 0, p.lastEdges)
	err := p.edgesRead.Each(p.objs.FlowEdges, func(k flowsNbsFedgeKey, v *flowsNbsFedgeVal) {
		if k.Gen != gen {
			return
		}
		keys = append(keys, k)
		idx[k] = len(out.Edges)
		out.Edges = append(out.Edges, Edge{Key: decodeKey(k), Counts: decodeVal(*v)})
	})
	if err != nil {
		return fmt.Errorf("iterate edges: %w", err)
	}
	p.lastEdges = len(out.Edges)
	dkeys := p.dkeys[:0]
	err = p.detailsRead.Each(p.objs.FlowDetails, func(dk flowsNbsFdetailKey, dv *uint64) {
		if dk.Edge.Gen != gen {
			return
		}
		dkeys = append(dkeys, dk)
		i, ok := idx[dk.Edge]
		var c *Counts
		if ok {
			c = &out.Edges[i].Counts
		} else {
			// Its edge found no room: the overflow holds its counts.
			c = &out.Overflow
		}
		addDetail(c, dk.Kind, dk.Code, *dv)
	})
	if err != nil {
		return fmt.Errorf("iterate edge details: %w", err)
	}
	if err := deleteAll(p.objs.FlowDetails, dkeys); err != nil {
		return fmt.Errorf("delete edge details: %w", err)
	}
	if err := deleteAll(p.objs.FlowEdges, keys); err != nil {
		return fmt.Errorf("delete edges: %w", err)
	}
	p.keys, p.dkeys = Reusable(keys), Reusable(dkeys)
	if p.keys == nil {
		p.idx = nil // grown by a burst: a map never shrinks
	}
	per := p.over
	if err := p.objs.FlowOver.Lookup(gen, &per); err != nil {
		return fmt.Errorf("read overflow: %w", err)
	}
	for _, o := range per {
		add(&out.Overflow, decodeVal(o.V))
		out.EdgesLost += o.EdgesLost
		out.DetailsLost += o.DetailsLost
		for code, n := range o.RstSent {
			addDetail(&out.Overflow, kindRstSent, uint32(code), n)
		}
		for code, n := range o.RstRecv {
			addDetail(&out.Overflow, kindRstRecv, uint32(code), n)
		}
		for code, n := range o.Drops {
			addDetail(&out.Overflow, kindDrop, uint32(code), n)
		}
		for b, n := range o.Rtt {
			addDetail(&out.Overflow, kindRTT, uint32(b), n)
		}
	}
	p.over = per
	if len(p.zero) != len(per) {
		p.zero = make([]flowsNbsFover, len(per))
	}
	if err := p.objs.FlowOver.Put(gen, p.zero); err != nil {
		return fmt.Errorf("clear overflow: %w", err)
	}
	return nil
}

// Keep says whether storage for c items, n of them used this interval, is
// kept for the next: not once it is four times what an interval needs
// (and more than a few), so a burst of edges does not hold its memory for
// good.
func Keep(n, c int) bool { return c <= 1024 || n >= c/4 }

// Reusable is s emptied for the next interval, or nil when Keep says its
// storage goes.
func Reusable[T any](s []T) []T {
	clear(s)
	if !Keep(len(s), cap(s)) {
		return nil
	}
	return s[:0]
}

func deleteAll[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := m.BatchDelete(keys, nil); err == nil {
		return nil
	}
	for i := range keys {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// Detail kinds (enum nbs_flow_detail).
const (
	kindRTT     = 1
	kindRstSent = 2
	kindRstRecv = 3
	kindDrop    = 4
)

func addDetail(c *Counts, kind uint16, code uint32, n uint64) {
	if n == 0 {
		return
	}
	var m *map[uint32]uint64
	switch kind {
	case kindRTT:
		m = &c.RTTBuckets
	case kindRstSent:
		m = &c.ResetsSent
	case kindRstRecv:
		m = &c.ResetsReceived
	case kindDrop:
		m = &c.Drops
	default:
		return
	}
	if *m == nil {
		*m = map[uint32]uint64{}
	}
	(*m)[code] += n
}

func add(dst *Counts, src Counts) {
	dst.Opened += src.Opened
	dst.Failed += src.Failed
	dst.Closed += src.Closed
	dst.Retransmits += src.Retransmits
	dst.BytesSent += src.BytesSent
	dst.BytesReceived += src.BytesReceived
	dst.RTTCount += src.RTTCount
	dst.RTTSum += src.RTTSum
}

func decodeVal(v flowsNbsFedgeVal) Counts {
	return Counts{Opened: v.Opened, Failed: v.Failed, Closed: v.Closed, Retransmits: v.Retrans,
		BytesSent: v.BytesSent, BytesReceived: v.BytesRecv, RTTCount: v.RttCount, RTTSum: time.Duration(v.RttSumNs)}
}

func decodeKey(k flowsNbsFedgeKey) Key {
	return Key{Netns: k.Netns, Role: Role(k.Role), DNAT: k.Dnat != 0, Local: addr(k.Family, k.Laddr), LocalPort: k.Lport,
		Peer: addr(k.Family, k.Raddr), PeerPort: k.Rport}
}

func addr(family uint16, b [16]byte) netip.Addr {
	if family == unix.AF_INET6 {
		return netip.AddrFrom16(b).Unmap()
	}
	return netip.AddrFrom4([4]byte(b[:4]))
}
