package tree

import (
	"slices"
	"testing"

	"github.com/nbs-project/nbs/agent/catalog"
)

func newTree() *Tree {
	t := New()
	t.Define(
		catalog.Metric{ID: "r", Kind: catalog.Rate, Threshold: &catalog.Threshold{Warn: 100, Crit: 1000}},
		catalog.Metric{ID: "r/a", Kind: catalog.Rate, Threshold: &catalog.Threshold{Warn: 1, Crit: 10, Hold: 2}},
		catalog.Metric{ID: "r/a/x", Kind: catalog.Rate},
		catalog.Metric{ID: "r/b", Kind: catalog.Gauge, Threshold: &catalog.Threshold{Warn: 5, Crit: 1, Below: true}},
		catalog.Metric{ID: "r/c", Kind: catalog.Rate, Threshold: &catalog.Threshold{Warn: 3, Crit: 10, Baseline: 5}},
	)
	return t
}

// Hold delays a rise for that many consecutive intervals; a fall is immediate.
func TestHoldAndPropagation(t *testing.T) {
	tr := newTree()
	steps := []struct {
		a, b        float64
		wantA, root State
	}{
		{0, 10, OK, OK},
		{20, 10, OK, OK},     // crit level, first interval: held
		{20, 10, Crit, Crit}, // second consecutive: raised, and the root follows
		{5, 10, Warn, Warn},  // falls at once to the current level
		{0, 3, OK, Warn},     // b below its warn level (comparison below)
		{0, 0.5, OK, Crit},   // b below crit
	}
	for i, s := range steps {
		res := tr.Evaluate(map[string]float64{"r": 0, "r/a": s.a, "r/a/x": 0, "r/b": s.b, "r/c": 0}, nil)
		if res.Own["r/a"] != s.wantA || res.State["r"] != s.root {
			t.Fatalf("step %d: r/a %v root %v; want %v and %v", i, res.Own["r/a"], res.State["r"], s.wantA, s.root)
		}
		if res.Own["r"] != OK {
			t.Fatalf("step %d: root's own state %v; want OK (only its children are raised)", i, res.Own["r"])
		}
	}
}

func TestMissingValueIsUnknownAndSignalsUp(t *testing.T) {
	tr := newTree()
	res := tr.Evaluate(map[string]float64{"r": 0, "r/a": 0, "r/b": 10, "r/c": 0}, nil)
	if res.Own["r/a/x"] != Unknown || res.State["r/a"] != Unknown || res.State["r"] != Unknown {
		t.Fatalf("states %v; want r/a/x, r/a and r UNKNOWN", res.State)
	}
}

// A baseline threshold judges against the metric's own moving median and
// says nothing until it has history.
func TestBaselineThreshold(t *testing.T) {
	tr := newTree()
	eval := func(c float64) State {
		return tr.Evaluate(map[string]float64{"r": 0, "r/a": 0, "r/a/x": 0, "r/b": 10, "r/c": c}, nil).Own["r/c"]
	}
	if s := eval(1000); s != OK {
		t.Fatalf("first interval, no baseline: %v, want OK", s)
	}
	for range 5 {
		eval(10)
	}
	cases := []struct {
		v    float64
		want State
	}{{20, OK}, {30, Warn}, {100, Crit}, {10, OK}}
	for _, c := range cases {
		if got := eval(c.v); got != c.want {
			t.Errorf("value %v against a median of ~10: %v, want %v", c.v, got, c.want)
		}
	}
}

// Below its floor a baseline threshold raises nothing, however small the
// baseline: 4x a 1 µs median is still 4 µs.
func TestBaselineFloor(t *testing.T) {
	tr := New()
	tr.Define(catalog.Metric{ID: "rtt", Kind: catalog.Gauge, Threshold: &catalog.Threshold{Warn: 3, Crit: 10, Baseline: 10, Floor: 1}})
	for range 10 {
		tr.Evaluate(map[string]float64{"rtt": 0.001}, nil)
	}
	cases := []struct {
		v    float64
		want State
	}{{0.5, OK}, {0.9, OK}, {5, Crit}}
	for _, c := range cases {
		if got := tr.Evaluate(map[string]float64{"rtt": c.v}, nil).Own["rtt"]; got != c.want {
			t.Errorf("%v ms against a 0.001 ms median with a 1 ms floor: %v, want %v", c.v, got, c.want)
		}
	}
}

func TestOverridesAndDisable(t *testing.T) {
	tr := newTree()
	tr.SetThresholds(map[string]catalog.Threshold{"r/a/x": {Warn: 1, Crit: 2}}, []string{"r/b"})
	res := tr.Evaluate(map[string]float64{"r": 0, "r/a": 0, "r/a/x": 5, "r/b": 0, "r/c": 0}, nil)
	if res.Own["r/a/x"] != Crit {
		t.Errorf("override: r/a/x %v, want CRIT", res.Own["r/a/x"])
	}
	if res.Own["r/b"] != OK {
		t.Errorf("disabled threshold: r/b %v, want OK", res.Own["r/b"])
	}
	if tr.Effective("r/b") != nil || tr.Effective("r/a").Crit != 10 {
		t.Errorf("effective thresholds wrong: r/b %v, r/a %v", tr.Effective("r/b"), tr.Effective("r/a"))
	}
}

func TestSelectStreamsRootsAndWhatMatters(t *testing.T) {
	cases := []struct {
		name      string
		values    map[string]float64
		increases map[string]float64
		full      bool
		want      []string
	}{
		{"healthy: roots only", map[string]float64{"r": 0, "r/a": 0, "r/a/x": 0, "r/b": 10, "r/c": 0}, nil, false, []string{"r"}},
		// r/c is judged against its baseline: healthy, it is not streamed
		// however far from zero (snapshots carry it).
		{"healthy, baselined not zero", map[string]float64{"r": 0, "r/a": 0, "r/a/x": 0, "r/b": 10, "r/c": 1.5}, nil, false, []string{"r"}},
		{"non-zero child with its ancestors", map[string]float64{"r": 0, "r/a": 0, "r/a/x": 0.5, "r/b": 10, "r/c": 0},
			map[string]float64{"r/a/x": 5}, false, []string{"r", "r/a", "r/a/x"}},
		{"non-OK child", map[string]float64{"r": 0, "r/a": 0, "r/a/x": 0, "r/b": 0, "r/c": 0}, nil, false, []string{"r", "r/b"}},
		{"snapshot", map[string]float64{"r": 0, "r/a": 0, "r/a/x": 0, "r/b": 10, "r/c": 0}, nil, true, []string{"r", "r/a", "r/a/x", "r/b", "r/c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTree()
			got := tr.Select(tr.Evaluate(c.values, nil), c.increases, c.full)
			if !slices.Equal(got, c.want) {
				t.Errorf("Select = %v, want %v", got, c.want)
			}
		})
	}
}

func TestDefineReturnsOnlyNewMetrics(t *testing.T) {
	tr := newTree()
	added := tr.Define(catalog.Metric{ID: "r"}, catalog.Metric{ID: "r/d"})
	if len(added) != 1 || added[0].ID != "r/d" {
		t.Fatalf("Define added %v, want only r/d", added)
	}
	ids := []string{}
	for _, m := range tr.Metrics() {
		ids = append(ids, m.ID)
	}
	if !slices.IsSorted(ids) {
		t.Errorf("Metrics() not parents-first: %v", ids)
	}
}

// An idle metric (nothing to measure) has no value yet is OK; a missing one
// is UNKNOWN.
func TestIdleIsOKWithoutValue(t *testing.T) {
	tr := New()
	tr.Define(catalog.Metric{ID: "r", Kind: catalog.Gauge}, catalog.Metric{ID: "r/a", Kind: catalog.Gauge})
	res := tr.Evaluate(map[string]float64{"r/a": 1}, map[string]bool{"r": true})
	if _, ok := res.Values["r"]; ok || res.Own["r"] != OK || res.State["r"] != OK {
		t.Fatalf("idle root: value present %v, own %v, state %v; want no value and OK", ok, res.Own["r"], res.State["r"])
	}
	res = tr.Evaluate(map[string]float64{"r/a": 1}, nil)
	if res.Own["r"] != Unknown {
		t.Fatalf("missing root: %v, want UNKNOWN", res.Own["r"])
	}
}

// A baseline is of the intervals not in breach: a breach does not raise
// the threshold it is judged against (so the state and the collector's
// "median from before the breach" agree), until it has lasted
// catalog.BaselineAdopt windows, when its level becomes the baseline.
func TestBaselineDuringBreach(t *testing.T) {
	const window = 10
	thr := &catalog.Threshold{Warn: 3, Crit: 10, Baseline: window}
	type run struct {
		v     float64
		n     int   // intervals of v
		want  State // the metric's own state at each of them
		child float64
	}
	adopt := catalog.BaselineAdopt * window
	for _, c := range []struct {
		name  string
		hold  uint32
		steps []run
	}{
		{"a long breach stays raised against the median from before it", 0, []run{
			{10, window, OK, 0}, {50, adopt - 1, Warn, 0}, {10, 1, OK, 0}, {35, 1, Warn, 0}}},
		{"a breach as long as BaselineAdopt windows becomes the baseline", 0, []run{
			{10, window, OK, 0}, {50, adopt, Warn, 0}, {50, 3, OK, 0}, {10, 1, OK, 0}, {150, 1, Warn, 0}}},
		{"a short breach leaves the baseline as it was", 0, []run{
			// Half a window of 100: with it in the baseline the median
			// would be 55 and 35 would be OK.
			{10, window, OK, 0}, {100, window / 2, Crit, 0}, {10, 2, OK, 0}, {35, 1, Warn, 0}}},
		{"a new breach starts its count afresh", 0, []run{
			{10, window, OK, 0}, {50, adopt - 1, Warn, 0}, {10, 1, OK, 0}, {50, adopt - 1, Warn, 0}}},
		{"held values count as not in breach, as the collector reads them stored OK", 3, []run{
			// Two held intervals of 1000 enter the baseline (state OK), too
			// few of ten to move its median.
			{10, window, OK, 0}, {1000, 2, OK, 0}, {1000, 5, Crit, 0}, {10, 1, OK, 0}, {35, 2, OK, 0}, {35, 1, Warn, 0}}},
		{"a raised child freezes the baseline; the metric is not in breach itself", 0, []run{
			// While the child is CRIT, 25 is OK (below 3x 10) but kept out:
			// with ten of them in, 35 would be OK against a median of 25.
			{10, window, OK, 0}, {25, window, OK, 5}, {35, 1, Warn, 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := New()
			thr := *thr
			thr.Hold = c.hold
			tr.Define(catalog.Metric{ID: "rtt", Kind: catalog.Gauge, Threshold: &thr},
				catalog.Metric{ID: "rtt/loss", Kind: catalog.Gauge, Threshold: &catalog.Threshold{Warn: 1, Crit: 2}})
			i := 0
			for _, s := range c.steps {
				for k := range s.n {
					i++
					res := tr.Evaluate(map[string]float64{"rtt": s.v, "rtt/loss": s.child}, nil)
					if got := res.Own["rtt"]; got != s.want {
						t.Fatalf("interval %d (%v, %d of %d): %v, want %v", i, s.v, k+1, s.n, got, s.want)
					}
				}
			}
		})
	}
}
