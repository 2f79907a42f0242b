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

func (d *data) ping(from, to time.Time, step time.Duration) Ping {
	type agg struct {
		rtt, host *loglinear.Dense
		c         counts
		nodes     map[string]bool
	}
	fold := func(samples []store.SampleRow, hists []store.HistogramRow) (map[string]*agg, map[int32]*agg) {
		byTarget, byNode := map[string]*agg{}, map[int32]*agg{}
		get := func(m map[string]*agg, k string) *agg {
			if m[k] == nil {
				m[k] = &agg{nodes: map[string]bool{}}
			}
			return m[k]
		}
		getN := func(k int32) *agg {
			if byNode[k] == nil {
				byNode[k] = &agg{}
			}
			return byNode[k]
		}
		for _, h := range hists {
			t, child := pingTarget(h.Path)
			if t == "" || !d.wanted(t) {
				continue
			}
			a := get(byTarget, t)
			a.nodes[d.names[h.NodeID]] = true
			switch child {
			case "":
				merge(&a.rtt, h)
				merge(&getN(h.NodeID).rtt, h)
			case "host_delay":
				merge(&a.host, h)
			}
		}
		for _, s := range samples {
			t, child := pingTarget(s.Path)
			if t == "" || !d.wanted(t) || (child != "sent" && child != "lost") {
				continue
			}
			a, n := get(byTarget, t), getN(s.NodeID)
			a.nodes[d.names[s.NodeID]] = true
			for _, c := range []*counts{&a.c, &n.c} {
				c.n += s.N
				if child == "sent" {
					c.sent += s.Sum
				} else {
					c.lost += s.Sum
				}
			}
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
		pt := PingTarget{Target: t, Nodes: sortedSet(a.nodes),
			P50: quantile(a.rtt, 0.5, sc), P90: quantile(a.rtt, 0.9, sc), P99: quantile(a.rtt, 0.99, sc), Max: hmax(a.rtt, sc),
			Sent: countOrNil(a.c, a.c.sent), Lost: countOrNil(a.c, a.c.lost), Loss: a.c.loss(),
			HostDelayP50: quantile(a.host, 0.5, hs), HostDelayP99: quantile(a.host, 0.99, hs)}
		if p := prev[t]; p != nil {
			pt.Previous = PingPrevious{P50: quantile(p.rtt, 0.5, sc), P99: quantile(p.rtt, 0.99, sc), Loss: p.c.loss(),
				Sent: countOrNil(p.c, p.c.sent), Lost: countOrNil(p.c, p.c.lost)}
		}
		out.Targets = append(out.Targets, pt)
		out.Series = append(out.Series, PingSeries{Target: t, Points: d.pingSeries(serH[t], ser[t], from, to, step, sc)})
	}
	ids := make([]int32, 0, len(curNodes))
	for id := range curNodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return d.names[ids[i]] < d.names[ids[j]] })
	sc := 1e6
	for _, t := range names {
		sc = d.scale("ping/" + t)
		break
	}
	for _, id := range ids {
		a := curNodes[id]
		out.PerNode = append(out.PerNode, PingNode{Node: d.names[id],
			P50: quantile(a.rtt, 0.5, sc), P99: quantile(a.rtt, 0.99, sc), Max: hmax(a.rtt, sc),
			Sent: countOrNil(a.c, a.c.sent), Lost: countOrNil(a.c, a.c.lost), Loss: a.c.loss()})
	}
	return out
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
