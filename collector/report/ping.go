package report

// Ping: each target's delay percentiles and loss over the period, per
// series point, against the previous period.

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// pingTarget returns the target of a ping RTT histogram (ping/<target>)
// and of its children (ping/<target>/<child>), "" for anything else.
func pingTarget(path string) (target, child string) {
	rest, ok := strings.CutPrefix(path, "ping/")
	if !ok {
		return "", ""
	}
	target, child, _ = strings.Cut(rest, "/")
	if target == "clock" {
		return "", ""
	}
	return target, child
}

func (d *data) wanted(target string) bool { return len(d.targets) == 0 || d.targets[target] }

type counts struct {
	sent, lost float64
	n          int64 // samples behind them; 0 = no data
}

func (c counts) loss() *float64 {
	if c.n == 0 || c.sent <= 0 {
		return nil
	}
	return num(c.lost / c.sent)
}

func countOrNil(c counts, v float64) *int64 {
	if c.n == 0 {
		return nil
	}
	x := int64(math.Round(v))
	return &x
}

// pingAgg is what a target's or a node's ping numbers come from.
type pingAgg struct {
	rtt, host *loglinear.Dense
	c         counts
	// byNode is a target's per-node drill-down (nil for a node's own).
	byNode map[int32]*pingAgg
}

func (a *pingAgg) node(id int32) *pingAgg {
	if a.byNode[id] == nil {
		a.byNode[id] = &pingAgg{}
	}
	return a.byNode[id]
}

// add folds a histogram or a sent/lost sample of child into a.
func (a *pingAgg) addHist(child string, h store.HistogramRow) {
	switch child {
	case "":
		merge(&a.rtt, h)
	case "host_delay":
		merge(&a.host, h)
	}
}

func (a *pingAgg) addCount(child string, s store.SampleRow) {
	a.c.n += s.N
	if child == "sent" {
		a.c.sent += s.Sum
	} else {
		a.c.lost += s.Sum
	}
}

// pingNode is one node's row: sc scales RTTs, hs host delays.
func pingNode(name string, a *pingAgg, sc, hs float64) PingNode {
	return PingNode{Node: name,
		P50: quantile(a.rtt, 0.5, sc), P90: quantile(a.rtt, 0.9, sc), P99: quantile(a.rtt, 0.99, sc), Max: hmax(a.rtt, sc),
		Sent: countOrNil(a.c, a.c.sent), Lost: countOrNil(a.c, a.c.lost), Loss: a.c.loss(),
		HostDelayP50: quantile(a.host, 0.5, hs), HostDelayP99: quantile(a.host, 0.99, hs)}
}

func (d *data) ping(from, to time.Time, step time.Duration) Ping {
	fold := func(samples []store.SampleRow, hists []store.HistogramRow) (map[string]*pingAgg, map[int32]*pingAgg) {
		byTarget, byNode := map[string]*pingAgg{}, map[int32]*pingAgg{}
		get := func(k string) *pingAgg {
			if byTarget[k] == nil {
				byTarget[k] = &pingAgg{byNode: map[int32]*pingAgg{}}
			}
			return byTarget[k]
		}
		getN := func(k int32) *pingAgg {
			if byNode[k] == nil {
				byNode[k] = &pingAgg{}
			}
			return byNode[k]
		}
		for _, h := range hists {
			t, child := pingTarget(h.Path)
			if t == "" || !d.wanted(t) || (child != "" && child != "host_delay") {
				continue
			}
			a := get(t)
			a.addHist(child, h)
			a.node(h.NodeID).addHist(child, h)
			getN(h.NodeID).addHist(child, h)
		}
		for _, s := range samples {
			t, child := pingTarget(s.Path)
			if t == "" || !d.wanted(t) || (child != "sent" && child != "lost") {
				continue
			}
			a := get(t)
			a.addCount(child, s)
			a.node(s.NodeID).addCount(child, s)
			getN(s.NodeID).addCount(child, s)
		}
		return byTarget, byNode
	}
	cur, curNodes := fold(d.cur, d.curH)
	prev, _ := fold(d.prev, d.prevH)
	out := Ping{Targets: []PingTarget{}, PerNode: []PingNode{}, Series: []PingSeries{}}
	// The series' rows by target, grouped once rather than scanned per target.
	serH, ser := map[string][]store.HistogramRow{}, map[string][]store.SampleRow{}
	for _, h := range d.serH {
		if t, child := pingTarget(h.Path); t != "" && child == "" {
			serH[t] = append(serH[t], h)
		}
	}
	for _, s := range d.ser {
		if t, child := pingTarget(s.Path); t != "" && (child == "sent" || child == "lost") {
			ser[t] = append(ser[t], s)
		}
	}
	names := make([]string, 0, len(cur))
	for t := range cur {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		a := cur[t]
		sc := d.scale("ping/" + t)
		hs := d.scale("ping/" + t + "/host_delay")
		pt := PingTarget{Target: t, Nodes: []string{}, PerNode: []PingNode{},
			P50: quantile(a.rtt, 0.5, sc), P90: quantile(a.rtt, 0.9, sc), P99: quantile(a.rtt, 0.99, sc), Max: hmax(a.rtt, sc),
			Sent: countOrNil(a.c, a.c.sent), Lost: countOrNil(a.c, a.c.lost), Loss: a.c.loss(),
			HostDelayP50: quantile(a.host, 0.5, hs), HostDelayP99: quantile(a.host, 0.99, hs)}
		for _, id := range d.byName(a.byNode) {
			pt.Nodes = append(pt.Nodes, d.names[id])
			pt.PerNode = append(pt.PerNode, pingNode(d.names[id], a.byNode[id], sc, hs))
		}
		pt.NodeCount = len(pt.Nodes)
		// The drill-down shows who is slow: the highest p99 first (no data
		// last), at most maxDrillDown of them in a mesh of many nodes.
		sort.SliceStable(pt.PerNode, func(i, j int) bool {
			a, b := pt.PerNode[i].P99, pt.PerNode[j].P99
			return a != nil && (b == nil || *a > *b)
		})
		if len(pt.PerNode) > maxDrillDown {
			pt.PerNode = pt.PerNode[:maxDrillDown]
		}
		if p := prev[t]; p != nil {
			pt.Previous = PingPrevious{P50: quantile(p.rtt, 0.5, sc), P99: quantile(p.rtt, 0.99, sc), Loss: p.c.loss(),
				Sent: countOrNil(p.c, p.c.sent), Lost: countOrNil(p.c, p.c.lost)}
		}
		out.Targets = append(out.Targets, pt)
		out.Series = append(out.Series, PingSeries{Target: t, Points: d.pingSeries(serH[t], ser[t], from, to, step, sc)})
	}
	// A node's numbers over every target it pings: RTTs and host delays
	// in the first target's unit (every ping target is in ms).
	sc, hs := 1e6, 1e6
	for _, t := range names {
		sc, hs = d.scale("ping/"+t), d.scale("ping/"+t+"/host_delay")
		break
	}
	for _, id := range d.byName(curNodes) {
		out.PerNode = append(out.PerNode, pingNode(d.names[id], curNodes[id], sc, hs))
	}
	return out
}

// byName is the node ids of m sorted by node name.
func (d *data) byName(m map[int32]*pingAgg) []int32 {
	ids := make([]int32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return d.names[ids[i]] < d.names[ids[j]] })
	return ids
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (d *data) pingSeries(hists []store.HistogramRow, samples []store.SampleRow, from, to time.Time, step time.Duration, scale float64) []PingPoint {
	n := int((to.Sub(from) + step - 1) / step)
	cs := make([]counts, n)
	for _, s := range samples {
		if _, child := pingTarget(s.Path); child == "sent" || child == "lost" {
			if i := slot(s.TS, from, step); i >= 0 && i < n {
				cs[i].n += s.N
				if child == "sent" {
					cs[i].sent += s.Sum
				} else {
					cs[i].lost += s.Sum
				}
			}
		}
	}
	pts := make([]PingPoint, n)
	points(hists, from, step, n, func(i int, h *loglinear.Dense) {
		pts[i] = PingPoint{T: from.Add(time.Duration(i) * step), P50: quantile(h, 0.5, scale), P99: quantile(h, 0.99, scale), Loss: cs[i].loss()}
	})
	return pts
}
