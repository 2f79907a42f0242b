package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/httpjson"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
)

// NodeSummary is a node as listed in the fleet view.
type NodeSummary struct {
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	State     string            `json:"state"`
	Connected bool              `json:"connected"`
	// ClockOffsetMS is how far the node's clock is ahead of the collector's
	// (null while it has no stream here); ClockSkewed says it is beyond
	// what the collector tolerates without a warning.
	ClockOffsetMS *int64             `json:"clock_offset_ms"`
	ClockSkewed   bool               `json:"clock_skewed"`
	Stale         bool               `json:"stale"`
	LastReport    *time.Time         `json:"last_report"`
	IntervalMS    uint32             `json:"interval_ms"`
	AgentVersion  string             `json:"agent_version"`
	KernelRelease string             `json:"kernel_release"`
	Capabilities  []store.Capability `json:"capabilities"`
	Roots         []*TreeNode        `json:"roots"`
	// Tenant is the node's tenant (collector/tenant), "" for none.
	Tenant string `json:"tenant"`
	// RetiredAt is when the node moved to another tenant: what is shown
	// is what it reported before (only its former tenant sees this).
	RetiredAt *time.Time `json:"retired_at,omitempty"`
	// ClaimedLabels are labels its last Hello claimed against those bound
	// server-side (ignored); staff only.
	ClaimedLabels map[string]string `json:"claimed_labels,omitempty"`
}

// NodeList is the fleet.
type NodeList struct {
	Nodes []NodeSummary `json:"nodes"`
}

// Tree is a node's whole metric tree.
type Tree struct {
	Node       string     `json:"node"`
	Time       *time.Time `json:"time"` // of the newest report; null before the first
	IntervalMS uint32     `json:"interval_ms"`
	WindowS    int        `json:"window_s"`
	// At and From are set when the tree was asked for a past time: the
	// instant it is as of, and where its recent window starts.
	At   *time.Time `json:"at,omitempty"`
	From *time.Time `json:"from,omitempty"`
	// Stale: the node has not reported for a while (or its stream is
	// gone), so the values are its last, not current ones.
	Stale bool        `json:"stale"`
	Roots []*TreeNode `json:"roots"`
}

// Point is one step of a series.
type Point struct {
	Time  time.Time `json:"t"`
	Value *float64  `json:"value"`
	Max   *float64  `json:"max,omitempty"`
	Count *float64  `json:"count,omitempty"`
	State string    `json:"state"`
	// Histograms: percentiles of the step's merged distribution, in unit.
	Percentiles *Percentiles `json:"percentiles,omitempty"`
}

type Percentiles struct {
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Samples uint64  `json:"samples"`
}

// Series is one metric of a node over time.
type Series struct {
	Node   string    `json:"node"`
	Metric string    `json:"metric"`
	Unit   string    `json:"unit"`
	Kind   string    `json:"kind"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	StepMS int64     `json:"step_ms"`
	Points []Point   `json:"points"`
}

// Evidence is one event (a 5-tuple and the like) that explains a metric.
type Evidence struct {
	Time   time.Time         `json:"t"`
	Metric string            `json:"metric"`
	Fields map[string]string `json:"fields"`
	// Counterparts are what other nodes the caller sees said about the
	// same flow (counterparts.go); empty when none did.
	Counterparts []Counterpart `json:"counterparts"`
}

// EventList is a node's newest evidence for a metric and its descendants.
type EventList struct {
	Node   string     `json:"node"`
	Metric string     `json:"metric"`
	Events []Evidence `json:"events"`
}

// clockSkewWarning is the clock offset beyond which a node's view warns:
// its report times, and so its graphs, are off by that much.
const clockSkewWarning = 2 * time.Second

// withClock adds the node's clock offset, known while it has a stream here.
func (a *API) withClock(s NodeSummary) NodeSummary {
	c, ok := a.live.(Clocks)
	if !ok {
		return s
	}
	if s.RetiredAt != nil {
		return s // the name's stream speaks for its current row
	}
	if d, ok := c.ClockOffset(s.Name); ok {
		ms := d.Milliseconds()
		s.ClockOffsetMS, s.ClockSkewed = &ms, d.Abs() > clockSkewWarning
	}
	return s
}

// staffDetail adds what staff see of a node and customers do not: labels
// its agent claimed against the bound ones. A customer's summary loses the
// agent's own root, and its capabilities are what it loses (customer.go).
func staffDetail(ctx context.Context, n store.Node, s NodeSummary) NodeSummary {
	if access.FromContext(ctx).SeesAll() {
		s.ClaimedLabels = n.ClaimedLabels
	}
	if v := ViewOf(ctx); !v.Staff() {
		s.Roots = v.Roots(s.Roots)
		if s.LastReport != nil && !s.Stale {
			worst := store.StateOK // the state of what the customer sees
			for _, r := range s.Roots {
				worst = store.Worse(worst, r.worst)
			}
			s.State = worst.String()
		}
		s.Capabilities = v.Capabilities(s.Capabilities)
	}
	return s
}

// staleAfter is how many missed intervals make a node's newest data stale.
const staleAfter = 3

func summarize(n store.Node, defs []store.MetricDef, latest store.Latest, ok, connected bool, now time.Time) NodeSummary {
	s := NodeSummary{Name: n.Name, Labels: n.Labels, Connected: connected && n.Retired == nil, IntervalMS: n.IntervalMS,
		AgentVersion: n.AgentVersion, KernelRelease: n.KernelRelease, Capabilities: n.Capabilities, Roots: []*TreeNode{},
		Tenant: n.Tenant, RetiredAt: n.Retired}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Capabilities == nil {
		s.Capabilities = []store.Capability{}
	}
	worst := store.StateUnknown
	if ok {
		t := latest.Time.UTC()
		s.LastReport = &t
		iv := time.Duration(max(latest.IntervalMS, 1)) * time.Millisecond
		s.Stale = now.Sub(latest.Time) > staleAfter*iv
		s.Roots = BuildTree(defs, latest, nil, nil)
		worst = store.StateOK
		for _, r := range s.Roots {
			r.Children = nil // the fleet view shows roots only
			worst = store.Worse(worst, r.worst)
		}
		if s.Stale {
			worst = store.StateUnknown
		}
	}
	s.State = worst.String()
	return s
}

// node looks up the route's {node} among the nodes the caller sees.
func (a *API) node(r *http.Request) (store.Node, error) {
	name, err := NodeParam(r)
	if err != nil {
		return store.Node{}, err
	}
	return a.q.NodeByNameIn(r.Context(), Scope(r), name)
}

// ListNodes serves GET /nodes: every node the caller sees, with its roots.
func (a *API) ListNodes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	scope := Scope(r)
	nodes, err := a.q.NodesIn(ctx, scope)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	roots, err := a.q.RootDefinitionsIn(ctx, scope)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	latest, err := a.q.LatestRootsIn(ctx, scope)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	now := a.now()
	out := NodeList{Nodes: make([]NodeSummary, 0, len(nodes))}
	for _, n := range nodes {
		l, ok := latest[n.ID]
		out.Nodes = append(out.Nodes, a.withClock(staffDetail(ctx, n, summarize(n, roots[n.ID], l, ok, a.live.Connected(n.Name), now))))
	}
	httpjson.Write(w, http.StatusOK, out)
}

// nodeState is what the node and tree views read of one node: the node
// (scoped to the caller), its definitions and its latest values.
type nodeState struct {
	node     store.Node
	defs     []store.MetricDef
	latest   store.Latest
	reported bool // latest holds a report
}

func (a *API) nodeState(r *http.Request) (nodeState, error) {
	var st nodeState
	n, err := a.node(r)
	if err != nil {
		return st, err
	}
	st.node = n
	if st.defs, err = a.q.Definitions(r.Context(), n.ID); err != nil {
		return st, err
	}
	if st.defs, err = a.withoutForeignPing(r.Context(), Scope(r), st.defs); err != nil {
		return st, err
	}
	st.latest, st.reported, err = a.q.Latest(r.Context(), n.ID)
	return st, err
}

// GetNode serves GET /nodes/{node}: one node as the fleet view shows it.
func (a *API) GetNode(w http.ResponseWriter, r *http.Request) {
	st, err := a.nodeState(r)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	var rootDefs []store.MetricDef
	for _, d := range st.defs {
		if schema.Root(d.Path) == d.Path {
			rootDefs = append(rootDefs, d)
		}
	}
	httpjson.Write(w, http.StatusOK, a.withClock(staffDetail(r.Context(), st.node,
		summarize(st.node, rootDefs, st.latest, st.reported, a.live.Connected(st.node.Name), a.now()))))
}

// GetTree serves GET /nodes/{node}/tree: live, or as of ?at= (with the
// recent window before it) or over ?from=&to= (as of to), read from that
// time's rollups (treeat.go).
func (a *API) GetTree(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	window, err := parseWindow(q.Get("window"))
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	now := a.now()
	tt, err := parseTreeTime(q, window, now)
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	st, err := a.nodeState(r)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	n, defs, l, ok := st.node, st.defs, st.latest, st.reported
	var thresholds map[string]*store.Threshold
	if a.thresholds != nil {
		if thresholds, err = a.thresholds.Thresholds(ctx, n, defs); err != nil {
			httpjson.WriteError(w, r, err, a.log)
			return
		}
	}
	var recent map[string]store.Recent
	if tt.Past {
		l, ok, recent, err = a.pastTree(ctx, n, defs, tt)
		window = tt.At.Sub(tt.From)
	} else {
		recent, err = a.q.RecentByMetric(ctx, n.ID, now.Add(-window))
	}
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	out := Tree{Node: n.Name, IntervalMS: n.IntervalMS, WindowS: int(window.Seconds()),
		Roots: BuildTree(defs, l, thresholds, recent)}
	// What the agent says of its triggered sources is now; a past tree
	// shows the values of its time only.
	if !tt.Past {
		triggered, err := store.Triggered(ctx, a.q, n.ID, a.now())
		if err != nil {
			httpjson.WriteError(w, r, err, a.log)
			return
		}
		noteTriggered(out.Roots, triggered)
	}
	if ok {
		t := l.Time.UTC()
		out.Time = &t
		iv := time.Duration(max(l.IntervalMS, n.IntervalMS, 1)) * time.Millisecond
		// Live, the newest values are stale when the node stopped
		// reporting, as the fleet view says (summarize); its stream may be
		// on another collector, so that this one has none proves nothing.
		// A past tree is as of its time, never stale.
		out.Stale = !tt.Past && now.Sub(l.Time) > staleAfter*iv
	}
	if tt.Past {
		at, from := tt.At.UTC(), tt.From.UTC()
		out.At, out.From = &at, &from
	}
	out.Roots = ViewOf(ctx).Roots(out.Roots)
	httpjson.Write(w, http.StatusOK, out)
}

// metricWindow reads the metric and from/to parameters that the series and
// events routes share.
func (a *API) metricWindow(r *http.Request) (metric string, from, to time.Time, err error) {
	if metric, err = metricParam(r); err != nil {
		return "", from, to, err
	}
	q := r.URL.Query()
	from, to, err = timeRange(q.Get("from"), q.Get("to"), defaultRange, a.now())
	return metric, from, to, err
}

// GetSeries serves GET /nodes/{node}/series: one metric over time.
func (a *API) GetSeries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	metric, from, to, err := a.metricWindow(r)
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	out, err := a.seriesOf(r, []string{metric}, from, to, q.Get("step"))
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	httpjson.Write(w, http.StatusOK, out[0])
}

// maxBatchMetrics bounds the metrics of one batch series request: a tree
// shows about a hundred rows with every branch open, asked in pages of this.
const maxBatchMetrics = 64

// SeriesBatch is several metrics of a node over one window and step.
type SeriesBatch struct {
	Node   string    `json:"node"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	StepMS int64     `json:"step_ms"`
	Series []Series  `json:"series"`
}

// GetSeriesBatch serves GET /nodes/{node}/series/batch: up to
// maxBatchMetrics metrics (?metric= repeated) over one window, as the
// tree's trend lines need them: one request instead of one per row. A
// metric the node does not have is left out, not an error (the tree may
// have changed since the client read it).
func (a *API) GetSeriesBatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	metrics := q["metric"]
	switch {
	case len(metrics) == 0:
		httpjson.WriteError(w, r, invalid("query parameter metric is required (repeat it for each metric, at most %d)", maxBatchMetrics), nil)
		return
	case len(metrics) > maxBatchMetrics:
		httpjson.WriteError(w, r, invalid("%d metrics asked; at most %d per request", len(metrics), maxBatchMetrics), nil)
		return
	}
	seen := map[string]bool{}
	uniq := metrics[:0:0]
	for _, m := range metrics {
		if !schema.ValidID(m) {
			httpjson.WriteError(w, r, invalid("metric %s is not a metric id like tcp_reset/sent/no_socket", Quote(m)), nil)
			return
		}
		if !seen[m] {
			seen[m] = true
			uniq = append(uniq, m)
		}
	}
	from, to, err := timeRange(q.Get("from"), q.Get("to"), defaultRange, a.now())
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	out, err := a.seriesOf(r, uniq, from, to, q.Get("step"))
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	b := SeriesBatch{Series: out}
	if len(out) > 0 {
		b.Node, b.From, b.To, b.StepMS = out[0].Node, out[0].From, out[0].To, out[0].StepMS
	} else if n, err := a.node(r); err == nil {
		b.Node, b.From, b.To = n.Name, from.UTC(), to.UTC()
	}
	httpjson.Write(w, http.StatusOK, b)
}

// seriesOf computes metrics of the route's node over [from, to). With one
// metric, one the node does not have is not found; with several, it is left
// out. Staff-only metrics (customer.go) are unknown to a customer.
func (a *API) seriesOf(r *http.Request, metrics []string, from, to time.Time, stepS string) ([]Series, error) {
	ctx := r.Context()
	n, err := a.node(r)
	if err != nil {
		return nil, err
	}
	step, err := parseStep(stepS, time.Duration(n.IntervalMS)*time.Millisecond, from, to)
	if err != nil {
		return nil, err
	}
	defs, err := a.q.Definitions(ctx, n.ID)
	if err != nil {
		return nil, err
	}
	if defs, err = a.withoutForeignPing(ctx, Scope(r), defs); err != nil {
		return nil, err
	}
	byPath := make(map[string]store.MetricDef, len(defs))
	for _, d := range defs {
		if ViewOf(ctx).Metric(d.Path) {
			byPath[d.Path] = d
		}
	}
	var want []store.MetricDef
	for _, m := range metrics {
		if d, ok := byPath[m]; ok {
			want = append(want, d)
		} else if len(metrics) == 1 {
			return nil, fmt.Errorf("metric %q on node %s: %w", m, n.Name, store.ErrNotFound)
		}
	}
	out := make([]Series, 0, len(want))
	if len(want) == 0 {
		return out, nil
	}
	points := map[string][]Point{}
	if res := seriesRollup(step); res != 0 {
		// Steps start at a boundary of the rollups they are made of: the
		// first at or after from, so that none begins before what was
		// asked (the UI places points from its own from).
		if r := time.Duration(res) * time.Second; !from.Truncate(r).Equal(from) {
			from = from.Truncate(r).Add(r)
		}
		points, err = a.rollupPoints(ctx, n, want, from, to, step, res)
	} else {
		for _, d := range want {
			if points[d.Path], err = a.rawPoints(ctx, n, d, from, to, step); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for _, d := range want {
		ps := points[d.Path]
		if ps == nil {
			ps = []Point{}
		}
		out = append(out, Series{Node: n.Name, Metric: d.Path, Unit: d.Unit, Kind: d.Kind.String(),
			From: from.UTC(), To: to.UTC(), StepMS: step.Milliseconds(), Points: ps})
	}
	return out, nil
}

// GetEvents serves GET /nodes/{node}/events: the newest evidence.
func (a *API) GetEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	metric, from, to, err := a.metricWindow(r)
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		httpjson.WriteError(w, r, err, nil)
		return
	}
	n, err := a.node(r)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	// A metric the caller may not see has no evidence, exactly as one the
	// node does not have: an empty list, not a 404 that would say it exists.
	view := ViewOf(ctx)
	var events []store.StoredEvent
	if view.Metric(metric) {
		if events, err = a.ownerEvents(ctx, n, metric, from, to, limit); err != nil {
			httpjson.WriteError(w, r, err, a.log)
			return
		}
	}
	events = slices.DeleteFunc(events, func(e store.StoredEvent) bool { return !view.Metric(e.Metric) })
	if events, err = a.withoutForeignEvents(ctx, Scope(r), events); err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	others, err := a.counterparts(ctx, Scope(r), n, events)
	if err != nil {
		httpjson.WriteError(w, r, err, a.log)
		return
	}
	out := EventList{Node: n.Name, Metric: metric, Events: make([]Evidence, 0, len(events))}
	for i, e := range events {
		f := e.Fields
		if f == nil {
			f = map[string]string{}
		}
		f = view.Fields(f)
		// The other nodes' fields as the caller sees them too.
		cs := make([]Counterpart, 0, len(others[i]))
		for _, c := range others[i] {
			if view.Metric(c.Metric) {
				c.Fields = view.Fields(c.Fields)
				cs = append(cs, c)
			}
		}
		out.Events = append(out.Events, Evidence{e.Time.UTC(), e.Metric, f, cs})
	}
	httpjson.Write(w, http.StatusOK, out)
}

// ownerEvents is the evidence of metric and its descendants, and, for an
// owner child (drops/not_specified/pod:shop.cart-7d9f), its parent's events
// whose namespace that owner had: the agent records evidence on the parent
// and names the owner in each event (owner_id), so that the child's own
// list is not empty. Both are newest first, at most limit together.
func (a *API) ownerEvents(ctx context.Context, n store.Node, metric string, from, to time.Time, limit int) ([]store.StoredEvent, error) {
	events, err := a.q.Events(ctx, n.ID, metric, from, to, limit)
	if err != nil {
		return nil, err
	}
	parent, seg := schema.Parent(metric), metric[strings.LastIndexByte(metric, '/')+1:]
	if parent == "" || !ownerSegment(seg) {
		return events, nil
	}
	// The parent's list holds every owner's events: read as many as may
	// be asked, and keep this owner's.
	all, err := a.q.Events(ctx, n.ID, parent, from, to, maxLimit)
	if err != nil {
		return nil, err
	}
	for _, e := range all {
		if e.Metric == parent && e.Fields["owner_id"] == seg {
			events = append(events, e)
		}
	}
	slices.SortStableFunc(events, func(x, y store.StoredEvent) int { return y.Time.Compare(x.Time) })
	if len(events) > limit {
		events = events[:limit]
	}
	return events, nil
}

// ownerSegment reports whether a metric id's last segment names an owner
// (agent/owner.Owner.ID: a kind prefix, or host).
func ownerSegment(seg string) bool {
	return seg == "host" || strings.Contains(seg, ":")
}

// seriesRollup is the rollup resolution a series of this step is read
// from: the coarsest whose buckets the step is made of, 0 for raw reports
// (steps under a minute, or not a whole number of minutes). A month of a
// node is 259,200 reports at 10 s and 720 hour rollups per metric.
func seriesRollup(step time.Duration) int32 {
	for _, res := range []int32{store.RollupHour, store.RollupMinute} {
		if step%(time.Duration(res)*time.Second) == 0 {
			return res
		}
	}
	return 0
}

// rawPoints computes a series from raw reports.
func (a *API) rawPoints(ctx context.Context, n store.Node, def store.MetricDef, from, to time.Time, step time.Duration) ([]Point, error) {
	buckets, err := a.q.Series(ctx, n.ID, def.Path, from, to, step)
	if err != nil {
		return nil, err
	}
	points := make([]Point, 0, len(buckets))
	for _, b := range buckets {
		points = append(points, point(def, b))
	}
	if def.Kind != store.KindHistogram {
		return points, nil
	}
	hs, err := a.q.HistogramSeries(ctx, n.ID, def.Path, from, to, step)
	if err != nil {
		return nil, err
	}
	byStart := make(map[int64]*Percentiles, len(hs))
	for _, hb := range hs {
		if pc := percentiles(hb.Hist, def.Scale); pc != nil {
			byStart[hb.Start.UnixNano()] = pc
		}
	}
	for i := range points {
		points[i].Percentiles = byStart[points[i].Time.UnixNano()]
		noSamples(def, &points[i])
	}
	return points, nil
}

// rollupPoints computes series from rollups of resolution res, whose
// buckets make up each step exactly, for several metrics in one read. A
// rollup counts only the reports that carried the metric; how many the node
// sent (what a rate is divided by, as the raw series does) is its root's
// count, which every report carries.
func (a *API) rollupPoints(ctx context.Context, n store.Node, defs []store.MetricDef, from, to time.Time, step time.Duration, res int32) (map[string][]Point, error) {
	wanted := map[string]bool{}
	for _, d := range defs {
		wanted[d.Path] = true
		wanted[schema.Root(d.Path)] = true
	}
	samples, hists, err := a.q.ReadRollups(ctx, store.RollupQuery{NodeIDs: []int32{n.ID}, Res: res, From: from, To: to,
		Match: func(p string) bool { return wanted[p] }})
	if err != nil {
		return nil, err
	}
	type acc struct {
		own  store.SampleAgg
		hist *loglinear.Histogram
		seen bool
	}
	type key struct {
		path string
		at   int64
	}
	steps := map[key]*acc{}
	stepOf := func(ts time.Time) int64 { return from.Add(ts.Sub(from) / step * step).UnixNano() }
	at := func(path string, ts time.Time) *acc {
		k := key{path, stepOf(ts)}
		s := steps[k]
		if s == nil {
			s = &acc{}
			steps[k] = s
		}
		return s
	}
	for _, r := range samples {
		s := at(r.Path, r.TS)
		s.own.Merge(r.SampleAgg)
		s.seen = true
	}
	for _, r := range hists {
		s := at(r.Path, r.TS)
		if s.hist == nil {
			s.hist = loglinear.New()
		}
		for i, b := range r.Index {
			s.hist.Counts[uint32(b)] += uint64(r.Counts[i])
		}
		s.hist.Count += r.Count
		s.hist.Sum += r.Sum
		// A root that is itself a histogram has no sample rows: its
		// histogram says the node reported.
		s.seen = true
	}
	iv := int64(n.IntervalMS)
	out := make(map[string][]Point, len(defs))
	for _, def := range defs {
		root := schema.Root(def.Path)
		var starts []int64
		for k, s := range steps {
			// A step is there when the node reported: its root was.
			if k.path == root && s.seen {
				starts = append(starts, k.at)
			}
		}
		slices.Sort(starts)
		points := make([]Point, 0, len(starts))
		for _, k := range starts {
			own, rt := steps[key{def.Path, k}], steps[key{root, k}]
			var o store.SampleAgg
			var h *loglinear.Histogram
			if own != nil {
				o, h = own.own, own.hist
			}
			reports := max(rt.own.N, o.N)
			b := store.Bucket{Start: time.Unix(0, k), Sum: o.Sum, Max: o.Max, Present: int(o.N), Reports: int(reports),
				IntervalMS: reports * iv, Worst: aggState(o, iv)}
			p := point(def, b)
			if h != nil {
				p.Percentiles = percentiles(h, def.Scale)
			}
			noSamples(def, &p)
			points = append(points, p)
		}
		out[def.Path] = points
	}
	return out, nil
}

// noSamples clears a histogram step's value when the step had no samples:
// the agent stores 0 for an interval with nothing to measure, and 0 ms would
// read as a fast network. No value is null, never 0.
func noSamples(def store.MetricDef, p *Point) {
	if def.Kind == store.KindHistogram && p.Percentiles == nil {
		p.Value, p.Max = nil, nil
	}
}

// point is one step of a series as the API shows it.
func point(def store.MetricDef, b store.Bucket) Point {
	p := Point{Time: b.Start.UTC(), State: b.Worst.String()}
	switch def.Kind {
	case store.KindRate:
		p.Value = ptr(b.Sum / (float64(max(b.IntervalMS, 1)) / 1000))
		p.Count = ptr(b.Sum)
	default:
		if b.Present > 0 {
			p.Value, p.Max = ptr(b.Sum/float64(b.Present)), ptr(b.Max)
		}
	}
	// A step without a value is OK unless its reports were in breach
	// without one (a ping root whose every echo was lost is CRIT, no value).
	if b.Present == 0 && b.Worst != store.StateWarn && b.Worst != store.StateCrit {
		p.State = store.StateOK.String()
	}
	return p
}

// percentiles of a step's merged distribution, nil when it has none.
func percentiles(h *loglinear.Histogram, scale float64) *Percentiles {
	scale = max(scale, 1)
	pc := &Percentiles{P50: h.Quantile(0.5) / scale, P90: h.Quantile(0.9) / scale,
		P99: h.Quantile(0.99) / scale, Max: h.Max() / scale, Samples: h.Count}
	// An empty step (or one stored before histograms were checked)
	// has no percentiles; NaN is not JSON.
	if h.Count == 0 || !finite(pc.P50, pc.P90, pc.P99, pc.Max) {
		return nil
	}
	return pc
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}
