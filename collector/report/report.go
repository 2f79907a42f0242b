// Package report computes customer reports over a period: ping delay and
// loss, kernel latency, reliability, availability, incidents and
// objectives, each with the previous period of the same length. Every
// number comes from rollups maintained in the write path (collector/store):
// percentiles from merged log-linear bucket counts, never from averaged
// percentiles; rates from counter sums; periods without data are null.
//
// Compute (report.go) reads the rollups side by side; each section is
// computed in a file of its own (ping.go, kernel.go, reliability.go,
// incidents.go, objectives.go) from the same data, with the histogram
// helpers of histograms.go. The HTTP side and saved definitions are
// http.go and repo.go.
package report

import (
	"context"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/api"
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
	maxDrillDown  = 50 // nodes in a ping target's per_node
)

// Store is what a report reads.
type Store interface {
	NodesIn(ctx context.Context, scope store.Scope) ([]store.Node, error)
	ReadRollups(ctx context.Context, q store.RollupQuery) ([]store.SampleRow, []store.HistogramRow, error)
	DefinitionsOf(ctx context.Context, nodeIDs []int32) (map[string]store.MetricDef, error)
	BadMinutes(ctx context.Context, nodeIDs []int32, from, to time.Time, limit int) ([]store.SampleRow, error)
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
	// PerNode reads every day from per-node day rollups, never from the
	// scope pre-aggregate (the equality tests' reference, benchmarks).
	PerNode bool
}

// ScopeStore is what a Store that keeps the per-scope day pre-aggregate
// (store.ReadScopeDays) also offers. Each read says ok false when it
// cannot serve its days exactly, and the report reads them per node.
type ScopeStore interface {
	ReadScopeDays(ctx context.Context, q store.ScopeDayQuery) ([]store.SampleRow, []store.HistogramRow, bool, error)
	ReadNodePeriodSamples(ctx context.Context, q store.NodePeriodQuery) ([]store.SampleRow, bool, error)
	ReadNodeDayHistograms(ctx context.Context, q store.NodePeriodQuery) ([]store.HistogramRow, bool, error)
}

// Compute builds the report the principal in ctx may see: its scope is
// ANDed with q.Selector, so a customer can never widen it.
func Compute(ctx context.Context, st Store, q Query, now time.Time) (*Report, error) {
	p := access.FromContext(ctx)
	// What the caller may not see (api.View: the agent's own root, owner
	// children of processes and namespaces) is not read at all: no
	// section, chart, objective or incident can show it.
	view := api.ViewFor(p)
	shownOnly := func(match func(string) bool) func(string) bool {
		return func(path string) bool { return view.Metric(path) && match(path) }
	}
	seriesMatch := shownOnly(seriesMetric)
	q.Objectives = slices.DeleteFunc(slices.Clone(q.Objectives), func(o Objective) bool { return !view.Metric(o.Metric) })
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
		sp := span{st: st, ids: ids, res: res, raw: q.Raw, today: now.UTC().Truncate(24 * time.Hour)}
		if ss, ok := st.(ScopeStore); ok && !q.PerNode {
			sp.scoped, sp.scope = ss, scopeOf(nodes)
		}
		// The first read to fail ends the others: a report whose read hit
		// the statement timeout answers at once, not after each of its
		// reads has waited its own turn on the read pool to time out too.
		outer := ctx // the group's ends with Wait
		g, ctx := errgroup.WithContext(ctx)
		// Only the metrics the sections show: a busy node has hundreds of
		// metrics (52 histograms), of which a report shows a few dozen, and
		// the filter is on metric ids in SQL (store.RollupQuery.Match), so
		// the others are neither fetched nor decoded.
		match := shownOnly(d.reportMetric(q.Objectives))
		// A fleet's or a tenant's whole days from the scope pre-aggregate
		// when it covers exactly these nodes (readScoped); the per-node
		// tables from per-node sums over the period.
		var curDays scopedDays
		g.Go(func() (err error) {
			var ok bool
			if d.cur, d.curH, curDays, ok, err = sp.readScoped(ctx, from, to, match, true); err != nil || ok {
				return err
			}
			d.cur, d.curH, err = sp.read(ctx, from, to, match)
			return
		})
		g.Go(func() (err error) {
			var ok bool
			if d.prev, d.prevH, _, ok, err = sp.readScoped(ctx, prevFrom, from, match, false); err != nil || ok {
				return err
			}
			d.prev, d.prevH, err = sp.read(ctx, prevFrom, from, match)
			return
		})
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
			g.Go(func() (err error) {
				hours.s, hours.h, err = st.ReadRollups(ctx, store.RollupQuery{NodeIDs: ids, Res: store.RollupHour, From: d0, To: d1, Match: seriesMatch})
				return
			})
		}
		if seriesRes != res {
			for i, r := range [2][2]time.Time{{seriesFrom, d0}, {d1, to}} {
				g.Go(func() (err error) {
					edges[i].s, edges[i].h, err = st.ReadRollups(ctx, store.RollupQuery{NodeIDs: ids, Res: seriesRes, From: r[0], To: r[1], Match: seriesMatch})
					return
				})
			}
		}
		if len(q.Objectives) > 0 && res != store.RollupMinute {
			match := shownOnly(objectiveMetrics(q.Objectives))
			g.Go(func() (err error) {
				_, d.objH, err = st.ReadRollups(ctx, store.RollupQuery{NodeIDs: ids, Res: store.RollupHour, From: from, To: to, Match: match})
				return
			})
		}
		g.Go(func() (err error) { d.defs, err = st.DefinitionsOf(ctx, ids); return })
		var bad []store.SampleRow
		g.Go(func() (err error) { bad, err = st.BadMinutes(ctx, ids, from, to, maxBadMinutes); return })
		if err := g.Wait(); err != nil {
			return nil, err
		}
		switch {
		case hourlyDays:
			inside := func(ts time.Time) bool { return !ts.Before(d0) && ts.Before(d1) }
			d.ser = append(slices.DeleteFunc(slices.Clone(d.cur), func(r store.SampleRow) bool { return inside(r.TS) }), hours.s...)
			d.serH = append(slices.DeleteFunc(slices.Clone(d.curH), func(r store.HistogramRow) bool { return inside(r.TS) }), hours.h...)
		case seriesRes == res:
			d.ser, d.serH = d.cur, d.curH
		case curDays.ok:
			// The whole days' points are the scope's day rows.
			d.ser, d.serH = edges[0].s, edges[0].h
			for _, r := range curDays.s {
				if seriesMatch(r.Path) {
					d.ser = append(d.ser, r)
				}
			}
			for _, r := range curDays.h {
				if seriesMatch(r.Path) {
					d.serH = append(d.serH, r)
				}
			}
			d.ser, d.serH = append(d.ser, edges[1].s...), append(d.serH, edges[1].h...)
		default:
			d.ser, d.serH = edges[0].s, edges[0].h
			for _, r := range d.cur {
				if !r.TS.Before(d0) && r.TS.Before(d1) && seriesMatch(r.Path) {
					d.ser = append(d.ser, r)
				}
			}
			for _, r := range d.curH {
				if !r.TS.Before(d0) && r.TS.Before(d1) && seriesMatch(r.Path) {
					d.serH = append(d.serH, r)
				}
			}
			d.ser, d.serH = append(d.ser, edges[1].s...), append(d.serH, edges[1].h...)
		}
		if d.objH == nil {
			d.objH = d.curH
		}
		if curDays.ok {
			d.timeline = curDays.timeline
		}
		// Nothing stored before the collector refused them at ingest names
		// another tenant's node to a customer (store.ForeignPing): not a
		// ping target row, its series, incidents or objectives.
		if bad, err = d.withoutForeignPing(outer, st, p, bad); err != nil {
			return nil, err
		}
		// The agent's own root is how NBS watches itself: staff's, as
		// are owner children of processes and namespaces (api.View).
		rep.Incidents = incidents(bad, names, d.defs, view.Metric, now)
		rep.DataFrom = d.dataFrom(bad)
	}
	if rep.Incidents == nil {
		rep.Incidents = []Incident{}
	}
	rep.Ping = d.ping(seriesFrom, to, seriesStep)
	rep.KernelLatency = d.kernel(seriesFrom, to, seriesStep)
	rep.Reliability = d.reliability(length)
	rep.Availability = d.availability(nodes, length)
	rep.AvailabilityTimeline = d.availabilityTimeline(len(nodes), from, to)
	rep.Objectives = d.objectives(q.Objectives, from, to)
	return rep, nil
}

// dataFrom is when the period's data starts: the earliest row with
// samples in it, at the finest resolution read (a minute for periods up to
// two days; the raised minutes always), so a page says "data starts at
// 06:27", not the hour or day the first row of a coarser read begins. Nil
// when nothing was reported in the period.
func (d *data) dataFrom(bad []store.SampleRow) *time.Time {
	var first time.Time
	see := func(ts time.Time, n int64) {
		if n > 0 && (first.IsZero() || ts.Before(first)) {
			first = ts
		}
	}
	rows := [][]store.SampleRow{d.ser, bad, d.timeline}
	if d.timeline == nil {
		// d.cur holds rows of their times, not per-node period sums.
		rows = append(rows, d.cur)
	}
	for _, rs := range rows {
		for _, r := range rs {
			see(r.TS, r.N)
		}
	}
	for _, hs := range [][]store.HistogramRow{d.serH} {
		for _, h := range hs {
			see(h.TS, int64(h.Count))
		}
	}
	if first.IsZero() {
		return nil
	}
	first = first.UTC()
	return &first
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
	// timeline is what the availability timeline reads when d.cur holds
	// per-node period sums (readScoped); nil: d.cur.
	timeline []store.SampleRow
}

// span reads the rollups of a period: minute rollups, or whole UTC days
// from day rollups and the hours at either end from hour rollups.
type span struct {
	st  Store
	ids []int32
	res int32
	raw bool
	// scoped, if set, serves whole days of scope (readScoped).
	scoped ScopeStore
	scope  string
	// today is the start of the UTC day that holds the report's now. A
	// period rounded up to its next hour ends at midnight after 23:00, but
	// today is not a whole day yet: no day rollup or pre-aggregate holds
	// it, and asking the pre-aggregate for it sent the whole period to the
	// per-node reads for the last hour of every day.
	today time.Time
}

// scopeOf is the pre-aggregate scope that could cover nodes exactly: their
// tenant when they all have the same one, else the whole fleet. Whether it
// does (no other node in its sums) store.ReadScopeDays checks.
func scopeOf(nodes []store.Node) string {
	if len(nodes) == 0 {
		return store.FleetScope
	}
	t := nodes[0].Tenant
	for _, n := range nodes[1:] {
		if n.Tenant != t {
			return store.FleetScope
		}
	}
	return t
}

// perNodeMetric is what the per-node tables read: the ping targets' metrics
// (ping per node, a target's drill-down) and the roots (availability per
// node). Every other section sums over the nodes.
func perNodeMetric(path string) bool {
	t, _ := pingTarget(path)
	return t != "" || !strings.Contains(path, "/")
}

// perNodeHistogram is the histograms among them: a ping target's RTT and
// host delay.
func perNodeHistogram(path string) bool {
	t, child := pingTarget(path)
	return t != "" && (child == "" || child == "host_delay")
}

// scopedDays is the scope pre-aggregate's rows of a period's whole days
// (NodeID 0, a row a day and metric), for the charts and the timeline.
type scopedDays struct {
	ok       bool
	s        []store.SampleRow
	h        []store.HistogramRow
	timeline []store.SampleRow
}

// readScoped reads [from, to) as read does, but its whole days from the
// scope pre-aggregate: every metric but the per-node tables' as the
// scope's day rows, and with perNode those (perNodeMetric) as one sample
// row a node and metric summed over the days in SQL and the ping
// histograms' day rows. Whichever way a number is summed, it is the same
// sum of the same day rollups (TestPreAggregateEqualsPerNode). ok is false
// when the pre-aggregate cannot serve these days for these nodes.
func (s span) readScoped(ctx context.Context, from, to time.Time, match func(string) bool, perNode bool) (
	samples []store.SampleRow, hists []store.HistogramRow, days scopedDays, ok bool, err error) {
	d0, d1 := s.days(from, to)
	if s.scoped == nil || s.raw || s.res != store.RollupHour || !d0.Before(d1) {
		return nil, nil, days, false, nil
	}
	ds, dh, ok, err := s.scoped.ReadScopeDays(ctx, store.ScopeDayQuery{Scope: s.scope, NodeIDs: s.ids, From: d0, To: d1, Match: match})
	if err != nil || !ok {
		return nil, nil, days, false, err
	}
	// The rest side by side, each on a connection of its own: the per-node
	// reads are most of a fleet report's time. One that cannot serve its
	// part makes the whole fall back (ok false), as before.
	var (
		ns     []store.SampleRow
		nh     []store.HistogramRow
		nodeOK = true
		edges  [2]struct {
			s []store.SampleRow
			h []store.HistogramRow
		}
	)
	g, gctx := errgroup.WithContext(ctx)
	if perNode {
		g.Go(func() (err error) {
			var ok bool
			ns, ok, err = s.scoped.ReadNodePeriodSamples(gctx, store.NodePeriodQuery{NodeIDs: s.ids, From: d0, To: d1,
				Match: func(p string) bool { return match(p) && perNodeMetric(p) && !perNodeHistogram(p) }})
			if !ok {
				nodeOK = false
			}
			return err
		})
		g.Go(func() (err error) {
			// The fold's per-node copy of the days (one index range), else
			// the day rollups.
			q := store.NodePeriodQuery{NodeIDs: s.ids, From: d0, To: d1, Match: func(p string) bool { return match(p) && perNodeHistogram(p) }}
			var ok bool
			if nh, ok, err = s.scoped.ReadNodeDayHistograms(gctx, q); err != nil || ok {
				return err
			}
			_, nh, err = s.st.ReadRollups(gctx, store.RollupQuery{NodeIDs: s.ids, Res: store.RollupDay, From: d0, To: d1, Match: q.Match})
			return err
		})
	}
	for i, r := range [2][2]time.Time{{from, d0}, {d1, to}} {
		g.Go(func() (err error) {
			edges[i].s, edges[i].h, err = s.st.ReadRollups(gctx, store.RollupQuery{NodeIDs: s.ids, Res: store.RollupHour, From: r[0], To: r[1], Match: match})
			return err
		})
	}
	if err := g.Wait(); err != nil || !nodeOK {
		return nil, nil, days, false, err
	}
	keep := func(p string) bool { return !perNode || !perNodeMetric(p) }
	samples = append(slices.Concat(edges[0].s, edges[1].s), ns...)
	hists = append(slices.Concat(edges[0].h, edges[1].h), nh...)
	for _, r := range ds {
		if keep(r.Path) {
			samples = append(samples, r)
		}
	}
	for _, r := range dh {
		if keep(r.Path) {
			hists = append(hists, r)
		}
	}
	days = scopedDays{ok: true, s: ds, h: dh, timeline: append(slices.Concat(edges[0].s, edges[1].s), ds...)}
	return samples, hists, days, true, nil
}

// days is the whole UTC days of [from, to) that read takes from day
// rollups, [d0, d1); d0 == d1 == to when it reads none.
func (s span) days(from, to time.Time) (d0, d1 time.Time) {
	d0 = from.Truncate(24 * time.Hour)
	if d0.Before(from) {
		d0 = d0.Add(24 * time.Hour)
	}
	d1 = to.Truncate(24 * time.Hour)
	if !s.today.IsZero() && d1.After(s.today) {
		d1 = s.today
	}
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

// reportMetric is every metric a section reads from the period's totals:
// ping RTT, host delay, sent and lost of the wanted targets (ping.go),
// kernel latency (kernel.go), resets, drops, retransmits, RTOs and
// segments (reliability.go), the roots but the agent's (availability) and
// the objectives' metrics. Anything else in the rollups the sections skip,
// so reading it could not change a number (TestMetricFilterEqualsUnfiltered).
func (d *data) reportMetric(objs []Objective) func(string) bool {
	objective := objectiveMetrics(objs)
	return func(path string) bool {
		if t, child := pingTarget(path); t != "" {
			if d.wanted(t) && (child == "" || child == "host_delay" || child == "sent" || child == "lost") {
				return true
			}
			return objective(path)
		}
		if !strings.Contains(path, "/") {
			return path != "agent" || objective(path)
		}
		return kernelMetric(path) || reliabilityMetric(path) || objective(path)
	}
}

// seriesMetric is what the charts need.
func seriesMetric(path string) bool {
	t, child := pingTarget(path)
	return (t != "" && (child == "" || child == "sent" || child == "lost")) || kernelMetric(path)
}

// withoutForeignPing drops from every row the report read, and from bad,
// the ping targets named after a node outside scope. The candidates come
// from the scope's definitions (every row has one), so the rows are
// scanned only when one of them is another tenant's node; staff's
// reports skip the check.
func (d *data) withoutForeignPing(ctx context.Context, st Store, scope store.Scope, bad []store.SampleRow) ([]store.SampleRow, error) {
	if scope.SeesAll() {
		return bad, nil
	}
	seen := map[string]bool{}
	var paths []string
	for p := range d.defs {
		if t := store.PingTargetOf(p); t != "" && !seen[t] {
			seen[t] = true
			paths = append(paths, p)
		}
	}
	hide, err := store.ForeignPing(ctx, st, scope, paths)
	if err != nil || hide == nil {
		return bad, err
	}
	samples := func(rows []store.SampleRow) []store.SampleRow {
		return slices.DeleteFunc(slices.Clone(rows), func(r store.SampleRow) bool { return hide(r.Path) })
	}
	hists := func(rows []store.HistogramRow) []store.HistogramRow {
		return slices.DeleteFunc(slices.Clone(rows), func(r store.HistogramRow) bool { return hide(r.Path) })
	}
	d.cur, d.prev, d.ser = samples(d.cur), samples(d.prev), samples(d.ser)
	if d.timeline != nil {
		d.timeline = samples(d.timeline)
	}
	d.curH, d.prevH, d.serH, d.objH = hists(d.curH), hists(d.prevH), hists(d.serH), hists(d.objH)
	for p := range d.defs {
		if hide(p) {
			delete(d.defs, p)
		}
	}
	return samples(bad), nil
}
