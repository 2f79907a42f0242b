// Package report computes customer reports over a period: ping delay and
// loss, kernel latency, reliability, availability, incidents and
// objectives, each with the previous period of the same length. Every
// number comes from rollups maintained in the write path (collector/store):
// percentiles from merged log-linear bucket counts, never from averaged
// percentiles; rates from counter sums; periods without data are null.
package report

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
)

// ErrorBound is the largest relative error of a percentile estimated from
// the log-linear layout: a bucket is 1/2^SubBits of its lower bound wide
// and the estimate is its midpoint.
const ErrorBound = 1.0 / (2 << loglinear.SubBits)

// Limits on what a caller can ask for and on what one report holds.
const (
	MaxPeriod     = 400 * 24 * time.Hour
	MaxTargets    = 100
	MaxObjectives = 20
	maxSeries     = 400  // points per chart
	maxIncidents  = 1000 // incidents listed
	maxBadMinutes = 200000
	topReasons    = 10
)

// Store is what a report reads.
type Store interface {
	NodesIn(ctx context.Context, scope store.Scope) ([]store.Node, error)
	ReadRollups(ctx context.Context, q store.RollupQuery) ([]store.SampleRow, []store.HistogramRow, error)
	DefinitionsOf(ctx context.Context, nodeIDs []int32) (map[string]store.MetricDef, error)
	BadMinutes(ctx context.Context, nodeIDs []int32, from, to time.Time, limit int) ([]store.SampleRow, error)
}

// Objective is a target a report checks per hour, e.g. ping p99 < 5 ms.
type Objective struct {
	Name string `json:"name"`
	// Metric is "ping" (every ping target's RTT) or a histogram's path.
	Metric   string  `json:"metric"`
	Quantile float64 `json:"quantile"`
	BelowMS  float64 `json:"below_ms"`
	Per      string  `json:"per"` // "hour"
}

// Validate checks an objective's fields.
func (o Objective) Validate() error {
	switch {
	case o.Name == "" || len(o.Name) > 200:
		return fmt.Errorf("objective name must be 1 to 200 bytes")
	case o.Metric == "" || len(o.Metric) > 256:
		return fmt.Errorf("objective %q: metric must be \"ping\" or a histogram path", o.Name)
	case !(o.Quantile > 0 && o.Quantile <= 1):
		return fmt.Errorf("objective %q: quantile %v must be in (0, 1]", o.Name, o.Quantile)
	case !(o.BelowMS > 0) || math.IsInf(o.BelowMS, 0):
		return fmt.Errorf("objective %q: below_ms must be a positive number", o.Name)
	case o.Per != "hour":
		return fmt.Errorf("objective %q: per must be \"hour\"", o.Name)
	}
	return nil
}

// Query is one report to compute.
type Query struct {
	Selector   access.Selector
	From, To   time.Time
	Targets    []string
	Objectives []Objective
	// Raw computes from raw reports instead of rollups (benchmarks, tests).
	Raw bool
	// Res forces a rollup resolution (seconds); 0 picks one.
	Res int32
}

// Compute builds the report the principal in ctx may see: its scope is
// ANDed with q.Selector, so a customer can never widen it.
func Compute(ctx context.Context, st Store, q Query, now time.Time) (*Report, error) {
	p := access.FromContext(ctx)
	all, err := st.NodesIn(ctx, p)
	if err != nil {
		return nil, err
	}
	sel := access.Selector{}
	for k, v := range q.Selector {
		sel[k] = v
	}
	for k, v := range p.Selector {
		if p.Role == access.RoleCustomer {
			sel[k] = v
		}
	}
	var nodes []store.Node
	for _, n := range all {
		if q.Selector.Matches(n.Labels) && p.Sees(n.Labels) {
			nodes = append(nodes, n)
		}
	}
	// Up to 2 days: minute rollups. Longer: whole UTC days from day
	// rollups and the hours at either end from hour rollups, so the cost
	// grows with nodes × days rather than with samples.
	res := q.Res
	if res == 0 {
		res = store.RollupMinute
		if q.To.Sub(q.From) > 48*time.Hour {
			res = store.RollupHour
		}
	}
	if q.Raw {
		res = store.RollupMinute
	}
	step := time.Duration(res) * time.Second
	from := q.From.UTC().Truncate(step)
	to := q.To.UTC().Truncate(step)
	if to.Before(q.To) {
		to = to.Add(step)
	}
	length := to.Sub(from)
	prevFrom := from.Add(-length)

	rep := &Report{
		Period:      Period{From: from, To: to, PreviousFrom: prevFrom, PreviousTo: from},
		Scope:       Scope{Selector: sel, Nodes: []string{}},
		ErrorBound:  ErrorBound,
		GeneratedAt: now.UTC(),
		Resolution:  int(res),
	}
	ids := make([]int32, 0, len(nodes))
	names := map[int32]string{}
	for _, n := range nodes {
		ids = append(ids, n.ID)
		names[n.ID] = n.Name
		rep.Scope.Nodes = append(rep.Scope.Nodes, n.Name)
	}
	d := data{names: names, targets: map[string]bool{}}
	for _, t := range q.Targets {
		d.targets[t] = true
	}
	// Series: minute or hour points up to 16 days, day points beyond.
	seriesStep, seriesFrom, seriesRes := step, from, res
	if res != store.RollupMinute && length > 16*24*time.Hour {
		seriesStep, seriesFrom, seriesRes = 24*time.Hour, from.Truncate(24*time.Hour), store.RollupDay
	}
	for to.Sub(seriesFrom)/seriesStep > maxSeries {
		seriesStep *= 2
	}
	if len(ids) > 0 {
		sp := span{st: st, ids: ids, res: res, raw: q.Raw}
		// The first read to fail ends the others: a report whose read hit
		// the statement timeout answers at once, not after each of its
		// reads has waited its own turn on the read pool to time out too.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		g := errgroup{cancel: cancel}
		g.do(func() (err error) { d.cur, d.curH, err = sp.read(ctx, from, to, nil); return })
		g.do(func() (err error) { d.prev, d.prevH, err = sp.read(ctx, prevFrom, from, nil); return })
		// Day points: the totals' day rollups are the series' too, so only
		// the days at either end (partly outside the totals' whole days)
		// are read again.
		d0, d1 := sp.days(from, to)
		var edges [2]struct {
			s []store.SampleRow
			h []store.HistogramRow
		}
		// Hour points over the whole days too: the totals read those days
		// from day rollups, one row a day, which an hourly chart cannot use.
		var hours struct {
			s []store.SampleRow
			h []store.HistogramRow
		}
		hourlyDays := seriesRes == res && res == store.RollupHour && d0.Before(d1)
		if hourlyDays {
			g.do(func() (err error) {
				hours.s, hours.h, err = st.ReadRollups(ctx, store.RollupQuery{NodeIDs: ids, Res: store.RollupHour, From: d0, To: d1, Match: seriesMetric})
				return
			})
		}
		if seriesRes != res {
			for i, r := range [2][2]time.Time{{seriesFrom, d0}, {d1, to}} {
				g.do(func() (err error) {
					edges[i].s, edges[i].h, err = st.ReadRollups(ctx, store.RollupQuery{NodeIDs: ids, Res: seriesRes, From: r[0], To: r[1], Match: seriesMetric})
					return
				})
			}
		}
		if len(q.Objectives) > 0 && res != store.RollupMinute {
			match := objectiveMetrics(q.Objectives)
			g.do(func() (err error) {
				_, d.objH, err = st.ReadRollups(ctx, store.RollupQuery{NodeIDs: ids, Res: store.RollupHour, From: from, To: to, Match: match})
				return
			})
		}
		g.do(func() (err error) { d.defs, err = st.DefinitionsOf(ctx, ids); return })
		var bad []store.SampleRow
		g.do(func() (err error) { bad, err = st.BadMinutes(ctx, ids, from, to, maxBadMinutes); return })
		if err := g.wait(); err != nil {
			return nil, err
		}
		switch {
		case hourlyDays:
			outside := func(ts time.Time) bool { return ts.Before(d0) || !ts.Before(d1) }
			d.ser = append(filterRows(d.cur, func(r store.SampleRow) bool { return outside(r.TS) }), hours.s...)
			d.serH = append(filterRows(d.curH, func(r store.HistogramRow) bool { return outside(r.TS) }), hours.h...)
		case seriesRes == res:
			d.ser, d.serH = d.cur, d.curH
		default:
			d.ser, d.serH = edges[0].s, edges[0].h
			for _, r := range d.cur {
				if !r.TS.Before(d0) && r.TS.Before(d1) && seriesMetric(r.Path) {
					d.ser = append(d.ser, r)
				}
			}
			for _, r := range d.curH {
				if !r.TS.Before(d0) && r.TS.Before(d1) && seriesMetric(r.Path) {
					d.serH = append(d.serH, r)
				}
			}
			d.ser, d.serH = append(d.ser, edges[1].s...), append(d.serH, edges[1].h...)
		}
		if d.objH == nil {
			d.objH = d.curH
		}
		rep.Incidents = incidents(bad, names, d.cur)
	}
	if rep.Incidents == nil {
		rep.Incidents = []Incident{}
	}
	rep.Ping = d.ping(seriesFrom, to, seriesStep)
	rep.KernelLatency = d.kernel(seriesFrom, to, seriesStep)
	rep.Reliability = d.reliability(length)
	rep.Availability = d.availability(nodes, length)
	rep.Objectives = d.objectives(q.Objectives, from, to)
	return rep, nil
}

// filterRows returns the rows keep keeps, in a new slice.
func filterRows[R any](rows []R, keep func(R) bool) []R {
	var out []R
	for _, r := range rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// data is what a report is computed from.
type data struct {
	names       map[int32]string
	targets     map[string]bool
	defs        map[string]store.MetricDef
	cur, prev   []store.SampleRow
	curH, prevH []store.HistogramRow
	// Series and objectives may read another resolution than the totals.
	ser  []store.SampleRow
	serH []store.HistogramRow
	objH []store.HistogramRow
}

// span reads the rollups of a period: minute rollups, or whole UTC days
// from day rollups and the hours at either end from hour rollups.
type span struct {
	st  Store
	ids []int32
	res int32
	raw bool
}

// days is the whole UTC days of [from, to) that read takes from day
// rollups, [d0, d1); d0 == d1 == to when it reads none.
func (s span) days(from, to time.Time) (d0, d1 time.Time) {
	d0 = from.Truncate(24 * time.Hour)
	if d0.Before(from) {
		d0 = d0.Add(24 * time.Hour)
	}
	d1 = to.Truncate(24 * time.Hour)
	if s.raw || s.res == store.RollupMinute || !d0.Before(d1) {
		return to, to
	}
	return d0, d1
}

func (s span) read(ctx context.Context, from, to time.Time, match func(string) bool) ([]store.SampleRow, []store.HistogramRow, error) {
	q := func(res int32, f, t time.Time) store.RollupQuery {
		return store.RollupQuery{NodeIDs: s.ids, Res: res, From: f, To: t, Raw: s.raw, Match: match}
	}
	d0, d1 := s.days(from, to)
	if s.raw || s.res == store.RollupMinute {
		return s.st.ReadRollups(ctx, q(s.res, from, to))
	}
	if !d0.Before(d1) {
		return s.st.ReadRollups(ctx, q(store.RollupHour, from, to))
	}
	var sparts [3][]store.SampleRow
	var hparts [3][]store.HistogramRow
	for i, part := range []store.RollupQuery{q(store.RollupHour, from, d0), q(store.RollupDay, d0, d1), q(store.RollupHour, d1, to)} {
		var err error
		if sparts[i], hparts[i], err = s.st.ReadRollups(ctx, part); err != nil {
			return nil, nil, err
		}
	}
	return slices.Concat(sparts[:]...), slices.Concat(hparts[:]...), nil
}

// seriesMetric is what the charts need.
func seriesMetric(path string) bool {
	t, child := pingTarget(path)
	return (t != "" && (child == "" || child == "sent" || child == "lost")) || kernelMetric(path)
}

func objectiveMetrics(objs []Objective) func(string) bool {
	return func(path string) bool {
		for _, o := range objs {
			if o.Metric == path {
				return true
			}
			if t, child := pingTarget(path); o.Metric == "ping" && t != "" && child == "" {
				return true
			}
		}
		return false
	}
}

// errgroup runs reads side by side and keeps the first error, and on it
// calls cancel.
type errgroup struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	cancel func()
}

func (g *errgroup) do(fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.mu.Lock()
			if g.err == nil {
				g.err = err
				g.cancel()
			}
			g.mu.Unlock()
		}
	})
}

func (g *errgroup) wait() error {
	g.wg.Wait()
	return g.err
}

// scale turns a histogram's recorded value into its unit.
func (d *data) scale(path string) float64 {
	if def, ok := d.defs[path]; ok && def.Scale > 0 {
		return def.Scale
	}
	return 1
}

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

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func quantile(h *loglinear.Dense, q, scale float64) *float64 {
	if h == nil || h.Count == 0 {
		return nil
	}
	return num(h.Quantile(q) / scale)
}

func hmax(h *loglinear.Dense, scale float64) *float64 {
	if h == nil || h.Count == 0 {
		return nil
	}
	return num(h.Max() / scale)
}

// merge folds a row into a histogram it allocates on first use. Dense
// histograms: a month of rows is folded with an addition per bucket, where
// sparse maps made merging most of a report's time (BENCHMARKS.md).
func merge(into **loglinear.Dense, r store.HistogramRow) {
	if *into == nil {
		*into = new(loglinear.Dense)
	}
	r.AddTo(*into)
}

// points folds rows into one histogram per series point, reusing one
// histogram, and calls fn with each point's (empty when no row falls in it).
func points(rows []store.HistogramRow, from time.Time, step time.Duration, n int, fn func(i int, h *loglinear.Dense)) {
	bySlot := make([][]store.HistogramRow, n)
	for _, r := range rows {
		if i := slot(r.TS, from, step); i >= 0 && i < n {
			bySlot[i] = append(bySlot[i], r)
		}
	}
	h := new(loglinear.Dense)
	for i, rs := range bySlot {
		h.Reset()
		for _, r := range rs {
			r.AddTo(h)
		}
		fn(i, h)
	}
}

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

// slot is a series point's index; points without data stay null.
func slot(t, from time.Time, step time.Duration) int { return int(t.Sub(from) / step) }

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

// kernelMetric reports whether a histogram is kernel latency: the TX
// stages and any receive-stack latency.
func kernelMetric(path string) bool {
	return strings.HasPrefix(path, "latency/tx/") || strings.HasPrefix(path, "latency/rx")
}

func (d *data) kernel(from, to time.Time, step time.Duration) []KernelLatency {
	fold := func(hists []store.HistogramRow) map[string]*loglinear.Dense {
		m := map[string]*loglinear.Dense{}
		for _, h := range hists {
			if kernelMetric(h.Path) {
				a := m[h.Path]
				merge(&a, h)
				m[h.Path] = a
			}
		}
		return m
	}
	cur, prev := fold(d.curH), fold(d.prevH)
	paths := make([]string, 0, len(cur))
	for p := range cur {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	n := int((to.Sub(from) + step - 1) / step)
	byPath := map[string][]store.HistogramRow{}
	for _, r := range d.serH {
		if kernelMetric(r.Path) {
			byPath[r.Path] = append(byPath[r.Path], r)
		}
	}
	out := []KernelLatency{}
	for _, p := range paths {
		h := cur[p]
		def := d.defs[p]
		// Reports show kernel latency in microseconds whatever the
		// catalogue's display unit: recorded values are nanoseconds.
		sc := 1e3
		title := def.Title
		if title == "" {
			title = p
		}
		k := KernelLatency{Metric: p, Title: title, Unit: "us",
			P50: quantile(h, 0.5, sc), P90: quantile(h, 0.9, sc), P99: quantile(h, 0.99, sc), Max: hmax(h, sc), Count: int64(h.Count)}
		if ph := prev[p]; ph != nil {
			c := int64(ph.Count)
			k.Previous = KernelPrevious{P50: quantile(ph, 0.5, sc), P99: quantile(ph, 0.99, sc), Count: &c}
		}
		k.Series = make([]KernelPoint, n)
		points(byPath[p], from, step, n, func(i int, h *loglinear.Dense) {
			k.Series[i] = KernelPoint{T: from.Add(time.Duration(i) * step), P50: quantile(h, 0.5, sc), P99: quantile(h, 0.99, sc)}
		})
		out = append(out, k)
	}
	return out
}

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

// incidents joins consecutive non-OK minutes of a root into spans; the
// child that explains one is the child non-OK the longest in it.
func incidents(bad []store.SampleRow, names map[int32]string, cur []store.SampleRow) []Incident {
	type key struct {
		node int32
		root string
	}
	byRoot := map[key][]store.SampleRow{}
	children := map[key][]store.SampleRow{}
	for _, r := range bad {
		root, _, isChild := strings.Cut(r.Path, "/")
		if isChild {
			children[key{r.NodeID, root}] = append(children[key{r.NodeID, root}], r)
		} else {
			byRoot[key{r.NodeID, root}] = append(byRoot[key{r.NodeID, root}], r)
		}
	}
	var out []Incident
	for k, rows := range byRoot {
		sort.Slice(rows, func(i, j int) bool { return rows[i].TS.Before(rows[j].TS) })
		var open *Incident
		var last time.Time
		flush := func() {
			if open == nil {
				return
			}
			open.End = last.Add(time.Minute)
			open.Seconds = open.End.Sub(open.Start).Seconds()
			open.Child = explain(children[k], open.Start, open.End)
			out = append(out, *open)
			open = nil
		}
		for _, r := range rows {
			if open != nil && r.TS.Sub(last) > time.Minute {
				flush()
			}
			if open == nil {
				open = &Incident{Node: names[k.node], Root: k.root, State: "warn", Start: r.TS,
					TreeURL: fmt.Sprintf("/nodes/%s?at=%d", names[k.node], r.TS.UnixMilli())}
				open.WorstValue = num(r.Max)
			}
			if r.Crit > 0 {
				open.State = "crit"
			}
			if open.WorstValue == nil || r.Max > *open.WorstValue {
				open.WorstValue = num(r.Max)
			}
			last = r.TS
		}
		flush()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Node+out[i].Root < out[j].Node+out[j].Root
	})
	if len(out) > maxIncidents {
		out = out[:maxIncidents]
	}
	return out
}

func explain(children []store.SampleRow, from, to time.Time) *string {
	bad := map[string]float64{}
	for _, c := range children {
		if !c.TS.Before(from) && c.TS.Before(to) {
			// CRIT seconds weigh more than WARN seconds.
			bad[c.Path] += c.Warn + 2*c.Crit
		}
	}
	var best string
	for p, v := range bad {
		if best == "" || v > bad[best] || (v == bad[best] && (len(p) > len(best) || (len(p) == len(best) && p < best))) {
			best = p
		}
	}
	if best == "" {
		return nil
	}
	return &best
}

func (d *data) objectives(objs []Objective, from, to time.Time) []ObjectiveResult {
	out := []ObjectiveResult{}
	for _, o := range objs {
		var rows []store.HistogramRow
		scale := 1e6
		for _, h := range d.objH {
			t, child := pingTarget(h.Path)
			match := h.Path == o.Metric
			if o.Metric == "ping" {
				match = t != "" && child == "" && d.wanted(t)
			}
			if !match {
				continue
			}
			scale = d.scale(h.Path)
			rows = append(rows, h)
		}
		// A histogram metric's scale turns its values into its unit;
		// objectives are in ms, and only ms metrics (ping) have them in
		// that unit, so anything else is taken as nanoseconds.
		if o.Metric != "ping" && d.defs[o.Metric].Unit != "ms" {
			scale = 1e6
		}
		r := ObjectiveResult{Name: o.Name, Missed: []time.Time{}}
		met := 0
		first := from.Truncate(time.Hour)
		points(rows, first, time.Hour, int((to.Sub(first)+time.Hour-1)/time.Hour), func(i int, h *loglinear.Dense) {
			if h.Count == 0 {
				r.NoDataHours++
				return
			}
			r.Hours++
			if h.Quantile(o.Quantile)/scale < o.BelowMS {
				met++
			} else {
				r.Missed = append(r.Missed, first.Add(time.Duration(i)*time.Hour))
			}
		})
		if r.Hours > 0 {
			r.Attainment = num(float64(met) / float64(r.Hours))
		}
		out = append(out, r)
	}
	return out
}
