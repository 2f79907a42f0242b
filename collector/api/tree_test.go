package api

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// flat is a tree node's fields a test compares, keyed by id.
type flat struct {
	value, count       *float64
	state, own, recent string
	recentCount        *float64
	children           []string
	threshold          *store.Threshold
}

func flatten(nodes []*TreeNode, out map[string]flat) {
	for _, n := range nodes {
		f := flat{value: n.Value, count: n.Count, state: n.State, own: n.OwnState, recent: n.RecentState,
			recentCount: n.RecentCount, threshold: n.Threshold}
		for _, c := range n.Children {
			f.children = append(f.children, c.ID)
		}
		out[n.ID] = f
		flatten(n.Children, out)
	}
}

func TestBuildTree(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	newest, older := now.UnixMilli(), now.Add(-10*time.Second).UnixMilli()
	def := &store.Threshold{Warn: 1, Crit: 10, Comparison: "above", HoldIntervals: 1}
	override := &store.Threshold{Warn: 2, Crit: 3, Comparison: "above", HoldIntervals: 1}
	defs := []store.MetricDef{ // sorted by path, as Definitions returns them
		{Path: "latency", Kind: store.KindHistogram},
		{Path: "latency/tx", Kind: store.KindHistogram},
		{Path: "tcp_reset", Kind: store.KindRate, DefaultThreshold: def},
		{Path: "tcp_reset/sent", Kind: store.KindRate},
		{Path: "tcp_reset/sent/no_socket", Kind: store.KindRate, DefaultThreshold: def},
		{Path: "tcp_reset/sent/other", Kind: store.KindRate},
	}
	latest := store.Latest{Time: now, IntervalMS: 10000, Metrics: map[string]store.LatestValue{
		"latency":                  {Value: 5, State: store.StateOK, TimeMS: newest, IntervalMS: 10000},
		"latency/tx":               {Value: 7, State: store.StateWarn, TimeMS: older, IntervalMS: 10000}, // not streamed since
		"tcp_reset":                {Value: 30, State: store.StateOK, TimeMS: newest, IntervalMS: 10000},
		"tcp_reset/sent/no_socket": {Value: 20, State: store.StateCrit, TimeMS: newest, IntervalMS: 10000},
		"tcp_reset/sent/other":     {Value: 5, State: store.StateWarn, TimeMS: older, IntervalMS: 10000},
	}}
	f := func(v float64) *float64 { return &v }
	type want struct {
		value, count *float64
		state, own   string
		children     []string
	}
	cases := []struct {
		name       string
		defs       []store.MetricDef
		latest     store.Latest
		thresholds map[string]*store.Threshold
		recent     map[string]store.Recent
		roots      []string
		want       map[string]want
	}{
		{
			name: "states propagate to the root; a child missing from the newest report is OK, a rate's zero",
			defs: defs, latest: latest,
			roots: []string{"tcp_reset", "latency"}, // raised first
			want: map[string]want{
				"latency":    {value: f(5), state: "ok", own: "ok", children: []string{"latency/tx"}},
				"latency/tx": {value: f(7), state: "ok", own: "ok"}, // last known level, and OK since
				// A rate is per second: 30 over a 10 s interval is 3/s.
				"tcp_reset":                {value: f(3), count: f(30), state: "crit", own: "ok", children: []string{"tcp_reset/sent"}},
				"tcp_reset/sent":           {value: f(0), count: f(0), state: "crit", own: "ok", children: []string{"tcp_reset/sent/no_socket", "tcp_reset/sent/other"}},
				"tcp_reset/sent/no_socket": {value: f(2), count: f(20), state: "crit", own: "crit"},
				"tcp_reset/sent/other":     {value: f(0), count: f(0), state: "ok", own: "ok"},
			},
		},
		{
			name:  "a node that never reported has no values and is OK",
			defs:  defs[2:4],
			roots: []string{"tcp_reset"},
			want: map[string]want{
				"tcp_reset":      {state: "ok", own: "ok", children: []string{"tcp_reset/sent"}},
				"tcp_reset/sent": {state: "ok", own: "ok"},
			},
		},
		{
			name: "an orphan (parent not defined) becomes a root",
			defs: []store.MetricDef{{Path: "drops/nf", Kind: store.KindGauge}},
			latest: store.Latest{Time: now, Metrics: map[string]store.LatestValue{
				"drops/nf": {Value: 1, State: store.StateUnknown, TimeMS: newest}}},
			roots: []string{"drops/nf"},
			want:  map[string]want{"drops/nf": {value: f(1), state: "unknown", own: "unknown"}},
		},
		{
			// A ping root on a node with no target: streamed for its
			// state, with no value — shown as none, not 0 ms — now and
			// after, when it is no longer in the newest report.
			name: "a root streamed without a value has none",
			defs: []store.MetricDef{{Path: "ping", Kind: store.KindGauge}, {Path: "ping/clock", Kind: store.KindGauge}, {Path: "tcp_reset", Kind: store.KindRate}},
			latest: store.Latest{Time: now, IntervalMS: 10000, Metrics: map[string]store.LatestValue{
				"ping":       {Value: 0, State: store.StateUnknown, TimeMS: newest, IntervalMS: 10000, NoValue: true},
				"ping/clock": {Value: 1, State: store.StateOK, TimeMS: older, IntervalMS: 10000},
				"tcp_reset":  {Value: 0, State: store.StateUnknown, TimeMS: older, IntervalMS: 10000, NoValue: true}}},
			roots: []string{"ping", "tcp_reset"},
			want: map[string]want{
				"ping":       {state: "unknown", own: "unknown", children: []string{"ping/clock"}},
				"ping/clock": {value: f(1), state: "ok", own: "ok"},
				"tcp_reset":  {value: f(0), count: f(0), state: "ok", own: "ok"}, // a rate not streamed since: nothing happened
			},
		},
		{
			name: "a histogram interval without samples has no value, never 0",
			defs: []store.MetricDef{{Path: "latency", Kind: store.KindHistogram}, {Path: "latency/rx", Kind: store.KindHistogram}},
			latest: store.Latest{Time: now, IntervalMS: 10000, Metrics: map[string]store.LatestValue{
				"latency":    {Value: 0, State: store.StateOK, TimeMS: newest, IntervalMS: 10000, NoValue: true},
				"latency/rx": {Value: 0, State: store.StateOK, TimeMS: newest, IntervalMS: 10000}}}, // an older agent
			roots: []string{"latency"},
			want: map[string]want{
				"latency":    {state: "ok", own: "ok", children: []string{"latency/rx"}},
				"latency/rx": {state: "ok", own: "ok"},
			},
		},
		{
			name:  "no definitions: an empty list, not null",
			roots: []string{},
			want:  map[string]want{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			roots := BuildTree(c.defs, c.latest, c.thresholds, c.recent)
			if roots == nil {
				t.Fatal("BuildTree returned nil; the API would answer roots: null")
			}
			var ids []string
			for _, r := range roots {
				ids = append(ids, r.ID)
			}
			if !slices.Equal(ids, c.roots) {
				t.Errorf("roots %v, want %v", ids, c.roots)
			}
			got := map[string]flat{}
			flatten(roots, got)
			if len(got) != len(c.want) {
				t.Errorf("%d nodes, want %d", len(got), len(c.want))
			}
			for id, w := range c.want {
				g, ok := got[id]
				if !ok {
					t.Errorf("%s missing", id)
					continue
				}
				if !eqPtr(g.value, w.value) || !eqPtr(g.count, w.count) || g.state != w.state || g.own != w.own || !slices.Equal(g.children, w.children) {
					t.Errorf("%s: value %v count %v state %s own %s children %v; want value %v count %v state %s own %s children %v",
						id, deref(g.value), deref(g.count), g.state, g.own, g.children, deref(w.value), deref(w.count), w.state, w.own, w.children)
				}
			}
		})
	}

	t.Run("thresholds: effective over default, and nil switches one off", func(t *testing.T) {
		roots := BuildTree(defs, latest, map[string]*store.Threshold{"tcp_reset/sent/no_socket": override, "tcp_reset": nil}, nil)
		got := map[string]flat{}
		flatten(roots, got)
		if got["tcp_reset/sent/no_socket"].threshold != override {
			t.Errorf("no_socket threshold %+v, want the override", got["tcp_reset/sent/no_socket"].threshold)
		}
		if got["tcp_reset"].threshold != nil {
			t.Errorf("tcp_reset threshold %+v, want none (switched off)", got["tcp_reset"].threshold)
		}
		if got["latency"].threshold != nil {
			t.Errorf("latency threshold %+v, want none", got["latency"].threshold)
		}
	})

	t.Run("recent window: a rate's increase and the worst state, OK when quiet", func(t *testing.T) {
		recent := map[string]store.Recent{
			"tcp_reset/sent/other": {Sum: 12, Worst: store.StateCrit},
			"latency":              {Sum: 99, Worst: store.StateWarn},
		}
		got := map[string]flat{}
		flatten(BuildTree(defs, latest, nil, recent), got)
		if g := got["tcp_reset/sent/other"]; !eqPtr(g.recentCount, f(12)) || g.recent != "crit" {
			t.Errorf("other: recent_count %v recent_state %s, want 12 crit", deref(g.recentCount), g.recent)
		}
		if g := got["tcp_reset/sent/no_socket"]; !eqPtr(g.recentCount, f(0)) || g.recent != "ok" {
			t.Errorf("no_socket: recent_count %v recent_state %s, want 0 ok", deref(g.recentCount), g.recent)
		}
		if g := got["latency"]; g.recentCount != nil || g.recent != "warn" {
			t.Errorf("latency (histogram): recent_count %v recent_state %s, want none and warn", deref(g.recentCount), g.recent)
		}
		// Without a window (the fleet view) the recent fields are absent.
		raw, _ := json.Marshal(BuildTree(defs, latest, nil, nil))
		var generic []map[string]any
		_ = json.Unmarshal(raw, &generic)
		if _, ok := generic[0]["recent_state"]; ok {
			t.Errorf("recent_state present without a window: %s", raw)
		}
	})
}

func TestSummarize(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	n := store.Node{Name: "web-1", IntervalMS: 10000}
	roots := []store.MetricDef{{Path: "ping", Kind: store.KindGauge}, {Path: "tcp_reset", Kind: store.KindRate}}
	latest := store.Latest{Time: now.Add(-10 * time.Second), IntervalMS: 10000, Metrics: map[string]store.LatestValue{
		"tcp_reset": {Value: 50, State: store.StateWarn, TimeMS: now.Add(-10 * time.Second).UnixMilli(), IntervalMS: 10000}}}
	cases := []struct {
		name      string
		latest    store.Latest
		ok        bool
		now       time.Time
		state     string
		stale     bool
		lastNil   bool
		rootCount int
	}{
		{"reporting: worst root", latest, true, now, "warn", false, false, 2},
		{"three intervals late: stale and unknown", latest, true, now.Add(25 * time.Second), "unknown", true, false, 2},
		{"never reported: unknown, no roots", store.Latest{}, false, now, "unknown", false, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := summarize(n, roots, c.latest, c.ok, true, c.now)
			if s.State != c.state || s.Stale != c.stale || (s.LastReport == nil) != c.lastNil || len(s.Roots) != c.rootCount {
				t.Errorf("state %s stale %v last_report %v roots %d; want %s %v nil=%v %d", s.State, s.Stale, s.LastReport, len(s.Roots), c.state, c.stale, c.lastNil, c.rootCount)
			}
			if s.Labels == nil || s.Capabilities == nil || s.Roots == nil {
				t.Errorf("labels %v capabilities %v roots %v: want empty, never null", s.Labels, s.Capabilities, s.Roots)
			}
			for _, r := range s.Roots {
				if r.Children != nil {
					t.Errorf("root %s has children in the fleet view", r.ID)
				}
			}
		})
	}
}

func eqPtr(a, b *float64) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestNaturalCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"sim-2", "sim-10", -1},
		{"sim-10", "sim-2", 1},
		{"sim-02", "sim-2", 0},
		{"a", "b", -1},
		{"drops", "drops/x", -1},
		{"x9y", "x10a", -1},
		{"", "", 0},
	} {
		if got := NaturalCompare(c.a, c.b); got != c.want {
			t.Errorf("NaturalCompare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Siblings: raised first (CRIT, WARN, UNKNOWN), then OK, by title with
// numbers in order; the agent's own root last whatever its state.
func TestTreeOrder(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := now.UnixMilli()
	defs := []store.MetricDef{
		{Path: "agent", Title: "Agent overhead", Kind: store.KindGauge},
		{Path: "drops", Title: "Drops", Kind: store.KindRate},
		{Path: "ping", Title: "Ping", Kind: store.KindGauge},
		{Path: "ping/t10", Title: "target 10", Kind: store.KindGauge},
		{Path: "ping/t2", Title: "target 2", Kind: store.KindGauge},
		{Path: "ping/t3", Title: "target 3", Kind: store.KindGauge},
		{Path: "tcp_reset", Title: "TCP resets", Kind: store.KindRate},
	}
	latest := store.Latest{Time: now, IntervalMS: 10000, Metrics: map[string]store.LatestValue{
		"agent":     {Value: 20, State: store.StateCrit, TimeMS: ms},
		"ping/t3":   {Value: 9, State: store.StateWarn, TimeMS: ms},
		"tcp_reset": {Value: 9, State: store.StateCrit, TimeMS: ms},
		"drops":     {Value: 0, State: store.StateOK, TimeMS: ms},
	}}
	roots := BuildTree(defs, latest, nil, nil)
	var got []string
	for _, r := range roots {
		got = append(got, r.ID)
	}
	if want := []string{"tcp_reset", "ping", "drops", "agent"}; !slices.Equal(got, want) {
		t.Errorf("roots %v, want %v", got, want)
	}
	got = nil
	for _, c := range roots[1].Children {
		got = append(got, c.ID)
	}
	if want := []string{"ping/t3", "ping/t2", "ping/t10"}; !slices.Equal(got, want) {
		t.Errorf("ping's children %v, want %v", got, want)
	}
}

func TestCustomerText(t *testing.T) {
	in := "Reports wait in the spool (--spool.dir, on disk). They are sent in order. Beyond --buffer.reports the oldest go."
	if got, want := (View{customer: true}).Text(in), "They are sent in order."; got != want {
		t.Errorf("a customer's Text = %q, want %q", got, want)
	}
}
