// Package agent is the agent branch: what the agent's BPF programs cost
// (from the kernel's run-time statistics), whether reports are getting
// through, and which triggered sources are attached. It also attaches and
// detaches the triggered sources (source.Adaptive) from the tree's state,
// within the overhead budget.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const capStats = "bpf.stats"

// Defaults for Options left zero.
const (
	DefaultBudgetPercent = 1.0
	DefaultHold          = 2 * time.Minute
	DefaultMaxOn         = 15 * time.Minute
)

const statsSysctl = "/proc/sys/kernel/bpf_stats_enabled"

// Options configure New.
type Options struct {
	// Sources are the agent's other sources: those with Programs are
	// measured, the Adaptive ones attached on demand.
	Sources []source.Source
	// Pending and Dropped read the report outbox.
	Pending func() int
	Dropped func() uint64
	// BudgetPercent of one CPU for all BPF programs together.
	BudgetPercent float64
	// Hold keeps a triggered source attached after its trouble clears;
	// MaxOn is its longest stretch attached.
	Hold, MaxOn time.Duration
	// Interval is how often Collect is called; with StatsWindow shorter
	// than it, the run-time statistics are on only for the StatsWindow
	// before each Collect, and the programs' figures are measured over it.
	// While they are on, the kernel reads the clock twice around every run
	// of every BPF program on the node (85–90 ns a run here, BENCHMARKS.md):
	// a window cuts that by the duty cycle. Zero keeps them on for good.
	Interval, StatsWindow time.Duration
	// StatsEvery, with a StatsWindow, opens the window before one Collect
	// in StatsEvery only (≤ 1: before every one), cutting the duty cycle
	// again, while nothing needs a fresh figure: a window opens before the
	// next Collect whenever the last one measured the programs over the
	// budget with a source attached that the controller may shed, a
	// triggered source (not an always-on one) is
	// attached, an operator's expand is in force, or Adapt attached,
	// detached or re-sampled anything. The Collects between report the
	// last window's figures.
	StatsEvery int
	Logger     *slog.Logger
}

type program struct {
	src  source.Source
	id   string // metric id segment
	prog *ebpf.Program
}

// Source is the agent branch.
type Source struct {
	opts     Options
	log      *slog.Logger
	adaptive []source.Adaptive
	names    map[source.Adaptive]string

	restore  string // kernel.bpf_stats_enabled to put back at Close
	statsWhy string
	statsOK  bool
	ctl      Controller
	mu       sync.Mutex
	statsOn  io.Closer // BPF_ENABLE_STATS descriptor; nil while a window is shut
	windowed bool      // statistics on only for Options.StatsWindow before each Collect
	opened   time.Time // when the statistics' window opened; zero while shut
	// skipped counts the Collects since the last window (StatsEvery);
	// fresh says the next Collect needs a window whatever the count.
	skipped int
	fresh   bool
	// lastFig are the gauges of the last measured window (program figures
	// and totals), reported by the Collects that had none.
	lastFig   map[string]float64
	timer     *time.Timer
	closed    bool
	progs     []program // as the last Collect found them
	ids       map[*ebpf.Program]string
	taken     map[string]bool
	prev      map[*ebpf.Program]ebpf.ProgramStats // at the last Collect, or when the window opened
	prevOwn   map[*ebpf.Program]uint64            // runs in scope (source.Scoped), as prev
	lastAt    time.Time
	total     float64                   // fraction of a CPU charged to the budget, last interval
	cost      map[source.Source]float64 // per source, its own work, last interval
	events    []*nbsv1.Event
	adaptErrs map[string]string
	// expandBudget is the budget (percent) an operator's expand raised, in
	// force while the expand lasts; 0 for none.
	expandBudget float64
	// expandShed names the Expandable sources sent back to their sample
	// for the rest of the current expand, over the budget (Adapt's
	// goroutine only).
	expandShed map[string]bool
	// carried are, by evidence branch (metric segment), what the previous
	// agent's reports counted of the branch's process-local counts (see
	// Carry); carriedAll says every evidence branch has them.
	carried    map[string]carriedEvidence
	carriedAll bool
	// totalsFrom are, for the evidence branches that start afresh while the
	// totals continue, what the previous agent's reports counted of them;
	// at the first collection they become totalsOff, the offsets that make
	// the totals count only what the branches' own counters count.
	totalsFrom map[string][2]uint64 // reported, given up
	totalsOff  map[string][2]int64
}

// MaxExpandBudgetPercent bounds the budget an operator's expand may raise
// to (percent of one CPU); the collector refuses more, and the agent caps
// what it is sent.
const MaxExpandBudgetPercent = 25.0

// SetExpandBudget sets the budget (percent of one CPU) that holds while an
// operator's expand lasts, when it is above --overhead.budget; 0 clears it.
// Values beyond MaxExpandBudgetPercent are capped, negative or NaN ones
// ignored.
func (s *Source) SetExpandBudget(percent float64) {
	if !(percent > 0) {
		percent = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expandBudget = min(percent, MaxExpandBudgetPercent)
}

// budget is the budget in force at now (percent), under s.mu.
func (s *Source) budget(now, expandUntil time.Time) float64 {
	if now.Before(expandUntil) && s.expandBudget > s.opts.BudgetPercent {
		return s.expandBudget
	}
	return s.opts.BudgetPercent
}

// carriedEvidence is what counts of one branch's evidence start from in
// this agent (Carry).
type carriedEvidence struct {
	kept, capped uint64 // the previous agent's reports' agent/evidence/<b> and its interval_cap
	down         uint64 // agent_down: read by the agents before, never reported
	downKnown    bool
}

// New turns on the kernel's BPF run-time statistics, for the agent's
// lifetime or for a window before each Collect (Options.StatsWindow), and
// returns the branch. Statistics come on through BPF_ENABLE_STATS, which
// the kernel reverts by itself when the agent exits, however it exits; only
// where that is refused does it set kernel.bpf_stats_enabled (for good),
// and puts it back at Close.
func New(opts Options) *Source {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BudgetPercent <= 0 {
		opts.BudgetPercent = DefaultBudgetPercent
	}
	if opts.Hold <= 0 {
		opts.Hold = DefaultHold
	}
	if opts.MaxOn <= 0 {
		opts.MaxOn = DefaultMaxOn
	}
	if opts.Pending == nil {
		opts.Pending = func() int { return 0 }
	}
	if opts.Dropped == nil {
		opts.Dropped = func() uint64 { return 0 }
	}
	s := &Source{opts: opts, log: opts.Logger, names: map[source.Adaptive]string{},
		ctl: Controller{Budget: opts.BudgetPercent / 100, Hold: opts.Hold, MaxOn: opts.MaxOn},
		ids: map[*ebpf.Program]string{}, taken: map[string]bool{}, prev: map[*ebpf.Program]ebpf.ProgramStats{},
		prevOwn: map[*ebpf.Program]uint64{}, cost: map[source.Source]float64{}, adaptErrs: map[string]string{}, expandShed: map[string]bool{}}
	for _, src := range opts.Sources {
		// A triggered source this kernel cannot run has no programs: there
		// is nothing to attach.
		if a, ok := src.(source.Adaptive); ok && len(a.Programs()) > 0 {
			s.adaptive = append(s.adaptive, a)
			s.names[a] = catalog.MetricSegment(strings.ReplaceAll(a.Branch(), "/", "_"))
		}
	}
	s.enableStats()
	// Only the reference-counted BPF_ENABLE_STATS can be switched on and
	// off safely; the sysctl stays as it was set.
	s.windowed = s.statsOn != nil && opts.StatsWindow > 0 && opts.StatsWindow < opts.Interval
	s.opened = time.Now()
	if s.windowed {
		s.statsWhy = fmt.Sprintf("BPF run-time statistics on through BPF_ENABLE_STATS for the last %s of each %s interval, "+
			"which the programs' figures are measured over (while on, they cost every BPF program's run two clock reads)",
			opts.StatsWindow, opts.Interval)
		s.log.Info("BPF run-time statistics on only for the last part of each interval", "window", opts.StatsWindow, "interval", opts.Interval)
	}
	return s
}

func (s *Source) enableStats() {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err == nil {
		s.statsOn, s.statsOK = c, true
		s.statsWhy = "BPF run-time statistics on through BPF_ENABLE_STATS while the agent runs (the kernel turns them off when it exits)"
		s.log.Info("BPF run-time statistics enabled (BPF_ENABLE_STATS)")
		return
	}
	old, rerr := os.ReadFile(statsSysctl)
	cur := strings.TrimSpace(string(old))
	switch {
	case rerr == nil && cur == "1":
		s.statsOK = true
		s.statsWhy = "kernel.bpf_stats_enabled was already 1"
	case rerr == nil:
		if werr := os.WriteFile(statsSysctl, []byte("1"), 0); werr == nil {
			s.statsOK, s.restore = true, cur
			s.statsWhy = "set kernel.bpf_stats_enabled=1 (BPF_ENABLE_STATS refused: " + err.Error() + "); put back to " + cur + " when the agent stops"
			s.log.Warn("set kernel.bpf_stats_enabled=1; it is restored at exit, but not if the agent is killed", "was", cur)
		} else {
			s.statsWhy = fmt.Sprintf("BPF run-time statistics unavailable: BPF_ENABLE_STATS: %v; kernel.bpf_stats_enabled: %v", err, werr)
		}
	default:
		s.statsWhy = fmt.Sprintf("BPF run-time statistics unavailable: BPF_ENABLE_STATS: %v; kernel.bpf_stats_enabled: %v", err, rerr)
	}
	if !s.statsOK {
		s.log.Warn("BPF program costs cannot be measured: the overhead budget is not enforced, triggered sources are only time-bounded", "reason", s.statsWhy)
	}
}

func (s *Source) Name() string { return "agent" }

func (s *Source) Capabilities() []*nbsv1.Capability {
	return []*nbsv1.Capability{{Name: capStats, Available: s.statsOK, Reason: s.statsWhy}}
}

// programID names a program's subtree: its attach point, made unique.
func (s *Source) programID(p *ebpf.Program, key string) string {
	if id, ok := s.ids[p]; ok {
		return id
	}
	base := catalog.MetricSegment(key)
	id := base
	for n := 2; s.taken[id]; n++ {
		id = base + "_" + strconv.Itoa(n)
	}
	s.ids[p], s.taken[id] = id, true
	return id
}

// Carry makes the evidence counts that live in this process (events
// reported, interval_cap) continue those of the previous agent's reports,
// for each evidence source that continues the previous agent's counts
// (source.Continuing: its probe adopted the pinned maps and ring), and
// counts what that agent read from the ring but never reported (agent_down).
// reported is the counters the previous agent's reports carried (the
// agent's counted.json), nil when there is no record. Call it before the
// first Collect.
//
// The books of one branch balance from the ring's consumer position, which
// the pinned ring keeps: every record read by the agents before this one
// (EvidenceCounts.Consumed, read before this agent's reader started) was
// reported, given up beyond the per-interval cap, or lost with the agent
// that read it. So agent_down, cumulative over the agents, is Consumed
// less the reported and interval_cap counts the previous agent's reports
// carried, which themselves continue across agents.
func (s *Source) Carry(reported map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.carried, s.carriedAll = map[string]carriedEvidence{}, false
	s.totalsFrom, s.totalsOff = map[string][2]uint64{}, map[string][2]int64{}
	if reported == nil {
		return
	}
	for _, src := range s.opts.Sources {
		el, ok := src.(source.EvidenceLosses)
		if !ok {
			continue
		}
		c, err := el.EvidenceCounts()
		if err != nil || c.Dropped == nil {
			continue
		}
		b := catalog.MetricSegment(c.Branch)
		cont, _ := src.(source.Continuing)
		if cont == nil || !cont.Continues(c.Branch) {
			s.totalsFrom[b] = [2]uint64{reported[catalog.AgentEvidence+"/"+b], reported[catalog.AgentEvidenceDrop+"/"+b]}
			continue
		}
		k := carriedEvidence{capped: reported[catalog.AgentEvidenceDrop+"/"+b+"/"+source.CapInterval]}
		// An agent before this version reported no per-branch count: then
		// what it lost cannot be told from what it reported.
		if kept, ok := reported[catalog.AgentEvidence+"/"+b]; ok && c.ConsumedKnown {
			k.kept, k.downKnown = kept, true
			k.down = c.Consumed - min(kept+k.capped, c.Consumed)
		}
		s.carried[b] = k
	}
	// The totals continue when any branch does; those of the branches
	// that start afresh are offset at the first collection (evidence).
	s.carriedAll = len(s.carried) > 0
}

// Continues says which of the branch's counters continue the previous
// agent's (source.Continuing): those of the evidence of each source Carry
// carried, and the evidence totals when it carried any.
func (s *Source) Continues(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == catalog.AgentEvidence || id == catalog.AgentEvidenceDrop {
		return s.carriedAll
	}
	for b := range s.carried {
		if schema.Within(id, catalog.AgentEvidence+"/"+b) || schema.Within(id, catalog.AgentEvidenceDrop+"/"+b) {
			return true
		}
	}
	return false
}

// evidence adds what each source's evidence caps gave up, and what was
// reported (agent/evidence), continuing the previous agent's counts where
// Carry carried them.
func (s *Source) evidence(r *source.Reading) {
	var totalKept, totalDropped int64
	for _, src := range s.opts.Sources {
		el, ok := src.(source.EvidenceLosses)
		if !ok {
			continue
		}
		c, err := el.EvidenceCounts()
		if err != nil || c.Dropped == nil {
			continue // closed meanwhile, or no evidence (/proc)
		}
		branch := catalog.MetricSegment(c.Branch)
		k := s.carried[branch]
		dropped := maps.Clone(c.Dropped)
		dropped[source.CapInterval] += k.capped
		if c.ConsumedKnown {
			// A source with a ring always shows agent_down; it is 0 but
			// after a kill.
			dropped[source.CapAgentDown] = k.down
		}
		// The usual caps always (a zero says nothing was given up), then
		// any other a source counts.
		caps := slices.Clone(source.EvidenceCaps)
		for _, cp := range slices.Sorted(maps.Keys(dropped)) {
			if !slices.Contains(caps, cp) {
				caps = append(caps, cp)
			}
		}
		r.Metrics = append(r.Metrics, catalog.AgentEvidenceReported(branch))
		r.Metrics = append(r.Metrics, catalog.AgentEvidenceDropped(branch, caps)...)
		kept := k.kept + c.Kept
		r.Counters[catalog.AgentEvidence+"/"+branch] = kept
		id := catalog.AgentEvidenceDrop + "/" + branch
		r.Counters[id] = 0
		for _, cp := range caps {
			n := dropped[cp]
			r.Counters[id+"/"+cp] = n
			r.Counters[id] += n
		}
		// A branch that starts afresh while the totals continue: its first
		// values are a baseline of its own counters, so the totals go on
		// from its reported values instead (Carry).
		if from, ok := s.totalsFrom[branch]; ok {
			s.totalsOff[branch] = [2]int64{int64(from[0]) - int64(kept), int64(from[1]) - int64(r.Counters[id])}
			delete(s.totalsFrom, branch)
		}
		off := s.totalsOff[branch]
		totalKept += int64(kept) + off[0]
		totalDropped += int64(r.Counters[id]) + off[1]
	}
	r.Counters[catalog.AgentEvidence] = uint64(max(totalKept, 0))
	r.Counters[catalog.AgentEvidenceDrop] = uint64(max(totalDropped, 0))
}

// Collect reads every program's statistics and the outbox.
func (s *Source) Collect(context.Context) (source.Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	secs := now.Sub(s.lastAt).Seconds()
	first := s.lastAt.IsZero()
	s.lastAt = now
	measured := true
	if s.windowed {
		// The programs ran uncounted since the last Collect but for the
		// window: their figures are the window's.
		secs, measured = now.Sub(s.opened).Seconds(), !s.opened.IsZero()
		defer s.shutWindow(now)
	}

	r := source.Reading{Metrics: catalog.AgentTree(), Gauges: map[string]float64{},
		Counters: map[string]uint64{catalog.AgentOutboxDropped: s.opts.Dropped()}}
	r.Gauges[catalog.AgentOutbox] = float64(s.opts.Pending())

	s.evidence(&r)

	var progs []program
	for _, src := range s.opts.Sources {
		ps, ok := src.(source.Programs)
		if !ok {
			continue
		}
		for key, p := range ps.Programs() {
			if p != nil {
				progs = append(progs, program{src: src, id: s.programID(p, key), prog: p})
			}
		}
	}
	sort.Slice(progs, func(i, j int) bool { return progs[i].id < progs[j].id })
	s.progs = progs
	own := s.runsInScope(progs)
	var total, charged, runs float64
	cost := map[source.Source]float64{}
	for _, p := range progs {
		if !measured {
			// Called before its window opened, or a Collect without one
			// (StatsEvery): nothing was counted, and zeros would be wrong.
			// The last window's figures stand, for the budget and in the
			// report.
			ms := catalog.AgentProgram(p.id)
			r.Metrics = append(r.Metrics, ms...)
			for _, m := range ms {
				if v, ok := s.lastFig[m.ID]; ok {
					r.Gauges[m.ID] = v
				}
			}
			continue
		}
		st, err := p.prog.Stats()
		if err != nil {
			continue // closed meanwhile
		}
		prev := s.prev[p.prog]
		s.prev[p.prog] = *st
		dRuns := st.RunCount - min(prev.RunCount, st.RunCount)
		dTime := st.Runtime - min(prev.Runtime, st.Runtime)
		nsPerRun := 0.0
		switch {
		case dRuns > 0:
			nsPerRun = float64(dTime.Nanoseconds()) / float64(dRuns)
		case st.RunCount > 0:
			nsPerRun = float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
		}
		var perSec, frac float64
		if !first && secs > 0 {
			perSec = float64(dRuns) / secs
			frac = dTime.Seconds() / secs
		}
		total += frac
		runs += perSec
		// A namespace-restricted program is charged the share of its runs
		// that were in scope: runs for other namespaces leave after one
		// compare, and are the host's traffic, not this source's work.
		share := frac
		if n, ok := own[p.prog]; ok {
			dOwn := n - min(s.prevOwn[p.prog], n)
			s.prevOwn[p.prog] = n
			if dRuns > 0 && dOwn < dRuns {
				share = frac * float64(dOwn) / float64(dRuns)
			}
		}
		charged += share
		cost[p.src] += share
		ms := catalog.AgentProgram(p.id)
		r.Metrics = append(r.Metrics, ms...)
		r.Gauges[ms[0].ID] = 100 * frac
		r.Gauges[ms[1].ID] = nsPerRun
		r.Gauges[ms[2].ID] = perSec
	}
	if measured {
		s.total, s.cost = charged, cost
		r.Gauges[catalog.Agent] = 100 * total
		r.Gauges[catalog.AgentBPF] = runs
		if !first {
			// The first Collect's runs per second are not figures (no
			// interval before it): nothing to carry.
			s.lastFig = map[string]float64{}
			for id, v := range r.Gauges {
				if id == catalog.Agent || schema.Within(id, catalog.AgentBPF) {
					s.lastFig[id] = v
				}
			}
		}
	} else {
		for _, id := range []string{catalog.Agent, catalog.AgentBPF} {
			if v, ok := s.lastFig[id]; ok {
				r.Gauges[id] = v
			}
		}
	}

	attached := 0
	for _, a := range s.adaptive {
		m := catalog.AgentTriggeredSource(s.names[a], a.Branch())
		r.Metrics = append(r.Metrics, m)
		v := 0.0
		if a.Active() {
			v = 1
			attached++
		}
		r.Gauges[m.ID] = v
	}
	r.Gauges[catalog.AgentTriggered] = float64(attached)
	r.Events, s.events = s.events, nil
	return r, nil
}

// runsInScope reads the runs in scope of the programs whose sources count
// them (source.Scoped), by program.
func (s *Source) runsInScope(progs []program) map[*ebpf.Program]uint64 {
	out := map[*ebpf.Program]uint64{}
	bySource := map[source.Source]map[string]uint64{}
	for _, src := range s.opts.Sources {
		sc, ok := src.(source.Scoped)
		if !ok {
			continue
		}
		m, err := sc.RunsInScope()
		if err != nil {
			s.log.Debug("runs in scope unavailable; the source is charged every run", "source", src.Name(), "err", err)
			continue
		}
		bySource[src] = m
	}
	for _, p := range progs {
		m := bySource[p.src]
		if m == nil {
			continue
		}
		for key, prog := range p.src.(source.Programs).Programs() {
			if prog == p.prog {
				if n, ok := m[key]; ok {
					out[p.prog] = n
				}
			}
		}
	}
	return out
}

// shutWindow turns the statistics off after a Collect (under s.mu) and
// opens the next window StatsWindow before the next Collect is due, if
// that Collect is to have one (windowDue).
func (s *Source) shutWindow(now time.Time) {
	measured := !s.opened.IsZero()
	if s.statsOn != nil {
		if err := s.statsOn.Close(); err != nil {
			s.log.Warn("turn BPF run-time statistics off", "err", err)
		}
		s.statsOn = nil
	}
	s.opened = time.Time{}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if measured {
		s.skipped, s.fresh = 0, false
	} else {
		s.skipped++
	}
	if s.closed || !s.windowDue() {
		return
	}
	s.scheduleWindow()
}

// scheduleWindow opens a window StatsWindow before the Collect after the
// last one (under s.mu).
func (s *Source) scheduleWindow() {
	next := s.lastAt.Add(s.opts.Interval - s.opts.StatsWindow)
	s.timer = time.AfterFunc(time.Until(next), s.openWindow)
}

// windowDue says whether the next Collect is to have a window (under
// s.mu): Options.StatsEvery's count is up, or something needs a fresh
// figure (see there).
func (s *Source) windowDue() bool {
	if s.opts.StatsEvery <= 1 || s.skipped+1 >= s.opts.StatsEvery || s.fresh || s.expandBudget > 0 || s.lastFig == nil {
		return true
	}
	for _, a := range s.adaptive {
		if !a.Active() {
			continue
		}
		// Over the budget with something attached that the controller
		// may shed: its next step must see the figure of now.
		if s.total > s.ctl.Budget {
			return true
		}
		if st, ok := a.(source.Standing); !ok || !st.AlwaysOn() {
			return true
		}
	}
	return false
}

// needFresh asks for a window before the next Collect: Adapt changed what
// is attached or sampled, so the figures of the last window are not what
// runs now.
func (s *Source) needFresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fresh = true
	if s.windowed && !s.closed && s.timer == nil && s.statsOn == nil && !s.lastAt.IsZero() {
		s.scheduleWindow()
	}
}

// openWindow turns the statistics on from the programs' counts now, which
// only others' statistics can have moved since the last Collect.
func (s *Source) openWindow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.statsOn != nil {
		return
	}
	for _, p := range s.progs {
		if st, err := p.prog.Stats(); err == nil {
			s.prev[p.prog] = *st
		}
	}
	for p, n := range s.runsInScope(s.progs) {
		s.prevOwn[p] = n
	}
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		s.log.Warn("turn BPF run-time statistics on; this interval's program figures are missing", "err", err)
		return
	}
	s.statsOn, s.opened = c, time.Now()
}

// Usage returns the fraction of a CPU charged to the budget over the last
// interval (every program's runs, but only the in-scope runs of a
// namespace-restricted one, source.Scoped), and each source's share.
func (s *Source) Usage() (total float64, bySource map[source.Source]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[source.Source]float64, len(s.cost))
	for k, v := range s.cost {
		out[k] = v
	}
	return s.total, out
}

// Adapt attaches and detaches triggered sources from this interval's tree
// state (res), the operator's expand request and the measured cost. Call
// it once per interval, after Collect and the tree's evaluation.
func (s *Source) Adapt(ctx context.Context, now time.Time, res tree.Result, expandUntil time.Time) {
	if len(s.adaptive) == 0 {
		return
	}
	total, cost := s.Usage()
	s.mu.Lock()
	budget := s.budget(now, expandUntil)
	s.mu.Unlock()
	s.ctl.Budget = budget / 100
	total = s.expand(now, expandUntil, total, cost)
	byName := map[string]source.Adaptive{}
	in := make([]Input, 0, len(s.adaptive))
	for _, a := range s.adaptive {
		name := s.names[a]
		byName[name] = a
		always := false
		if st, ok := a.(source.Standing); ok {
			always = st.AlwaysOn()
		}
		in = append(in, Input{Name: name, Trouble: s.trouble(res, a), On: a.Active(), Cost: cost[a], Always: always})
	}
	decisions := s.ctl.Step(now, expandUntil, total, in)
	if len(decisions) > 0 {
		s.needFresh()
	}
	for _, d := range decisions {
		a := byName[d.Name]
		err := a.SetActive(ctx, d.On)
		action := "detached"
		if d.On {
			action = "attached"
		}
		// An error that repeats every interval is reported once.
		last := s.adaptErrs[d.Name]
		s.adaptErrs[d.Name] = ""
		if err != nil {
			s.adaptErrs[d.Name] = err.Error()
			if last == err.Error() {
				continue
			}
			s.log.Warn("triggered source: "+action+" failed", "triggered", a.Name(), "reason", d.Reason, "err", err)
		} else {
			s.log.Info("triggered source "+action, "triggered", a.Name(), "reason", d.Reason)
		}
		fields := map[string]string{"action": action, "reason": d.Reason, "branch": a.Branch(),
			"bpf_cpu_percent": strconv.FormatFloat(100*total, 'f', 4, 64),
			"budget_percent":  strconv.FormatFloat(budget, 'f', 4, 64)}
		if err != nil {
			fields["error"] = err.Error()
		}
		s.mu.Lock()
		s.events = append(s.events, &nbsv1.Event{MetricId: catalog.AgentTriggered + "/" + d.Name, TimeUnixNano: now.UnixNano(), Fields: fields})
		s.mu.Unlock()
	}
}

// expand turns every source.Expandable to measuring everything while an
// operator has the node expanded and back to its sample after, or as soon
// as the agent's BPF programs together are over the budget with it on (then
// for the rest of that expand). A source whose sampling changed is treated
// as unmeasured this interval (its cost was its old sampling's): its cost is
// taken out of total, which it returns, and the controller forgets what it
// last cost, so it stays attached and is measured afresh.
func (s *Source) expand(now, expandUntil time.Time, total float64, cost map[source.Source]float64) float64 {
	expanding := now.Before(expandUntil)
	for _, a := range s.adaptive {
		e, ok := a.(source.Expandable)
		if !ok {
			continue
		}
		name := s.names[a]
		if !expanding {
			delete(s.expandShed, name)
		}
		want := expanding && !s.expandShed[name]
		reason := "an operator expanded the node"
		if want && e.Expanded() && total > s.ctl.Budget {
			want, s.expandShed[name] = false, true
			reason = OverBudget(total, cost[a], s.ctl.Budget) + ": back to the sample until the expand ends"
		} else if !want {
			reason = "the expand ended"
		}
		if want == e.Expanded() {
			continue
		}
		err := e.SetExpanded(want)
		action := "measuring everything"
		if !want {
			action = "measuring its sample"
		}
		if err != nil {
			s.log.Warn("expandable source: "+action+" failed", "source", a.Name(), "reason", reason, "err", err)
			continue
		}
		s.log.Info("expandable source "+action, "source", a.Name(), "reason", reason)
		s.needFresh()
		total -= cost[a]
		delete(cost, a)
		s.ctl.ForgetCost(name)
		s.mu.Lock()
		s.events = append(s.events, &nbsv1.Event{MetricId: catalog.AgentTriggered + "/" + name, TimeUnixNano: now.UnixNano(),
			Fields: map[string]string{"action": action, "reason": reason, "branch": a.Branch()}})
		s.mu.Unlock()
	}
	return total
}

// trouble names a metric under a's trigger branch that is WARN or CRIT by
// its own threshold, leaving out every triggered source's own subtree (a
// triggered source must not keep itself attached); "" when there is none.
func (s *Source) trouble(res tree.Result, a source.Adaptive) string {
	root := a.Trigger()
	var ids []string
	for id, st := range res.Own {
		if st != tree.Warn && st != tree.Crit {
			continue
		}
		if !schema.Within(id, root) {
			continue
		}
		own := false
		for _, b := range s.adaptive {
			if schema.Within(id, b.Branch()) {
				own = true
				break
			}
		}
		if !own {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	sort.Strings(ids)
	return ids[0] + " is " + strings.TrimPrefix(res.Own[ids[0]].String(), "STATE_")
}

// Close detaches nothing (each source closes itself) and turns the
// statistics off again.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	var errs []error
	if s.statsOn != nil {
		errs = append(errs, s.statsOn.Close())
		s.statsOn = nil
	}
	if s.restore != "" {
		if err := os.WriteFile(statsSysctl, []byte(s.restore), 0); err != nil {
			errs = append(errs, fmt.Errorf("restore kernel.bpf_stats_enabled=%s: %w", s.restore, err))
		} else {
			s.log.Info("restored kernel.bpf_stats_enabled", "value", s.restore)
		}
	}
	return errors.Join(errs...)
}
