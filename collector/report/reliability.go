package report

// Reliability and availability: TCP retransmits, resets and drops by
// reason; the share of the period each root spent in each state.

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

type reasonCount struct {
	metric string
	count  float64
}

func top(m map[string]float64) []reasonCount {
	out := make([]reasonCount, 0, len(m))
	for k, v := range m {
		out = append(out, reasonCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].metric < out[j].metric
	})
	if len(out) > topReasons {
		out = out[:topReasons]
	}
	return out
}

type reliabilityTotals struct {
	resets, drops  map[string]float64
	resetN, dropN  int64
	retrans, rto   float64
	retransN, rtoN int64
	segments       float64
	segmentsN      int64
}

// reliabilityMetric is what foldReliability counts.
func reliabilityMetric(path string) bool {
	parts := strings.Split(path, "/")
	switch {
	case parts[0] == "tcp_reset" && len(parts) == 3, parts[0] == "drops" && len(parts) == 2:
		return true
	}
	return path == "latency/retransmits" || path == "latency/rto" || path == "latency/segments_out"
}

func foldReliability(samples []store.SampleRow) reliabilityTotals {
	t := reliabilityTotals{resets: map[string]float64{}, drops: map[string]float64{}}
	for _, s := range samples {
		parts := strings.Split(s.Path, "/")
		switch {
		case parts[0] == "tcp_reset" && len(parts) == 3:
			t.resets[s.Path] += s.Sum
			t.resetN += s.N
		case parts[0] == "drops" && len(parts) == 2:
			t.drops[s.Path] += s.Sum
			t.dropN += s.N
		case s.Path == "latency/retransmits":
			t.retrans += s.Sum
			t.retransN += s.N
		case s.Path == "latency/rto":
			t.rto += s.Sum
			t.rtoN += s.N
		case s.Path == "latency/segments_out":
			t.segments += s.Sum
			t.segmentsN += s.N
		}
	}
	return t
}

func sumOrNil(m map[string]float64, n int64) *int64 {
	if n == 0 {
		return nil
	}
	var s float64
	for _, v := range m {
		s += v
	}
	x := int64(math.Round(s))
	return &x
}

func (d *data) reliability(length time.Duration) Reliability {
	cur, prev := foldReliability(d.cur), foldReliability(d.prev)
	hours, secs := length.Hours(), length.Seconds()
	out := Reliability{Resets: []ReasonRow{}, Drops: []ReasonRow{}}
	for _, r := range top(cur.resets) {
		parts := strings.Split(r.metric, "/")
		out.Resets = append(out.Resets, ReasonRow{Metric: r.metric, Reason: parts[2], Direction: parts[1],
			Count: int64(math.Round(r.count)), PerHour: num(r.count / hours)})
	}
	for _, r := range top(cur.drops) {
		out.Drops = append(out.Drops, ReasonRow{Metric: r.metric, Reason: strings.TrimPrefix(r.metric, "drops/"),
			Count: int64(math.Round(r.count)), PerHour: num(r.count / hours)})
	}
	if cur.retransN > 0 {
		x := int64(math.Round(cur.retrans))
		out.Retransmits.Segments = &x
		out.Retransmits.PerSecond = num(cur.retrans / secs)
		if cur.segmentsN > 0 && cur.segments > 0 {
			out.Retransmits.Per1000Segments = num(1000 * cur.retrans / cur.segments)
		}
	}
	if cur.rtoN > 0 {
		x := int64(math.Round(cur.rto))
		out.Retransmits.RTOs = &x
		out.Retransmits.RTOsPerSecond = num(cur.rto / secs)
	}
	out.Previous = ReliabilityPrevious{Resets: sumOrNil(prev.resets, prev.resetN), Drops: sumOrNil(prev.drops, prev.dropN)}
	if prev.retransN > 0 {
		x := int64(math.Round(prev.retrans))
		out.Previous.Retransmits = &x
	}
	return out
}

// availability is the share of the period each root of each node spent in
// each state; what no sample covered is no data.
func (d *data) availability(nodes []store.Node, length time.Duration) []Availability {
	type key struct {
		node int32
		root string
	}
	acc := map[key]*store.SampleAgg{}
	for _, s := range d.cur {
		if strings.Contains(s.Path, "/") || s.Path == "agent" {
			continue
		}
		k := key{s.NodeID, s.Path}
		if acc[k] == nil {
			acc[k] = &store.SampleAgg{}
		}
		acc[k].Merge(s.SampleAgg)
	}
	roots := map[string]bool{}
	for k := range acc {
		roots[k.root] = true
	}
	for _, r := range []string{"ping", "latency", "tcp_reset", "drops"} {
		roots[r] = true
	}
	secs := length.Seconds()
	out := []Availability{}
	for _, n := range nodes {
		for _, root := range sortedSet(roots) {
			a := acc[key{n.ID, root}]
			if a == nil {
				a = &store.SampleAgg{}
			}
			ok, warn, crit := min(a.OK/secs, 1), min(a.Warn/secs, 1), min(a.Crit/secs, 1)
			out = append(out, Availability{Node: n.Name, Root: root, OK: ok, Warn: warn, Crit: crit,
				NoData: max(0, 1-ok-warn-crit)})
		}
	}
	return out
}

// availabilityTimeline is each root's state over the n nodes in scope per
// day, or per hour for periods up to 2 days: the share of node-time of
// each step (within the period) spent OK, WARN or CRIT, the rest no data.
// Roots no node reported in the period are left out.
func (d *data) availabilityTimeline(n int, from, to time.Time) []AvailabilityRoot {
	out := []AvailabilityRoot{}
	if n == 0 || !from.Before(to) {
		return out
	}
	step := 24 * time.Hour
	if to.Sub(from) <= 48*time.Hour {
		step = time.Hour
	}
	first := from.Truncate(step)
	steps := int((to.Sub(first) + step - 1) / step)
	acc := map[string][]store.SampleAgg{}
	rows := d.cur
	if d.timeline != nil {
		rows = d.timeline
	}
	for _, s := range rows {
		if strings.Contains(s.Path, "/") || s.Path == "agent" {
			continue
		}
		i := int(s.TS.Truncate(step).Sub(first) / step)
		if i < 0 || i >= steps {
			continue
		}
		if acc[s.Path] == nil {
			acc[s.Path] = make([]store.SampleAgg, steps)
		}
		acc[s.Path][i].Merge(s.SampleAgg)
	}
	for _, root := range sortedSet(func() map[string]bool {
		m := map[string]bool{}
		for r := range acc {
			m[r] = true
		}
		return m
	}()) {
		a := AvailabilityRoot{Root: root, StepSeconds: int(step.Seconds()), Points: make([]AvailabilityPoint, steps)}
		for i, agg := range acc[root] {
			t0 := first.Add(time.Duration(i) * step)
			// The part of the step inside the period, for every node.
			secs := (minTime(t0.Add(step), to).Sub(maxTime(t0, from))).Seconds() * float64(n)
			ok, warn, crit := min(agg.OK/secs, 1), min(agg.Warn/secs, 1), min(agg.Crit/secs, 1)
			a.Points[i] = AvailabilityPoint{T: t0, OK: ok, Warn: warn, Crit: crit, NoData: max(0, 1-ok-warn-crit)}
		}
		out = append(out, a)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
