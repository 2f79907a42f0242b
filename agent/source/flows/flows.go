// Package flows hands the agent's report the flow map's data (issue 29,
// docs/flow-map-agent.md): each interval, the TCP connections of this node's
// owners by peer (FlowEdge), from the flows probe, and the addresses those
// owners held (AddressHolder), so the collector can join both ends of a
// connection and name the owner that held a peer address at the time.
//
// It adds nothing to the metric tree: its data goes in the report's own
// fields (source.Reading's Flows and AddressHolders).
package flows

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/owner"
	dropsprobe "github.com/nbs-project/nbs/agent/probe/drops"
	probe "github.com/nbs-project/nbs/agent/probe/flows"
	"github.com/nbs-project/nbs/agent/probe/tcpreset"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/topk"
	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// CapBPF is the capability that says whether edges are measured.
const CapBPF = "bpf.flows"

// DefaultTop is how many edges a report carries before the rest are
// folded into one "other" edge (--flows.top).
const DefaultTop = 200

// DefaultEvery is how often a report carries edges and addresses
// (--flows.every): the collector's finest bucket.
const DefaultEvery = time.Minute

// MaxTop keeps the top-K and its "other" edge within a report's limit.
const MaxTop = wire.MaxFlowEdges - 1

// Options configure Open.
type Options struct {
	source.Env
	// Disabled turns the flow map off (--flows.enable=false): no program is
	// loaded and no address is read.
	Disabled bool
	// Top is how many edges each report names (--flows.top): the worst and
	// busiest; the rest are summed into one "other" edge. 0 means
	// DefaultTop; more than MaxTop is MaxTop.
	Top int
	// Every is how often a report carries the edges and the addresses
	// (--flows.every): what the intervals between counted is summed into
	// it. 0 sends them with every report. The collector keeps edges per
	// minute, so a minute loses no detail and writes a sixth of the rows of
	// 10 s reports.
	Every time.Duration
	// MaxEdges sizes the kernel's edge table (0: the probe's default).
	MaxEdges uint32
}

// Source reads the flows probe and the owners' addresses.
type Source struct {
	log      *slog.Logger
	probe    *probe.Probe // nil when edges are not measured
	why      string       // why not, or what is missing
	names    tcpreset.Names
	drops    dropsprobe.Names
	resolver *owner.Resolver
	top      int
	holders  *holders // nil when the flow map is off
	xlat     *translator

	// every (Options.Every); pending is what the probe counted since the
	// last report that carried edges, with the backends of its
	// per-connection edges by index; due is when the next one does.
	every       time.Duration
	pending     probe.Interval
	pendingXlat map[int]netip.AddrPort
	pendingIdx  map[heldKey]int // an edge of pending by its key
	// heldAddrs are the address holders seen since the last report with
	// edges, each (address, owner id) once (heldAddrIdx: true when held,
	// false when left out past the cap); heldLeft counts those left out,
	// for the report's other edge (FlowEdge.holders_left_out).
	heldAddrs   []*nbsv1.AddressHolder
	heldAddrIdx map[[2]string]bool
	heldLeft    uint64
	due         time.Time
	// release makes the next collection carry everything held (Release).
	release atomic.Bool

	// Reused by each report's edges: the edges by owner (the kernel's
	// table bounds them) and their ranking (s.top at most).
	byID    map[edgeID]int
	aggs    []agg
	topHeap []rankedEdge

	mu     sync.Mutex
	folded uint64 // edges folded into "other", since the start
}

// Open loads and attaches the flows probe, or returns a source that says
// why it measures no edges (it still lists the owners' addresses, which
// the collector needs to name this node's owners as other nodes' peers).
func Open(_ context.Context, opts Options) (*Source, error) {
	s := &Source{log: opts.Log("flows"), resolver: opts.Owners, top: opts.Top, every: opts.Every}
	if s.resolver == nil {
		s.resolver = owner.New(owner.Options{Logger: opts.Logger})
	}
	switch {
	case s.top <= 0:
		s.top = DefaultTop
	case s.top > MaxTop:
		s.top = MaxTop
	}
	if opts.Disabled {
		s.why = "disabled by --flows.enable=false"
		return s, nil
	}
	var only *netns.Handle
	if !opts.AllNetns {
		only = &opts.Netns
	}
	s.holders = newHolders(s.resolver, only, s.log)
	if opts.DisableBPF {
		s.why = source.BPFDisabled
		return s, nil
	}
	names, err := tcpreset.LoadNames(opts.BTF)
	if err != nil {
		s.why = err.Error()
		s.log.Warn("flows: no edges measured", "err", err)
		return s, nil
	}
	dnames, err := dropsprobe.LoadNames(opts.BTF)
	if err != nil {
		s.why = err.Error()
		s.log.Warn("flows: no edges measured", "err", err)
		return s, nil
	}
	p, err := probe.Load(probe.Options{NetnsInode: opts.BPFNetns(), MaxEdges: opts.MaxEdges, Logger: s.log, BTF: opts.BTF})
	if err == nil {
		if err = p.Attach(); err != nil {
			p.Close()
		}
	}
	if err != nil {
		s.why = err.Error()
		s.log.Warn("flows: no edges measured", "err", err)
		return s, nil
	}
	s.probe, s.names, s.drops, s.why = p, names, dnames, p.LiveReason()
	host := opts.Netns
	if opts.AllNetns {
		// The node's connection tracking (a Service's DNAT) is the
		// host's: PID 1's namespace.
		if h, err := netns.Resolve("/proc/1/ns/net"); err == nil {
			host = h
		}
	}
	s.xlat = &translator{probe: p, path: s.holders.path, checked: map[peerKey]bool{},
		host: func() (netns.Handle, bool) { return host, host.Path != "" }}
	return s, nil
}

func (s *Source) Name() string { return "flows (bpf)" }

// Capabilities says whether edges are measured, and if live connections
// are read at each interval's end.
func (s *Source) Capabilities() []*nbsv1.Capability {
	return []*nbsv1.Capability{{Name: CapBPF, Available: s.probe != nil, Reason: s.why}}
}

// Programs returns the probe's programs, for the agent branch's cost figures.
func (s *Source) Programs() map[string]*ebpf.Program {
	if s.probe == nil {
		return nil
	}
	return s.probe.Programs()
}

// Folded is how many edges were folded into "other" since the start.
func (s *Source) Folded() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.folded
}

func (s *Source) Close() error {
	if s.probe == nil {
		return nil
	}
	return s.probe.Close()
}

// Release makes the next Collect carry the edges and addresses held since
// the last report with them (a stopping agent's last report), due or not.
func (s *Source) Release() { s.release.Store(true) }

func (s *Source) Collect(ctx context.Context) (source.Reading, error) {
	return s.collect(ctx, time.Now())
}

func (s *Source) collect(ctx context.Context, now time.Time) (source.Reading, error) {
	var r source.Reading
	send := s.every <= 0 || !now.Before(s.due) || s.release.Swap(false)
	var held []*nbsv1.AddressHolder
	if s.holders != nil {
		// Every interval: it also finds the namespaces whose connection
		// tracking the translator reads.
		held = s.holders.collect(ctx)
	}
	if !send {
		s.holdAddresses(held)
	}
	if s.probe != nil {
		// The probe is read every interval (its tables hold one interval),
		// and what it counted waits here until a report carries it.
		iv, err := s.probe.Collect()
		if err != nil {
			return r, fmt.Errorf("flows: %w", err)
		}
		s.hold(iv, s.xlat.apply(iv))
	}
	if !send {
		return r, nil
	}
	if s.every > 0 {
		// On the grid of every, so the nodes' edges land in the same
		// minute buckets.
		s.due = now.Truncate(s.every).Add(s.every)
	}
	// Every owner that held an address since the last report with edges,
	// so one that came and went between two is named too.
	s.holdAddresses(held)
	left := s.heldLeft
	r.AddressHolders = s.heldAddrs
	s.heldAddrs, s.heldAddrIdx, s.heldLeft = nil, nil, 0
	if s.probe == nil {
		return r, nil
	}
	r.Flows = withHoldersLeftOut(s.takeHeld(), left)
	return r, nil
}

// withHoldersLeftOut puts the count of address holders a report left out
// on its other edge, adding one that carries only that if there is none,
// so the map says why some peers resolve to no owner.
func withHoldersLeftOut(edges []*nbsv1.FlowEdge, left uint64) []*nbsv1.FlowEdge {
	if left == 0 {
		return edges
	}
	n := uint32(min(left, math.MaxUint32))
	if k := len(edges); k > 0 && edges[k-1].GetOther() {
		edges[k-1].HoldersLeftOut = n
		return edges
	}
	return append(edges, &nbsv1.FlowEdge{Other: true, HoldersLeftOut: n})
}

// takeHeld turns the edges held since the last report into its edges.
func (s *Source) takeHeld() []*nbsv1.FlowEdge {
	edges, folded := s.edges(s.pending, s.pendingXlat)
	// What waited is in edges now; its storage waits for the next
	// intervals (the kernel's table bounds it), without their counts.
	n := len(s.pending.Edges)
	s.pending = probe.Interval{Edges: probe.Reusable(s.pending.Edges)}
	clear(s.pendingXlat)
	clear(s.pendingIdx)
	if s.pending.Edges == nil && n > 0 {
		s.pendingXlat, s.pendingIdx = nil, nil // grown by a burst
	}
	s.mu.Lock()
	s.folded += uint64(folded)
	s.mu.Unlock()
	return edges
}

// maxLeftIndexed bounds the holders left out past a report's cap that are
// remembered, so one left out again in the next interval is not counted
// twice: past it (pod churn of tens of thousands of addresses a report),
// each is counted as seen and the count is a ceiling.
const maxLeftIndexed = 4 * wire.MaxAddressHolders

// holdAddresses adds the holders of an interval to those waiting for a
// report, each (address, owner) once; past the most a report carries they
// are counted (heldLeft), each once.
func (s *Source) holdAddresses(hs []*nbsv1.AddressHolder) {
	if len(hs) == 0 {
		return
	}
	if s.heldAddrIdx == nil {
		s.heldAddrIdx = map[[2]string]bool{}
	}
	left := uint64(0)
	for _, h := range hs {
		k := [2]string{h.GetAddress(), h.GetOwner().GetId()}
		if _, seen := s.heldAddrIdx[k]; seen {
			continue
		}
		if len(s.heldAddrs) < wire.MaxAddressHolders {
			s.heldAddrIdx[k] = true
			s.heldAddrs = append(s.heldAddrs, h)
			continue
		}
		left++
		if len(s.heldAddrIdx) < wire.MaxAddressHolders+maxLeftIndexed {
			s.heldAddrIdx[k] = false
		}
	}
	if left > 0 {
		s.heldLeft += left
		s.log.Warn("flows: more addresses held since the last report with edges than a report carries; the rest are left out (counted on the report's other edge)",
			"left_out", left, "max", wire.MaxAddressHolders)
	}
}

// heldKey is an edge of the probe as edges names it (a client's local
// port left out, its backend in): the intervals waiting for a report are
// summed by it, so what waits is bounded by the distinct edges, not by the
// intervals.
type heldKey struct {
	probe.Key
	to netip.AddrPort
}

// hold adds an interval's edges (and the backends of its per-connection
// ones) to those waiting for a report.
func (s *Source) hold(iv probe.Interval, xlat map[int]netip.AddrPort) {
	if s.pendingIdx == nil {
		s.pendingXlat, s.pendingIdx = map[int]netip.AddrPort{}, map[heldKey]int{}
	}
	for i, e := range iv.Edges {
		k := heldKey{Key: e.Key, to: xlat[i]}
		if k.Role == probe.Client {
			k.LocalPort, k.DNAT = 0, false
		}
		if j, ok := s.pendingIdx[k]; ok {
			addCounts(&s.pending.Edges[j].Counts, e.Counts)
			continue
		}
		s.pendingIdx[k] = len(s.pending.Edges)
		if k.to.IsValid() {
			s.pendingXlat[len(s.pending.Edges)] = k.to
		}
		s.pending.Edges = append(s.pending.Edges, e)
	}
	addCounts(&s.pending.Overflow, iv.Overflow)
}

// edgeID is an edge once its namespace is named: two namespaces of one
// owner (never, but for Unknown ones) are one edge.
type edgeID struct {
	owner     string
	role      probe.Role
	local     netip.Addr
	localPort uint16
	peer      netip.Addr
	peerPort  uint16
	// translated is where the node's connection tracking sent the
	// connections (DNAT), when it did.
	translated netip.AddrPort
}

type agg struct {
	owner owner.Owner
	probe.Counts
}

// edges turns an interval into FlowEdges: its s.top worst and busiest,
// and one "other" edge with the rest and what the kernel's tables had no
// room for, so the node's totals stay exact.
// xlat names the backends of per-connection edges (translator.apply). The
// maps of iv's counts may be changed.
func (s *Source) edges(iv probe.Interval, xlat map[int]netip.AddrPort) ([]*nbsv1.FlowEdge, int) {
	inodes := make([]uint32, 0, len(iv.Edges))
	for _, e := range iv.Edges {
		inodes = append(inodes, e.Netns)
	}
	owners := s.resolver.Lookup(slices.Compact(slices.Sorted(slices.Values(inodes)))...)
	if s.byID == nil {
		s.byID = map[edgeID]int{}
	}
	byID, aggs := s.byID, s.aggs[:0]
	defer func() {
		// Kept for the next interval without the counts' maps, unless
		// a burst made them far larger than it needs.
		clear(byID)
		if s.aggs = probe.Reusable(aggs); s.aggs == nil {
			s.byID = nil
		}
	}()
	for i, e := range iv.Edges {
		ow := owners[e.Netns]
		id := edgeID{owner: ow.ID(), role: e.Role, local: e.Local, localPort: e.LocalPort, peer: e.Peer, peerPort: e.PeerPort,
			translated: xlat[i]}
		if e.Role == probe.Client {
			id.localPort = 0 // a per-connection edge joins its backend's
		}
		j, ok := byID[id]
		if !ok {
			// The first edge's counts are taken over, maps and all: iv is
			// not used after this.
			byID[id] = len(aggs)
			aggs = append(aggs, agg{owner: ow, Counts: e.Counts})
			continue
		}
		addCounts(&aggs[j].Counts, e.Counts)
	}
	// The top K kept in a heap of K, its least one on top, so what the
	// ranking holds is K edges, not all of them; the rest goes to "other"
	// as it is pushed out. Figures are computed once per edge; addresses
	// compared only on ties, so the order is the same every time.
	top := topk.New(s.top, rankCmp, s.topHeap)
	var other probe.Counts
	addCounts(&other, iv.Overflow)
	folded := 0
	for id, j := range byID {
		a := &aggs[j]
		r := rankedEdge{id: id, trouble: trouble(a.Counts), busy: a.Opened + a.Closed + a.Failed,
			volume: a.BytesSent + a.BytesReceived}
		if out, left := top.Push(r); left {
			addCounts(&other, aggs[byID[out.id]].Counts)
			folded++
		}
	}
	kept := top.Sorted()
	out := make([]*nbsv1.FlowEdge, 0, len(kept)+1)
	for _, r := range kept {
		id := r.id
		a := &aggs[byID[id]]
		fe := s.counts(a.Counts)
		fe.Local = flowOwner(a.owner)
		fe.LocalAddress = id.local.String()
		fe.PeerAddress = id.peer.String()
		if id.role == probe.Server {
			fe.Role = nbsv1.FlowRole_FLOW_ROLE_SERVER
			fe.LocalPort = uint32(id.localPort)
		} else {
			fe.Role = nbsv1.FlowRole_FLOW_ROLE_CLIENT
			fe.PeerPort = uint32(id.peerPort)
			if id.translated.IsValid() {
				fe.PeerTranslatedAddress = id.translated.Addr().String()
				fe.PeerTranslatedPort = uint32(id.translated.Port())
			}
		}
		out = append(out, fe)
	}
	clear(kept)
	s.topHeap = kept[:0]
	if folded > 0 || !empty(other) {
		fe := s.counts(other)
		fe.Other, fe.EdgesFolded = true, uint32(folded)
		out = append(out, fe)
	}
	return out, folded
}

// rankedEdge is an edge with the figures it ranks by.
type rankedEdge struct {
	id                    edgeID
	trouble, busy, volume uint64
}

// rankCmp orders the worst first (failures, resets, drops, retransmits),
// then the busiest (connections, then bytes), then by the edge itself.
func rankCmp(a, b rankedEdge) int {
	if c := cmp.Or(cmp.Compare(b.trouble, a.trouble), cmp.Compare(b.busy, a.busy), cmp.Compare(b.volume, a.volume)); c != 0 {
		return c
	}
	x, y := a.id, b.id
	return cmp.Or(cmp.Compare(x.owner, y.owner), cmp.Compare(x.role, y.role), x.local.Compare(y.local),
		cmp.Compare(x.localPort, y.localPort), x.peer.Compare(y.peer), cmp.Compare(x.peerPort, y.peerPort),
		x.translated.Compare(y.translated))
}

// trouble is how bad an edge's interval was, for the top-K's order.
func trouble(c probe.Counts) uint64 {
	n := c.Failed + c.Retransmits
	for _, v := range c.Drops {
		n += v
	}
	for _, v := range c.ResetsSent {
		n += v
	}
	for _, v := range c.ResetsReceived {
		n += v
	}
	return n
}

func empty(c probe.Counts) bool {
	return c.Opened == 0 && c.Failed == 0 && c.Closed == 0 && c.Retransmits == 0 && c.BytesSent == 0 &&
		c.BytesReceived == 0 && c.RTTCount == 0 && len(c.ResetsSent) == 0 && len(c.ResetsReceived) == 0 && len(c.Drops) == 0
}

func addCounts(dst *probe.Counts, src probe.Counts) {
	dst.Opened += src.Opened
	dst.Failed += src.Failed
	dst.Closed += src.Closed
	dst.Retransmits += src.Retransmits
	dst.BytesSent += src.BytesSent
	dst.BytesReceived += src.BytesReceived
	dst.RTTCount += src.RTTCount
	dst.RTTSum += src.RTTSum
	dst.RTTBuckets = addMap(dst.RTTBuckets, src.RTTBuckets)
	dst.ResetsSent = addMap(dst.ResetsSent, src.ResetsSent)
	dst.ResetsReceived = addMap(dst.ResetsReceived, src.ResetsReceived)
	dst.Drops = addMap(dst.Drops, src.Drops)
}

func addMap(dst, src map[uint32]uint64) map[uint32]uint64 {
	for k, v := range src {
		if v == 0 {
			continue
		}
		if dst == nil {
			dst = map[uint32]uint64{}
		}
		dst[k] += v
	}
	return dst
}

// counts is an edge's counters on the wire, resets by the names the
// tcp_reset tree gives them.
func (s *Source) counts(c probe.Counts) *nbsv1.FlowEdge {
	fe := &nbsv1.FlowEdge{Opened: c.Opened, Failed: c.Failed, Closed: c.Closed, Retransmits: c.Retransmits,
		BytesSent: c.BytesSent, BytesReceived: c.BytesReceived}
	fe.ResetsSent = named(c.ResetsSent, s.names.Reason)
	fe.ResetsReceived = named(c.ResetsReceived, s.names.State)
	fe.Drops = named(c.Drops, s.drops.Reason)
	if c.RTTCount > 0 {
		h := &nbsv1.Histogram{Count: c.RTTCount, Sum: float64(c.RTTSum.Nanoseconds())}
		for _, b := range slices.Sorted(maps.Keys(c.RTTBuckets)) {
			h.BucketIndex = append(h.BucketIndex, b)
			h.BucketCount = append(h.BucketCount, c.RTTBuckets[b])
		}
		fe.Rtt = h
	}
	return fe
}

func named(m map[uint32]uint64, name func(uint32) string) map[string]uint64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(m))
	for code, n := range m {
		out[catalog.MetricSegment(name(code))] += n
	}
	return out
}

func flowOwner(o owner.Owner) *nbsv1.FlowOwner {
	fo := &nbsv1.FlowOwner{Id: o.ID(), Kind: string(o.Kind), Name: o.Name()}
	if o.Kind == owner.Pod {
		fo.Workload = Workload(o.Pod)
	}
	return fo
}
