package alert

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

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
		labels["root"] = rootOf(inst.Metric)
		labels["metric"] = inst.Child
		s.describeNode(ctx, ev, n, inst, r, annotations)
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
	if thr != nil {
		cmp := "above"
		if thr.Comparison == "below" {
			cmp = "below"
		}
		fmt.Fprintf(&d, ", against thresholds warn %s and crit %s (%s)", withUnit(thr.Warn, childDef.Unit),
			withUnit(thr.Crit, childDef.Unit), cmp)
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
		out["threshold"] = fmt.Sprintf("warn %s, crit %s", fmtNum(thr.Warn), fmtNum(thr.Crit))
	}
	out["tree_url"] = s.treeURL(inst.Node, inst.Child)
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
// the UI serves index.html for client-side routes).
func (s *Service) treeURL(node, metric string) string {
	return fmt.Sprintf("%s/nodes/%s?metric=%s", strings.TrimRight(s.cfg.ExternalURL, "/"), url.PathEscape(node), url.QueryEscape(metric))
}

func (s *Service) fleetURL() string { return strings.TrimRight(s.cfg.ExternalURL, "/") + "/" }
