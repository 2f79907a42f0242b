package app

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// ledger turns readings into reports so that every observation reaches
// storage exactly once. A healthy child is not streamed every interval (it
// would make a quiet fleet expensive), so what it measured is deferred, not
// dropped: histogram buckets of a child left out of a report accumulate here
// and travel with the next report that carries the child (it turned non-OK,
// the node is expanded, or a snapshot), stamped with the span they cover.
// Counters need no backlog: tree.Select streams every child with a non-zero
// increase, and nothing is sent for one without.
//
// It is owned by the agent's collection loop and not safe for concurrent use.
type ledger struct {
	// counters are the last cumulative value seen per counter id. They
	// outlive a reading that misses a counter (its source failed one
	// collection), so the value it reports next is not counted again from
	// the source's start.
	counters map[string]uint64
	// sinceBoot are the counters that are the kernel's own since boot
	// (source.SinceBoot): one first seen after the baseline counts from
	// there, not from boot.
	sinceBoot map[string]bool
	backlog   map[string]*deferred
}

type deferred struct {
	h     *loglinear.Histogram
	start time.Time // start of the first interval accumulated
}

func newLedger() *ledger {
	return &ledger{counters: map[string]uint64{}, sinceBoot: map[string]bool{}, backlog: map[string]*deferred{}}
}

// baseline takes the agent's first reading: counters count from here, and
// its histograms are left out with them, so the two stay consistent (an
// answered echo is in ping/<target>/sent and in its RTT histogram, or in
// neither). Sources count from their own start, which is this process's,
// so a restart never counts what the previous run reported.
//
// Two kinds of counter count instead from what the previous agent reported
// of them (prev, see carry), so the first report holds what that agent
// counted but did not report and what was counted while no agent ran:
//   - a counter of a source that continues the previous agent's counts
//     (r.continued: its probe adopted pinned maps). One the previous agent
//     never reported counts from 0, as a counter seen for the first time
//     does.
//   - a counter that is the kernel's own since boot (r.sinceBoot, /proc),
//     when the previous agent read it on this boot and in this namespace
//     (here) and it has not gone backwards since (the kernel reset it).
//     Otherwise it counts from here.
//
// Without a record of what was reported (prev.counted nil), every counter
// counts from here. The note says what happened to the kernel's counters,
// for one log line.
func (l *ledger) baseline(r reading, prev carried, here origin) (note baselineNote) {
	why := sameOrigin(prev, here)
	for id, v := range r.counters {
		switch c, ok := prev.counted[id]; {
		case r.sinceBoot[id]:
			l.sinceBoot[id] = true
			note.kernel++
			switch {
			case why != "" || !ok || !prev.sinceBoot[id]:
			case c > v:
				note.backwards = append(note.backwards, id)
			default:
				l.counters[id] = c
				note.continued++
				continue
			}
		case r.continued[id] && prev.counted != nil && !prev.sinceBoot[id]:
			l.counters[id] = min(c, v)
			continue
		}
		l.counters[id] = v
	}
	if note.kernel > 0 && note.continued == 0 {
		note.why = why
	}
	slices.Sort(note.backwards)
	return note
}

// baselineNote is what baseline did with the kernel's own counters.
type baselineNote struct {
	kernel, continued int // counters, and those continuing the previous agent's
	// why none continued, when none did and there is a reason besides
	// going backwards
	why       string
	backwards []string // counters smaller than the previous agent reported
}

// sameOrigin says why the kernel's counters a previous agent reported
// cannot be continued here, "" when they can.
func sameOrigin(prev carried, here origin) string {
	switch {
	case prev.counted == nil:
		return "no record of what a previous agent reported"
	case prev.from.Boot == "":
		return "the previous agent did not record its boot"
	case here.Boot == "":
		return "this boot's id is unknown"
	case prev.from.Boot != here.Boot:
		return "the previous agent ran before a reboot"
	case prev.from.Netns != here.Netns:
		return fmt.Sprintf("the previous agent read another namespace (inode %d, now %d)", prev.from.Netns, here.Netns)
	}
	return ""
}

func (l *ledger) accumulate(id string, h *loglinear.Histogram, start time.Time) {
	if h == nil || h.Count == 0 {
		return
	}
	d := l.backlog[id]
	if d == nil {
		c := loglinear.New()
		c.Merge(h) // the reading's histogram may be reused by its source
		l.backlog[id] = &deferred{h: c, start: start}
		return
	}
	d.h.Merge(h)
}

// retire forgets the counters and backlog of metrics their source stopped
// measuring (and their subtrees): a target added again later counts afresh.
// Its deferred observations are dropped with it, deliberately — the one
// exception to "deferred, not lost". They belong to a target nobody asks
// about any more, and for a ping peer the collector took away there is no
// binding left to report them under: the collector ends a node's stream
// when its tenant changes, so by the time the new peer list arrives every
// report built from here on is dated after the move and goes to the new
// tenant's row, and a peer of the old list is, then, another tenant's node. Counters lose nothing (an increase is streamed in
// the interval it happens); what goes is at most one snapshot period
// (--snapshot.every) of the RTT buckets of a target that was healthy
// throughout.
func (l *ledger) retire(ids []string) {
	for _, r := range ids {
		for id := range l.counters {
			if schema.Within(id, r) {
				delete(l.counters, id)
				delete(l.sinceBoot, id)
			}
		}
		for id := range l.backlog {
			if schema.Within(id, r) {
				delete(l.backlog, id)
			}
		}
	}
}

// build makes the report of the interval (now-elapsed, now] from its
// reading; full streams every metric and so flushes the whole backlog.
func (l *ledger) build(t *tree.Tree, now time.Time, elapsed time.Duration, cur reading, full bool) (*nbsv1.Report, tree.Result) {
	secs := max(elapsed.Seconds(), 1e-3)
	start := now.Add(-elapsed)
	values := make(map[string]float64, len(cur.counters)+len(cur.gauges)+len(cur.histograms))
	increases := make(map[string]float64, len(cur.counters))
	for id, v := range cur.counters {
		if _, seen := l.counters[id]; !seen && cur.sinceBoot[id] {
			// The kernel's, first seen now (its source failed the first
			// reading): it counts from here, not from boot.
			l.counters[id], l.sinceBoot[id] = v, true
			increases[id], values[id] = 0, 0
			continue
		}
		// Sources count from their own start, so a counter never legitimately
		// goes backwards; if one does, nothing is made up. A counter seen for
		// the first time counts from 0: its source started it at 0.
		inc := float64(v - min(l.counters[id], v))
		l.counters[id] = v
		increases[id] = inc
		values[id] = inc / secs
	}
	for id, v := range cur.gauges {
		values[id] = v
	}
	// Histograms with no samples this interval: evaluated as 0 (a source
	// with nothing to measure is healthy, not unknown) but sent with no
	// value, so that no one reads 0 ms as a fast network.
	empty := map[string]bool{}
	for id, h := range cur.histograms {
		values[id] = 0
		empty[id] = h.Count == 0
		if m, ok := t.Metric(id); ok && h.Count > 0 {
			values[id] = h.Quantile(m.Quantile) / max(m.Scale, 1)
		}
		l.accumulate(id, h, start)
	}
	res := t.Evaluate(values, cur.idle)
	ids := t.Select(res, increases, full)
	r := &nbsv1.Report{TimeUnixNano: now.UnixNano(), IntervalMs: uint32(math.Round(float64(elapsed) / float64(time.Millisecond))),
		Snapshot: full, Events: cur.events}
	for _, id := range ids {
		m, _ := t.Metric(id)
		v, ok := values[id]
		if m.Kind == catalog.Rate {
			v = increases[id]
		}
		if !ok {
			v = 0 // and said to mean nothing: a root is streamed for its state
		}
		if empty[id] {
			ok, v = false, 0
		}
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id, Value: v, State: res.State[id], NoValue: !ok})
		if d := l.backlog[id]; d != nil {
			p := histogramProto(id, d.h)
			if d.start.Before(start) {
				p.StartUnixNano = d.start.UnixNano()
			}
			r.Histograms = append(r.Histograms, p)
			delete(l.backlog, id)
		}
	}
	return r, res
}

func histogramProto(id string, h *loglinear.Histogram) *nbsv1.Histogram {
	idx := h.Sorted()
	p := &nbsv1.Histogram{MetricId: id, Count: h.Count, Sum: h.Sum, BucketIndex: idx, BucketCount: make([]uint64, len(idx))}
	for i, b := range idx {
		p.BucketCount[i] = h.Counts[b]
	}
	return p
}
