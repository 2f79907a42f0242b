// Package dns is the dns root: queries, answer latency, errors by response
// code and timeouts, by owner and by server, from BPF programs that match
// each UDP query of this node's sockets to its answer in the kernel
// (agent/probe/dns). The programs run for every packet, so they are an
// Adaptive source: attached always by default, within the overhead budget
// (source.Standing), or only while an operator looks with
// Options.Triggered. Without BPF there is no dns root, and the Hello says
// why: no /proc counter counts DNS.
package dns

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/probe/bpfhist"
	probe "github.com/nbs-project/nbs/agent/probe/dns"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const capName = "bpf.dns"

// Options configure Open.
type Options struct {
	source.Env
	// Triggered attaches the programs only while the node is expanded
	// (--dns.always=false); by default they are always attached.
	Triggered bool
	// Timeout ends a query with no answer; 0 means catalog.DNSTimeout
	// seconds (tests shorten it).
	Timeout time.Duration
	// Slow is the latency from which an answer is evidence; 0 means
	// probe.DefaultSlow.
	Slow time.Duration
	// MaxEventsPerInterval bounds evidence per report; 0 means
	// source.MaxEvidencePerInterval.
	MaxEventsPerInterval int
	// TopServers is how many servers get a child; 0 means
	// catalog.DefaultTopServers.
	TopServers int

	// foldAbove and foldIdle are the probe's (tests fold at once).
	foldAbove, foldIdle int
}

// Source reads the dns counters while attached.
type Source struct {
	*source.Triggered[*probe.Probe, probe.Stats]
	opts     Options
	log      *slog.Logger
	evidence *source.Evidence
	annotate *source.Owners // names the owners of evidence (Annotate is safe for concurrent use)
	probe    *probe.Probe   // nil when unavailable

	capMu       sync.Mutex
	pendingEv   []*nbsv1.Event // timeouts' evidence for this reading
	sweptKept   uint64         // timeouts' evidence reported, since the start
	sweptCapped uint64         // and given up beyond the per-interval cap

	// Guarded by Triggered's lock; reset at each attachment, since the
	// agent forgets the root when the programs detach (its counters then
	// start again from 0).
	base     map[probe.Key]uint64
	timeouts map[tkey]uint64 // cumulative since the attachment
	swept    []*nbsv1.Event  // evidence of timeouts swept, for the next reading
	hist     bpfhist.Delta
	owners   *source.Owners
	servers  *servers
}

// tkey is where a timed-out query went.
type tkey struct {
	netns  uint32
	server netip.Addr
}

// Open loads the programs without attaching them, or returns a source that
// never measures and says why.
func Open(ctx context.Context, opts Options) (*Source, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = catalog.DNSTimeout * time.Second
	}
	if opts.MaxEventsPerInterval <= 0 {
		opts.MaxEventsPerInterval = source.MaxEvidencePerInterval
	}
	if opts.TopServers <= 0 {
		opts.TopServers = catalog.DefaultTopServers
	}
	s := &Source{opts: opts, log: opts.Log(catalog.DNS)}
	name := "dns (bpf, always on)"
	if opts.Triggered {
		name = "dns (bpf, triggered)"
	}
	var loaded *probe.Probe
	s.Triggered = source.NewTriggered(opts.Env, source.TriggeredSpec[*probe.Probe, probe.Stats]{
		Name: name, Capability: capName, Trigger: catalog.DNS, Branch: catalog.DNS,
		What: "DNS", AlwaysOn: !opts.Triggered, Runs: runs,
		Load: func(netnsInode uint32, log *slog.Logger) (*probe.Probe, error) {
			p, err := probe.Load(probe.Options{NetnsInode: netnsInode, EvidencePerSecond: opts.EvidencePerSecond,
				Slow: opts.Slow, Logger: log, BTF: opts.BTF, FoldAbove: opts.foldAbove, FoldIdle: opts.foldIdle})
			loaded = p
			return p, err
		},
		Attached: s.attached,
	})
	s.probe = loaded
	if loaded != nil {
		owners := opts.OwnerSplit()
		s.evidence = source.StartEvidence(ctx, catalog.DNS, s.log, opts.MaxEventsPerInterval,
			func(ctx context.Context, add func(*nbsv1.Event)) error {
				return loaded.ReadEvents(ctx, func(e probe.Event) {
					ev := event(e)
					owners.Annotate(ev, e.Netns) // named now: the namespace may be gone later
					add(ev)
				})
			}, loaded.SyncEvents)
		s.annotate = owners
	}
	return s, nil
}

// runs are the programs' runs in scope by attach point, the keys of
// Programs; nil when every run is in scope (no --netns), so the agent
// charges the kernel's count.
func runs(st probe.Stats) map[string]uint64 {
	if !st.Scoped {
		return nil
	}
	return map[string]uint64{probe.HookQuery: st.RunsQuery, probe.HookAnswer: st.RunsAnswer}
}

// probeFolded is the probe's FoldedKeys, for tests.
func (s *Source) probeFolded() uint64 {
	if s.probe == nil {
		return 0
	}
	return s.probe.FoldedKeys()
}

// attached starts counting afresh (see Source).
func (s *Source) attached(p *probe.Probe) error {
	base, err := p.Counts()
	if err != nil {
		return err
	}
	h, err := p.Histogram()
	if err != nil {
		return err
	}
	s.base = base
	s.hist.Reset(h)
	s.timeouts = map[tkey]uint64{}
	s.swept = nil
	s.owners = s.opts.OwnerSplit()
	s.servers = newServers(s.opts.TopServers)
	return nil
}

func (s *Source) Collect(ctx context.Context) (source.Reading, error) {
	if s.evidence != nil {
		// What the kernel wrote so far, for collect to take.
		s.evidence.Sync(ctx)
	}
	r, err := s.WhileAttached(s.collect)
	// Timeouts swept share the per-interval cap with the ring's events:
	// a resolver that went away must not fill a report with them.
	s.capMu.Lock()
	defer s.capMu.Unlock()
	room := max(s.opts.MaxEventsPerInterval-len(r.Events), 0)
	n := min(room, len(s.pendingEv))
	r.Events = append(r.Events, s.pendingEv[:n]...)
	s.sweptKept += uint64(n)
	s.sweptCapped += uint64(len(s.pendingEv) - n)
	s.pendingEv = nil
	return r, err
}

func (s *Source) collect(p *probe.Probe, r *source.Reading) error {
	// Events first: the kernel counts an answer before it submits its
	// evidence, so every event taken here is in the counts read next, and
	// its metric defined. (While detached, events read late wait here.)
	if s.evidence != nil {
		r.Events = s.evidence.Take()
	}
	timedOut, err := p.Sweep(s.opts.Timeout)
	if err != nil {
		return fmt.Errorf("time out dns queries: %w", err)
	}
	for _, e := range timedOut {
		s.timeouts[tkey{e.Netns, e.Server.Addr()}]++
		ev := event(e)
		if s.annotate != nil {
			s.annotate.Annotate(ev, e.Netns)
		}
		s.swept = append(s.swept, ev)
	}
	counts, err := p.Counts()
	if err != nil {
		return fmt.Errorf("read dns counters: %w", err)
	}
	h, err := p.Histogram()
	if err != nil {
		return fmt.Errorf("read dns latency: %w", err)
	}
	r.Metrics = catalog.DNSTree()
	r.Counters = map[string]uint64{catalog.DNS: 0, catalog.DNSErrors: 0, catalog.DNSTimeouts: 0, catalog.DNSClients: 0, catalog.DNSServers: 0}
	r.Histograms = map[string]*loglinear.Histogram{catalog.DNSLatency: s.hist.Next(h)}

	split := source.ByNetns{}
	tree := map[string]catalog.Metric{}
	for _, m := range r.Metrics {
		tree[m.ID] = m
	}
	byServer := map[netip.Addr]*serverCounts{}
	sc := func(a netip.Addr) *serverCounts {
		if byServer[a] == nil {
			byServer[a] = &serverCounts{}
		}
		return byServer[a]
	}
	// Every counter in a stable order, so a metric is defined in the
	// same place of r.Metrics each time.
	keys := slices.SortedFunc(maps.Keys(counts), compareKeys)
	for _, k := range keys {
		v := counts[k] - min(s.base[k], counts[k])
		if v == 0 {
			continue
		}
		switch k.What {
		case probe.Query:
			split.Add(r, tree[catalog.DNSClients], k.Netns, v)
			r.Counters[catalog.DNS] += v
			sc(k.Server).queries += v
		case probe.Answer:
			if k.Rcode == 0 {
				continue
			}
			name := catalog.RcodeName(k.Rcode)
			split.Add(r, catalog.DNSRcode(name), k.Netns, v)
			r.Counters[catalog.DNSErrors] += v
			if name != "nxdomain" {
				sc(k.Server).errors += v
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(s.timeouts), compareTKeys) {
		v := s.timeouts[k]
		split.Add(r, tree[catalog.DNSTimeouts], k.netns, v)
		sc(k.server).timeouts += v
	}
	// split.Add put dns/clients and dns/timeouts in r.Metrics again; the
	// fixed tree already defines them.
	r.Metrics = dedupe(r.Metrics)
	// The three named codes are defined from the start, so their
	// thresholds hold before the first error.
	for _, name := range []string{"nxdomain", "servfail", "refused"} {
		m := catalog.DNSRcode(name)
		if _, ok := r.Counters[m.ID]; !ok {
			r.Metrics = append(r.Metrics, m)
			r.Counters[m.ID] = 0
		}
	}
	s.servers.add(r, byServer)
	s.owners.Split(r, split)
	s.capMu.Lock()
	s.pendingEv = append(s.pendingEv, s.swept...)
	s.capMu.Unlock()
	s.swept = nil
	return nil
}

func compareKeys(a, b probe.Key) int {
	if c := compareInt(a.Netns, b.Netns); c != 0 {
		return c
	}
	if c := a.Server.Compare(b.Server); c != 0 {
		return c
	}
	if c := compareInt(a.What, b.What); c != 0 {
		return c
	}
	return compareInt(a.Rcode, b.Rcode)
}

func compareTKeys(a, b tkey) int {
	if c := compareInt(a.netns, b.netns); c != 0 {
		return c
	}
	return a.server.Compare(b.server)
}

func compareInt[T uint8 | uint32 | probe.What](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func dedupe(ms []catalog.Metric) []catalog.Metric {
	seen := map[string]bool{}
	out := ms[:0]
	for _, m := range ms {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}

// EvidenceCounts says what evidence the kernel's rate limit and ring, and
// the per-interval cap, gave up; the timeouts' evidence, which user space
// makes, passes the per-interval cap only.
func (s *Source) EvidenceCounts() (source.EvidenceCounts, error) {
	st, err := s.Stats()
	if err != nil {
		return source.EvidenceCounts{}, fmt.Errorf("read dns evidence losses: %w", err)
	}
	c := source.EvidenceCounts{Branch: catalog.DNS, Dropped: map[string]uint64{
		source.CapRateLimit: st.Suppressed, source.CapRingFull: st.RingFull, source.CapInterval: 0}}
	if s.evidence != nil {
		c.Kept, c.Dropped[source.CapInterval] = s.evidence.Counts()
	}
	s.capMu.Lock()
	c.Kept += s.sweptKept
	c.Dropped[source.CapInterval] += s.sweptCapped
	s.capMu.Unlock()
	return c, nil
}

// Close detaches and frees the programs, then stops the evidence reader
// (closing the ring is what wakes it).
func (s *Source) Close() error {
	err := s.Triggered.Close()
	if s.evidence != nil {
		s.evidence.Stop()
	}
	return err
}

// event is the evidence of one slow, failed or unanswered query, recorded
// on the metric it explains.
func event(e probe.Event) *nbsv1.Event {
	id := catalog.DNSLatency
	switch {
	case e.TimedOut:
		id = catalog.DNSTimeouts
	case e.Rcode != 0:
		id = catalog.DNSRcode(catalog.RcodeName(e.Rcode)).ID
	}
	f := map[string]string{
		"netns":  strconv.FormatUint(uint64(e.Netns), 10),
		"name":   e.Name,
		"qtype":  qtypeName(e.QType),
		"server": e.Server.String(),
		"client": e.Client.String(),
		"id":     strconv.Itoa(int(e.ID)),
	}
	if e.Truncated {
		f["name_truncated"] = "true"
	}
	if e.TimedOut {
		f["outcome"] = "timeout"
	} else {
		f["rcode"] = catalog.RcodeName(e.Rcode)
		f["latency_ms"] = strconv.FormatFloat(float64(e.Latency)/1e6, 'f', 6, 64) // to the nanosecond
	}
	return &nbsv1.Event{MetricId: id, TimeUnixNano: e.Time.UnixNano(), Fields: f}
}

var qtypes = map[uint16]string{1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
	33: "SRV", 64: "SVCB", 65: "HTTPS", 255: "ANY"}

func qtypeName(t uint16) string {
	if n, ok := qtypes[t]; ok {
		return n
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// serverCounts are one server's counts since the attachment.
type serverCounts struct{ queries, errors, timeouts uint64 }

// servers gives the first top servers met a child each, for as long as
// the source counts, and sums the rest in other: children that never
// change owner add up to dns/servers exactly, with no ledger of moves.
type servers struct {
	top   int
	slots map[netip.Addr]string // server -> id segment
}

func newServers(top int) *servers { return &servers{top: top, slots: map[netip.Addr]string{}} }

func (sv *servers) add(r *source.Reading, by map[netip.Addr]*serverCounts) {
	// Busiest first, so that when places run short the busy ones get them.
	addrs := slices.SortedFunc(maps.Keys(by), func(a, b netip.Addr) int {
		if c := compareInt64(by[b].queries, by[a].queries); c != 0 {
			return c
		}
		return a.Compare(b)
	})
	var other serverCounts
	otherSeen := false
	for _, a := range addrs {
		c := by[a]
		r.Counters[catalog.DNSServers] += c.queries
		id, ok := sv.slots[a]
		if !ok && len(sv.slots) < sv.top {
			id = catalog.MetricSegment(a.String())
			sv.slots[a], ok = id, true
		}
		if !ok {
			other.queries += c.queries
			other.errors += c.errors
			other.timeouts += c.timeouts
			otherSeen = true
			continue
		}
		put(r, catalog.DNSServer(id, a.String()), *c)
	}
	if otherSeen {
		put(r, catalog.DNSServerOther(), other)
	}
}

func put(r *source.Reading, ms []catalog.Metric, c serverCounts) {
	r.Metrics = append(r.Metrics, ms...)
	r.Counters[ms[0].ID] = c.queries
	r.Counters[ms[1].ID] = c.errors
	r.Counters[ms[2].ID] = c.timeouts
}

func compareInt64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
