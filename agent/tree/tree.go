// Package tree evaluates a node's metric tree each interval: thresholds with
// hold counts and baselines, state propagation from children to roots, and
// which samples are worth streaming.
package tree

import (
	"slices"
	"sort"
	"sync"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

type State = nbsv1.State

const (
	OK      = nbsv1.State_STATE_OK
	Warn    = nbsv1.State_STATE_WARN
	Crit    = nbsv1.State_STATE_CRIT
	Unknown = nbsv1.State_STATE_UNKNOWN
)

// Tree holds the node's metric definitions (fixed and discovered) and each
// metric's threshold state between intervals. It is safe for concurrent use:
// the collector's config arrives on the uplink goroutine.
type Tree struct {
	mu        sync.Mutex
	metrics   map[string]catalog.Metric
	order     []string // sorted ids: parents before children
	overrides map[string]catalog.Threshold
	disabled  map[string]bool
	eval      map[string]*evalState
}

type evalState struct {
	state   State // current, after hold
	pending State // level waiting for its hold count
	streak  uint32
	// history is the baseline: the newest values (at most Baseline) of the
	// intervals the metric's subtree was OK. A breach is kept out, so the
	// threshold it is judged against does not rise with it (learn).
	history []float64
	// breach is the newest values (at most Baseline) of the current run of
	// intervals the metric's own state is raised, and run that run's
	// length: past catalog.BaselineAdopt baseline windows the run is the new
	// normal, and its values become the baseline.
	breach []float64
	run    uint32
}

func New() *Tree {
	return &Tree{metrics: map[string]catalog.Metric{}, overrides: map[string]catalog.Threshold{},
		disabled: map[string]bool{}, eval: map[string]*evalState{}}
}

// Define adds metrics; it returns those that were not yet known.
func (t *Tree) Define(ms ...catalog.Metric) []catalog.Metric {
	t.mu.Lock()
	defer t.mu.Unlock()
	var added []catalog.Metric
	for _, m := range ms {
		if _, ok := t.metrics[m.ID]; ok {
			continue
		}
		t.metrics[m.ID] = m
		t.order = append(t.order, m.ID)
		added = append(added, m)
	}
	if len(added) > 0 {
		sort.Strings(t.order)
	}
	return added
}

// Forget removes metrics and their subtrees (and their threshold state), so
// a child its source stopped measuring is no longer UNKNOWN. Defining it
// again later starts it afresh.
func (t *Tree) Forget(ids ...string) {
	if len(ids) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := func(id string) bool {
		for _, f := range ids {
			if schema.Within(id, f) {
				return true
			}
		}
		return false
	}
	t.order = slices.DeleteFunc(t.order, func(id string) bool {
		if !gone(id) {
			return false
		}
		delete(t.metrics, id)
		delete(t.eval, id)
		return true
	})
}

// Metric returns a definition by id.
func (t *Tree) Metric(id string) (catalog.Metric, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.metrics[id]
	return m, ok
}

// Metrics returns every definition, parents first.
func (t *Tree) Metrics() []catalog.Metric {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]catalog.Metric, len(t.order))
	for i, id := range t.order {
		out[i] = t.metrics[id]
	}
	return out
}

// SetThresholds replaces the operator overrides (from the collector's
// Config); metrics not listed fall back to their catalogue default.
func (t *Tree) SetThresholds(overrides map[string]catalog.Threshold, disabled []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.overrides = overrides
	t.disabled = make(map[string]bool, len(disabled))
	for _, id := range disabled {
		t.disabled[id] = true
	}
}

// Effective returns the threshold in force for a metric, nil if none.
func (t *Tree) Effective(id string) *catalog.Threshold {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.effective(id)
}

func (t *Tree) effective(id string) *catalog.Threshold {
	if t.disabled[id] {
		return nil
	}
	if o, ok := t.overrides[id]; ok {
		return &o
	}
	return t.metrics[id].Threshold
}

// Result is one interval's evaluation.
type Result struct {
	// Values are headline values (per second for rates) by id; a metric
	// with no value this interval is absent.
	Values map[string]float64
	// Own is each metric's state from its own threshold; State adds its
	// children (the worst of the subtree).
	Own, State map[string]State
}

// Evaluate applies thresholds to this interval's headline values. A metric
// without a value is UNKNOWN (its source is missing), unless it is idle:
// it has nothing to measure, and is OK.
func (t *Tree) Evaluate(values map[string]float64, idle map[string]bool) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := Result{Values: values, Own: make(map[string]State, len(t.order)), State: make(map[string]State, len(t.order))}
	for _, id := range t.order {
		v, ok := values[id]
		switch {
		case !ok && idle[id]:
			res.Own[id] = OK
			continue
		case !ok:
			res.Own[id] = Unknown
			continue
		}
		res.Own[id] = t.evaluateOne(id, v)
	}
	// Children sort after their parents, so walking backwards folds every
	// subtree into its parent before the parent is folded into its own.
	for _, id := range t.order {
		res.State[id] = res.Own[id]
	}
	for i := len(t.order) - 1; i >= 0; i-- {
		id := t.order[i]
		if p := schema.Parent(id); p != "" {
			if _, ok := res.State[p]; ok {
				res.State[p] = schema.Worse(res.State[p], res.State[id])
			}
		}
	}
	for _, id := range t.order {
		if v, ok := values[id]; ok {
			t.learn(id, v, res.Own[id], res.State[id])
		}
	}
	return res
}

// learn adds an interval's value to a baseline threshold's history when
// the metric was not in breach: its state, the one streamed (the worst of
// its subtree), is OK. The collector states the median of the same values
// (stored with state OK, before the breach: collector/alert/describe.go).
// While its own state is raised the baseline is frozen, except that a
// run raised for catalog.BaselineAdopt windows becomes the baseline; while only
// its subtree is raised it is frozen.
func (t *Tree) learn(id string, v float64, own, folded State) {
	thr := t.effective(id)
	st := t.eval[id]
	if thr == nil || thr.Baseline == 0 || st == nil {
		return
	}
	window := int(thr.Baseline)
	keep := func(xs []float64) []float64 {
		xs = append(xs, v)
		if len(xs) > window {
			xs = xs[len(xs)-window:]
		}
		return xs
	}
	switch {
	case folded == OK:
		st.history, st.breach, st.run = keep(st.history), st.breach[:0], 0
	case own != OK:
		st.breach, st.run = keep(st.breach), st.run+1
		if uint64(st.run) >= catalog.BaselineAdopt*uint64(thr.Baseline) {
			st.history, st.breach, st.run = slices.Clone(st.breach), nil, 0
		}
	default:
		st.breach, st.run = st.breach[:0], 0
	}
}

func (t *Tree) evaluateOne(id string, v float64) State {
	st := t.eval[id]
	if st == nil {
		st = &evalState{state: OK, pending: OK}
		t.eval[id] = st
	}
	thr := t.effective(id)
	level := OK
	if thr != nil {
		warn, crit := thr.Warn, thr.Crit
		usable := true
		if thr.Baseline > 0 {
			// Relative thresholds need a baseline first; until then, and
			// while the baseline is zero, the metric cannot be judged.
			if len(st.history) < int(min(thr.Baseline, 3)) {
				usable = false
			} else {
				m := median(st.history)
				warn, crit = warn*m, crit*m
				usable = m > 0
			}
		}
		if thr.Baseline > 0 && !thr.Below && v < thr.Floor {
			usable = false
		}
		if usable {
			level = compare(v, warn, crit, thr.Below)
		}
	}
	hold := uint32(1)
	if thr != nil && thr.Hold > 1 {
		hold = thr.Hold
	}
	switch {
	case schema.Severity(level) <= schema.Severity(st.state):
		// Falling back is immediate: a cleared condition should stop paging.
		st.state, st.pending, st.streak = level, level, 0
	case level == st.pending:
		st.streak++
	default:
		st.pending, st.streak = level, 1
	}
	if schema.Severity(st.pending) > schema.Severity(st.state) && st.streak >= hold {
		st.state = st.pending
	}
	return st.state
}

func compare(v, warn, crit float64, below bool) State {
	if below {
		switch {
		case v <= crit:
			return Crit
		case v <= warn:
			return Warn
		}
		return OK
	}
	switch {
	case v >= crit:
		return Crit
	case v >= warn:
		return Warn
	}
	return OK
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Select picks the metrics to stream: every root; a child that is not OK,
// or has a non-zero increase (so per-reason counts add up exactly in
// storage); everything when full is set (periodic snapshot or an operator
// looking); and the ancestors of whatever is picked, so the tree stays
// whole. A healthy child judged against its own baseline is not streamed
// either: what the collector knows of its moving median comes from the
// snapshots, which keeps a healthy node's report a few samples.
func (t *Tree) Select(res Result, increases map[string]float64, full bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	picked := make(map[string]bool, len(t.order))
	for _, id := range t.order {
		_, hasValue := res.Values[id]
		switch {
		case schema.Parent(id) == "", full:
			picked[id] = true
		case !hasValue:
			// A child with no value says nothing the parent's UNKNOWN doesn't.
		case res.State[id] != OK, increases[id] > 0:
			for p := id; p != "" && !picked[p]; p = schema.Parent(p) {
				picked[p] = true
			}
		}
	}
	out := make([]string, 0, len(picked))
	for _, id := range t.order {
		if picked[id] {
			out = append(out, id)
		}
	}
	return out
}
