package alert

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nbs-project/nbs/collector/leader"
	"github.com/nbs-project/nbs/collector/store"
)

const (
	// sweepEvery: the leader reads every node's new reports this often even
	// without a wake-up, in case a NOTIFY was lost (a follower's database
	// hiccup, a leader change in between).
	sweepEvery = 10 * time.Second
	// silentEvery: silent rules are evaluated this often, not on every
	// cycle.
	silentEvery = time.Second
	// reloadEvery: rules and node labels are re-read this often besides on
	// notification.
	reloadEvery = 30 * time.Second
	// flushEvery is how often the watermarks that moved are written (a
	// node's is also written with its changes); a new leader replays at
	// most this much of each node's reports, harmlessly. Every node that
	// reported since is a row: written every second, that was one row per
	// report, two thirds of what the evaluator cost the database.
	flushEvery = 30 * time.Second
	// newNodeLookback is how much history a node the evaluator has never
	// read gets evaluated from (a fresh install, a new node).
	newNodeLookback = time.Minute
)

// evaluator is the leader's state for one term; a database error discards
// it and the next one starts again from what PostgreSQL holds.
type evaluator struct {
	s     *Service
	term  leader.Term
	eng   *Engine
	paths map[int32]string
	nodes map[int32]store.Node
	// nodeSums, nodeSeed and nodeGen let loadNodes decode only the node
	// rows that changed.
	nodeSums map[int32]nodeSum
	nodeSeed maphash.Seed
	nodeGen  uint32
	// newest is sweep's room for every node's newest report time, kept
	// (store.NewestTimesInto).
	newest    map[int32]time.Time
	known     map[int32]bool // nodes whose watermark is persisted
	synced    map[int32]bool // nodes read from the database by this evaluator (see read)
	wm        map[int32]time.Time
	lastFlush time.Time
	lastSweep time.Time
	lastLoad  time.Time
	// lastSilent is when silent rules were last evaluated.
	lastSilent time.Time
	// started is when this evaluator began: silence before it may be this
	// collector's own outage, not the nodes'.
	started time.Time
	defs    defsCache
	// ahead holds reports dated after this collector's clock, observed
	// once at a clamped time, by their own time: they stay after the
	// watermark, so every cycle reads them again until the watermark passes them.
	ahead map[store.ReportKey]time.Time
	// samples is an observation's samples, reused: the engine keeps none
	// of them (Observe copies what it keeps).
	samples []Sample
}

// clampTime is the time a report is observed at: its own, but never after
// this collector's clock, so a node whose clock runs ahead (or lies) cannot
// move its watermark past the reports that follow; each such report is
// observed once. Clamped times stay strictly increasing, so two reports
// clamped in one cycle are both observed.
func (ev *evaluator) clampTime(r store.Report, now time.Time) (time.Time, bool) {
	for k, t := range ev.ahead {
		// Once the watermark passes it, the cursor no longer returns it.
		if wm, ok := ev.eng.Watermark(k.NodeID); ok && !t.After(wm) {
			delete(ev.ahead, k)
		}
	}
	if !r.Time.After(now) {
		return r.Time, false
	}
	if ev.ahead == nil {
		ev.ahead = map[store.ReportKey]time.Time{}
	}
	if _, seen := ev.ahead[r.Key()]; seen {
		return time.Time{}, true
	}
	ev.ahead[r.Key()] = r.Time
	t := now
	if wm, ok := ev.eng.Watermark(r.NodeID); ok && !t.After(wm) {
		t = wm.Add(time.Nanosecond)
	}
	return t, false
}

// evaluate runs evaluators until ctx ends or another leader fences this
// term off.
func (s *Service) evaluate(ctx context.Context, term leader.Term) error {
	backoff := time.Second
	defer s.countAlerts(nil)
	for ctx.Err() == nil {
		ev := &evaluator{s: s, term: term, eng: NewEngine(), paths: map[int32]string{}, known: map[int32]bool{},
			synced: map[int32]bool{}, wm: map[int32]time.Time{}, defs: defsCache{}, started: time.Now()}
		err := ev.init(ctx)
		if err == nil {
			err = ev.loop(ctx)
		}
		if errors.Is(err, leader.ErrFenced) || ctx.Err() != nil {
			return err
		}
		s.metrics.EvaluationFailures.Inc()
		s.log.Warn("alert evaluation failed; restarting from the database", "err", err, "in", backoff)
		select {
		case <-time.After(backoff + rand.N(backoff/2)):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	return nil
}

// init rebuilds the engine from PostgreSQL: open instances, recently
// resolved identities, watermarks, every node's newest state (for group
// rules), then the rules, whose changes since the last term (a rule deleted
// while nobody led) are persisted at once.
func (ev *evaluator) init(ctx context.Context) error {
	// What was handed over before now is committed, so the first cycle's
	// read of every node from the database has it.
	ev.s.handover.take()
	open, err := ev.s.repo.openInstances(ctx)
	if err != nil {
		return err
	}
	for i := range open {
		inst := open[i].Instance
		ev.eng.Restore(&inst)
	}
	resolved, err := ev.s.repo.resolvedWithin(ctx, resolvedMemory)
	if err != nil {
		return err
	}
	for _, r := range resolved {
		ev.eng.RestoreResolved(r.Fingerprint, r.LastTS)
	}
	wms, err := ev.s.repo.watermarks(ctx)
	if err != nil {
		return err
	}
	for id, ts := range wms {
		ev.eng.SetWatermark(id, ts)
		ev.known[id] = true
	}
	if err := ev.loadNodes(ctx); err != nil {
		return err
	}
	latest, err := ev.s.st.LatestAll(ctx)
	if err != nil {
		return err
	}
	for id, l := range latest {
		n, ok := ev.nodes[id]
		if !ok {
			continue
		}
		var samples []Sample
		newest := l.Time.UnixMilli()
		for p, v := range l.Metrics {
			if v.TimeMS >= newest { // node_latest keeps children not streamed since; those are OK now
				samples = append(samples, Sample{Path: p, Value: v.Value, State: v.State})
			}
		}
		ev.eng.SeedNode(nodeInfo(n), l.Time, time.Duration(l.IntervalMS)*time.Millisecond, samples)
	}
	changes, err := ev.loadRules(ctx)
	if err != nil {
		return err
	}
	ev.s.dirty.add(nil, true)
	return ev.persist(ctx, changes, time.Now())
}

func nodeInfo(n store.Node) NodeInfo { return NodeInfo{ID: n.ID, Name: n.Name, Labels: n.Labels} }

// loadNodes rereads the nodes, decoding only the rows that changed since
// the last time (store.NodesChanged): every 30 s every node's labels and
// capabilities decoded anew, and a new map of them, were a tenth of the
// collector's allocations at 10,000 nodes. A node no longer there is
// forgotten.
func (ev *evaluator) loadNodes(ctx context.Context) error {
	if ev.nodes == nil {
		ev.nodes, ev.nodeSums, ev.nodeSeed = map[int32]store.Node{}, map[int32]nodeSum{}, maphash.MakeSeed()
	}
	ev.nodeGen++
	gen := ev.nodeGen
	err := ev.s.st.NodesChanged(ctx, ev.nodeSeed, func(id int32, sum store.NodeSum) bool {
		if s, ok := ev.nodeSums[id]; ok && s.sum == sum {
			ev.nodeSums[id] = nodeSum{sum: sum, gen: gen}
			return false
		}
		return true
	}, func(n store.Node, sum store.NodeSum) {
		ev.nodes[n.ID], ev.nodeSums[n.ID] = n, nodeSum{sum: sum, gen: gen}
	})
	if err != nil {
		// Half read: the next load decodes every node again.
		ev.nodes, ev.nodeSums = nil, nil
		return err
	}
	for id, s := range ev.nodeSums {
		if s.gen != gen {
			delete(ev.nodeSums, id)
			delete(ev.nodes, id)
		}
	}
	return nil
}

// nodeSum is a node's row as the evaluator last read it (loadNodes): its
// sum, and the load that saw it.
type nodeSum struct {
	sum store.NodeSum
	gen uint32
}

func (ev *evaluator) loadRules(ctx context.Context) ([]Change, error) {
	rules, err := ev.s.repo.rules(ctx)
	if err != nil {
		return nil, err
	}
	ev.lastLoad = time.Now()
	return ev.eng.SetRules(rules, time.Now().Truncate(time.Microsecond)), nil
}

func (ev *evaluator) loop(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := ev.cycle(ctx); err != nil {
			return err
		}
		select {
		case <-ev.s.dirty.wake:
		case <-tick.C:
		case <-ev.s.rulesCh:
			ev.lastLoad = time.Time{}
		case <-ctx.Done():
			return nil
		}
	}
}

// cycle reads the new reports of the dirty nodes, runs them through the
// engine, evaluates group rules, and persists what changed.
func (ev *evaluator) cycle(ctx context.Context) error {
	// PostgreSQL keeps microseconds: the same instant in memory and stored.
	now := time.Now().Truncate(time.Microsecond)
	var changes []Change
	if now.Sub(ev.lastLoad) >= reloadEvery {
		if err := ev.loadNodes(ctx); err != nil {
			return err
		}
		c, err := ev.loadRules(ctx)
		if err != nil {
			return err
		}
		changes = append(changes, c...)
		changes = append(changes, ev.eng.EndGone(func(id int32) bool { _, ok := ev.nodes[id]; return ok }, now)...)
	}
	c, err := ev.read(ctx, now)
	if err != nil {
		return err
	}
	changes = append(changes, c...)
	changes = append(changes, ev.eng.EvaluateGroups(now)...)
	// Silence is a matter of seconds at the least (intervals are), and
	// looking at every node costs: at 10,000 nodes it was a fifth of the
	// collector's CPU when it ran on every cycle.
	if now.Sub(ev.lastSilent) >= silentEvery {
		ev.lastSilent = now
		changes = append(changes, ev.eng.EvaluateSilent(now, ev.started)...)
	}
	ev.eng.Prune(now)
	if err := ev.persist(ctx, changes, now); err != nil {
		return err
	}
	ev.s.countAlerts(ev.eng)
	return nil
}

// countAlerts sets the alerts gauge from the engine's open instances; nil
// (no longer evaluating) sets it to zero.
func (s *Service) countAlerts(eng *Engine) {
	var pending, firing int
	if eng != nil {
		pending, firing = eng.Counts()
	}
	s.metrics.Alerts.WithLabelValues(string(Pending)).Set(float64(pending))
	s.metrics.Alerts.WithLabelValues(string(Firing)).Set(float64(firing))
}

func keys(m map[int32]bool) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// read takes this cycle's reports: from memory, those this collector
// stored for nodes already read from the database; from the database, the
// nodes another collector stored reports for (NOTIFY), those the
// hand-over dropped or that were never read in this term, and every node
// at a sweep or when asked to. Both paths give the engine the same
// reports in the same order: a node read from the database in this cycle
// has what was handed over for it (the hand-over follows the commit), so
// that is set aside; the memory path keeps to the cursor's rules (newer
// than the watermark, within the lookback, in report order). A sweep
// comes after memory has moved the watermarks, so it reads the reports
// only of nodes with something no hand-over brought.
func (ev *evaluator) read(ctx context.Context, now time.Time) ([]Change, error) {
	dirty, all := ev.s.dirty.take()
	mem, missed, lost := ev.s.handover.take()
	// Read below (fromMemory and feed copy what they keep), then reused.
	defer ev.s.handover.recycle(mem)
	if dirty == nil {
		dirty = map[int32]bool{}
	}
	maps.Copy(dirty, missed)
	all = all || lost
	kept := mem[:0]
	for _, r := range mem {
		if all || dirty[r.NodeID] || !ev.synced[r.NodeID] {
			dirty[r.NodeID] = true
			continue
		}
		kept = append(kept, r)
	}
	var changes []Change
	if len(kept) > 0 {
		reports := ev.fromMemory(kept)
		ev.s.metrics.ReportsRead.WithLabelValues("memory").Add(float64(len(reports)))
		c, err := ev.feed(ctx, reports, now)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c...)
	}
	if all || now.Sub(ev.lastSweep) >= sweepEvery {
		ev.lastSweep = now
		if err := ev.sweep(ctx, dirty); err != nil {
			ev.s.dirty.add(keys(dirty), true) // read them again next time
			return nil, err
		}
	}
	if len(dirty) > 0 {
		c, err := ev.observe(ctx, dirty, now)
		if err != nil {
			ev.s.dirty.add(keys(dirty), false) // read them again next time
			return nil, err
		}
		changes = append(changes, c...)
	}
	return changes, nil
}

// sweep adds to dirty every known node with a stored report newer than its
// watermark, by node_latest's newest time (what the cursor's join checks
// first): one read of that table rather than a cursor per node, a fifth of
// the cost at 30,000 nodes (BENCHMARKS.md). The nodes with nothing newer
// are read from the database as far as it matters: from now on their
// reports may come from memory.
func (ev *evaluator) sweep(ctx context.Context, dirty map[int32]bool) error {
	newest, err := ev.s.st.NewestTimesInto(ctx, ev.newest)
	if err != nil {
		return err
	}
	ev.newest = newest
	for id := range ev.nodes {
		if dirty[id] {
			continue
		}
		ts, ok := newest[id]
		if wm, known := ev.eng.Watermark(id); ok && (!known || ts.After(wm)) {
			dirty[id] = true
			continue
		}
		ev.synced[id] = true
	}
	return nil
}

// fromMemory orders handed-over reports as the database path reads them
// (by node, then time; two writer workers can commit one node's reports
// out of order) and keeps those it would return: newer than the node's
// watermark, and not older than the lookback before the node's newest
// report (measured, as node_latest is, by OrderTime). Times are cut to
// PostgreSQL's microseconds, so a watermark is the same instant in memory
// and stored.
func (ev *evaluator) fromMemory(mem []store.Report) []store.Report {
	for i := range mem {
		mem[i].Time = mem[i].Time.Truncate(time.Microsecond)
	}
	slices.SortStableFunc(mem, func(a, b store.Report) int {
		if c := cmp.Compare(a.NodeID, b.NodeID); c != 0 {
			return c
		}
		return a.Time.Compare(b.Time)
	})
	out := mem[:0]
	for i := 0; i < len(mem); {
		j := i
		var newest time.Time
		for ; j < len(mem) && mem[j].NodeID == mem[i].NodeID; j++ {
			if t := mem[j].OrderTime().Truncate(time.Microsecond); t.After(newest) {
				newest = t
			}
		}
		wm, ok := ev.eng.Watermark(mem[i].NodeID)
		lb := ev.s.cfg.Lookback
		if !ok {
			wm, lb = time.Unix(0, 0), newNodeLookback
		}
		since := wm
		if t := newest.Add(-lb); t.After(since) {
			since = t
		}
		for _, r := range mem[i:j] {
			if r.Time.After(since) {
				out = append(out, r)
			}
		}
		i = j
	}
	return out
}

// observe reads the reports of the given nodes newer than their
// watermarks, in report order, and feeds them to the engine. The replay is
// bounded relative to the node's own newest report (not this collector's
// clock, which the agent's may not agree with).
func (ev *evaluator) observe(ctx context.Context, dirty map[int32]bool, now time.Time) ([]Change, error) {
	cursors := make([]store.ReportCursor, 0, len(dirty))
	for id := range dirty {
		wm, ok := ev.eng.Watermark(id)
		lb := ev.s.cfg.Lookback
		if !ok {
			wm, lb = time.Unix(0, 0), newNodeLookback
		}
		cursors = append(cursors, store.ReportCursor{NodeID: id, After: wm, Lookback: lb})
	}
	reports, err := ev.s.st.ReportsAfter(ctx, cursors)
	if err != nil {
		return nil, err
	}
	for id := range dirty {
		ev.synced[id] = true
	}
	ev.s.metrics.ReportsRead.WithLabelValues("database").Add(float64(len(reports)))
	return ev.feed(ctx, reports, now)
}

// feed runs reports, in report order per node, through the engine. Those
// read from the database carry metric ids only, resolved here; handed-over
// ones carry their paths.
func (ev *evaluator) feed(ctx context.Context, reports []store.Report, now time.Time) ([]Change, error) {
	missing := map[int32]bool{}
	for _, r := range reports {
		for _, smp := range r.Samples {
			if _, ok := ev.paths[smp.MetricID]; !ok && smp.Path == "" {
				missing[smp.MetricID] = true
			}
		}
	}
	if len(missing) > 0 {
		paths, err := ev.s.st.MetricPaths(ctx, keys(missing))
		if err != nil {
			return nil, err
		}
		maps.Copy(ev.paths, paths)
	}
	var changes []Change
	for _, r := range reports {
		n, ok := ev.nodes[r.NodeID]
		if !ok {
			if err := ev.loadNodes(ctx); err != nil {
				return nil, err
			}
			if n, ok = ev.nodes[r.NodeID]; !ok {
				continue
			}
		}
		t, skip := ev.clampTime(r, now)
		if skip {
			continue
		}
		o := Observation{Node: nodeInfo(n), Time: t, Interval: time.Duration(r.IntervalMS) * time.Millisecond,
			Samples: ev.samples[:0]}
		for _, smp := range r.Samples {
			p := smp.Path
			if p == "" {
				p = ev.paths[smp.MetricID]
			}
			o.Samples = append(o.Samples, Sample{Path: p, Value: smp.Value, State: smp.State})
		}
		changes = append(changes, ev.eng.Observe(o, now)...)
		ev.samples = o.Samples
		ev.wm[r.NodeID] = t
	}
	return changes, nil
}

// persist writes a cycle's changes, their deliveries and the watermarks in
// one transaction under the fencing epoch: either all of it happened, and
// the outbox will announce it, or none of it, and the next term replays it.
func (ev *evaluator) persist(ctx context.Context, changes []Change, now time.Time) error {
	every := len(ev.wm) > 0 && now.Sub(ev.lastFlush) >= flushEvery
	if len(changes) == 0 && !every {
		return nil
	}
	for _, c := range changes {
		if c.Kind == ChangeFired {
			ev.s.describe(ctx, ev, c)
		}
	}
	// Every watermark that moved, every flushEvery; between those, the
	// watermarks of the nodes whose changes are stored, with them.
	// Only nodes the store still has: a watermark of a deleted node would
	// fail its foreign key, and the whole cycle with it.
	watermarks := map[int32]time.Time{}
	keep := func(id int32) {
		if ts, moved := ev.wm[id]; moved {
			if _, ok := ev.nodes[id]; ok {
				watermarks[id] = ts
			}
		}
	}
	if every {
		for id := range ev.wm {
			keep(id)
		}
	} else {
		for _, c := range changes {
			if c.Inst.Kind == KindNode {
				keep(c.Inst.NodeID)
			}
		}
	}
	deliveries, err := ev.s.repo.persist(ctx, ev.term, changes, watermarks, ev.s.outbox)
	if err != nil {
		return err
	}
	if every {
		ev.wm = map[int32]time.Time{}
		ev.lastFlush = now
	} else {
		for id := range watermarks {
			delete(ev.wm, id)
		}
	}
	for _, c := range changes {
		l := ev.s.log.With("alert", c.Inst.RuleName, "node", c.Inst.Node, "metric", c.Inst.Metric, "id", c.Inst.ID)
		switch c.Kind {
		case ChangeFired:
			// took: from the start of the evaluation cycle to the commit that
			// queued the notifications, this collector's own share of the latency.
			l.Info("alert firing", "child", c.Inst.Child, "took", time.Since(now).Round(time.Microsecond))
		case ChangeResolved:
			l.Info("alert resolved")
		default:
			l.Debug("alert " + c.Kind.String())
		}
	}
	if deliveries > 0 {
		select {
		case ev.s.sendWake <- struct{}{}:
		default:
		}
	}
	return nil
}
