package agent

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/agent/source/latencyqdisc"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// openQdisc opens the real qdisc sojourn source on lab namespace A.
func openQdisc(t *testing.T, lab *netlab.Lab) *latencyqdisc.Source {
	t.Helper()
	h, err := netns.Resolve(lab.A)
	if err != nil {
		t.Fatal(err)
	}
	qd, err := latencyqdisc.Open(context.Background(), latencyqdisc.Options{Env: source.Env{Netns: h}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qd.Close() })
	if qd.Programs() == nil {
		netlab.SkipOrFail(t, "agent: qdisc sojourn unavailable: %s", qd.Capabilities()[0].GetReason())
	}
	return qd
}

func newSelf(t *testing.T, opts Options) *Source {
	t.Helper()
	s := New(opts)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if !s.statsOK {
		netlab.SkipOrFail(t, "agent: %s", s.statsWhy)
	}
	return s
}

func collect(t *testing.T, s source.Source) source.Reading {
	t.Helper()
	r, err := s.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func result(own map[string]tree.State) tree.Result { return tree.Result{Own: own} }

// expandQdisc takes the baseline collection and attaches the qdisc
// programs by an operator's expand; it returns when it did.
func expandQdisc(t *testing.T, s *Source, qd *latencyqdisc.Source) time.Time {
	t.Helper()
	collect(t, s)
	now := time.Now()
	s.Adapt(context.Background(), now, result(nil), now.Add(time.Minute))
	if !qd.Active() {
		t.Fatal("expand did not attach the qdisc programs")
	}
	return now
}

// An operator's expand attaches the qdisc programs; with a budget they
// exceed, the next interval detaches them, says why, and the agent branch
// shows what each program cost per run and how often it ran.
func TestBudgetDetachesTriggeredPrograms(t *testing.T) {
	lab := netlab.New(t)
	qd := openQdisc(t, lab)
	s := newSelf(t, Options{Sources: []source.Source{qd}, BudgetPercent: 1e-6, Hold: time.Second, MaxOn: time.Hour})
	ctx := context.Background()
	now := expandQdisc(t, s, qd)
	lab.Exec(t, lab.A, "ping", "-c", "200", "-i", "0.002", "-q", lab.IPB.String())
	r := collect(t, s)
	events := r.Events
	prog := catalog.AgentBPF + "/net_dev_queue"
	t.Logf("net_dev_queue: %.0f ns/run, %.0f runs/s, %.5f%% of a CPU; total %.5f%%",
		r.Gauges[prog+"/ns_per_run"], r.Gauges[prog+"/runs_per_sec"], r.Gauges[prog], r.Gauges[catalog.Agent])
	if r.Gauges[prog+"/ns_per_run"] <= 0 || r.Gauges[prog+"/runs_per_sec"] <= 0 || r.Gauges[catalog.Agent] <= 0 {
		t.Fatalf("no cost measured: %v", r.Gauges)
	}
	if r.Gauges[catalog.AgentTriggered+"/latency_qdisc"] != 1 {
		t.Errorf("agent/triggered/latency_qdisc = %v while attached", r.Gauges[catalog.AgentTriggered+"/latency_qdisc"])
	}
	s.Adapt(ctx, time.Now(), result(nil), now.Add(time.Minute))
	if qd.Active() {
		t.Fatal("over the budget, the qdisc programs are still attached")
	}
	r = collect(t, s)
	var reasons []string
	for _, e := range append(events, r.Events...) {
		reasons = append(reasons, e.GetFields()["action"]+": "+e.GetFields()["reason"])
	}
	if len(reasons) != 2 || !strings.HasPrefix(reasons[0], "attached: an operator expanded") ||
		!strings.HasPrefix(reasons[1], "detached: over budget, ") {
		t.Errorf("events %q", reasons)
	}
	if r.Gauges[catalog.AgentTriggered+"/latency_qdisc"] != 0 {
		t.Error("agent/triggered/latency_qdisc still 1")
	}
	// Detached, the programs no longer run.
	before := collect(t, s).Gauges
	lab.Exec(t, lab.A, "ping", "-c", "20", "-i", "0.002", "-q", lab.IPB.String())
	if after := collect(t, s).Gauges; after[prog+"/runs_per_sec"] != 0 {
		t.Errorf("detached net_dev_queue ran %.0f times/s (before: %.0f)", after[prog+"/runs_per_sec"], before[prog+"/runs_per_sec"])
	}
}

// An operator's expand may raise the budget for its duration: the qdisc
// programs that a 1e-6% budget detaches stay attached under the expand's
// 25% (the cap, whatever the collector sends), and the budget in force is
// the node's own again once the expand ends.
func TestExpandRaisesBudget(t *testing.T) {
	lab := netlab.New(t)
	qd := openQdisc(t, lab)
	s := newSelf(t, Options{Sources: []source.Source{qd}, BudgetPercent: 1e-6, Hold: time.Second, MaxOn: time.Hour})
	s.SetExpandBudget(1000)
	ctx := context.Background()
	now := expandQdisc(t, s, qd)
	until := now.Add(time.Minute)
	lab.Exec(t, lab.A, "ping", "-c", "200", "-i", "0.002", "-q", lab.IPB.String())
	r := collect(t, s)
	if r.Gauges[catalog.Agent] <= 1e-6 {
		t.Fatalf("BPF used %g%% of a CPU: not over the node's budget, nothing to test", r.Gauges[catalog.Agent])
	}
	s.Adapt(ctx, time.Now(), result(nil), until)
	if !qd.Active() {
		t.Fatal("detached although the expand raised the budget")
	}
	if b := s.budget(time.Now(), until); b != MaxExpandBudgetPercent {
		t.Errorf("budget during the expand %g%%, want the cap %g%%", b, MaxExpandBudgetPercent)
	}
	if b := s.budget(until, until); b != 1e-6 {
		t.Errorf("budget once the expand ended %g%%, want the node's 1e-6%%", b)
	}
	var events []string
	for _, e := range r.Events {
		events = append(events, e.GetFields()["action"]+" budget "+e.GetFields()["budget_percent"])
	}
	if len(events) != 1 || events[0] != "attached budget 25.0000" {
		t.Errorf("events %q, want the attach under the expand's budget", events)
	}
}

// Trouble in the latency branch attaches the triggered source, trouble in
// its own subtree does not (it would keep itself attached), and it is
// detached Hold after the trouble clears.
func TestTroubleAttachesAndHoldDetaches(t *testing.T) {
	lab := netlab.New(t)
	qd := openQdisc(t, lab)
	s := newSelf(t, Options{Sources: []source.Source{qd}, BudgetPercent: 100, Hold: 2 * time.Second, MaxOn: time.Hour})
	ctx := context.Background()
	collect(t, s)
	t0 := time.Now()
	s.Adapt(ctx, t0, result(map[string]tree.State{catalog.LatencyQdisc + "/va": tree.Crit, catalog.Latency: tree.OK}), time.Time{})
	if qd.Active() {
		t.Fatal("attached by its own metric's state")
	}
	s.Adapt(ctx, t0.Add(time.Second), result(map[string]tree.State{catalog.LatencyTXQdiscToDriver: tree.Warn}), time.Time{})
	if !qd.Active() {
		t.Fatal("latency/tx/qdisc_to_driver WARN did not attach qdisc sojourn")
	}
	ev := collect(t, s).Events
	if len(ev) != 1 || !strings.Contains(ev[0].GetFields()["reason"], "latency/tx/qdisc_to_driver is WARN") {
		t.Errorf("events %v", ev)
	}
	s.Adapt(ctx, t0.Add(2*time.Second), result(nil), time.Time{})
	if !qd.Active() {
		t.Fatal("detached before the hold ran out")
	}
	s.Adapt(ctx, t0.Add(4*time.Second), result(nil), time.Time{})
	if qd.Active() {
		t.Fatal("still attached after the hold")
	}
	// Retired metrics: the branch vanishes instead of going UNKNOWN.
	if r := collect(t, qd); len(r.Retired) != 1 || r.Retired[0] != catalog.LatencyQdisc || len(r.Metrics) != 0 {
		t.Errorf("after detaching: retired %v, metrics %d", r.Retired, len(r.Metrics))
	}
}

// With a statistics window the programs' figures come from the window
// before each collection: the agent's statistics are off after a
// collection, one made before the window opened reports no program
// figures (rather than zeros), and one after it reports the load run
// inside the window, at its rate over the window, not over the interval.
func TestStatsWindow(t *testing.T) {
	lab := netlab.New(t)
	qd := openQdisc(t, lab)
	const interval, window = 1500 * time.Millisecond, 700 * time.Millisecond
	s := newSelf(t, Options{Sources: []source.Source{qd}, BudgetPercent: 100, Hold: time.Hour, MaxOn: time.Hour,
		Interval: interval, StatsWindow: window})
	if !s.windowed {
		netlab.SkipOrFail(t, "agent: statistics not switchable: %s", s.statsWhy)
	}
	statsOn := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.statsOn != nil
	}
	expandQdisc(t, s, qd)
	if statsOn() {
		t.Fatal("statistics still on after a collection")
	}
	prog := catalog.AgentBPF + "/net_dev_queue"
	if g, ok := collect(t, s).Gauges[prog+"/runs_per_sec"]; ok {
		t.Errorf("a collection before the window opened reported %v runs/s", g)
	}
	deadline := time.Now().Add(2 * interval)
	for !statsOn() {
		if time.Now().After(deadline) {
			t.Fatalf("the window did not open within %s", 2*interval)
		}
		time.Sleep(5 * time.Millisecond)
	}
	opened := time.Now()
	const pings = 100
	lab.Exec(t, lab.A, "ping", "-c", strconv.Itoa(pings), "-i", "0.002", "-q", lab.IPB.String())
	// The window opened at most one poll before we saw it.
	maxSecs := time.Since(opened).Seconds() + 0.02
	r := collect(t, s)
	perSec := r.Gauges[prog+"/runs_per_sec"]
	t.Logf("net_dev_queue in the window: %.0f runs/s, %.0f ns/run; window at most %.3f s", perSec, r.Gauges[prog+"/ns_per_run"], maxSecs)
	// Every echo request leaves A through vA's queue: at least pings runs
	// in the window.
	if perSec*maxSecs < pings || r.Gauges[prog+"/ns_per_run"] <= 0 || r.Gauges[catalog.Agent] <= 0 {
		t.Errorf("window figures %v: want at least %d runs in at most %.3f s", r.Gauges, pings, maxSecs)
	}
	if statsOn() {
		t.Error("statistics still on after the collection that ended the window")
	}
}

// With StatsEvery the statistics' window opens before one collection in
// that many while nothing needs a fresh figure; the collections between
// report the last window's figures; attaching a triggered source opens
// one before the next collection and keeps them opening while it is
// attached.
func TestStatsEvery(t *testing.T) {
	lab := netlab.New(t)
	qd := openQdisc(t, lab)
	const interval, window = 1200 * time.Millisecond, 300 * time.Millisecond
	s := newSelf(t, Options{Sources: []source.Source{qd}, BudgetPercent: 100, Hold: time.Hour, MaxOn: time.Hour,
		Interval: interval, StatsWindow: window, StatsEvery: 3})
	if !s.windowed {
		netlab.SkipOrFail(t, "agent: statistics not switchable: %s", s.statsWhy)
	}
	state := func() (on, scheduled bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.statsOn != nil, s.timer != nil
	}
	waitOpen := func(what string) {
		t.Helper()
		deadline := time.Now().Add(2 * interval)
		for on, _ := state(); !on; on, _ = state() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the window did not open within %s", what, 2*interval)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	collect(t, s) // the first: no figures yet, so the next has a window
	waitOpen("after the first collection")
	measured := collect(t, s)
	total, ok := measured.Gauges[catalog.Agent]
	if !ok {
		t.Fatalf("a collection after a window reported no %s: %v", catalog.Agent, measured.Gauges)
	}
	// Two collections without a window, which report the last one's
	// figures; the third has one again.
	for i := 1; i <= 2; i++ {
		if on, scheduled := state(); on || scheduled {
			t.Fatalf("before collection %d after the window: statistics on %v, a window scheduled %v; want neither", i, on, scheduled)
		}
		r := collect(t, s)
		if g, ok := r.Gauges[catalog.Agent]; !ok || g != total {
			t.Errorf("collection %d without a window: %s = %v (reported %v), want the window's %v", i, catalog.Agent, g, ok, total)
		}
		carried := 0
		for id, v := range measured.Gauges {
			if !strings.HasPrefix(id, catalog.AgentBPF+"/") {
				continue
			}
			carried++
			if g, ok := r.Gauges[id]; !ok || g != v {
				t.Errorf("collection %d without a window: %s = %v (reported %v), want the window's %v", i, id, g, ok, v)
			}
		}
		if carried == 0 {
			t.Errorf("the window reported no program's figures: %v", measured.Gauges)
		}
	}
	if _, scheduled := state(); !scheduled {
		t.Fatal("no window scheduled for the third collection after the last")
	}
	waitOpen("the third collection")
	collect(t, s)
	if _, scheduled := state(); scheduled {
		t.Fatal("a window scheduled right after a measured one, with nothing attached")
	}
	// An expand attaches the qdisc programs: the next collection has a
	// window, and so does every one while they are attached.
	now := time.Now()
	s.Adapt(context.Background(), now, result(nil), now.Add(time.Minute))
	if !qd.Active() {
		t.Fatal("expand did not attach the qdisc programs")
	}
	for i := 1; i <= 2; i++ {
		waitOpen("with the qdisc programs attached")
		lab.Exec(t, lab.A, "ping", "-c", "20", "-i", "0.002", "-q", lab.IPB.String())
		r := collect(t, s)
		if g := r.Gauges[catalog.AgentBPF+"/net_dev_queue/ns_per_run"]; i == 2 && g <= 0 {
			// The first window may have opened before the attach.
			t.Errorf("collection %d with the qdisc programs attached: net_dev_queue %v ns/run", i, g)
		}
	}
}

// evidenceSource is a source whose evidence caps gave up the given counts.
type evidenceSource struct {
	source.Source
	counts source.EvidenceCounts
}

func (e evidenceSource) EvidenceCounts() (source.EvidenceCounts, error) { return e.counts, nil }

// Each source's given-up evidence shows per cap under agent/evidence/dropped,
// summed per source and in all, with a source's own caps besides the usual
// ones; a source without evidence (/proc) adds nothing.
func TestEvidenceDropped(t *testing.T) {
	resets := evidenceSource{counts: source.EvidenceCounts{Branch: catalog.TCPReset, Kept: 420,
		Dropped: map[string]uint64{source.CapRateLimit: 180, source.CapRingFull: 0, source.CapInterval: 3}}}
	drops := evidenceSource{counts: source.EvidenceCounts{Branch: catalog.Drops, Kept: 7,
		Dropped: map[string]uint64{source.CapRateLimit: 1, source.CapRingFull: 2, "agent_down": 4}}}
	proc := evidenceSource{counts: source.EvidenceCounts{Branch: "proc"}}
	s := newSelf(t, Options{Sources: []source.Source{resets, drops, proc}})
	r := collect(t, s)
	want := map[string]uint64{
		catalog.AgentEvidence:                           427,
		"agent/evidence/tcp_reset":                      420,
		"agent/evidence/drops":                          7,
		catalog.AgentEvidenceDrop:                       190,
		"agent/evidence/dropped/tcp_reset":              183,
		"agent/evidence/dropped/tcp_reset/rate_limit":   180,
		"agent/evidence/dropped/tcp_reset/ring_full":    0,
		"agent/evidence/dropped/tcp_reset/interval_cap": 3,
		"agent/evidence/dropped/drops":                  7,
		"agent/evidence/dropped/drops/agent_down":       4,
		"agent/evidence/dropped/drops/rate_limit":       1,
		"agent/evidence/dropped/drops/ring_full":        2,
		"agent/evidence/dropped/drops/interval_cap":     0,
	}
	defined := map[string]bool{}
	for _, m := range r.Metrics {
		defined[m.ID] = true
	}
	for id, v := range want {
		if got, ok := r.Counters[id]; !ok || got != v {
			t.Errorf("%s = %d (present %v), want %d", id, got, ok, v)
		}
		if !defined[id] {
			t.Errorf("%s has a value but no definition", id)
		}
	}
	for id := range r.Counters {
		if strings.HasPrefix(id, "agent/evidence/dropped/proc") {
			t.Errorf("a source without evidence has %s", id)
		}
	}
}

// continuingSource is an evidence source whose probe adopted the previous
// agent's pinned maps and ring, or not.
type continuingSource struct {
	evidenceSource
	continues bool
}

func (c continuingSource) Continues(string) bool { return c.continues }

// Carry makes the process-local evidence counts (reported, interval_cap)
// continue the previous agent's reports for a source that continues, and
// counts what that agent read from the ring but never reported
// (agent_down: the ring's consumer position less what was reported or
// capped); nothing carries without a record, for a source that starts
// afresh, and agent_down needs the per-branch reported count.
func TestEvidenceCarriedAcrossRestart(t *testing.T) {
	const (
		kept     = "agent/evidence/tcp_reset"
		capped   = "agent/evidence/dropped/tcp_reset/interval_cap"
		down     = "agent/evidence/dropped/tcp_reset/agent_down"
		dropped  = "agent/evidence/dropped/tcp_reset"
		rateLim  = "agent/evidence/dropped/tcp_reset/rate_limit"
		consumed = 130 // records read from the ring by the agents before
	)
	// This agent, at its first collection: 2 events taken, 1 beyond the
	// cap; the kernel's counts continue (rate_limit 50).
	counts := source.EvidenceCounts{Branch: catalog.TCPReset, Kept: 2, Consumed: consumed, ConsumedKnown: true,
		Dropped: map[string]uint64{source.CapRateLimit: 50, source.CapRingFull: 0, source.CapInterval: 1}}
	prev := map[string]uint64{kept: 100, capped: 5, down: 3, rateLim: 40}
	tests := []struct {
		name      string
		continues bool
		reported  map[string]uint64
		want      map[string]uint64
		continued bool
	}{
		{"continuing, with a record", true, prev,
			map[string]uint64{kept: 102, capped: 6, down: 130 - 105, dropped: 50 + 6 + 25, catalog.AgentEvidence: 102}, true},
		{"no record of the previous reports", true, nil,
			map[string]uint64{kept: 2, capped: 1, down: 0, dropped: 51, catalog.AgentEvidence: 2}, false},
		{"a fresh ring", false, prev,
			map[string]uint64{kept: 2, capped: 1, down: 0, dropped: 51}, false},
		{"a record without per-source counts (an older agent)", true, map[string]uint64{capped: 5},
			map[string]uint64{kept: 2, capped: 6, down: 0, dropped: 56}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := continuingSource{evidenceSource{counts: counts}, tt.continues}
			s := newSelf(t, Options{Sources: []source.Source{src}})
			s.Carry(tt.reported)
			r := collect(t, s)
			for id, v := range tt.want {
				if got := r.Counters[id]; got != v {
					t.Errorf("%s = %d, want %d", id, got, v)
				}
			}
			for _, id := range []string{kept, capped, down, dropped, rateLim, catalog.AgentEvidence, catalog.AgentEvidenceDrop} {
				if got := s.Continues(id); got != tt.continued {
					t.Errorf("Continues(%s) = %v, want %v", id, got, tt.continued)
				}
			}
			if s.Continues(catalog.AgentOutboxDropped) {
				t.Error("the outbox's own counter continues")
			}
		})
	}
}

// mutableSource is an evidence source whose counts a test changes between
// collections.
type mutableSource struct {
	source.Source
	counts *source.EvidenceCounts
}

func (m mutableSource) EvidenceCounts() (source.EvidenceCounts, error) { return *m.counts, nil }

// The totals continue when a source continues, and a source that starts
// afresh adds to them only what its own counters count: its first values
// are its baseline, not an increase.
func TestEvidenceTotalsWithAFreshSource(t *testing.T) {
	resets := continuingSource{evidenceSource{counts: source.EvidenceCounts{Branch: catalog.TCPReset, Kept: 2,
		Consumed: 105, ConsumedKnown: true, Dropped: map[string]uint64{source.CapRateLimit: 50}}}, true}
	fresh := &source.EvidenceCounts{Branch: catalog.Drops, Kept: 4, Dropped: map[string]uint64{source.CapRateLimit: 7}}
	s := newSelf(t, Options{Sources: []source.Source{resets, mutableSource{counts: fresh}}})
	s.Carry(map[string]uint64{"agent/evidence/tcp_reset": 100, "agent/evidence/drops": 50,
		"agent/evidence/dropped/drops": 70, catalog.AgentEvidence: 150})
	if !s.Continues(catalog.AgentEvidence) || s.Continues("agent/evidence/drops") {
		t.Fatal("the totals must continue and the fresh source's counts must not")
	}
	for i, want := range []struct{ kept, dropped uint64 }{
		{kept: 102 + 50, dropped: 50 + 5 + 70}, // agent_down 105-100; the fresh source's 4 and 7 are its baseline
		{kept: 102 + 50 + 3, dropped: 50 + 5 + 70 + 1},
	} {
		if i == 1 {
			fresh.Kept += 3
			fresh.Dropped = map[string]uint64{source.CapRateLimit: 8}
		}
		r := collect(t, s)
		if got := r.Counters[catalog.AgentEvidence]; got != want.kept {
			t.Errorf("collection %d: %s = %d, want %d", i, catalog.AgentEvidence, got, want.kept)
		}
		if got := r.Counters[catalog.AgentEvidenceDrop]; got != want.dropped {
			t.Errorf("collection %d: %s = %d, want %d", i, catalog.AgentEvidenceDrop, got, want.dropped)
		}
	}
}
