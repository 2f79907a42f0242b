package alert

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// Phase is where an alert instance is in its life.
type Phase string

const (
	Pending  Phase = "pending"
	Firing   Phase = "firing"
	Resolved Phase = "resolved"
)

// NodeInfo is what rules need to know about a node.
type NodeInfo struct {
	ID     int32
	Name   string
	Labels map[string]string
}

// Sample is one metric of a report as the engine sees it.
type Sample struct {
	Path  string
	Value float64
	State store.State
}

// Observation is one stored report.
type Observation struct {
	Node     NodeInfo
	Time     time.Time
	Interval time.Duration
	Samples  []Sample
}

// Evidence is what the newest observation said about an instance.
type Evidence struct {
	ObservedAt time.Time
	Interval   time.Duration
	// The metric the rule matched, and the descendant that explains it.
	State      store.State
	Value      float64
	Child      string
	ChildState store.State
	ChildValue float64
	// Group rules: how many nodes are in the state, out of how many.
	InState, Total int
	Nodes          []string
}

// Instance is one alert: a rule applied to one node's metric, or to one
// group of nodes.
type Instance struct {
	ID          int64
	Fingerprint string
	RuleID      int64
	RuleName    string
	Kind        string
	Severity    string
	NodeID      int32
	Node        string
	Metric      string            // the metric the rule matched
	Child       string            // the explaining descendant, frozen when it fires
	Group       map[string]string // group rules: the group_by label values
	State       Phase
	Since       time.Time // start of the breach
	LastTS      time.Time // observation time of the newest transition
	FiredAt     time.Time
	ResolvedAt  time.Time
	Evidence    Evidence
	Labels      map[string]string
	Annotations map[string]string
	Headline    *float64 // the explaining value as people read it (per second for a rate), set when it fires

	lastSeen time.Time // newest breaching observation, for gap detection
}

// ChangeKind says what happened to an instance.
type ChangeKind int

const (
	ChangePending  ChangeKind = iota + 1 // a breach started (or restarted)
	ChangeFired                          // held long enough: page
	ChangeResolved                       // a firing instance cleared: resolve
	ChangeCleared                        // a pending instance cleared before firing
)

func (k ChangeKind) String() string {
	switch k {
	case ChangePending:
		return "pending"
	case ChangeFired:
		return "fired"
	case ChangeResolved:
		return "resolved"
	case ChangeCleared:
		return "cleared"
	}
	return "unknown"
}

// Change is one transition, in the order it happened.
type Change struct {
	Kind ChangeKind
	Inst *Instance
	Rule *Rule // nil when the rule itself went away
}

const (
	// staleAfter intervals without a report make a node UNKNOWN for group
	// rules, as in the fleet view.
	staleAfter = 3
	// memberTTL: a node silent for longer no longer counts in a group at
	// all, so decommissioned nodes do not dilute percentages forever.
	memberTTL = 15 * time.Minute
	// gapIntervals: a pending breach whose node was silent this long starts
	// over; "for N intervals" means N reports in a row.
	gapIntervals = 3
	// resolvedMemory: how long a resolved identity guards against replays
	// of the reports that preceded its resolve.
	resolvedMemory = 15 * time.Minute
)

// Engine is the alert state machine. It is pure (no I/O, no clock): the
// evaluator feeds it observations in report-time order per node and the
// current time, and persists the changes it returns. Not safe for
// concurrent use.
type Engine struct {
	rules     map[int64]*Rule
	ruleOrder []int64
	open      map[string]*Instance           // pending and firing, by fingerprint
	byNode    map[int32]map[string]*Instance // node instances of open
	resolved  map[string]time.Time           // fingerprint → observation time that resolved it
	nodes     map[int32]*nodeView
	// silentIDs and fpBuf are EvaluateSilent's room, kept from one
	// evaluation to the next.
	silentIDs []int32
	fpBuf     []byte
	watermark map[int32]time.Time
}

type nodeView struct {
	info     NodeInfo
	time     time.Time
	interval time.Duration
	// states are the newest report's metrics and their states; only ever
	// ranged over (worst), so a slice: a map of a healthy node's dozen
	// roots took several times the room, and one sized by a snapshot's
	// full tree kept that room for good (a fifth of the collector's live
	// heap at 10,000 nodes).
	states []nodeState
}

type nodeState struct {
	path  string
	state store.State
}

func NewEngine() *Engine {
	return &Engine{rules: map[int64]*Rule{}, open: map[string]*Instance{}, byNode: map[int32]map[string]*Instance{},
		resolved: map[string]time.Time{}, nodes: map[int32]*nodeView{}, watermark: map[int32]time.Time{}}
}

// SetRules replaces the rules in force. Open instances of rules that were
// deleted, disabled or changed kind end (a firing one is resolved).
func (e *Engine) SetRules(rules []Rule, now time.Time) []Change {
	e.rules = map[int64]*Rule{}
	e.ruleOrder = e.ruleOrder[:0]
	for i := range rules {
		if rules[i].Enabled {
			r := rules[i]
			e.rules[r.ID] = &r
			e.ruleOrder = append(e.ruleOrder, r.ID)
		}
	}
	sort.Slice(e.ruleOrder, func(i, j int) bool { return e.ruleOrder[i] < e.ruleOrder[j] })
	var changes []Change
	for _, fp := range sortedFingerprints(e.open) {
		inst := e.open[fp]
		if r := e.rules[inst.RuleID]; r == nil || instanceKind(r.Kind) != inst.Kind {
			changes = append(changes, e.end(inst, nil, inst.LastTS, now))
		}
	}
	return changes
}

// EndGone ends the open node instances of nodes that are no longer current
// (deleted, or moved to another tenant, which retires the node's row: the
// node reports under a new id from then on, so nothing else would end
// them). A firing one resolves; a pending one clears. Such nodes are
// forgotten, so silent rules do not page for them.
func (e *Engine) EndGone(current func(id int32) bool, now time.Time) []Change {
	var changes []Change
	for id := range e.nodes {
		if !current(id) {
			delete(e.nodes, id)
		}
	}
	for _, fp := range sortedFingerprints(e.open) {
		inst := e.open[fp]
		if inst.Kind == KindNode && !current(inst.NodeID) {
			changes = append(changes, e.end(inst, e.rules[inst.RuleID], inst.LastTS, now))
		}
	}
	return changes
}

// Restore puts back an open instance loaded from the database.
func (e *Engine) Restore(inst *Instance) {
	if inst.lastSeen.IsZero() {
		inst.lastSeen = inst.LastTS
	}
	e.open[inst.Fingerprint] = inst
	if inst.Kind == KindNode {
		if e.byNode[inst.NodeID] == nil {
			e.byNode[inst.NodeID] = map[string]*Instance{}
		}
		e.byNode[inst.NodeID][inst.Fingerprint] = inst
	}
}

// RestoreResolved remembers a recently resolved identity, so replaying the
// reports before its resolve cannot open it again.
func (e *Engine) RestoreResolved(fingerprint string, lastTS time.Time) {
	if lastTS.After(e.resolved[fingerprint]) {
		e.resolved[fingerprint] = lastTS
	}
}

// SetWatermark says up to which report time a node was already evaluated.
func (e *Engine) SetWatermark(node int32, ts time.Time) {
	if ts.After(e.watermark[node]) {
		e.watermark[node] = ts
	}
	// A pending breach still open at the watermark was seen breaching
	// there: the previous leader persisted both in one transaction.
	for _, inst := range e.byNode[node] {
		if inst.State == Pending && ts.After(inst.lastSeen) {
			inst.lastSeen = ts
		}
	}
}

// Watermark returns the newest report time evaluated for a node.
func (e *Engine) Watermark(node int32) (time.Time, bool) {
	t, ok := e.watermark[node]
	return t, ok
}

// Open returns the pending and firing instances.
func (e *Engine) Open() []*Instance {
	out := make([]*Instance, 0, len(e.open))
	for _, fp := range sortedFingerprints(e.open) {
		out = append(out, e.open[fp])
	}
	return out
}

// Counts returns how many instances are pending and how many firing.
func (e *Engine) Counts() (pending, firing int) {
	for _, inst := range e.open {
		if inst.State == Firing {
			firing++
		} else {
			pending++
		}
	}
	return pending, firing
}

// SeedNode records a node's newest known state without evaluating node
// rules, so group rules see the whole fleet from the start rather than only
// the first nodes to report.
func (e *Engine) SeedNode(info NodeInfo, t time.Time, interval time.Duration, samples []Sample) {
	if nv := e.nodes[info.ID]; nv != nil && !t.After(nv.time) {
		return
	}
	e.setNodeView(info, t, interval, samples)
}

// setNodeView refills a node's view in place: a map a report was most of
// the alert engine's garbage at 10,000 nodes. Only the engine's caller
// reads views, between calls.
func (e *Engine) setNodeView(info NodeInfo, t time.Time, interval time.Duration, samples []Sample) {
	nv := e.nodes[info.ID]
	if nv == nil {
		nv = &nodeView{}
		e.nodes[info.ID] = nv
	}
	nv.info, nv.time, nv.interval = info, t, interval
	states := nv.states[:0]
	if cap(states) < len(samples) || cap(states) > 2*len(samples)+16 {
		// A snapshot's room is not kept for the roots that follow it;
		// a report a little larger than the last fits (a troubled
		// node's reports vary by a few samples: each one larger was an
		// array).
		states = make([]nodeState, 0, len(samples)+len(samples)/4+4)
	}
	for _, s := range samples {
		states = append(states, nodeState{path: s.Path, state: s.State})
	}
	// The paths of a longer report before stay reachable otherwise.
	clear(states[len(states):cap(states)])
	nv.states = states
}

// Prune forgets resolved identities old enough that no replay reaches them.
func (e *Engine) Prune(now time.Time) {
	for fp, t := range e.resolved {
		if now.Sub(t) > resolvedMemory {
			delete(e.resolved, fp)
		}
	}
}

// Observe evaluates the node rules on one report. Reports at or before the
// node's watermark were evaluated already and change nothing.
func (e *Engine) Observe(o Observation, now time.Time) []Change {
	if wm, ok := e.watermark[o.Node.ID]; ok && !o.Time.After(wm) {
		return nil
	}
	e.watermark[o.Node.ID] = o.Time
	e.setNodeView(o.Node, o.Time, o.Interval, o.Samples)
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	var changes []Change
	for _, id := range e.ruleOrder {
		r := e.rules[id]
		if r.Kind != KindNode {
			continue
		}
		breaching := map[string]Sample{}
		if r.selects(o.Node.Labels) {
			for _, s := range o.Samples {
				if r.matchesMetric(s.Path) && r.breaches(s.State) {
					breaching[s.Path] = s
				}
			}
		}
		for _, fp := range sortedFingerprints(e.byNode[o.Node.ID]) {
			inst := e.byNode[o.Node.ID][fp]
			if inst.RuleID != r.ID {
				continue
			}
			s, ok := breaching[inst.Metric]
			delete(breaching, inst.Metric)
			if !o.Time.After(inst.LastTS) {
				continue // a replay of what this instance already reflects
			}
			if !ok {
				changes = append(changes, e.end(inst, r, o.Time, now))
				continue
			}
			inst.Evidence = evidence(o, s)
			if c, ok := e.progress(inst, r, o, now); ok {
				changes = append(changes, c)
			}
		}
		for _, path := range sortedKeysOf(breaching) {
			fp := nodeFingerprint(r.ID, o.Node.ID, path)
			if last, ok := e.resolved[fp]; ok && !o.Time.After(last) {
				continue
			}
			inst := &Instance{Fingerprint: fp, RuleID: r.ID, RuleName: r.Name, Kind: KindNode, Severity: r.Severity,
				NodeID: o.Node.ID, Node: o.Node.Name, Metric: path, State: Pending,
				Since: o.Time.Add(-o.Interval), LastTS: o.Time, lastSeen: o.Time,
				Evidence: evidence(o, breaching[path])}
			e.Restore(inst)
			if c, ok := e.fireIfHeld(inst, r, o.Time, o.Interval, now); ok {
				changes = append(changes, c)
			} else {
				changes = append(changes, Change{Kind: ChangePending, Inst: inst, Rule: r})
			}
		}
	}
	return changes
}

// progress moves a breaching instance on: restart a pending breach after a
// gap in the reports, or fire it once it has held long enough.
func (e *Engine) progress(inst *Instance, r *Rule, o Observation, now time.Time) (Change, bool) {
	defer func() { inst.lastSeen = o.Time }()
	if inst.State != Pending {
		return Change{}, false
	}
	if o.Time.Sub(inst.lastSeen) > gapIntervals*o.Interval {
		inst.Since, inst.LastTS = o.Time.Add(-o.Interval), o.Time
		if c, ok := e.fireIfHeld(inst, r, o.Time, o.Interval, now); ok {
			return c, true
		}
		return Change{Kind: ChangePending, Inst: inst, Rule: r}, true
	}
	return e.fireIfHeld(inst, r, o.Time, o.Interval, now)
}

// fireIfHeld fires a pending instance whose breach covers the hold. A report
// covers the interval before its time, so two consecutive breaching reports
// cover two intervals; a tenth of an interval absorbs timer jitter.
func (e *Engine) fireIfHeld(inst *Instance, r *Rule, at time.Time, interval time.Duration, now time.Time) (Change, bool) {
	if at.Sub(inst.Since) < r.hold(interval)-interval/10 {
		return Change{}, false
	}
	inst.State, inst.LastTS, inst.FiredAt = Firing, at, now
	inst.Child = inst.Evidence.Child
	return Change{Kind: ChangeFired, Inst: inst, Rule: r}, true
}

// end closes an open instance: resolve if it fired, clear if it was pending.
func (e *Engine) end(inst *Instance, r *Rule, at, now time.Time) Change {
	delete(e.open, inst.Fingerprint)
	if m := e.byNode[inst.NodeID]; m != nil {
		delete(m, inst.Fingerprint)
		if len(m) == 0 {
			delete(e.byNode, inst.NodeID)
		}
	}
	if at.After(inst.LastTS) {
		inst.LastTS = at
	}
	if inst.State == Pending {
		return Change{Kind: ChangeCleared, Inst: inst, Rule: r}
	}
	inst.State, inst.ResolvedAt = Resolved, now
	e.RestoreResolved(inst.Fingerprint, inst.LastTS)
	return Change{Kind: ChangeResolved, Inst: inst, Rule: r}
}

// evidence describes a breaching metric and the descendant that explains
// it: the worst non-OK descendant in the same report, the deepest among
// equally bad ones (a parent's state is the worst of its children's, so that
// is where the cause is named most precisely).
//
// The report's samples are read as they are, not through a map a report
// built whether or not anything breached: a report holds each path once
// (ingest refuses a repeated one), and the order below is total.
func evidence(o Observation, s Sample) Evidence {
	ev := Evidence{ObservedAt: o.Time, Interval: o.Interval, State: s.State, Value: s.Value,
		Child: s.Path, ChildState: s.State, ChildValue: s.Value}
	depth := strings.Count(s.Path, "/")
	prefix := s.Path + "/"
	for _, c := range o.Samples {
		p := c.Path
		if !strings.HasPrefix(p, prefix) || c.State.Severity() <= store.StateOK.Severity() {
			continue
		}
		d := strings.Count(p, "/")
		better := c.State.Severity() > ev.ChildState.Severity() ||
			(c.State.Severity() == ev.ChildState.Severity() && (d > depth ||
				(d == depth && (c.Value > ev.ChildValue || (c.Value == ev.ChildValue && p < ev.Child)))))
		if better {
			ev.Child, ev.ChildState, ev.ChildValue, depth = p, c.State, c.Value, d
		}
	}
	return ev
}

// worst is a node's worst state among the metrics a rule watches; a node
// silent for staleAfter intervals is UNKNOWN.
func (nv *nodeView) worst(r *Rule, now time.Time) store.State {
	if now.Sub(nv.time) > staleAfter*max(nv.interval, time.Millisecond) {
		return store.StateUnknown
	}
	w := store.StateOK
	for _, s := range nv.states {
		if r.matchesMetric(s.path) {
			w = store.Worse(w, s.state)
		}
	}
	return w
}

type groupAcc struct {
	key         map[string]string
	total       int
	inState     []string
	maxInterval time.Duration
}

// EvaluateGroups evaluates the group rules against the nodes' newest states.
// Group holds are measured on the collector's clock, since the members'
// reports come from different clocks.
func (e *Engine) EvaluateGroups(now time.Time) []Change {
	var changes []Change
	for _, id := range e.ruleOrder {
		r := e.rules[id]
		if r.Kind != KindGroup {
			continue
		}
		groups := map[string]*groupAcc{}
		for _, nv := range e.nodes {
			if now.Sub(nv.time) > memberTTL || !r.selects(nv.info.Labels) {
				continue
			}
			key := map[string]string{}
			for _, k := range r.GroupBy {
				key[k] = nv.info.Labels[k]
			}
			fp := groupFingerprint(r.ID, key)
			g := groups[fp]
			if g == nil {
				g = &groupAcc{key: key}
				groups[fp] = g
			}
			g.total++
			g.maxInterval = max(g.maxInterval, nv.interval)
			if r.breaches(nv.worst(r, now)) {
				g.inState = append(g.inState, nv.info.Name)
			}
		}
		breaching := map[string]*groupAcc{}
		for fp, g := range groups {
			n := len(g.inState)
			if (r.MinNodes > 0 && n >= r.MinNodes) || (r.MinPercent > 0 && g.total > 0 && 100*float64(n)/float64(g.total) >= r.MinPercent) {
				sort.Strings(g.inState)
				breaching[fp] = g
			}
		}
		for _, fp := range sortedFingerprints(e.open) {
			inst := e.open[fp]
			if inst.RuleID != r.ID {
				continue
			}
			g, ok := breaching[fp]
			delete(breaching, fp)
			if !ok {
				changes = append(changes, e.end(inst, r, now, now))
				continue
			}
			inst.Evidence = groupEvidence(g, now)
			if inst.State == Pending {
				if c, ok := e.fireIfHeld(inst, r, now, max(g.maxInterval, time.Millisecond), now); ok {
					changes = append(changes, c)
				}
			}
		}
		for _, fp := range sortedKeysOf(breaching) {
			g := breaching[fp]
			inst := &Instance{Fingerprint: fp, RuleID: r.ID, RuleName: r.Name, Kind: KindGroup, Severity: r.Severity,
				Metric: r.Metric, Group: g.key, State: Pending, Since: now, LastTS: now, lastSeen: now,
				Evidence: groupEvidence(g, now)}
			e.Restore(inst)
			changes = append(changes, Change{Kind: ChangePending, Inst: inst, Rule: r})
		}
	}
	return changes
}

// silentPending: a node this many intervals late is shown as a pending
// silent alert (as the fleet shows it UNKNOWN) before the rule's hold
// fires it.
const silentPending = staleAfter

// EvaluateSilent evaluates the silent rules on the collector's clock: a node
// whose newest report is older than the rule's hold fires (pending from
// silentPending intervals); its next report resolves it. Silence is counted
// from started at the latest, the start of this evaluator's term, so a
// collector that was itself down does not page for every node it could not
// hear from.
func (e *Engine) EvaluateSilent(now, started time.Time) []Change {
	var changes []Change
	var ids []int32
	for _, id := range e.ruleOrder {
		r := e.rules[id]
		if r.Kind != KindSilent {
			continue
		}
		if ids == nil {
			ids = sortedNodeIDs(e.silentIDs[:0], e.nodes)
			e.silentIDs = ids
		}
		for _, nid := range ids {
			nv := e.nodes[nid]
			// Looked up without a string a node a second (at 10,000
			// nodes, 2% of the collector's allocations): one is made
			// only for a new instance.
			e.fpBuf = appendNodeFingerprint(e.fpBuf[:0], r.ID, nid, "")
			inst := e.open[string(e.fpBuf)]
			interval := max(nv.interval, time.Second)
			last := nv.time
			if last.Before(started) {
				last = started
			}
			quiet := now.Sub(last)
			switch {
			case inst != nil && (nv.time.After(inst.Since) || !r.selects(nv.info.Labels)):
				// It reported again (or the rule no longer watches it).
				changes = append(changes, e.end(inst, r, nv.time, now))
			case inst == nil && r.selects(nv.info.Labels) && (quiet > silentPending*interval || quiet >= r.hold(interval)):
				inst = &Instance{Fingerprint: string(e.fpBuf), RuleID: r.ID, RuleName: r.Name, Kind: KindNode, Severity: r.Severity,
					NodeID: nid, Node: nv.info.Name, State: Pending, Since: nv.time, LastTS: now, lastSeen: now,
					Evidence: Evidence{ObservedAt: nv.time, Interval: interval, State: store.StateUnknown, ChildState: store.StateUnknown}}
				e.Restore(inst)
				if quiet >= r.hold(interval) {
					inst.State, inst.FiredAt = Firing, now
					changes = append(changes, Change{Kind: ChangeFired, Inst: inst, Rule: r})
				} else {
					changes = append(changes, Change{Kind: ChangePending, Inst: inst, Rule: r})
				}
			case inst != nil && inst.State == Pending && quiet >= r.hold(interval):
				inst.State, inst.LastTS, inst.FiredAt = Firing, now, now
				changes = append(changes, Change{Kind: ChangeFired, Inst: inst, Rule: r})
			}
		}
	}
	return changes
}

// sortedNodeIDs are m's keys, sorted, in into's room.
func sortedNodeIDs(into []int32, m map[int32]*nodeView) []int32 {
	ids := into[:0]
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func groupEvidence(g *groupAcc, now time.Time) Evidence {
	return Evidence{ObservedAt: now, Interval: g.maxInterval, InState: len(g.inState), Total: g.total, Nodes: g.inState}
}

// nodeFingerprint is "n:<rule>:<node>:<metric>", built without fmt: silent
// rules build one per node on every evaluation.
func nodeFingerprint(rule int64, node int32, metric string) string {
	return string(appendNodeFingerprint(make([]byte, 0, 32+len(metric)), rule, node, metric))
}

// appendNodeFingerprint appends nodeFingerprint's string to b.
func appendNodeFingerprint(b []byte, rule int64, node int32, metric string) []byte {
	b = append(b, "n:"...)
	b = strconv.AppendInt(b, rule, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(node), 10)
	b = append(b, ':')
	b = append(b, metric...)
	return b
}

func groupFingerprint(rule int64, key map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "g:%d:", rule)
	for i, k := range sortedKeys(key) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, key[k])
	}
	return b.String()
}

func sortedFingerprints(m map[string]*Instance) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedKeysOf[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
