// Package tcpreset is the tcp_reset branch: resets by the kernel's reason from
// BPF tracepoints, or from /proc counters where BPF is unavailable.
package tcpreset

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/tcpreset"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const (
	capBPF  = "bpf.tcp_reset"
	capProc = "proc.tcp_reset"
)

// Options configure Open.
type Options struct {
	source.Env
	// MaxEventsPerInterval bounds evidence per report (--evidence.per-interval);
	// the kernel already rate-limits, this bounds the report size if the
	// interval is long. 0 means source.MaxEvidencePerInterval; events
	// beyond it are counted (EvidenceCounts).
	MaxEventsPerInterval int
}

// Open loads the BPF probe, or falls back to /proc and says why.
func Open(ctx context.Context, opts Options) (source.Source, error) {
	if opts.MaxEventsPerInterval <= 0 {
		opts.MaxEventsPerInterval = source.MaxEvidencePerInterval
	}
	log := opts.Log(catalog.TCPReset)
	why := source.BPFDisabled
	if !opts.DisableBPF {
		p, err := probe.Load(probe.Options{NetnsInode: opts.BPFNetns(), EvidencePerSecond: opts.EvidencePerSecond, Logger: log, BTF: opts.BTF,
			PinDir: opts.PinDirOf("tcp_reset")})
		if err == nil {
			return newBPF(ctx, p, log, opts.MaxEventsPerInterval, opts.OwnerSplit()), nil
		}
		why = err.Error()
		log.Warn("tcp_reset: BPF unavailable, falling back to /proc counters (no per-reason split, no evidence)", "err", err)
	}
	s := &procSource{proc: opts.ProcReader(), bpfWhy: why}
	if _, err := s.proc.SNMP(); err != nil {
		return nil, fmt.Errorf("tcp_reset: BPF unavailable (%s) and /proc fallback failed: %w", why, err)
	}
	return s, nil
}

type bpfSource struct {
	probe    *probe.Probe
	consumed uint64 // records read from the ring before this source's reader ran
	known    bool   // consumed could be read
	names    probe.Names
	evidence *source.Evidence
	owners   *source.Owners
}

func newBPF(ctx context.Context, p *probe.Probe, log *slog.Logger, maxEvents int, owners *source.Owners) *bpfSource {
	s := &bpfSource{probe: p, names: p.Names(), owners: owners}
	// Before the reader starts: what the previous agents read of an
	// adopted ring (EvidenceCounts.Consumed).
	var err error
	if s.consumed, err = p.Consumed(); err != nil {
		log.Warn("tcp_reset: cannot read the evidence ring's position; evidence a killed agent read but did not report is not counted", "err", err)
	}
	s.known = err == nil
	s.evidence = source.StartEvidence(ctx, catalog.TCPReset, log, maxEvents, func(ctx context.Context, add func(*nbsv1.Event)) error {
		return p.ReadEvents(ctx, func(e probe.Event) {
			ev := event(e)
			// Named when it happens: a namespace may be gone by the
			// next collection.
			owners.Annotate(ev, e.Netns)
			add(ev)
		})
	}, p.SyncEvents)
	return s
}

func (s *bpfSource) Name() string { return "tcp_reset (bpf)" }

// EvidenceCounts says what evidence the kernel's rate limit and ring, and
// the per-interval cap, gave up.
func (s *bpfSource) EvidenceCounts() (source.EvidenceCounts, error) {
	st, err := s.probe.Stats()
	if err != nil {
		return source.EvidenceCounts{}, fmt.Errorf("read tcp_reset evidence losses: %w", err)
	}
	kept, capped := s.evidence.Counts()
	return source.EvidenceCounts{Branch: catalog.TCPReset, Kept: kept, Dropped: map[string]uint64{
		source.CapRateLimit: st.Suppressed, source.CapRingFull: st.RingFull, source.CapInterval: capped,
	}, Consumed: s.consumed, ConsumedKnown: s.known}, nil
}

func (s *bpfSource) Capabilities() []*nbsv1.Capability {
	return []*nbsv1.Capability{{Name: capBPF, Available: true}}
}

// Continues says whether the counters continue a previous agent's (see
// source.Continuing): all of them come from the probe's maps.
func (s *bpfSource) Continues(string) bool { return s.probe.Continued() }

// Programs returns the probe's programs, for the agent branch's cost figures.
func (s *bpfSource) Programs() map[string]*ebpf.Program { return s.probe.Programs() }

func metricFor(names probe.Names, k probe.Key) catalog.Metric {
	if k.Direction == probe.DirectionSent {
		return catalog.ResetSentReason(names.Reason(k.Code))
	}
	return catalog.ResetReceivedState(names.State(k.Code))
}

// event is the evidence of one reset.
func event(e probe.Event) *nbsv1.Event {
	id := catalog.TCPResetSent + "/" + e.Reason
	if e.Direction == probe.DirectionReceived {
		id = catalog.TCPResetReceived + "/" + e.State
	}
	// Sized for the owner's fields too (source.Owners.Annotate).
	fields := make(map[string]string, source.EventFields)
	fields["direction"] = e.Direction.String()
	fields["netns"] = strconv.FormatUint(uint64(e.Netns), 10)
	if e.Reason != "" {
		fields["reason"] = e.Reason
	}
	if e.State != "" {
		fields["state"] = e.State
	}
	if e.Src.IsValid() {
		fields["src"] = e.Src.String()
		fields["dst"] = e.Dst.String()
	}
	return &nbsv1.Event{MetricId: id, TimeUnixNano: e.Time.UnixNano(), Fields: fields}
}

func (s *bpfSource) Collect(ctx context.Context) (source.Reading, error) {
	// The evidence the kernel wrote so far first: each reset is counted
	// before its evidence is submitted, so the counts read next hold it.
	s.evidence.Sync(ctx)
	byNetns, err := s.probe.CountsByNetns()
	if err != nil {
		return source.Reading{}, fmt.Errorf("read tcp_reset counters: %w", err)
	}
	r := source.Reading{Metrics: catalog.TCPResetTree(), Counters: map[string]uint64{
		catalog.TCPReset: 0, catalog.TCPResetSent: 0, catalog.TCPResetReceived: 0,
	}}
	// Each reason's counts by namespace, for its owner children.
	split := source.ByNetns{}
	for ns, counts := range byNetns {
		for k, v := range counts {
			m := metricFor(s.names, k)
			split.Add(&r, m, ns, v)
			r.Counters[m.Parent()] += v
			r.Counters[catalog.TCPReset] += v
		}
	}
	r.Events = s.evidence.Take()
	// An event may name a reason whose counter the map read above missed
	// (it raced the read); define it so the event is never orphaned.
	for _, e := range r.Events {
		if _, ok := r.Counters[e.GetMetricId()]; !ok {
			if e.GetFields()["direction"] == "sent" {
				r.Metrics = append(r.Metrics, catalog.ResetSentReason(e.GetFields()["reason"]))
			} else {
				r.Metrics = append(r.Metrics, catalog.ResetReceivedState(e.GetFields()["state"]))
			}
		}
	}
	s.owners.Split(&r, split)
	return r, nil
}

func (s *bpfSource) Close() error {
	err := s.probe.Close()
	s.evidence.Stop()
	return err
}

// procSource reads reset counters from /proc inside the watched namespace.
type procSource struct {
	proc   *procnet.Reader
	bpfWhy string
}

// SinceBoot says every counter is the kernel's since boot (see
// source.SinceBoot).
func (s *procSource) SinceBoot(string) bool { return true }

func (s *procSource) Name() string { return "tcp_reset (/proc)" }

func (s *procSource) Capabilities() []*nbsv1.Capability {
	return []*nbsv1.Capability{
		{Name: capBPF, Available: false, Reason: s.bpfWhy},
		{Name: capProc, Available: true, Reason: "reset totals from /proc/net/snmp and TCPAbortOn* from /proc/net/netstat; no per-reason split or evidence"},
	}
}

func (s *procSource) Collect(context.Context) (source.Reading, error) {
	c, err := s.proc.SNMP()
	if err != nil {
		return source.Reading{}, err
	}
	// As the kernel counts them, since boot (source.SinceBoot).
	abs := map[string]uint64{
		catalog.TCPResetSent:                 c["Tcp.OutRsts"],
		catalog.ResetReceivedProc().ID:       c["Tcp.EstabResets"],
		catalog.ResetReceivedProc().Parent(): c["Tcp.EstabResets"],
		catalog.TCPReset:                     c["Tcp.OutRsts"] + c["Tcp.EstabResets"],
	}
	r := source.Reading{Metrics: append(catalog.TCPResetTree(), catalog.ResetReceivedProc(), catalog.ResetSentOther())}
	var explained uint64
	for _, pc := range catalog.ProcResetCounters {
		m := catalog.ResetSentReason(pc.Reason)
		r.Metrics = append(r.Metrics, m)
		abs[m.ID] = c["TcpExt."+pc.Counter]
		explained += c["TcpExt."+pc.Counter]
	}
	abs[catalog.ResetSentOther().ID] = c["Tcp.OutRsts"] - min(explained, c["Tcp.OutRsts"])
	r.Counters = abs
	return r, nil
}

func (s *procSource) Close() error { return nil }
