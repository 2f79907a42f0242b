// Package drops is the drops branch: packets the kernel dropped, by the
// kernel's own reason from BPF (kfree_skb), with evidence; or a few /proc
// counters where BPF is unavailable. Either way, the connection tracking
// table's failures and the devices' own drop and error counters of the
// watched namespace (conntrack.go, device.go; kernel.go makes them children).
package drops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/drops"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/netns"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const (
	capBPF  = "bpf.drops"
	capProc = "proc.drops"
	// Not BPF: read from the watched namespace either way.
	capConntrack = "proc.drops.conntrack"
	capDevice    = "netlink.drops.device"
)

// Options configure Open.
type Options struct {
	source.Env
	// MaxEventsPerInterval bounds evidence per report (--evidence.per-interval);
	// 0 means source.MaxEvidencePerInterval. Events beyond it are counted
	// (EvidenceCounts).
	MaxEventsPerInterval int
	// SoftnetPath is /proc/net/softnet_stat unless set (tests).
	SoftnetPath string
}

// Source is the drops branch, from BPF or /proc.
type Source struct {
	ns     netns.Handle
	log    *slog.Logger
	max    int
	bpfWhy string

	// BPF
	probe    *probe.Probe
	names    probe.Names
	evidence *source.Evidence
	owners   *source.Owners
	consumed uint64 // records read from the ring before this source's reader ran
	known    bool   // consumed could be read

	// /proc
	proc    *procnet.Reader
	softnet string

	// The kernel's conntrack and device counters, with or without BPF.
	kernel *kernel
}

// Open loads the BPF probe, or falls back to /proc and says why.
func Open(ctx context.Context, opts Options) (*Source, error) {
	if opts.MaxEventsPerInterval <= 0 {
		opts.MaxEventsPerInterval = source.MaxEvidencePerInterval
	}
	s := &Source{ns: opts.Netns, log: opts.Log(catalog.Drops), max: opts.MaxEventsPerInterval, bpfWhy: source.BPFDisabled,
		proc: opts.ProcReader(), softnet: opts.SoftnetPath, kernel: newKernel()}
	if s.softnet == "" {
		s.softnet = "/proc/net/softnet_stat"
	}
	if !opts.DisableBPF {
		p, err := probe.Load(probe.Options{NetnsInode: opts.BPFNetns(), EvidencePerSecond: int(opts.EvidencePerSecond), Logger: s.log, BTF: opts.BTF,
			PinDir: opts.PinDirOf("drops")})
		if err == nil {
			s.startBPF(ctx, p, opts.OwnerSplit())
			// The first reading of conntrack and the devices, so the
			// capabilities say what is there (the agent asks once, now).
			if err := s.collectKernel(&source.Reading{Counters: map[string]uint64{}}); err != nil {
				s.log.Warn("drops: cannot read conntrack and device counters", "err", err)
			}
			return s, nil
		}
		s.bpfWhy = err.Error()
		s.log.Warn("drops: BPF unavailable, falling back to /proc counters (no per-reason split, no evidence)", "err", err)
	}
	if _, err := s.collectProc(); err != nil {
		return nil, fmt.Errorf("drops: BPF unavailable (%s) and /proc fallback failed: %w", s.bpfWhy, err)
	}
	return s, nil
}

func (s *Source) startBPF(ctx context.Context, p *probe.Probe, owners *source.Owners) {
	s.probe, s.names, s.bpfWhy, s.owners = p, p.Names(), "", owners
	// Before the reader starts: what the previous agents read of an
	// adopted ring (EvidenceCounts.Consumed).
	var err error
	if s.consumed, err = p.Consumed(); err != nil {
		s.log.Warn("drops: cannot read the evidence ring's position; evidence a killed agent read but did not report is not counted", "err", err)
	}
	s.known = err == nil
	s.evidence = source.StartEvidence(ctx, catalog.Drops, s.log, s.max, func(ctx context.Context, add func(*nbsv1.Event)) error {
		return p.ReadEvents(ctx, func(e probe.Event) {
			ev := event(e)
			// Named when it happens: a namespace may be gone by the
			// next collection.
			owners.Annotate(ev, e.Netns)
			add(ev)
		})
	}, p.SyncEvents)
}

func (s *Source) Name() string {
	if s.probe != nil {
		return "drops (bpf)"
	}
	return "drops (/proc)"
}

func (s *Source) Capabilities() []*nbsv1.Capability {
	ct := &nbsv1.Capability{Name: capConntrack, Available: s.kernel.ctWhy == "",
		Reason: "drops/conntrack from /proc/sys/net/netfilter and /proc/net/stat/nf_conntrack of " + s.ns.String()}
	if !ct.Available {
		ct.Reason = "no drops/conntrack in " + s.ns.String() + ": " + s.kernel.ctWhy
	}
	dev := &nbsv1.Capability{Name: capDevice, Available: s.kernel.devWhy == "",
		Reason: "drops/device from the devices' IFLA_STATS64 (rtnetlink) in " + s.ns.String()}
	if !dev.Available {
		dev.Reason = "no drops/device in " + s.ns.String() + ": " + s.kernel.devWhy
	}
	if s.probe != nil {
		return []*nbsv1.Capability{{Name: capBPF, Available: true}, ct, dev}
	}
	return []*nbsv1.Capability{
		{Name: capBPF, Available: false, Reason: s.bpfWhy},
		{Name: capProc, Available: true, Reason: "UDP no-port and receive-buffer drops, IP input discards and listen drops " +
			"from /proc/net/{snmp,snmp6,netstat} of " + s.ns.String() + ", CPU backlog drops from softnet_stat (host-wide); " +
			"no per-reason split or evidence"},
		ct, dev,
	}
}

// Continues says whether the counters continue a previous agent's (see
// source.Continuing): those from the probe's maps; never on /proc, nor
// conntrack's and the devices' (SinceBoot).
func (s *Source) Continues(id string) bool {
	return s.probe != nil && s.probe.Continued() && !isKernelCounter(id)
}

// SinceBoot says the counters are the kernel's since boot (see
// source.SinceBoot): on /proc, all of them; with BPF, those of conntrack
// and drops/device. Not the device children, which count from the
// source's first sight of their device.
func (s *Source) SinceBoot(id string) bool {
	if isDeviceChild(id) {
		return false
	}
	return s.probe == nil || isKernelCounter(id)
}

// EvidenceCounts says what evidence the kernel's rate limit and ring, and
// the per-interval cap, gave up; nothing on /proc, which has no evidence.
func (s *Source) EvidenceCounts() (source.EvidenceCounts, error) {
	c := source.EvidenceCounts{Branch: catalog.Drops}
	if s.probe == nil {
		return c, nil
	}
	st, err := s.probe.Stats()
	if err != nil {
		return c, fmt.Errorf("read drops evidence losses: %w", err)
	}
	var capped uint64
	c.Kept, capped = s.evidence.Counts()
	c.Dropped = map[string]uint64{source.CapRateLimit: st.Suppressed, source.CapRingFull: st.RingFull, source.CapInterval: capped}
	c.Consumed, c.ConsumedKnown = s.consumed, s.known
	return c, nil
}

// Programs returns the BPF program by tracepoint, nil on /proc.
func (s *Source) Programs() map[string]*ebpf.Program {
	if s.probe == nil {
		return nil
	}
	return s.probe.Programs()
}

// metricFor names the child of a reason code.
func (s *Source) metricFor(code uint32) catalog.Metric {
	return catalog.DropReason(s.names.Reason(code))
}

// event is the evidence of one drop.
func event(e probe.Event) *nbsv1.Event {
	id := catalog.Drops + "/" + e.Reason
	if e.Code >= probe.Overflow {
		id = catalog.DropsOverflow
	}
	// Sized for the owner's fields too (source.Owners.Annotate).
	fields := make(map[string]string, source.EventFields)
	fields["reason"] = e.Reason
	fields["code"] = strconv.FormatUint(uint64(e.Code), 10)
	fields["netns"] = strconv.FormatUint(uint64(e.Netns), 10)
	if e.Protocol != "" {
		fields["protocol"] = e.Protocol
	}
	if e.Src.IsValid() {
		fields["src"] = e.Src.String()
		fields["dst"] = e.Dst.String()
	}
	if e.Ifindex != 0 {
		fields["ifindex"] = strconv.FormatUint(uint64(e.Ifindex), 10)
	}
	if e.Location != 0 {
		fields["location"] = fmt.Sprintf("%#x", e.Location)
	}
	return &nbsv1.Event{MetricId: id, TimeUnixNano: e.Time.UnixNano(), Fields: fields}
}

func (s *Source) Collect(ctx context.Context) (source.Reading, error) {
	if s.probe == nil {
		return s.collectProc()
	}
	// The evidence the kernel wrote so far first: each drop is counted
	// before its evidence is submitted, so the counts read next hold it.
	s.evidence.Sync(ctx)
	byNetns, err := s.probe.CountsByNetns()
	if err != nil {
		return source.Reading{}, fmt.Errorf("read drop counters: %w", err)
	}
	r := source.Reading{Metrics: catalog.DropsTree(), Counters: map[string]uint64{catalog.Drops: 0}}
	// Each reason's counts by namespace, for its owner children.
	split := source.ByNetns{}
	count := func(m catalog.Metric, ns uint32, v uint64) {
		split.Add(&r, m, ns, v)
		if m.ID != catalog.DropsNotSpecified {
			r.Counters[catalog.Drops] += v
		}
	}
	for ns, c := range byNetns {
		for code, v := range c.ByReason {
			count(s.metricFor(code), ns, v)
		}
		if c.Overflow > 0 {
			count(catalog.DropOverflow(), ns, c.Overflow)
		}
	}
	r.Events = s.evidence.Take()
	s.nameFunctions(r.Events)
	// An event may name a reason whose counter the read above missed (it
	// raced the read); define it so the event is never orphaned.
	for _, e := range r.Events {
		switch id := e.GetMetricId(); {
		case r.Counters[id] > 0:
		case id == catalog.DropsOverflow:
			r.Metrics = append(r.Metrics, catalog.DropOverflow())
		default:
			r.Metrics = append(r.Metrics, catalog.DropReason(e.GetFields()["reason"]))
		}
	}
	s.owners.Split(&r, split)
	if err := s.collectKernel(&r); err != nil {
		return source.Reading{}, err
	}
	return r, nil
}

// collectKernel adds drops/conntrack and drops/device, read in one visit
// to the watched namespace.
func (s *Source) collectKernel(r *source.Reading) error {
	var (
		ct           conntrack
		ctErr, lnErr error
		links        []link
	)
	if err := s.ns.Do(func() error {
		ct, ctErr = readConntrack(os.ReadFile) // in the namespace: this thread is
		links, lnErr = readLinks()
		return nil
	}); err != nil {
		return fmt.Errorf("read conntrack and device counters: %w", err)
	}
	if ctErr != nil && !errors.Is(ctErr, errNoConntrack) && ctErr.Error() != s.kernel.ctWhy {
		s.log.Warn("drops: cannot read conntrack counters", "netns", s.ns.String(), "err", ctErr)
	}
	why := ""
	if lnErr != nil {
		if why = lnErr.Error(); why != s.kernel.devWhy {
			s.log.Warn("drops: cannot read device counters", "netns", s.ns.String(), "err", lnErr)
		}
	}
	s.kernel.devWhy = why
	if r.Gauges == nil {
		r.Gauges = map[string]float64{}
	}
	s.kernel.add(r, ct, ctErr, links)
	return nil
}

// nameFunctions adds the kernel function that dropped each packet, looked
// up for the whole batch at once.
func (s *Source) nameFunctions(events []*nbsv1.Event) {
	locs := make([]uint64, 0, len(events))
	for _, e := range events {
		if a, err := strconv.ParseUint(e.GetFields()["location"], 0, 64); err == nil {
			locs = append(locs, a)
		}
	}
	if len(locs) == 0 {
		return
	}
	names := s.probe.Functions(locs)
	for _, e := range events {
		if a, err := strconv.ParseUint(e.GetFields()["location"], 0, 64); err == nil && names[a] != "" {
			e.Fields["function"] = names[a]
		}
	}
}

func (s *Source) collectProc() (source.Reading, error) {
	c, err := s.proc.SNMP()
	if err != nil {
		return source.Reading{}, err
	}
	c6, err := s.proc.SNMP6()
	if err != nil {
		return source.Reading{}, err
	}
	sn, err := procnet.ReadSoftnet(s.softnet)
	if err != nil {
		return source.Reading{}, err
	}
	pcs := catalog.DropProcCounters()
	abs := make(map[string]uint64, len(pcs))
	r := source.Reading{Metrics: catalog.DropsTree()}
	for _, pc := range pcs {
		r.Metrics = append(r.Metrics, pc.Metric)
		var v uint64
		for _, name := range pc.Counters {
			v += c[name] + c6[name] // the files' groups differ: "Udp" and "Udp6"
		}
		if pc.HostWide {
			v = sn.Dropped + sn.FlowLimit
		}
		abs[pc.Metric.ID] = v
	}
	// As the kernel counts them, since boot (source.SinceBoot).
	r.Counters = make(map[string]uint64, len(abs)+1)
	for id, v := range abs {
		r.Counters[id] = v
		r.Counters[catalog.Drops] += v
	}
	if err := s.collectKernel(&r); err != nil {
		return source.Reading{}, err
	}
	return r, nil
}

func (s *Source) Close() error {
	if s.probe == nil {
		return nil
	}
	err := s.probe.Close()
	s.evidence.Stop()
	return err
}
