// Package app runs a node agent: it opens the sources of every branch, folds
// their readings into the node's metric tree each interval, and streams
// reports to the collector. It is used by nbs-agent and by tests alike.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/nodecred"
	"github.com/nbs-project/nbs/agent/owner"
	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/agent/procnet"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/agent"
	dnssrc "github.com/nbs-project/nbs/agent/source/dns"
	"github.com/nbs-project/nbs/agent/source/drops"
	"github.com/nbs-project/nbs/agent/source/flows"
	"github.com/nbs-project/nbs/agent/source/latency"
	"github.com/nbs-project/nbs/agent/source/latencyecn"
	"github.com/nbs-project/nbs/agent/source/latencyflows"
	"github.com/nbs-project/nbs/agent/source/latencyqdisc"
	"github.com/nbs-project/nbs/agent/source/latencyrx"
	"github.com/nbs-project/nbs/agent/source/latencysizes"
	"github.com/nbs-project/nbs/agent/source/latencytx"
	pingsrc "github.com/nbs-project/nbs/agent/source/ping"
	"github.com/nbs-project/nbs/agent/source/tcpreset"
	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/agent/uplink"
	"github.com/nbs-project/nbs/internal/buildinfo"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/netns"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

type Agent struct {
	cfg      Config
	log      *slog.Logger
	tree     *tree.Tree
	outbox   *spool.Spool
	instance uint64
	kernel   string
	version  string

	mu      sync.Mutex
	caps    []*nbsv1.Capability
	sources []source.Source
	ping    peers
	self    *agent.Source // the agent branch; it also attaches triggered sources
	// proc is the watched namespace's SNMP counters, read once per
	// collection for every source that needs them.
	proc *procnet.Reader
	// pingAddress is what this node announces for peers to ping.
	pingAddress string

	// collecting is held while the sources are read and their metrics
	// defined, and while the collector's peers are applied: a peer it
	// takes away is then either not read or forgotten after it was
	// defined, never defined again after it was forgotten.
	collecting sync.Mutex
	// sizes are the last reading's, under collecting: the next one's
	// maps are made that large, where growing them to it was most of
	// what a collection allocated for them (a map of hundreds of
	// counters, gauges and flags, each a few times over).
	sizes readingSizes

	expandUntil atomic.Int64 // Unix nanoseconds
	reports     atomic.Uint64
}

func New(cfg Config, log *slog.Logger) *Agent {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return &Agent{cfg: cfg, log: log, tree: tree.New(), kernel: unix.ByteSliceToString(uts.Release[:]), version: buildinfo.Version()}
}

// Run measures and streams until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	identity, err := nodecred.Open(a.cfg.CredentialFile, a.cfg.BootstrapTokenFile, a.log.With("part", "nodecred"))
	if err != nil {
		return err
	}
	ns, err := netns.Resolve(a.cfg.Netns)
	if err != nil {
		return fmt.Errorf("--netns %q: %w", a.cfg.Netns, err)
	}
	pingAddress, err := a.cfg.pingAddress(ns)
	if err != nil {
		a.log.Warn("ping: cannot detect this node's address; not announcing one (set --ping.address)", "err", err)
	}
	spooled, spoolCap := a.openSpool()
	defer func() {
		if err := spooled.Close(); err != nil {
			a.log.Warn("close spool", "err", err)
		}
	}()
	a.mu.Lock()
	a.pingAddress = pingAddress
	a.outbox = spooled
	a.instance = spooled.Instance()
	a.caps = append(a.caps, spoolCap)
	a.mu.Unlock()
	pinDir, pinCap := a.pinning()
	a.mu.Lock()
	a.caps = append(a.caps, pinCap)
	a.mu.Unlock()
	carryDir := ""
	if spooled.Persistent() {
		carryDir = a.cfg.SpoolDir
	}
	boot, err := readBootID(bootIDPath)
	if err != nil {
		a.log.Warn("this boot is unknown; the kernel's /proc counters will not continue across agent restarts", "err", err)
	}
	car := newCarry(carryDir, a.cfg.NodeName, origin{Boot: boot, Netns: ns.Inode}, a.log.With("part", "carry"))
	env := a.env(ns)
	env.PinDir = pinDir
	a.proc = env.Proc
	// The load's peak is its heap and the pages of the binary it maps:
	// not also those the start mapped before it.
	dropTextPages()
	restoreGC := tightGC()
	sources, err := a.openSources(ctx, env, a.branches())
	restoreGC()
	if a.cfg.MaxProcs > 0 {
		runtime.GOMAXPROCS(a.cfg.MaxProcs)
	}
	if a.cfg.TimerSlack > 0 {
		if n, err := raiseTimerSlack(procSelf, a.cfg.TimerSlack); err != nil {
			a.log.Debug("timer slack left as it was", "threads", n, "err", err)
		}
	}
	// Every program is loaded now (triggered ones attach later without
	// BTF): the decoded kernel types would only hold memory.
	env.BTF.Release()
	if err != nil {
		return err
	}
	// Loading left garbage several times the agent's live heap, which a
	// quiet agent would otherwise keep resident until its next GC.
	debug.FreeOSMemory()
	a.mu.Lock()
	a.sources = sources
	for _, s := range a.sources {
		a.caps = append(a.caps, s.Capabilities()...)
	}
	a.caps = append(a.caps, ownerCapability(env.Owners, a.log))
	a.mu.Unlock()
	defer func() {
		for _, s := range a.sources {
			if err := s.Close(); err != nil {
				a.log.Warn("close source", "source", s.Name(), "err", err)
			}
		}
	}()
	for _, c := range a.caps {
		if !c.GetAvailable() {
			a.log.Warn("capability unavailable", "capability", c.GetName(), "reason", c.GetReason())
		}
	}

	// The first reading is the baseline: reports count from here, but for
	// the counters that continue the previous agent's (pinned maps).
	led := newLedger()
	// What the previous agent's reports counted: the agent branch's
	// evidence counts live in the process and continue from it (Carry).
	prev := car.restore(a.outbox)
	a.mu.Lock()
	self := a.self
	a.mu.Unlock()
	self.Carry(prev.counted)
	first := a.collect(ctx, led)
	var reported map[string]uint64
	if len(first.continued) > 0 {
		if reported = prev.counted; reported == nil {
			a.log.Warn("the probes adopted pinned counters but there is no record of what the previous agent reported " +
				"(a spool in memory, or another node's); counts made while no agent ran are not reported")
		} else {
			a.log.Info("continuing the previous agent's counts: the first report holds what was counted since its last one",
				"counters", len(first.continued))
		}
	}
	a.logKernelBaseline(led.baseline(first, prev, car.here))
	// What the reports carry from here; for fresh maps, this start.
	car.start(led.counters, led.sinceBoot)
	last := time.Now()
	// The evidence of what the first report counts for the previous agent
	// (read from the pinned rings: made after its last report, or while no
	// agent ran) goes with it; the rest of the baseline's is of counts that
	// are not reported.
	var carried []*nbsv1.Event
	if reported != nil {
		carried = first.continuedEvents
	}

	tlsCfg, err := a.cfg.tls(a.log.With("part", "tls"))
	if err != nil {
		return err
	}
	up := uplink.New(uplink.Options{Address: a.cfg.CollectorAddress, TLS: tlsCfg, Identity: identity}, a.outbox, a, a.log.With("part", "uplink"))
	// The uplink outlives ctx by the final flush: it delivers the last
	// report of a stopping agent.
	upCtx, upStop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := up.Run(upCtx); err != nil {
			a.log.Error("uplink stopped", "err", err)
		}
	})
	defer func() {
		upStop()
		wg.Wait()
	}()
	a.log.Info("agent running", "node", a.cfg.NodeName, "collector", a.cfg.CollectorAddress, "interval", a.cfg.Interval,
		"netns", ns.String(), "instance", fmt.Sprintf("%016x", a.instance))

	ticker := time.NewTicker(a.cfg.Interval)
	defer ticker.Stop()
	lastSnapshot := time.Now()
	for {
		select {
		case <-ctx.Done():
			a.flush(led, car, last)
			return nil
		case now := <-ticker.C:
			cur := a.collect(ctx, led)
			elapsed := now.Sub(last)
			last = now
			snapshotDue := now.Sub(lastSnapshot) >= a.cfg.SnapshotEvery
			if snapshotDue {
				lastSnapshot = now
			}
			full := snapshotDue || now.UnixNano() < a.expandUntil.Load()
			cur.events, carried = append(carried, cur.events...), nil
			res := a.report(led, car, now, elapsed, cur, full)
			a.adapt(ctx, now, res)
		}
	}
}

// logKernelBaseline says, once, whether the kernel's own (/proc) counters
// continue the previous agent's.
func (a *Agent) logKernelBaseline(n baselineNote) {
	if len(n.backwards) > 0 {
		a.log.Warn("kernel counters smaller than the previous agent reported (reset); counting them from this agent's start",
			"counters", n.backwards)
	}
	switch {
	case n.continued > 0:
		a.log.Info("continuing the previous agent's kernel (/proc) counters: the first report holds what they counted since its last one",
			"counters", n.continued, "of", n.kernel)
	case n.why != "":
		a.log.Info("counting the kernel's (/proc) counters from this agent's start", "why", n.why, "counters", n.kernel)
	}
}

// report builds the report of the interval (now-elapsed, now] and gives
// it to the outbox, which numbers it (splitting one too large to send),
// recording around it which counts the reports carry (see carry).
func (a *Agent) report(led *ledger, car *carry, now time.Time, elapsed time.Duration, cur reading, full bool) tree.Result {
	rep, res := led.build(a.tree, now, elapsed, cur, full)
	rep.Flows, rep.AddressHolders = cur.flows, cur.holders
	car.pending(rep.GetTimeUnixNano(), led.counters)
	a.outbox.Add(rep)
	car.commit()
	a.reports.Add(1)
	return res
}

// flush reports the last, partial interval of a stopping agent and waits
// up to --shutdown.flush-timeout for the collector to ack everything held,
// so a SIGTERM loses nothing; what is not acked by then stays in the spool
// for the next agent.
func (a *Agent) flush(led *ledger, car *carry, last time.Time) {
	// The agent's context has ended, not the sources: their maps are
	// still there to read, and their evidence readers run until they close.
	ctx, cancel := context.WithTimeout(context.Background(), max(a.cfg.FlushTimeout, time.Second))
	defer cancel()
	// The collector refuses a report of less than the shortest interval
	// (100ms, as --interval): a stop just after a collection waits for it.
	// The collection has the evidence readers read their rings first
	// (source.Evidence.Sync), which puts the evidence of every event
	// counted in this report in it, so a SIGTERM loses none
	// (agent/evidence/dropped/*/agent_down).
	time.Sleep(time.Until(last.Add(minInterval)))
	for _, s := range a.sources {
		if h, ok := s.(source.Holding); ok {
			h.Release() // what it held for a later report goes in this one
		}
	}
	now := time.Now()
	a.report(led, car, now, now.Sub(last), a.collect(ctx, led), false)
	deadline := time.Now().Add(a.cfg.FlushTimeout)
	for a.outbox.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := a.outbox.Len(); n > 0 {
		a.log.Warn("stopping with reports not yet acked; they stay in the spool for the next agent", "reports", n,
			"spool", a.outbox.Persistent())
		return
	}
	a.log.Info("final report stored; stopping")
}

// tightGC makes the collector run at a quarter of the live heap's growth
// rather than at its doubling, until the returned func sets the running
// agent's (runningGCPercent): the
// loading of the BPF programs decodes kernel BTF, garbage several times the
// live heap, and at the default the agent's peak memory came from that
// (bench/agentcost: 1.5–3 MB less peak resident memory, no more CPU). An
// operator's GOGC is left alone.
//
// A soft memory limit (loadMemoryLimit) holds the heap, and what the
// runtime keeps of it, near the live heap too, unless the operator set
// GOMEMLIMIT: 1.3 MB less peak for 0.16 s more CPU at the start.
func tightGC() (restore func()) {
	restoreGC, restoreLimit := func() {}, func() {}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
		restoreGC = func() { debug.SetGCPercent(runningGCPercent) }
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		prev := debug.SetMemoryLimit(loadMemoryLimit)
		restoreLimit = func() { debug.SetMemoryLimit(prev) }
	}
	return func() { restoreGC(); restoreLimit() }
}

// loadMemoryLimit is the soft memory limit while the programs load.
const loadMemoryLimit = 10 << 20

// runningGCPercent is the running agent's GOGC: its live heap is a few MB
// and it allocates little between collections, so collecting at half the
// heap's growth keeps 1–2 MB less resident (the peak of a running agent is
// its binary's pages and its heap's growth) for a GC cycle every few
// intervals more. At 50 a collection of an idle node with 50 namespaces
// runs two cycles (a live heap of 2 MB, goals of 2–4 MB); 100 was measured
// (bench/agentcost BenchmarkAgentIdle, 2026-11-30, alternated): no CPU
// difference the machine's load let through (0.112–0.166% of a core against
// 0.107–0.260%), peak resident memory 24.2–26.6 MiB against 23.3–27.1, over
// the 24 MiB goal in every round.
const runningGCPercent = 50

// ownerCapability says whether pods' container names can be read from the
// runtimes' OCI bundles; where they cannot, owners fall back to hostnames
// without a word in the tree, so it is said here and in the log.
func ownerCapability(r *owner.Resolver, log *slog.Logger) *nbsv1.Capability {
	ok, why := r.BundleAccess()
	if !ok {
		log.Warn("container names unavailable", "reason", why)
	}
	return &nbsv1.Capability{Name: "owner.oci_bundles", Available: ok, Reason: why}
}

// env is what every source is opened with.
func (a *Agent) env(ns netns.Handle) source.Env {
	return source.Env{Netns: ns, AllNetns: a.cfg.Netns == "", DisableBPF: !a.cfg.BPF,
		EvidencePerSecond: uint32(a.cfg.EvidencePerSecond), Logger: a.log, Proc: procnet.NewReader(ns.ReadFile),
		Owners: owner.New(owner.Options{Logger: a.log.With("part", "owner")}), TopOwners: a.cfg.TopOwners,
		BTF: bpfload.NewKernelBTF()}
}

// opener opens the source of one branch of the tree.
type opener func(context.Context, source.Env) (source.Source, error)

// branches open the agent's sources, in order; a new branch is one more
// line. The agent branch is not here: it comes after all of them.
func (a *Agent) branches() []opener {
	targets, _ := pingsrc.ParseTargets(a.cfg.PingTargets) // checked by Validate
	return []opener{
		open(tcpreset.Open, tcpreset.Options{MaxEventsPerInterval: a.cfg.evidencePerInterval()}),
		open(latency.Open, latency.Options{}),
		open(drops.Open, drops.Options{MaxEventsPerInterval: a.cfg.evidencePerInterval()}),
		open(pingsrc.Open, pingsrc.Options{Targets: targets, Interval: a.cfg.PingInterval}),
		open(latencytx.Open, latencytx.Options{CgroupPath: a.cfg.CgroupPath, SampleEvery: uint32(a.cfg.TxSample)}),
		open(latencyqdisc.Open, latencyqdisc.Options{}),
		open(latencysizes.Open, latencysizes.Options{}),
		open(latencyecn.Open, latencyecn.Options{}),
		open(latencyflows.Open, latencyflows.Options{}),
		open(latencyrx.Open, latencyrx.Options{Triggered: !a.cfg.LatencyRXAlways, ReadSample: a.cfg.LatencyRXSample}),
		open(dnssrc.Open, dnssrc.Options{Triggered: !a.cfg.DNSAlways, MaxEventsPerInterval: a.cfg.evidencePerInterval()}),
		open(flows.Open, flows.Options{Disabled: !a.cfg.FlowsEnable, Top: a.cfg.FlowsTop, Every: a.cfg.FlowsEvery}),
	}
}

// open makes a source package's Open an opener: opts are the branch's own
// options, to which the opener adds the shared environment.
func open[O any, PO interface {
	*O
	SetEnv(source.Env)
}, S source.Source](openFn func(context.Context, O) (S, error), opts O) opener {
	return func(ctx context.Context, env source.Env) (source.Source, error) {
		o := opts
		PO(&o).SetEnv(env)
		s, err := openFn(ctx, o)
		if err != nil {
			return nil, err // not a nil *S in a non-nil interface
		}
		return s, nil
	}
}

// statsWindow is how long before each collection the BPF run-time
// statistics are on: a second of each interval of 5 s or more (a tenth of
// the default's), for good at shorter intervals, where a second would be
// most of it anyway.
func statsWindow(interval time.Duration) time.Duration {
	if interval < 5*time.Second {
		return 0
	}
	return time.Second
}

// statsEvery is how many collections share one window of the run-time
// statistics while nothing needs a fresh figure (agent.Options.StatsEvery):
// with a second of every third 10 s interval they are on 3% of the time
// (10% with one a collection), and every program's run pays their clock
// reads that much less often.
const statsEvery = 3

// peers is the ping branch as the collector's config reaches it.
type peers interface {
	// SetPeers returns the subtrees of the peers it stopped pinging.
	SetPeers(specs []string) (retired []string)
}

// openSources opens the source of every branch, then the agent branch,
// which measures the BPF programs of the others and attaches the triggered
// ones. A source that cannot run degrades itself (and says why in its
// capabilities); an error here is for a node where not even the fallback
// works, and closes what was opened.
func (a *Agent) openSources(ctx context.Context, env source.Env, branches []opener) ([]source.Source, error) {
	var opened []source.Source
	for _, openBranch := range branches {
		s, err := openBranch(ctx, env)
		if err != nil {
			for _, o := range opened {
				if cerr := o.Close(); cerr != nil {
					a.log.Warn("close source", "source", o.Name(), "err", cerr)
				}
			}
			return nil, err // it names its branch
		}
		opened = append(opened, s)
	}
	self := agent.New(agent.Options{Sources: append([]source.Source(nil), opened...),
		Pending: a.outbox.Len, Dropped: a.outbox.Dropped, BudgetPercent: a.cfg.OverheadBudget,
		Hold: a.cfg.TriggeredHold, MaxOn: a.cfg.TriggeredMax, Interval: a.cfg.Interval, StatsWindow: statsWindow(a.cfg.Interval), StatsEvery: statsEvery,
		Logger: env.Log(catalog.Agent)})
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range opened {
		if p, ok := s.(peers); ok {
			a.ping = p
		}
	}
	a.self = self
	return append(opened, self), nil
}

// reading merges every source's collection of one interval.
type reading struct {
	counters   map[string]uint64
	gauges     map[string]float64
	histograms map[string]*loglinear.Histogram
	idle       map[string]bool // see source.Reading.Idle
	events     []*nbsv1.Event
	// continued are the counters of sources whose counts continue the
	// previous agent's (source.Continuing), and continuedEvents the
	// events of their metrics.
	continued       map[string]bool
	continuedEvents []*nbsv1.Event
	// sinceBoot are the counters that are the kernel's own since boot
	// (source.SinceBoot).
	sinceBoot map[string]bool
	// flows and holders go into the report as they are (source.Reading).
	flows   []*nbsv1.FlowEdge
	holders []*nbsv1.AddressHolder
}

// readingSizes are the sizes of a reading's maps.
type readingSizes struct{ counters, gauges, histograms, idle, continued, sinceBoot int }

func (a *Agent) collect(ctx context.Context, led *ledger) reading {
	a.collecting.Lock()
	defer a.collecting.Unlock()
	if a.proc != nil {
		a.proc.Next()
	}
	z := a.sizes
	r := reading{counters: make(map[string]uint64, z.counters), gauges: make(map[string]float64, z.gauges),
		histograms: make(map[string]*loglinear.Histogram, z.histograms), idle: make(map[string]bool, z.idle),
		continued: make(map[string]bool, z.continued), sinceBoot: make(map[string]bool, z.sinceBoot)}
	defer func() {
		a.sizes = readingSizes{counters: len(r.counters), gauges: len(r.gauges), histograms: len(r.histograms), idle: len(r.idle),
			continued: len(r.continued), sinceBoot: len(r.sinceBoot)}
	}()
	for _, s := range a.sources {
		got, err := s.Collect(ctx)
		if err != nil {
			// Its metrics go UNKNOWN this interval; the others still report.
			a.log.Warn("collect", "source", s.Name(), "err", err)
			continue
		}
		a.tree.Forget(got.Retired...)
		led.retire(got.Retired)
		if added := a.tree.Define(got.Metrics...); len(added) > 0 {
			a.log.Debug("new metrics", "source", s.Name(), "count", len(added))
		}
		cont, _ := s.(source.Continuing)
		kernel, _ := s.(source.SinceBoot)
		for k, v := range got.Counters {
			r.counters[k] = v
			if cont != nil && cont.Continues(k) {
				r.continued[k] = true
			}
			if kernel != nil && kernel.SinceBoot(k) {
				r.sinceBoot[k] = true
			}
		}
		for k, v := range got.Gauges {
			r.gauges[k] = v
		}
		for k, h := range got.Histograms {
			r.histograms[k] = h
		}
		for _, id := range got.Idle {
			r.idle[id] = true
		}
		r.events = append(r.events, got.Events...)
		r.flows = append(r.flows, got.Flows...)
		r.holders = append(r.holders, got.AddressHolders...)
		for _, e := range got.Events {
			if cont != nil && cont.Continues(e.GetMetricId()) {
				r.continuedEvents = append(r.continuedEvents, e)
			}
		}
	}
	return r
}

// adapt lets the agent branch attach or detach triggered sources from this
// interval's tree state.
func (a *Agent) adapt(ctx context.Context, now time.Time, res tree.Result) {
	a.mu.Lock()
	self := a.self
	a.mu.Unlock()
	if self != nil {
		self.Adapt(ctx, now, res, time.Unix(0, a.expandUntil.Load()))
	}
}

// Hello describes the node for a new stream.
func (a *Agent) Hello() *nbsv1.Hello {
	a.mu.Lock()
	caps := append([]*nbsv1.Capability(nil), a.caps...)
	pingAddress := a.pingAddress
	a.mu.Unlock()
	h := &nbsv1.Hello{NodeName: a.cfg.NodeName, Labels: a.cfg.Labels, AgentVersion: a.version, KernelRelease: a.kernel,
		InstanceId: a.instance, Capabilities: caps, IntervalMs: uint32(a.cfg.Interval.Milliseconds()), PingAddress: pingAddress}
	for _, m := range a.tree.Metrics() {
		h.Metrics = append(h.Metrics, m.Proto())
	}
	return h
}

// Definition returns one metric's definition for a stream's new_metrics.
func (a *Agent) Definition(id string) (*nbsv1.MetricDefinition, bool) {
	m, ok := a.tree.Metric(id)
	if !ok {
		return nil, false
	}
	return m.Proto(), true
}

// ApplyConfig takes the collector's effective thresholds and expand request
// without a restart.
func (a *Agent) ApplyConfig(c *nbsv1.Config) {
	overrides := make(map[string]catalog.Threshold, len(c.GetThresholds()))
	var bad []error
	for id, t := range c.GetThresholds() {
		thr, err := catalog.ThresholdFromProto(t)
		if err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", id, err))
			continue
		}
		overrides[id] = thr
	}
	if len(bad) > 0 {
		a.log.Warn("ignoring invalid thresholds from the collector", "err", errors.Join(bad...))
	}
	a.tree.SetThresholds(overrides, c.GetDisabledThresholds())
	a.expandUntil.Store(c.GetExpandUntilUnixNano())
	a.mu.Lock()
	ps, self := a.ping, a.self
	a.mu.Unlock()
	if self != nil {
		self.SetExpandBudget(c.GetExpandBudgetPercent())
	}
	if ps != nil {
		// Forgotten now, not at the next collection: the Hello of a stream
		// opened meanwhile, and the next report, no longer name a peer the
		// collector took away (after a change of tenant, another tenant's
		// node). What the ledger deferred for them is dropped at the next
		// collection (ledger.retire says why).
		a.collecting.Lock()
		gone := ps.SetPeers(c.GetPingTargets())
		a.tree.Forget(gone...)
		a.collecting.Unlock()
		if len(gone) > 0 {
			a.log.Info("ping peers removed by the collector forgotten", "targets", gone)
		}
	}
	a.log.Info("config applied", "version", c.GetVersion(), "threshold_overrides", len(overrides))
}

// openSpool opens the report spool in --spool.dir, or one in memory when
// that is empty or unusable: the agent then runs, and its capability says
// that a restart would lose what is not yet delivered.
func (a *Agent) openSpool() (*spool.Spool, *nbsv1.Capability) {
	opts := spool.Options{Dir: a.cfg.SpoolDir, Node: a.cfg.NodeName, MaxBytes: a.cfg.SpoolMaxBytes,
		MaxReports: a.cfg.BufferReports, Describe: a.Definition, Logger: a.log.With("part", "spool")}
	c := &nbsv1.Capability{Name: "spool", Available: true}
	if opts.Dir == "" {
		c.Available, c.Reason = false, "--spool.dir is empty: un-acked reports are kept in memory and lost if the agent restarts"
	} else if s, err := spool.Open(opts); err == nil {
		return s, c
	} else {
		a.log.Error("spool unusable; keeping un-acked reports in memory only", "err", err)
		c.Available, c.Reason = false, err.Error()+": un-acked reports are kept in memory and lost if the agent restarts"
	}
	opts.Dir = ""
	s, _ := spool.Open(opts) // in memory: cannot fail
	return s, c
}

// Pending is the number of reports not yet acked by the collector.
func (a *Agent) Pending() int {
	a.mu.Lock()
	ob := a.outbox
	a.mu.Unlock()
	if ob == nil {
		return 0
	}
	return ob.Len()
}

// Reports is the number of reports produced so far.
func (a *Agent) Reports() uint64 { return a.reports.Load() }

// pinning says where the probes pin, "" for nowhere, and the capability
// that tells the collector whether a restart keeps what the kernel counts.
func (a *Agent) pinning() (string, *nbsv1.Capability) {
	dir := a.cfg.pinDir()
	c := &nbsv1.Capability{Name: "bpf.pinning"}
	switch {
	case !a.cfg.BPF:
		c.Reason = source.BPFDisabled
		return "", c
	case dir == "":
		c.Reason = "--bpf.pin-dir=none: an agent restart loses what the probes counted after its last collection and while no agent ran"
		return "", c
	}
	if err := onBPFFS(dir); err != nil {
		a.log.Warn("not pinning BPF counters; an agent restart loses what the probes counted after its last collection", "err", err)
		c.Reason = err.Error() + ": an agent restart loses what the probes counted after its last collection and while no agent ran"
		return "", c
	}
	c.Available = true
	c.Reason = "tcp_reset and drops counters and programs are pinned in " + dir + ": they go on counting while no agent runs, and the next agent reports it"
	return dir, c
}

// onBPFFS checks that dir is (or would be made) on a bpffs mount: the
// nearest existing directory must be one.
func onBPFFS(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		var fs unix.Statfs_t
		err := unix.Statfs(p, &fs)
		if err == nil {
			if fs.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("--bpf.pin-dir %s is not on a bpffs mount (mount -t bpf bpf /sys/fs/bpf)", dir)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || p == filepath.Dir(p) {
			return fmt.Errorf("--bpf.pin-dir %s: %w", dir, err)
		}
	}
}

// Unpin removes what agents with this configuration pinned, and the record
// of what they reported: the uninstall step (nbs-agent --bpf.unpin). The
// programs stop counting; an agent started later counts from its start.
func Unpin(cfg Config, log *slog.Logger) error {
	dir := cfg.pinDir()
	if dir == "" {
		return errors.New("--bpf.pin-dir=none: nothing to unpin")
	}
	if err := bpfload.Unpin(dir); err != nil {
		return err
	}
	if cfg.SpoolDir != "" {
		if err := newCarry(cfg.SpoolDir, cfg.NodeName, origin{}, log).forget(); err != nil {
			return fmt.Errorf("remove the record of reported counts: %w", err)
		}
	}
	log.Info("unpinned the agent's BPF programs and counters", "dir", dir)
	return nil
}
