package agent

import (
	"strings"
	"testing"
	"time"
)

// sim runs a controller over intervals, applying its decisions like the
// agent does.
type sim struct {
	t   *testing.T
	c   *Controller
	now time.Time
	on  map[string]bool
}

func newSim(t *testing.T, budget float64) *sim {
	return &sim{t: t, c: &Controller{Budget: budget, Hold: 30 * time.Second, MaxOn: 5 * time.Minute},
		now: time.Unix(1_000_000, 0), on: map[string]bool{}}
}

// step advances 10 s; trouble and cost are per source name.
func (s *sim) step(expandUntil time.Time, base float64, trouble map[string]string, cost map[string]float64, names ...string) []Decision {
	s.now = s.now.Add(10 * time.Second)
	total := base
	var in []Input
	for _, n := range names {
		c := 0.0
		if s.on[n] {
			c = cost[n]
		}
		total += c
		in = append(in, Input{Name: n, Trouble: trouble[n], On: s.on[n], Cost: c})
	}
	ds := s.c.Step(s.now, expandUntil, total, in)
	for _, d := range ds {
		s.on[d.Name] = d.On
	}
	return ds
}

func TestTriggerHoldAndDetach(t *testing.T) {
	s := newSim(t, 0.01)
	none := time.Time{}
	cost := map[string]float64{"q": 0.001}
	if ds := s.step(none, 0.001, nil, cost, "q"); len(ds) != 0 {
		t.Fatalf("attached without trouble: %+v", ds)
	}
	ds := s.step(none, 0.001, map[string]string{"q": "latency/tx/qdisc_to_driver is CRIT"}, cost, "q")
	if len(ds) != 1 || !ds[0].On || !strings.Contains(ds[0].Reason, "qdisc_to_driver") {
		t.Fatalf("trouble did not attach: %+v", ds)
	}
	// Trouble clears: attached for Hold (30 s) more, then detached.
	for i := 0; i < 2; i++ {
		if ds := s.step(none, 0.001, nil, cost, "q"); len(ds) != 0 {
			t.Fatalf("interval %d after trouble: %+v", i, ds)
		}
	}
	ds = s.step(none, 0.001, nil, cost, "q")
	if len(ds) != 1 || ds[0].On {
		t.Fatalf("not detached after the hold: %+v", ds)
	}
}

func TestExpandAttachesUntilItEnds(t *testing.T) {
	s := newSim(t, 0.01)
	until := s.now.Add(25 * time.Second)
	ds := s.step(until, 0, nil, nil, "q", "f")
	if len(ds) != 2 || !ds[0].On || !ds[1].On || !strings.Contains(ds[0].Reason, "expanded") {
		t.Fatalf("expand: %+v", ds)
	}
	s.step(until, 0, nil, nil, "q", "f")
	if ds := s.step(until, 0, nil, nil, "q", "f"); len(ds) != 2 || ds[0].On {
		t.Fatalf("after the expand ended: %+v", ds)
	}
}

func TestMaxOnThenRest(t *testing.T) {
	s := newSim(t, 0.01)
	trouble := map[string]string{"q": "latency/retransmits is WARN"}
	var on, off int
	for i := 0; i < 60; i++ { // 10 minutes of steady trouble
		for _, d := range s.step(time.Time{}, 0, trouble, nil, "q") {
			if d.On {
				on++
			} else {
				off++
				if !strings.Contains(d.Reason, "triggered.max") {
					t.Fatalf("detached for %q", d.Reason)
				}
			}
		}
	}
	// 5 min on, 30 s rest, 5 min on, ...: at least two stretches.
	if on < 2 || off < 1 {
		t.Fatalf("attached %d times, detached %d times in 10 min of trouble", on, off)
	}
}

// Over the budget the most expensive triggered source goes first and stays
// off for the rest period; a source whose last cost would not fit is not
// attached; always-on programs over the budget keep everything off.
func TestBudget(t *testing.T) {
	s := newSim(t, 0.01)
	trouble := map[string]string{"q": "latency is CRIT", "f": "latency is CRIT"}
	cost := map[string]float64{"q": 0.008, "f": 0.002}
	s.step(time.Time{}, 0.001, trouble, cost, "q", "f") // both attach: costs unknown
	if !s.on["q"] || !s.on["f"] {
		t.Fatalf("not attached: %+v", s.on)
	}
	ds := s.step(time.Time{}, 0.001, trouble, cost, "q", "f") // 0.011 > 0.01
	if len(ds) != 1 || ds[0].Name != "q" || ds[0].On || !strings.Contains(ds[0].Reason, "over budget, ") {
		t.Fatalf("shed: %+v", ds)
	}
	if !s.on["f"] {
		t.Fatal("the cheap source was detached too")
	}
	// q's measured cost does not fit beside f: it stays off.
	for i := 0; i < 5; i++ {
		if ds := s.step(time.Time{}, 0.001, trouble, cost, "q", "f"); len(ds) != 0 {
			t.Fatalf("interval %d: %+v", i, ds)
		}
	}
	// Always-on load rises above the budget: f goes too.
	ds = s.step(time.Time{}, 0.02, trouble, cost, "q", "f")
	if len(ds) != 1 || ds[0].Name != "f" || ds[0].On {
		t.Fatalf("shed under always-on load: %+v", ds)
	}
	// Load falls: sources come back as far as their measured costs fit.
	for i := 0; i < 6; i++ {
		s.step(time.Time{}, 0.001, trouble, cost, "q", "f")
		used := 0.001
		for n, on := range s.on {
			if on {
				used += cost[n]
			}
		}
		if used > 0.01 {
			t.Fatalf("interval %d: %+v uses %.3f of a CPU, budget 0.01", i, s.on, used)
		}
	}
	if !s.on["f"] && !s.on["q"] {
		t.Fatalf("nothing came back after the load fell: %+v", s.on)
	}
}

// An always-on source is attached with no trouble or expand and stays past
// MaxOn; over the budget it is detached, saying by how much, rests for
// Hold, and is attached again once its last cost fits.
func TestAlwaysOn(t *testing.T) {
	c := &Controller{Budget: 0.01, Hold: 30 * time.Second, MaxOn: time.Minute}
	now := time.Unix(1_000_000, 0)
	on := false
	step := func(base, cost float64) []Decision {
		now = now.Add(10 * time.Second)
		in := []Input{{Name: "rx", On: on, Always: true}}
		total := base
		if on {
			in[0].Cost = cost
			total += cost
		}
		ds := c.Step(now, time.Time{}, total, in)
		for _, d := range ds {
			on = d.On
		}
		return ds
	}
	if ds := step(0.001, 0.002); len(ds) != 1 || !ds[0].On || ds[0].Reason != "always on" {
		t.Fatalf("not attached: %+v", ds)
	}
	for i := range 12 { // two minutes, twice MaxOn
		if ds := step(0.001, 0.002); len(ds) != 0 {
			t.Fatalf("interval %d: %+v", i, ds)
		}
	}
	ds := step(0.001, 0.031)
	if len(ds) != 1 || ds[0].On || ds[0].Reason != "over budget, 3.2% of a CPU vs 1% (this source 3.1%)" {
		t.Fatalf("over budget: %+v", ds)
	}
	// Resting for Hold (30 s), then its last cost still does not fit.
	for i := range 3 {
		if ds := step(0.001, 0); len(ds) != 0 {
			t.Fatalf("resting, interval %d: %+v", i, ds)
		}
	}
	if ds := step(0.001, 0); len(ds) != 0 || on {
		t.Fatalf("attached although its last cost does not fit: %+v", ds)
	}
	// The rest of the node's programs get cheaper and the budget is
	// raised: its cost fits again.
	c.Budget = 0.05
	if ds := step(0.001, 0.031); len(ds) != 1 || !ds[0].On {
		t.Fatalf("not attached again: %+v", ds)
	}
}
