package alert

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// defsCache holds nodes' metric definitions for descriptions; a fire is
// rare, but a storm fires many roots of one node at once.
type defsCache map[int32]defsEntry

type defsEntry struct {
	list []store.MetricDef
	byID map[string]store.MetricDef
	at   time.Time
}

func (c defsCache) get(ctx context.Context, st *store.Store, node int32) (defsEntry, error) {
	if e, ok := c[node]; ok && time.Since(e.at) < time.Minute {
		return e, nil
	}
	defs, err := st.Definitions(ctx, node)
	if err != nil {
		return defsEntry{}, err
	}
	e := defsEntry{list: defs, byID: make(map[string]store.MetricDef, len(defs)), at: time.Now()}
	for _, d := range defs {
		e.byID[d.Path] = d
	}
	c[node] = e
	return e, nil
}

// describe freezes a firing instance's labels and writes its annotations:
// what is wrong, where, by how much against which threshold, and the link
// to that place in the tree.
func (s *Service) describe(ctx context.Context, ev *evaluator, c Change) {
	inst, r := c.Inst, c.Rule
	labels := map[string]string{}
	annotations := map[string]string{}
	if inst.Kind == KindNode {
		n := ev.nodes[inst.NodeID]
		for k, v := range n.Labels {
			if !reservedLabels[k] {
				labels[k] = v
			}
		}
		labels["node"] = inst.Node
		if r.Kind == KindSilent {
			describeSilent(inst, r, annotations)
			annotations["tree_url"] = s.treeURL(inst.Node, "", inst.Since, inst.FiredAt)
		} else {
			labels["root"] = rootOf(inst.Metric)
			labels["metric"] = inst.Child
			s.describeNode(ctx, ev, n, inst, r, annotations)
		}
	} else {
		for k, v := range r.Selector {
			if !reservedLabels[k] {
				labels[k] = v
			}
		}
		for k, v := range inst.Group {
			labels[k] = v
		}
		if !strings.Contains(r.Metric, "*") {
			labels["metric"] = r.Metric
			labels["root"] = rootOf(r.Metric)
		}
		describeGroup(inst, r, annotations)
		annotations["tree_url"] = s.fleetURL()
	}
	for k, v := range r.Labels {
		labels[k] = v
	}
	labels["alertname"] = inst.RuleName
	labels["severity"] = inst.Severity
	if r.RunbookURL != "" {
		annotations["runbook_url"] = r.RunbookURL
	}
	annotations["observed_at"] = inst.Evidence.ObservedAt.UTC().Format(time.RFC3339Nano)
	inst.Labels, inst.Annotations = labels, annotations
}

func (s *Service) describeNode(ctx context.Context, ev *evaluator, n store.Node, inst *Instance, r *Rule, out map[string]string) {
	e := inst.Evidence
	defs, err := ev.defs.get(ctx, s.st, inst.NodeID)
	if err != nil {
		s.log.Warn("read metric definitions for an alert description", "node", inst.Node, "err", err)
	}
	var thresholds map[string]*store.Threshold
	if s.thresholds != nil && err == nil && n.ID != 0 {
		if thresholds, err = s.thresholds.Thresholds(ctx, n, defs.list); err != nil {
			s.log.Warn("read thresholds for an alert description", "node", inst.Node, "err", err)
		}
	}
	childDef := defs.byID[inst.Child]
	childVal := headline(childDef, e.ChildValue, e.Interval)
	inst.Headline = &childVal
	thr := childDef.DefaultThreshold
	if t, ok := thresholds[inst.Child]; ok {
		thr = t
	}
	root := rootOf(inst.Metric)
	out["summary"] = fmt.Sprintf("%s is %s on %s: %s at %s", root, strings.ToUpper(e.State.String()), inst.Node,
		inst.Child, withUnit(childVal, childDef.Unit))
	var d strings.Builder
	fmt.Fprintf(&d, "%s", inst.Child)
	if childDef.Title != "" {
		fmt.Fprintf(&d, " (%s)", childDef.Title)
	}
	fmt.Fprintf(&d, " is %s at %s", strings.ToUpper(e.ChildState.String()), withUnit(childVal, childDef.Unit))
	var lv levels
	if thr != nil {
		var median *float64
		if thr.BaselineIntervals > 0 {
			median = s.baselineMedian(ctx, inst, childDef, thr)
		}
		lv = thresholdLevels(thr, childDef.Unit, median)
		fmt.Fprintf(&d, ", against %s", lv.long)
	}
	d.WriteString(".")
	if inst.Child != inst.Metric {
		md := defs.byID[inst.Metric]
		fmt.Fprintf(&d, " %s is %s at %s.", inst.Metric, strings.ToUpper(e.State.String()),
			withUnit(headline(md, e.Value, e.Interval), md.Unit))
	}
	fmt.Fprintf(&d, " Rule %s: %s at %s or worse for %s.", r.Name, r.Metric, r.State, r.forText())
	out["description"] = d.String()
	out["value"] = fmtNum(childVal)
	if thr != nil {
		out["threshold"] = lv.short
		if lv.median != "" {
			out["baseline_median"] = lv.median
		}
	}
	out["tree_url"] = s.treeURL(inst.Node, inst.Child, inst.Since, e.ObservedAt)
}

// levels is a threshold as people read it, in the metric's unit.
type levels struct {
	// short: "warn 3 ms, crit 10 ms", or for a baseline threshold
	// "warn 3x median 1.2 ms = 3.6 ms, crit 10x median 1.2 ms = 12 ms".
	short string
	// long: the same with the comparison and, for a baseline, its window.
	long string
	// median: the moving median with its unit, "" unless baselined and known.
	median string
}

// thresholdLevels renders a threshold. A baseline threshold's warn and crit
// are factors of the moving median the agent judged the metric against;
// median is that median in the metric's unit, nil when it is not known
// (nothing stored before the breach), in which case the factors are given
// as factors, never as if they were levels.
func thresholdLevels(thr *store.Threshold, unit string, median *float64) levels {
	cmp := "above"
	if thr.Comparison == "below" {
		cmp = "below"
	}
	if thr.BaselineIntervals == 0 {
		w, c := withUnit(thr.Warn, unit), withUnit(thr.Crit, unit)
		return levels{short: fmt.Sprintf("warn %s, crit %s", w, c),
			long: fmt.Sprintf("thresholds warn %s and crit %s (%s)", w, c, cmp)}
	}
	window := fmt.Sprintf("the median of the %d intervals before the breach", thr.BaselineIntervals)
	floor := ""
	if thr.Floor > 0 && cmp == "above" {
		floor = fmt.Sprintf("; never raised below %s", withUnit(thr.Floor, unit))
	}
	if median == nil {
		return levels{short: fmt.Sprintf("warn %sx median, crit %sx median", fmtNum(thr.Warn), fmtNum(thr.Crit)),
			long: fmt.Sprintf("warn %sx and crit %sx %s (%s; the median is not known: no stored values before the breach%s)",
				fmtNum(thr.Warn), fmtNum(thr.Crit), window, cmp, floor)}
	}
	m := withUnit(*median, unit)
	w, c := withUnit(thr.Warn**median, unit), withUnit(thr.Crit**median, unit)
	return levels{
		short:  fmt.Sprintf("warn %sx median %s = %s, crit %sx median %s = %s", fmtNum(thr.Warn), m, w, fmtNum(thr.Crit), m, c),
		long:   fmt.Sprintf("warn %sx and crit %sx %s, %s: warn %s, crit %s (%s%s)", fmtNum(thr.Warn), fmtNum(thr.Crit), window, m, w, c, cmp, floor),
		median: m,
	}
}

// baselineMedian is the median a baseline threshold multiplies, taken from
// before the breach, as the agent takes it (agent/tree learn): the
// metric's values in the threshold's window of reports that precede the
// breach's start (inst.Since), not including it, and only those it was not
// in breach in (stored state OK: an earlier breach is left out of the
// agent's baseline too). The reports between the start and the firing one
// are the breach itself: a median over them would be the breach's own value
// ("CRIT at 214 ms, against warn 3x median 214 ms"), explaining nothing. A
// report without the metric is an increase of zero for a rate (streamed
// whenever it moved); for a gauge or histogram it is skipped (a healthy
// child is streamed only in snapshots, so the median is of what was
// stored: the snapshots' and any raised values). nil when nothing was
// stored. A breach that lasted catalog.BaselineAdopt windows became the
// agent's baseline and its alert resolved; for a window after that, a new
// alert's text may state the median from before it.
func (s *Service) baselineMedian(ctx context.Context, inst *Instance, def store.MetricDef, thr *store.Threshold) *float64 {
	e := inst.Evidence
	interval := max(e.Interval, time.Second)
	before := inst.Since
	if before.IsZero() || before.After(e.ObservedAt) {
		before = e.ObservedAt
	}
	// Twice the window, for reports' jitter, and as far back as earlier
	// breaches left out may reach (BaselineAdopt windows): the limit keeps
	// exactly the newest BaselineIntervals of them.
	from := before.Add(-(2 + catalog.BaselineAdopt) * time.Duration(thr.BaselineIntervals) * interval)
	vals, err := s.st.BaselineValues(ctx, inst.NodeID, inst.Child, from, before, int(thr.BaselineIntervals))
	if err != nil {
		s.log.Warn("read the baseline of an alert description", "node", inst.Node, "metric", inst.Child, "err", err)
		return nil
	}
	present := 0
	for _, v := range vals {
		if !math.IsNaN(v) {
			present++
		}
	}
	if present == 0 {
		return nil
	}
	vals = slices.DeleteFunc(vals, func(v float64) bool { return math.IsNaN(v) && def.Kind != store.KindRate })
	for i, v := range vals {
		if math.IsNaN(v) {
			vals[i] = 0
		}
	}
	m := headline(def, median(vals), e.Interval)
	return &m
}

// median of values (sorted in place), as the agent computes it.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// describeSilent says since when a node has sent nothing.
func describeSilent(inst *Instance, r *Rule, out map[string]string) {
	quiet := inst.FiredAt.Sub(inst.Since).Round(time.Second)
	out["summary"] = fmt.Sprintf("%s has sent no report for %s", inst.Node, quiet)
	out["description"] = fmt.Sprintf("%s's last report was at %s: the agent stopped, lost its connection to every collector, or the host is down. "+
		"Its values in the tree are from then, not current. Rule %s: no report for %s.",
		inst.Node, inst.Since.UTC().Format(time.RFC3339), r.Name, r.forText())
	out["value"] = quiet.String()
	secs := quiet.Seconds()
	inst.Headline = &secs
}

func describeGroup(inst *Instance, r *Rule, out map[string]string) {
	e := inst.Evidence
	scope := "nodes"
	if sel := selectorText(r.Selector, inst.Group); sel != "" {
		scope = "nodes with " + sel
	}
	out["summary"] = fmt.Sprintf("%d of %d %s are %s or worse on %s", e.InState, e.Total, scope, strings.ToUpper(r.State), r.Metric)
	need := fmt.Sprintf("at least %d nodes", r.MinNodes)
	if r.MinPercent > 0 {
		need = fmt.Sprintf("at least %s%% of them", fmtNum(r.MinPercent))
	}
	nodes := e.Nodes
	more := ""
	if len(nodes) > 20 {
		nodes, more = nodes[:20], fmt.Sprintf(" and %d more", len(e.Nodes)-20)
	}
	out["description"] = fmt.Sprintf("%s%s. Rule %s: %s at %s or worse, %s, for %s.",
		strings.Join(nodes, ", "), more, r.Name, r.Metric, r.State, need, r.forText())
	out["value"] = strconv.Itoa(e.InState)
	pct := 0.0
	if e.Total > 0 {
		pct = 100 * float64(e.InState) / float64(e.Total)
	}
	inst.Headline = &pct
}

func selectorText(sel, group map[string]string) string {
	all := map[string]string{}
	for k, v := range sel {
		all[k] = v
	}
	for k, v := range group {
		all[k] = v
	}
	parts := make([]string, 0, len(all))
	for _, k := range sortedKeys(all) {
		parts = append(parts, k+"="+all[k])
	}
	return strings.Join(parts, ",")
}

// headline is the value people compare to thresholds: per second for a
// rate (the stored value is the increase over the interval).
func headline(d store.MetricDef, v float64, interval time.Duration) float64 {
	if d.Kind == store.KindRate && interval > 0 {
		return v / interval.Seconds()
	}
	return v
}

func headlineValue(inst *Instance) (float64, bool) {
	if inst.Headline == nil {
		return 0, false
	}
	return *inst.Headline, true
}

func rootOf(metric string) string { return schema.Root(metric) }

func withUnit(v float64, unit string) string {
	if unit == "" {
		return fmtNum(v)
	}
	return fmtNum(v) + " " + unit
}

// fmtNum prints a value with the precision people read: 187, 2.5, 0.0123.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// treeURL links to a metric in a node's tree in the web UI (history routing:
// the UI serves index.html for client-side routes), over the breach window
// from its start to end, with some context either side.
func (s *Service) treeURL(node, metric string, start, end time.Time) string {
	var q []string
	if metric != "" {
		q = append(q, "metric="+url.QueryEscape(metric))
	}
	if !start.IsZero() && !end.IsZero() {
		from, to := breachWindow(start, end)
		q = append(q, "from="+from.UTC().Format(time.RFC3339), "to="+to.UTC().Format(time.RFC3339))
	}
	u := fmt.Sprintf("%s/nodes/%s", strings.TrimRight(s.cfg.ExternalURL, "/"), url.PathEscape(node))
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

// windowPad is the least context shown either side of a breach: enough to
// see what the metric did before it rose and after it fell.
const windowPad = 5 * time.Minute

// breachWindow is the time range a link to a breach opens: the breach,
// padded by a quarter of its length (at least windowPad) either side, to
// whole seconds.
func breachWindow(start, end time.Time) (from, to time.Time) {
	if end.Before(start) {
		end = start
	}
	pad := max(end.Sub(start)/4, windowPad)
	return start.Add(-pad).Truncate(time.Second), end.Add(pad + time.Second - 1).Truncate(time.Second)
}

func (s *Service) fleetURL() string { return strings.TrimRight(s.cfg.ExternalURL, "/") + "/" }
