package alert

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

const (
	ok   = store.StateOK
	warn = store.StateWarn
	crit = store.StateCrit
)

func smp(path string, v float64, s store.State) Sample { return Sample{Path: path, Value: v, State: s} }

// roots is a healthy tcp_reset and latency, the way an agent always sends roots.
func roots(resetState store.State, extra ...Sample) []Sample {
	return append([]Sample{smp("tcp_reset", 0, resetState), smp("latency", 0, ok)}, extra...)
}

func rootCrit() Rule {
	return Rule{ID: 1, Name: "NBSRootCritical", Kind: KindNode, Metric: "*", State: "crit", ForIntervals: 2, Severity: "critical", Enabled: true}
}

// describeChanges renders changes as "kind:metric[>child]" for comparison.
func describeChanges(cs []Change) []string {
	out := []string{}
	for _, c := range cs {
		s := c.Kind.String() + ":" + c.Inst.Metric
		if c.Inst.Kind == KindGroup {
			s = c.Kind.String() + ":" + c.Inst.Fingerprint
		}
		if c.Kind == ChangeFired && c.Inst.Child != c.Inst.Metric && c.Inst.Kind == KindNode {
			s += ">" + c.Inst.Child
		}
		out = append(out, s)
	}
	return out
}

type step struct {
	at      float64 // seconds after t0 (report time)
	node    string  // default "web-1"
	samples []Sample
	want    []string
}

func TestAlertEngineNodeRules(t *testing.T) {
	cases := []struct {
		name  string
		rules []Rule
		steps []step
	}{
		{"fires on the second CRIT report and resolves on the first OK one", []Rule{rootCrit()}, []step{
			{at: 1, samples: roots(ok), want: []string{}},
			{at: 2, samples: roots(crit, smp("tcp_reset/sent", 200, crit), smp("tcp_reset/sent/no_socket", 200, crit)), want: []string{"pending:tcp_reset"}},
			{at: 3, samples: roots(crit, smp("tcp_reset/sent", 200, crit), smp("tcp_reset/sent/no_socket", 200, crit)), want: []string{"fired:tcp_reset>tcp_reset/sent/no_socket"}},
			{at: 4, samples: roots(crit, smp("tcp_reset/sent/no_socket", 200, crit)), want: []string{}},
			{at: 5, samples: roots(ok), want: []string{"resolved:tcp_reset"}},
			{at: 6, samples: roots(ok), want: []string{}},
		}},
		{"a breach shorter than the hold never pages", []Rule{rootCrit()}, []step{
			{at: 1, samples: roots(crit), want: []string{"pending:tcp_reset"}},
			{at: 2, samples: roots(warn), want: []string{"cleared:tcp_reset"}},
			{at: 3, samples: roots(crit), want: []string{"pending:tcp_reset"}},
			{at: 4, samples: roots(ok), want: []string{"cleared:tcp_reset"}},
		}},
		{"WARN does not match a CRIT rule", []Rule{rootCrit()}, []step{
			{at: 1, samples: roots(warn), want: []string{}},
			{at: 2, samples: roots(warn), want: []string{}},
		}},
		{"a WARN rule matches CRIT too", []Rule{{ID: 2, Name: "W", Kind: KindNode, Metric: "tcp_reset", State: "warn", ForIntervals: 1, Severity: "warning", Enabled: true}}, []step{
			{at: 1, samples: roots(crit), want: []string{"fired:tcp_reset"}},
			{at: 2, samples: roots(warn), want: []string{}},
			{at: 3, samples: roots(ok), want: []string{"resolved:tcp_reset"}},
		}},
		{"for_seconds 3 needs three one-second reports", []Rule{{ID: 3, Name: "S", Kind: KindNode, Metric: "*", State: "crit", ForSeconds: 3, Severity: "critical", Enabled: true}}, []step{
			{at: 1, samples: roots(crit), want: []string{"pending:tcp_reset"}},
			{at: 2, samples: roots(crit), want: []string{}},
			{at: 2.998, samples: roots(crit), want: []string{"fired:tcp_reset"}}, // jitter within a tenth of an interval
		}},
		{"a gap in the reports restarts a pending breach", []Rule{rootCrit()}, []step{
			{at: 1, samples: roots(crit), want: []string{"pending:tcp_reset"}},
			{at: 6, samples: roots(crit), want: []string{"pending:tcp_reset"}},
			{at: 7, samples: roots(crit), want: []string{"fired:tcp_reset"}},
		}},
		{"reports at or before the watermark change nothing", []Rule{rootCrit()}, []step{
			{at: 1, samples: roots(crit), want: []string{"pending:tcp_reset"}},
			{at: 2, samples: roots(crit), want: []string{"fired:tcp_reset"}},
			{at: 1, samples: roots(ok), want: []string{}},
			{at: 2, samples: roots(ok), want: []string{}},
			{at: 3, samples: roots(crit), want: []string{}},
		}},
		{"each root is its own alert", []Rule{rootCrit()}, []step{
			{at: 1, samples: []Sample{smp("tcp_reset", 1, crit), smp("latency", 1, crit), smp("latency/rto", 1, crit)}, want: []string{"pending:latency", "pending:tcp_reset"}},
			{at: 2, samples: []Sample{smp("tcp_reset", 1, crit), smp("latency", 1, crit), smp("latency/rto", 1, crit)}, want: []string{"fired:latency>latency/rto", "fired:tcp_reset"}},
			{at: 3, samples: []Sample{smp("tcp_reset", 1, ok), smp("latency", 1, crit)}, want: []string{"resolved:tcp_reset"}},
		}},
		{"the explanation is the worst descendant, the deepest of equals", []Rule{{ID: 4, Name: "R", Kind: KindNode, Metric: "*", State: "warn", ForIntervals: 1, Severity: "warning", Enabled: true}}, []step{
			{at: 1, samples: roots(crit,
				smp("tcp_reset/received", 5, warn), smp("tcp_reset/received/established", 5, warn),
				smp("tcp_reset/sent", 30, crit), smp("tcp_reset/sent/no_socket", 3, warn)),
				want: []string{"fired:tcp_reset>tcp_reset/sent"}},
		}},
		{"a rule on one child: absent from a report means OK", []Rule{{ID: 5, Name: "C", Kind: KindNode, Metric: "tcp_reset/sent/*", State: "warn", ForIntervals: 1, Severity: "warning", Enabled: true}}, []step{
			{at: 1, samples: roots(crit, smp("tcp_reset/sent", 20, crit), smp("tcp_reset/sent/no_socket", 20, crit), smp("tcp_reset/sent/tcp_state", 2, warn)),
				want: []string{"fired:tcp_reset/sent/no_socket", "fired:tcp_reset/sent/tcp_state"}},
			{at: 2, samples: roots(warn, smp("tcp_reset/sent", 2, warn), smp("tcp_reset/sent/tcp_state", 2, warn)),
				want: []string{"resolved:tcp_reset/sent/no_socket"}},
		}},
		{"the selector limits the rule to matching nodes", []Rule{{ID: 6, Name: "Acme", Kind: KindNode, Metric: "*", State: "crit", ForIntervals: 1, Severity: "critical", Selector: map[string]string{"customer": "acme"}, Enabled: true}}, []step{
			{at: 1, node: "other", samples: roots(crit), want: []string{}},
			{at: 1, node: "web-1", samples: roots(crit), want: []string{"fired:tcp_reset"}},
		}},
	}
	labels := map[string]map[string]string{"web-1": {"customer": "acme"}, "other": {"customer": "zeta"}}
	ids := map[string]int32{"web-1": 1, "other": 2}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := NewEngine()
			if got := e.SetRules(c.rules, t0); len(got) != 0 {
				t.Fatalf("SetRules on an empty engine = %v", describeChanges(got))
			}
			for i, s := range c.steps {
				node := s.node
				if node == "" {
					node = "web-1"
				}
				at := t0.Add(time.Duration(s.at * float64(time.Second)))
				o := Observation{Node: NodeInfo{ID: ids[node], Name: node, Labels: labels[node]}, Time: at, Interval: time.Second, Samples: s.samples}
				got := describeChanges(e.Observe(o, at))
				if !reflect.DeepEqual(got, s.want) {
					t.Fatalf("step %d (t=%vs): changes %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

func TestAlertEngineFiredInstanceCarriesEvidence(t *testing.T) {
	e := NewEngine()
	e.SetRules([]Rule{rootCrit()}, t0)
	node := NodeInfo{ID: 7, Name: "web-7", Labels: map[string]string{"customer": "acme"}}
	for i := 1; i <= 2; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		cs := e.Observe(Observation{Node: node, Time: at, Interval: time.Second, Samples: roots(crit, smp("tcp_reset/sent/no_socket", 187, crit))}, at)
		if i == 2 {
			if len(cs) != 1 || cs[0].Kind != ChangeFired {
				t.Fatalf("changes %v, want one fired", describeChanges(cs))
			}
			inst := cs[0].Inst
			want := Evidence{ObservedAt: at, Interval: time.Second, State: crit, Value: 0, Child: "tcp_reset/sent/no_socket", ChildState: crit, ChildValue: 187}
			if !reflect.DeepEqual(inst.Evidence, want) {
				t.Errorf("evidence %+v, want %+v", inst.Evidence, want)
			}
			if inst.Since != t0 || inst.FiredAt != at || inst.Node != "web-7" || inst.Fingerprint != "n:1:7:tcp_reset" {
				t.Errorf("instance %+v: want since t0, fired at t0+2s, node web-7, fingerprint n:1:7:tcp_reset", inst)
			}
		}
	}
}

// A new leader restores open instances and watermarks from the database and
// replays reports; nothing may page twice or resolve early.
func TestAlertEngineRestoreAndReplay(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	node := NodeInfo{ID: 1, Name: "web-1"}
	obs := func(s int, st store.State) Observation {
		return Observation{Node: node, Time: at(s), Interval: time.Second, Samples: roots(st)}
	}
	t.Run("firing instance: replayed breaching reports do not page again", func(t *testing.T) {
		e := NewEngine()
		e.Restore(&Instance{ID: 9, Fingerprint: "n:1:1:tcp_reset", RuleID: 1, RuleName: "NBSRootCritical", Kind: KindNode,
			NodeID: 1, Node: "web-1", Metric: "tcp_reset", State: Firing, Since: at(0), LastTS: at(2), FiredAt: at(2)})
		e.SetWatermark(1, at(1)) // flushed before the fire: the replay starts earlier
		if cs := e.SetRules([]Rule{rootCrit()}, at(5)); len(cs) != 0 {
			t.Fatalf("SetRules: %v", describeChanges(cs))
		}
		for s, st := range map[int]store.State{2: crit} {
			if cs := e.Observe(obs(s, st), at(5)); len(cs) != 0 {
				t.Fatalf("replay of t=%d: %v", s, describeChanges(cs))
			}
		}
		if cs := e.Observe(obs(3, crit), at(5)); len(cs) != 0 {
			t.Fatalf("t=3 crit: %v", describeChanges(cs))
		}
		if got := describeChanges(e.Observe(obs(4, ok), at(5))); !reflect.DeepEqual(got, []string{"resolved:tcp_reset"}) {
			t.Fatalf("t=4 ok: %v, want the resolve", got)
		}
	})
	t.Run("resolved identity: replayed reports before the resolve do not reopen it", func(t *testing.T) {
		e := NewEngine()
		e.RestoreResolved("n:1:1:tcp_reset", at(4))
		e.SetWatermark(1, at(1))
		e.SetRules([]Rule{rootCrit()}, at(6))
		for s := 2; s <= 4; s++ {
			st := crit
			if s == 4 {
				st = ok
			}
			if cs := e.Observe(obs(s, st), at(6)); len(cs) != 0 {
				t.Fatalf("replay of t=%d: %v", s, describeChanges(cs))
			}
		}
		if got := describeChanges(e.Observe(obs(5, crit), at(6))); !reflect.DeepEqual(got, []string{"pending:tcp_reset"}) {
			t.Fatalf("a new breach after the resolve: %v, want pending", got)
		}
	})
	t.Run("pending instance continues across the hand-over", func(t *testing.T) {
		e := NewEngine()
		e.Restore(&Instance{ID: 3, Fingerprint: "n:1:1:tcp_reset", RuleID: 1, Kind: KindNode, NodeID: 1, Node: "web-1",
			Metric: "tcp_reset", State: Pending, Since: at(0), LastTS: at(1)})
		e.SetWatermark(1, at(4)) // seen breaching up to t=4 by the previous leader (long gap from LastTS)
		e.SetRules([]Rule{{ID: 1, Name: "R", Kind: KindNode, Metric: "*", State: "crit", ForIntervals: 6, Severity: "critical", Enabled: true}}, at(5))
		if got := describeChanges(e.Observe(obs(5, crit), at(5))); len(got) != 0 {
			t.Fatalf("t=5: %v, want still pending", got)
		}
		if got := describeChanges(e.Observe(obs(6, crit), at(6))); !reflect.DeepEqual(got, []string{"fired:tcp_reset"}) {
			t.Fatalf("t=6: %v, want fired (six intervals since t=0)", got)
		}
	})
	t.Run("deleting a rule resolves its firing alerts and clears pending ones", func(t *testing.T) {
		e := NewEngine()
		e.SetRules([]Rule{rootCrit(), {ID: 2, Name: "Slow", Kind: KindNode, Metric: "latency", State: "crit", ForIntervals: 5, Severity: "warning", Enabled: true}}, at(0))
		e.Observe(Observation{Node: node, Time: at(1), Interval: time.Second, Samples: []Sample{smp("tcp_reset", 1, crit), smp("latency", 1, crit)}}, at(1))
		e.Observe(Observation{Node: node, Time: at(2), Interval: time.Second, Samples: []Sample{smp("tcp_reset", 1, crit), smp("latency", 1, crit)}}, at(2))
		got := describeChanges(e.SetRules(nil, at(3)))
		if !reflect.DeepEqual(got, []string{"resolved:latency", "resolved:tcp_reset", "cleared:latency"}) {
			t.Fatalf("SetRules(nil): %v", got)
		}
		if len(e.Open()) != 0 {
			t.Errorf("open instances left: %d", len(e.Open()))
		}
	})
}

func TestAlertEngineGroupRules(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type report struct {
		node  string
		state store.State
	}
	fleet := map[string]map[string]string{
		"a1": {"customer": "acme", "rack": "r1"}, "a2": {"customer": "acme", "rack": "r1"},
		"a3": {"customer": "acme", "rack": "r2"}, "a4": {"customer": "acme", "rack": "r2"},
		"z1": {"customer": "zeta", "rack": "r1"},
	}
	ids := map[string]int32{"a1": 1, "a2": 2, "a3": 3, "a4": 4, "z1": 5}
	type gstep struct {
		at      float64
		reports []report
		want    []string
	}
	cases := []struct {
		name  string
		rule  Rule
		steps []gstep
	}{
		{"at least 2 acme nodes WARN for 2 intervals",
			Rule{ID: 1, Name: "AcmeWarn", Kind: KindGroup, Metric: "*", State: "warn", ForIntervals: 2, MinNodes: 2, Severity: "warning", Selector: map[string]string{"customer": "acme"}, Enabled: true},
			[]gstep{
				{1, []report{{"a1", ok}, {"a2", ok}, {"a3", ok}, {"a4", ok}, {"z1", crit}}, []string{}},
				{2, []report{{"a1", warn}, {"a2", ok}, {"a3", ok}, {"a4", ok}, {"z1", crit}}, []string{}},
				{3, []report{{"a1", warn}, {"a2", crit}, {"a3", ok}, {"a4", ok}, {"z1", crit}}, []string{`pending:g:1:`}},
				{4, []report{{"a1", warn}, {"a2", crit}, {"a3", ok}, {"a4", ok}}, []string{}},
				{5, []report{{"a1", warn}, {"a2", crit}, {"a3", ok}, {"a4", ok}}, []string{`fired:g:1:`}},
				{6, []report{{"a1", ok}, {"a2", crit}, {"a3", ok}, {"a4", ok}}, []string{`resolved:g:1:`}},
			}},
		{"50% of a rack CRIT, per rack",
			Rule{ID: 2, Name: "RackCrit", Kind: KindGroup, Metric: "tcp_reset", State: "crit", ForIntervals: 1, MinPercent: 50, GroupBy: []string{"rack"}, Severity: "critical", Enabled: true},
			[]gstep{
				{1, []report{{"a1", crit}, {"a2", ok}, {"a3", ok}, {"a4", ok}, {"z1", ok}}, []string{}}, // r1: 1 of 3
				{2, []report{{"a1", crit}, {"a2", ok}, {"a3", crit}, {"a4", ok}, {"z1", crit}}, []string{`pending:g:2:rack="r1"`, `pending:g:2:rack="r2"`}},
				{3, []report{{"a1", crit}, {"a2", ok}, {"a3", ok}, {"a4", ok}, {"z1", crit}}, []string{`fired:g:2:rack="r1"`, `cleared:g:2:rack="r2"`}},
			}},
		{"a silent node counts as UNKNOWN",
			Rule{ID: 3, Name: "Silent", Kind: KindGroup, Metric: "*", State: "unknown", ForSeconds: 1, MinNodes: 1, Severity: "warning", Selector: map[string]string{"rack": "r2"}, Enabled: true},
			[]gstep{
				{1, []report{{"a3", ok}, {"a4", ok}}, []string{}},
				{2, []report{{"a3", ok}}, []string{}},
				{4, []report{{"a3", ok}}, []string{}},
				{5.5, []report{{"a3", ok}}, []string{`pending:g:3:`}}, // a4 silent for 4.5 intervals
				{6.5, []report{{"a3", ok}}, []string{`fired:g:3:`}},
				{7, []report{{"a3", ok}, {"a4", ok}}, []string{`resolved:g:3:`}},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := NewEngine()
			e.SetRules([]Rule{c.rule}, t0)
			for i, s := range c.steps {
				for _, r := range s.reports {
					e.Observe(Observation{Node: NodeInfo{ID: ids[r.node], Name: r.node, Labels: fleet[r.node]}, Time: at(s.at),
						Interval: time.Second, Samples: []Sample{smp("tcp_reset", 0, r.state)}}, at(s.at))
				}
				got := describeChanges(e.EvaluateGroups(at(s.at)))
				if !reflect.DeepEqual(got, s.want) {
					t.Fatalf("step %d (t=%vs): changes %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

func TestAlertGroupEvidenceNamesTheNodes(t *testing.T) {
	e := NewEngine()
	e.SetRules([]Rule{{ID: 1, Name: "G", Kind: KindGroup, Metric: "*", State: "crit", ForIntervals: 1, MinNodes: 2, Severity: "critical", Enabled: true}}, t0)
	for i := range 3 {
		name := fmt.Sprintf("n%d", i)
		st := crit
		if i == 1 {
			st = ok
		}
		e.Observe(Observation{Node: NodeInfo{ID: int32(i + 1), Name: name}, Time: t0, Interval: time.Second, Samples: roots(st)}, t0)
	}
	cs := e.EvaluateGroups(t0)
	if len(cs) != 1 {
		t.Fatalf("changes %v", describeChanges(cs))
	}
	ev := cs[0].Inst.Evidence
	if ev.InState != 2 || ev.Total != 3 || strings.Join(ev.Nodes, ",") != "n0,n2" {
		t.Errorf("evidence %+v: want 2 of 3, nodes n0,n2", ev)
	}
}

// A node that is no longer current — deleted, or moved to another tenant,
// which gives it a new row — has its open alerts ended: the firing one
// resolves, the pending one clears; another node's stay open.
func TestAlertEngineEndsAlertsOfNodesGone(t *testing.T) {
	e := NewEngine()
	e.SetRules([]Rule{rootCrit()}, t0)
	gone := NodeInfo{ID: 7, Name: "web-7", Labels: map[string]string{"customer": "acme"}}
	pending := NodeInfo{ID: 8, Name: "web-8", Labels: map[string]string{"customer": "acme"}}
	stays := NodeInfo{ID: 9, Name: "web-9", Labels: map[string]string{"customer": "acme"}}
	for i := 1; i <= 2; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		for _, n := range []NodeInfo{gone, stays} {
			e.Observe(Observation{Node: n, Time: at, Interval: time.Second, Samples: roots(crit)}, at)
		}
	}
	at := t0.Add(2 * time.Second)
	e.Observe(Observation{Node: pending, Time: at, Interval: time.Second, Samples: roots(crit)}, at)
	if p, f := e.Counts(); p != 1 || f != 2 {
		t.Fatalf("before: %d pending, %d firing; want 1 and 2", p, f)
	}
	got := describeChanges(e.EndGone(func(id int32) bool { return id == stays.ID }, t0.Add(time.Minute)))
	if want := []string{"resolved:tcp_reset", "cleared:tcp_reset"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EndGone: %v, want %v", got, want)
	}
	if p, f := e.Counts(); p != 0 || f != 1 {
		t.Errorf("after: %d pending, %d firing; want web-9's one firing", p, f)
	}
}

func nodeSilent() Rule {
	return Rule{ID: 2, Name: "NBSNodeSilent", Kind: KindSilent, Metric: "*", State: "unknown", ForSeconds: 180, Severity: "critical", Enabled: true}
}

// A silent rule shows a node pending once it is 3 intervals late, pages at
// the hold, and resolves on its next report; a node that keeps reporting
// never pages; silence before the evaluator started is not counted, while an
// open silent alert survives a new evaluator.
func TestAlertEngineNodeSilent(t *testing.T) {
	web1 := NodeInfo{ID: 1, Name: "web-1"}
	web2 := NodeInfo{ID: 2, Name: "web-2"}
	report := func(e *Engine, n NodeInfo, at time.Time) []string {
		return describeChanges(e.Observe(Observation{Node: n, Time: at, Interval: 10 * time.Second, Samples: roots(ok)}, at))
	}
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	e := NewEngine()
	e.SetRules([]Rule{rootCrit(), nodeSilent()}, t0)
	report(e, web1, sec(0))
	report(e, web2, sec(0))
	steps := []struct {
		at     int
		report bool // web-2 reports (web-1 stays silent after t0)
		want   []string
	}{
		{10, true, []string{}},
		{30, true, []string{}},
		{31, false, []string{"pending:"}}, // web-1 silent for 31 s > 3 intervals
		{120, true, []string{}},
		{180, true, []string{"fired:"}},
		{300, true, []string{}},
	}
	for _, s := range steps {
		if s.report {
			report(e, web2, sec(s.at))
		}
		got := describeChanges(e.EvaluateSilent(sec(s.at), t0))
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("t=%d: %v, want %v", s.at, got, s.want)
		}
	}
	open := e.Open()
	if len(open) != 1 || open[0].Node != "web-1" || open[0].State != Firing || !open[0].Since.Equal(sec(0)) {
		t.Fatalf("open %+v, want web-1 firing since its last report", open)
	}

	// A new evaluator (restart, failover) keeps the open alert rather than
	// restarting the silence count at its own start.
	e2 := NewEngine()
	e2.SetRules([]Rule{rootCrit(), nodeSilent()}, sec(400))
	e2.SeedNode(web1, sec(0), 10*time.Second, roots(ok))
	e2.SeedNode(web2, sec(300), 10*time.Second, roots(ok))
	e2.Restore(open[0])
	if got := describeChanges(e2.EvaluateSilent(sec(401), sec(400))); len(got) != 0 {
		t.Fatalf("after restart: %v, want the alert kept as it is", got)
	}
	// web-2 went quiet while no evaluator ran: counted from the start (400).
	if got := describeChanges(e2.EvaluateSilent(sec(429), sec(400))); len(got) != 0 {
		t.Fatalf("29 s after the evaluator started: %v, want nothing", got)
	}
	if got := describeChanges(e2.EvaluateSilent(sec(431), sec(400))); !reflect.DeepEqual(got, []string{"pending:"}) {
		t.Fatalf("31 s after the evaluator started: %v, want web-2 pending", got)
	}
	if got := report(e2, web1, sec(440)); len(got) != 0 {
		t.Fatalf("report: %v", got)
	}
	if got := describeChanges(e2.EvaluateSilent(sec(440), sec(400))); !reflect.DeepEqual(got, []string{"resolved:"}) {
		t.Fatalf("web-1 reported again: %v, want resolved", got)
	}
	// Deleted nodes are forgotten: web-2's pending alert clears and never fires.
	if got := describeChanges(e2.EndGone(func(id int32) bool { return id == web1.ID }, sec(450))); !reflect.DeepEqual(got, []string{"cleared:"}) {
		t.Fatalf("EndGone: %v", got)
	}
	// web-1 silent again for 460 s (past the hold at once): it fires; web-2 is gone.
	got := e2.EvaluateSilent(sec(900), sec(400))
	if len(got) != 1 || got[0].Kind != ChangeFired || got[0].Inst.Node != "web-1" {
		t.Fatalf("web-1 silent again for 460 s, web-2 gone: %v, want web-1 fired", describeChanges(got))
	}
}

// TestNodeFingerprintFormat: fingerprints are stored (alert_instances) and
// sent to Alertmanager; building them without fmt must not change one.
func TestNodeFingerprintFormat(t *testing.T) {
	for _, c := range []struct {
		rule   int64
		node   int32
		metric string
	}{{1, 1, ""}, {42, 7, "tcp_reset/sent/no_socket"}, {-3, -2147483648, "ping"}, {1 << 40, 2147483647, "a:b"}} {
		if got, want := nodeFingerprint(c.rule, c.node, c.metric), fmt.Sprintf("n:%d:%d:%s", c.rule, c.node, c.metric); got != want {
			t.Errorf("nodeFingerprint(%d, %d, %q) = %q, want %q", c.rule, c.node, c.metric, got, want)
		}
	}
}

// Looking at every node for silence allocates nothing while no node's
// silence changes: it runs every second over the whole fleet.
func TestAlertEngineSilentAllocatesNothingQuiet(t *testing.T) {
	e := NewEngine()
	e.SetRules([]Rule{rootCrit(), nodeSilent()}, t0)
	for id := range int32(1000) {
		n := NodeInfo{ID: id + 1, Name: fmt.Sprintf("web-%d", id)}
		e.Observe(Observation{Node: n, Time: t0, Interval: 10 * time.Second, Samples: roots(ok)}, t0)
	}
	at := t0.Add(5 * time.Second)
	if got := e.EvaluateSilent(at, t0); len(got) != 0 {
		t.Fatalf("changes after 5 s: %v", describeChanges(got))
	}
	if allocs := testing.AllocsPerRun(20, func() { e.EvaluateSilent(at, t0) }); allocs > 0 {
		t.Errorf("an evaluation of 1,000 quiet nodes took %.0f allocations", allocs)
	}
	// And one that goes silent still pages, under its own fingerprint.
	if got := describeChanges(e.EvaluateSilent(t0.Add(31*time.Second), t0)); len(got) != 1000 {
		t.Fatalf("after 31 s: %d changes, want every node pending", len(got))
	}
	if _, ok := e.open[nodeFingerprint(nodeSilent().ID, 7, "")]; !ok {
		t.Errorf("no open instance under node 7's fingerprint")
	}
}
