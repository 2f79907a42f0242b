// Package dns measures name resolution as this host's clients see it:
// UDP queries sent by local sockets, matched in the kernel to their
// responses by (network namespace, 5-tuple, DNS id), timed there, and
// counted by namespace, server and response code; queries left unanswered
// are timed out by user space (Sweep); slow and failed answers are
// evidence naming the query.
//
// Its programs (bpf/dns.bpf.c) run on every packet a device sends or
// receives, so the probe loads them once and attaches them on request.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/probe/evidence"
)

// Defaults for Options left zero.
const (
	DefaultEvidencePerSecond = 20
	// DefaultSlow makes an answer evidence: a tenth of a second is ten
	// times what a resolver in the same data centre takes even on a cache
	// miss to its upstream's cache, and what a user starts to feel.
	DefaultSlow = 100 * time.Millisecond
)

// NameMax is the longest query name the kernel keeps, in wire format
// (NBS_DNS_NAME); longer names are cut (Event.Truncated).
const NameMax = 96

// What a counter counts.
type What uint8

const (
	Query  What = 1 // a query sent
	Answer What = 2 // a response matched to its query with an error Rcode (NOERROR answers are in the histogram only)
)

// Key identifies one counter: queries to a server, or its answers with
// one response code, in one network namespace.
type Key struct {
	Netns  uint32
	Server netip.Addr
	What   What
	Rcode  uint8 // for Answer
}

// Options configure Load.
type Options struct {
	// NetnsInode restricts measuring to one network namespace; 0 measures
	// every namespace.
	NetnsInode uint32
	// EvidencePerSecond caps evidence events over all CPUs; 0 means
	// DefaultEvidencePerSecond.
	EvidencePerSecond uint32
	// Slow is the latency from which an answer is evidence (every error
	// answer is); 0 means DefaultSlow.
	Slow   time.Duration
	Logger *slog.Logger
	// BTF is kernel BTF shared with other probes' loads (nil: read it).
	BTF *bpfload.KernelBTF
	// FoldAbove and FoldIdle say when counters leave the kernel's map for
	// the probe's memory (see Probe.fold); 0 means DefaultFoldAbove and
	// DefaultFoldIdle, a negative FoldAbove folds at any size.
	FoldAbove, FoldIdle int
}

// Event is a slow or failed answer, or a timed-out query (Sweep).
type Event struct {
	Time     time.Time
	Netns    uint32
	Client   netip.AddrPort // the local socket that asked
	Server   netip.AddrPort
	ID       uint16
	QType    uint16
	Rcode    uint8
	Latency  time.Duration // 0 for a timeout
	TimedOut bool
	// Name is the question's name in dotted form ("cart.shop.svc."),
	// non-printable bytes escaped as \DDD; Truncated when the kernel kept
	// only its first NameMax bytes, or it did not parse.
	Name      string
	Truncated bool
}

// Stats are the probe's counts, cumulative, summed over CPUs.
type Stats struct {
	Queries     uint64 // query packets seen
	Answers     uint64 // responses matched to a pending query
	Unmatched   uint64 // responses with no pending query: late (timed out), or to a query not seen
	PendingFull uint64 // queries not tracked: the pending map refused them
	CountErrors uint64 // counter updates that failed (map full)
	Nonlinear   uint64 // port-53 datagrams whose DNS header was not in linear data
	Suppressed  uint64 // evidence withheld by the kernel's rate limit
	RingFull    uint64 // evidence lost because the reader lagged
	// Scoped says RunsQuery and RunsAnswer are counted: with
	// Options.NetnsInode only, the runs of each program in that namespace.
	Scoped                bool
	RunsQuery, RunsAnswer uint64
}

// The keys of Programs: the attach points (tracepoints net_dev_queue and
// netif_receive_skb), named for this probe, since latency/qdisc's program
// attaches to net_dev_queue too and the agent branch names each program's
// cost by its key.
const (
	HookQuery  = "dns_net_dev_queue"
	HookAnswer = "dns_netif_receive_skb"
)

// Probe is the loaded pair of programs, attached or not.
type Probe struct {
	objs  dnsObjects
	bpf   bpfload.Guarded
	log   *slog.Logger
	clock evidence.Clock
	ring  *evidence.Ring

	scoped bool // counting one namespace: runs in scope are counted

	countsMu   sync.Mutex
	foldAbove  int
	foldIdle   int
	seen       map[dnsNbsDnsCountKey]seenKey
	folded     map[dnsNbsDnsCountKey]uint64
	foldedKeys uint64
}

// seenKey is a kernel counter as the last Counts read it, and for how
// many reads since it has not moved.
type seenKey struct {
	v    uint64
	idle int
}

// Defaults of Options.FoldAbove and FoldIdle: the counter map holds
// 16,384 keys; folding starts at a quarter of it, so a node with a few
// hundred pods never folds, and takes keys idle for 30 readings (5
// minutes at the default interval).
const (
	DefaultFoldAbove = 4096
	DefaultFoldIdle  = 30
)

// Load loads the programs without attaching them; its error says whether
// this kernel can run them.
func Load(opts Options) (*Probe, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := opts.EvidencePerSecond
	if limit == 0 {
		limit = DefaultEvidencePerSecond
	}
	slow := opts.Slow
	if slow <= 0 {
		slow = DefaultSlow
	}
	spec, err := loadDns()
	if err != nil {
		return nil, fmt.Errorf("parse dns object: %w", err)
	}
	foldAbove, foldIdle := opts.FoldAbove, opts.FoldIdle
	if foldAbove == 0 {
		foldAbove = DefaultFoldAbove
	}
	if foldIdle <= 0 {
		foldIdle = DefaultFoldIdle
	}
	p := &Probe{log: log, clock: evidence.NewClock(), foldAbove: foldAbove, foldIdle: foldIdle, scoped: opts.NetnsInode != 0,
		seen: map[dnsNbsDnsCountKey]seenKey{}, folded: map[dnsNbsDnsCountKey]uint64{}, bpf: bpfload.Guarded{Object: bpfload.Object{
			Name: "dns", Log: log, BTF: opts.BTF,
			Needs: "a kernel (6.2+) with BTF tracepoints net_dev_queue and netif_receive_skb and the kfunc bpf_rdonly_cast",
		}}}
	// Queries left pending by an earlier attachment had their answers
	// missed while detached: they would time out falsely.
	p.bpf.BeforeAttach = func() error {
		if err := bpfload.DeleteIf(p.objs.DnsPending, func(dnsNbsDnsKey, *dnsNbsDnsPending) bool { return true }); err != nil {
			return fmt.Errorf("empty pending dns queries: %w", err)
		}
		return nil
	}
	vars := bpfload.Vars{dnsVarTargetNetns: opts.NetnsInode, dnsVarEvidencePerSec: limit, dnsVarSlowNs: uint64(slow.Nanoseconds())}
	if err := p.bpf.Load(spec, vars, &p.objs, nil); err != nil {
		return nil, err
	}
	p.bpf.Points = []bpfload.Point{
		// Answers first, so no query is tracked with nobody to match it.
		bpfload.Tracepoint(HookAnswer, p.objs.NbsDnsAnswer),
		bpfload.Tracepoint(HookQuery, p.objs.NbsDnsQuery),
	}
	p.ring = evidence.GuardedRing(&p.bpf, "dns", p.objs.DnsEvents)
	return p, nil
}

// Attach starts measuring; attaching an attached probe does nothing.
func (p *Probe) Attach() error { return p.bpf.Attach() }

// Detach stops measuring; counters keep what they counted.
func (p *Probe) Detach() error { return p.bpf.Detach() }

// Attached says whether the programs are attached.
func (p *Probe) Attached() bool { return p.bpf.Attached() }

// Programs returns the programs by attach point, for run-time statistics.
func (p *Probe) Programs() map[string]*ebpf.Program { return p.bpf.Programs() }

// Counts returns the cumulative counters, summed over CPUs, including
// those folded out of the kernel's map (see fold).
func (p *Probe) Counts() (map[Key]uint64, error) {
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	live := map[dnsNbsDnsCountKey]uint64{}
	err := p.bpf.Do("read dns counts", func() error {
		err := bpfload.EachSum(p.objs.DnsCounts, func(k dnsNbsDnsCountKey, v uint64) { live[k] = v })
		if err != nil {
			return err
		}
		return p.fold(live)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[Key]uint64, len(live)+len(p.folded))
	for k, v := range p.folded {
		out[key(k)] += v
	}
	for k, v := range live {
		out[key(k)] += v
	}
	return out, nil
}

func key(k dnsNbsDnsCountKey) Key {
	return Key{Netns: k.Netns, Server: addr(k.Family, k.Server), What: What(k.What), Rcode: k.Rcode}
}

// fold keeps the kernel's counter map from filling as namespaces come and
// go (a node's pods each leave a few keys behind): while it holds more
// than foldAbove keys, a key that has not moved for foldIdle readings is
// deleted from it and its count kept here, so every count goes on adding
// up (a key counted again starts from 0 in the kernel, on top of what was
// kept). An increment landing between the read and the delete of a key
// idle that long is the one thing lost. Under p.bpf's lock.
func (p *Probe) fold(live map[dnsNbsDnsCountKey]uint64) error {
	for k, v := range live {
		if prev, ok := p.seen[k]; ok && prev.v == v {
			p.seen[k] = seenKey{v, prev.idle + 1}
		} else {
			p.seen[k] = seenKey{v, 0}
		}
	}
	for k := range p.seen {
		if _, ok := live[k]; !ok {
			delete(p.seen, k)
		}
	}
	if len(live) <= p.foldAbove {
		return nil
	}
	for k, s := range p.seen {
		if s.idle < p.foldIdle {
			continue
		}
		if err := p.objs.DnsCounts.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("fold an idle dns counter: %w", err)
		}
		p.folded[k] += s.v
		p.foldedKeys++
		delete(live, k)
		delete(p.seen, k)
	}
	return nil
}

// FoldedKeys returns how many counters were moved out of the kernel's map
// (see fold).
func (p *Probe) FoldedKeys() uint64 {
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	return p.foldedKeys
}

// Histogram returns the cumulative latency histogram of answers, in
// nanoseconds.
func (p *Probe) Histogram() (bpfhist.Hist, error) {
	var h bpfhist.Hist
	err := p.bpf.Do("read dns latency", func() (err error) {
		h, _, err = bpfhist.Lookup(p.objs.DnsHist, uint32(0))
		return err
	})
	return h, err
}

// Sweep ends the queries pending for longer than timeout: each is deleted
// from the kernel's map and returned as a timed-out Event. An answer racing
// the sweep is the kernel's or the sweep's, never both: whichever deletes
// the entry first ends the query.
func (p *Probe) Sweep(timeout time.Duration) ([]Event, error) {
	var out []Event
	err := p.bpf.Do("sweep dns queries", func() error {
		now, err := monotonic()
		if err != nil {
			return err
		}
		type entry struct {
			k dnsNbsDnsKey
			v dnsNbsDnsPending
		}
		var old []entry
		err = bpfload.Each(p.objs.DnsPending, func(k dnsNbsDnsKey, v *dnsNbsDnsPending) {
			if v.TsNs+uint64(timeout.Nanoseconds()) <= now {
				old = append(old, entry{k, *v})
			}
		})
		if err != nil {
			return err
		}
		for _, e := range old {
			if err := p.objs.DnsPending.Delete(e.k); err != nil {
				if errors.Is(err, ebpf.ErrKeyNotExist) {
					continue // answered (or evicted) meanwhile
				}
				return fmt.Errorf("delete a timed-out dns query: %w", err)
			}
			name, cut := DecodeName(e.v.Name[:e.v.NameLen])
			out = append(out, Event{
				Time: p.clock.Time(e.v.TsNs + uint64(timeout.Nanoseconds())), Netns: e.k.Netns,
				Client: evidence.AddrPort(e.k.Family, e.k.Client, e.k.ClientPort),
				Server: evidence.AddrPort(e.k.Family, e.k.Server, e.k.ServerPort),
				ID:     e.k.Id, QType: e.v.Qtype, TimedOut: true, Name: name, Truncated: cut,
			})
		}
		return nil
	})
	return out, err
}

// Pending returns how many queries await an answer.
func (p *Probe) Pending() (int, error) {
	n := 0
	err := p.bpf.Do("count pending dns queries", func() error {
		return bpfload.Each(p.objs.DnsPending, func(dnsNbsDnsKey, *dnsNbsDnsPending) { n++ })
	})
	return n, err
}

// Scoped says whether the probe counts one namespace, so that Stats'
// runs count runs in scope apart from all.
func (p *Probe) Scoped() bool { return p.scoped }

// Stats returns the probe's counts.
func (p *Probe) Stats() (Stats, error) {
	var c dnsNbsDnsStats
	err := p.bpf.Do("read dns stats", func() (err error) {
		c, err = bpfload.LookupSum[dnsNbsDnsStats](p.objs.DnsStats, uint32(0))
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	return Stats{Queries: c.Queries, Answers: c.Answers, Unmatched: c.Unmatched, PendingFull: c.PendingFull,
		CountErrors: c.CountErrors, Nonlinear: c.Nonlinear, Suppressed: c.Suppressed, RingFull: c.RingFull,
		Scoped: p.scoped, RunsQuery: c.RunsQuery, RunsAnswer: c.RunsAnswer}, nil
}

// Consumed returns how many evidence records readers have taken from the
// ring (evidence.Ring.Consumed).
func (p *Probe) Consumed() (uint64, error) {
	return p.ring.Consumed(int(unsafe.Sizeof(dnsNbsDnsEvent{})))
}

// ReadEvents calls fn for each evidence event of a slow or failed answer
// until ctx is done or the probe is closed, then returns nil. Only one
// ReadEvents may run at a time.
func (p *Probe) ReadEvents(ctx context.Context, fn func(Event)) error {
	return evidence.ReadDecoded(ctx, p.ring, p.log, p.decode, fn)
}

// SyncEvents returns once the running ReadEvents has handed fn every event
// the kernel wrote before this call (see evidence.Ring.Sync).
func (p *Probe) SyncEvents(ctx context.Context) error { return p.ring.Sync(ctx) }

func (p *Probe) decode(raw []byte) (Event, error) {
	r, err := evidence.Decode[dnsNbsDnsEvent](raw)
	if err != nil {
		return Event{}, err
	}
	n := min(int(r.NameLen), len(r.Name))
	name, cut := DecodeName(r.Name[:n])
	return Event{
		Time: p.clock.Time(r.TsNs), Netns: r.Netns,
		Client: evidence.AddrPort(r.Family, r.Client, r.ClientPort),
		Server: evidence.AddrPort(r.Family, r.Server, r.ServerPort),
		ID:     r.Id, QType: r.Qtype, Rcode: r.Rcode, Latency: time.Duration(r.LatencyNs),
		Name: name, Truncated: cut,
	}, nil
}

// Close detaches the programs, frees the maps and ends a running ReadEvents.
func (p *Probe) Close() error { return p.bpf.Close() }

func addr(family uint16, b [16]byte) netip.Addr {
	return evidence.AddrPort(family, b, 0).Addr()
}

func monotonic() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("read the monotonic clock: %w", err)
	}
	return uint64(ts.Nano()), nil
}

// DecodeName turns a question name in wire format (length-prefixed
// labels, as the kernel copied it: at most NameMax bytes, possibly cut)
// into dotted form with a trailing dot for the root. Bytes outside
// letters, digits, '-' and '_' are escaped as \DDD (RFC 4343's form), so a
// hostile name cannot inject anything into a field. cut reports a name
// that did not end within b, or did not parse.
func DecodeName(b []byte) (name string, cut bool) {
	var sb strings.Builder
	for i := 0; ; {
		if i >= len(b) {
			return sb.String(), true
		}
		l := int(b[i])
		if l == 0 {
			if sb.Len() == 0 {
				return ".", false
			}
			return sb.String(), false
		}
		if l > 63 { // a compression pointer or reserved: not in a question
			return sb.String(), true
		}
		i++
		for j := 0; j < l; j++ {
			if i+j >= len(b) {
				return sb.String(), true
			}
			c := b[i+j]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
				sb.WriteByte(c)
			default:
				fmt.Fprintf(&sb, "\\%03d", c)
			}
		}
		sb.WriteByte('.')
		i += l
	}
}
