package app

import (
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/agent/tree"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// ledgerTree is a root with a histogram child (WARN at a p99 of 10 ms, so a
// test turns it non-OK by recording slow values) and a counter beside it.
func ledgerTree() *tree.Tree {
	t := tree.New()
	t.Define(
		catalog.Metric{ID: "ping", Kind: catalog.Gauge},
		catalog.Metric{ID: "ping/x", Kind: catalog.Histogram, Quantile: 0.99, Scale: 1e6,
			Threshold: &catalog.Threshold{Warn: 10, Crit: 100, Hold: 1}},
		catalog.Metric{ID: "ping/y", Kind: catalog.Rate}, // a sibling: its increases do not pull ping/x
	)
	return t
}

// step is one interval: values recorded (ns) into ping/x, the cumulative
// sent counter (absent when < 0: the source missed it), and a snapshot flag.
type step struct {
	values []uint64
	sent   int64
	full   bool
}

type ledgerRun struct {
	reports []*nbsv1.Report
	states  []nbsv1.State
}

func runLedger(t *testing.T, steps []step) ledgerRun {
	t.Helper()
	tr, led := ledgerTree(), newLedger()
	start := time.Unix(1_700_000_000, 0)
	led.baseline(reading{counters: map[string]uint64{"ping/y": 0}}, carried{}, origin{})
	var out ledgerRun
	for i, s := range steps {
		h := loglinear.New()
		for _, v := range s.values {
			h.Record(v)
		}
		cur := reading{counters: map[string]uint64{}, gauges: map[string]float64{"ping": 1},
			histograms: map[string]*loglinear.Histogram{"ping/x": h}}
		if s.sent >= 0 {
			cur.counters["ping/y"] = uint64(s.sent)
		}
		now := start.Add(time.Duration(i+1) * 10 * time.Second)
		rep, res := led.build(tr, now, 10*time.Second, cur, s.full)
		out.reports = append(out.reports, rep)
		out.states = append(out.states, res.State["ping/x"])
	}
	return out
}

func histOf(r *nbsv1.Report, id string) *nbsv1.Histogram {
	for _, h := range r.GetHistograms() {
		if h.GetMetricId() == id {
			return h
		}
	}
	return nil
}

func sampleOf(r *nbsv1.Report, id string) *nbsv1.Sample {
	for _, s := range r.GetSamples() {
		if s.GetMetricId() == id {
			return s
		}
	}
	return nil
}

const ms = uint64(time.Millisecond)

func TestLedgerDefersQuietHistogramUntilStreamed(t *testing.T) {
	steps := []step{
		{values: []uint64{1 * ms, 2 * ms}, sent: 2},
		{values: []uint64{1 * ms}, sent: 3},
		{values: nil, sent: 3},
		{values: []uint64{3 * ms, 4 * ms}, sent: 5},
		{values: []uint64{50 * ms}, sent: 6}, // WARN: streamed, carries the backlog
	}
	run := runLedger(t, steps)
	for i := range 4 {
		if h := histOf(run.reports[i], "ping/x"); h != nil {
			t.Errorf("interval %d: healthy child's histogram streamed: %v", i, h)
		}
		if run.states[i] != tree.OK {
			t.Errorf("interval %d: state %v, want OK", i, run.states[i])
		}
	}
	if run.states[4] != tree.Warn {
		t.Fatalf("interval 4: state %v, want WARN", run.states[4])
	}
	h := histOf(run.reports[4], "ping/x")
	if h == nil {
		t.Fatal("the WARN interval carries no histogram")
	}
	if h.GetCount() != 6 {
		t.Errorf("count %d, want 6 (every observation since the start)", h.GetCount())
	}
	if want := float64(1+2+1+3+4+50) * float64(ms); h.GetSum() != want {
		t.Errorf("sum %v, want %v", h.GetSum(), want)
	}
	// The span starts at the first interval with observations (the start).
	if want := time.Unix(1_700_000_000, 0).UnixNano(); h.GetStartUnixNano() != want {
		t.Errorf("start %d, want %d", h.GetStartUnixNano(), want)
	}
	// The counter's increases are streamed as they happen and sum to the total.
	var sent float64
	for _, r := range run.reports {
		if s := sampleOf(r, "ping/y"); s != nil {
			sent += s.GetValue()
		}
	}
	if sent != 6 {
		t.Errorf("streamed sent increases sum to %v, want 6", sent)
	}
	if s := sampleOf(run.reports[2], "ping/y"); s != nil {
		t.Errorf("a counter with no increase was streamed: %v", s)
	}
}

func TestLedgerSnapshotFlushesEverything(t *testing.T) {
	run := runLedger(t, []step{
		{values: []uint64{1 * ms}, sent: 1},
		{values: []uint64{2 * ms}, sent: 2, full: true},
		{values: []uint64{3 * ms}, sent: 3},
		{values: nil, sent: 3, full: true},
		{values: nil, sent: 3, full: true},
	})
	h := histOf(run.reports[1], "ping/x")
	if h == nil || h.GetCount() != 2 {
		t.Fatalf("first snapshot histogram %v, want count 2", h)
	}
	h = histOf(run.reports[3], "ping/x")
	if h == nil || h.GetCount() != 1 {
		t.Fatalf("second snapshot histogram %v, want count 1 (the interval before)", h)
	}
	if want := time.Unix(1_700_000_000, 0).Add(20 * time.Second).UnixNano(); h.GetStartUnixNano() != want {
		t.Errorf("start %d, want %d (the interval after the first snapshot)", h.GetStartUnixNano(), want)
	}
	if h := histOf(run.reports[4], "ping/x"); h != nil {
		t.Errorf("a snapshot with nothing accumulated carries %v", h)
	}
	if s := sampleOf(run.reports[4], "ping/x"); s == nil {
		t.Error("a snapshot lacks the child's sample")
	}
}

func TestLedgerNothingLostAcrossStateFlips(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
	}{
		{"ok-warn-ok", []step{
			{values: []uint64{1 * ms, 1 * ms}},
			{values: []uint64{40 * ms}},
			{values: []uint64{1 * ms}},
			{values: []uint64{2 * ms, 2 * ms}},
			{values: []uint64{1 * ms}, full: true},
		}},
		{"warn-ok-warn", []step{
			{values: []uint64{40 * ms}},
			{values: []uint64{1 * ms}},
			{values: []uint64{1 * ms}},
			{values: []uint64{60 * ms, 1 * ms}},
			{values: nil},
		}},
		{"ends-unflushed", []step{
			{values: []uint64{40 * ms}},
			{values: []uint64{1 * ms, 2 * ms}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.steps {
				tc.steps[i].sent = -1
			}
			run := runLedger(t, tc.steps)
			var recorded, streamed uint64
			for _, s := range tc.steps {
				recorded += uint64(len(s.values))
			}
			for i, r := range run.reports {
				h := histOf(r, "ping/x")
				if run.states[i] != tree.OK && h == nil && len(tc.steps[i].values) > 0 {
					t.Errorf("interval %d is %v but carries no histogram", i, run.states[i])
				}
				if h != nil {
					streamed += h.GetCount()
				}
			}
			if tc.name == "ends-unflushed" {
				// The last interval's observations wait for the next report.
				recorded -= 2
			}
			if streamed != recorded {
				t.Errorf("streamed %d observations, recorded %d", streamed, recorded)
			}
		})
	}
}

func TestLedgerCountersAcrossMissedReadingsAndNewMetrics(t *testing.T) {
	run := runLedger(t, []step{
		{sent: 10},
		{sent: -1}, // the source missed this collection
		{sent: 15},
		{sent: 15},
	})
	want := []float64{10, 0, 5, 0}
	for i, r := range run.reports {
		got := 0.0
		if s := sampleOf(r, "ping/y"); s != nil {
			got = s.GetValue()
		}
		if got != want[i] {
			t.Errorf("interval %d: increase %v, want %v", i, got, want[i])
		}
	}

	// A counter first seen after the baseline counts from its source's 0; a
	// retired one counts afresh when it comes back.
	tr, led := ledgerTree(), newLedger()
	now := time.Unix(1_700_000_000, 0)
	led.baseline(reading{}, carried{}, origin{})
	r, _ := led.build(tr, now.Add(10*time.Second), 10*time.Second, reading{counters: map[string]uint64{"ping/y": 4}}, false)
	if s := sampleOf(r, "ping/y"); s == nil || s.GetValue() != 4 {
		t.Errorf("new counter: sample %v, want 4", s)
	}
	led.retire([]string{"ping/y"})
	r, _ = led.build(tr, now.Add(20*time.Second), 10*time.Second, reading{counters: map[string]uint64{"ping/y": 2}}, false)
	if s := sampleOf(r, "ping/y"); s == nil || s.GetValue() != 2 {
		t.Errorf("counter after retirement: sample %v, want 2", s)
	}
}

// A restarted agent's sources count from their own start: the first report
// counts from the new baseline, never from 0 of the old run nor as a spike.
func TestLedgerRestartCountsFromBaseline(t *testing.T) {
	tr, led := ledgerTree(), newLedger()
	now := time.Unix(1_700_000_000, 0)
	led.baseline(reading{counters: map[string]uint64{"ping/y": 3}}, carried{}, origin{})
	r, _ := led.build(tr, now.Add(10*time.Second), 10*time.Second, reading{counters: map[string]uint64{"ping/y": 13}}, false)
	if s := sampleOf(r, "ping/y"); s == nil || s.GetValue() != 10 {
		t.Errorf("first interval after a start: sample %v, want the increase since the baseline, 10", s)
	}
}

// A root is streamed every interval for its state; without a value (its
// source measured nothing) the sample says so instead of passing 0 off as
// a measurement.
func TestLedgerRootWithoutValue(t *testing.T) {
	tr, led := ledgerTree(), newLedger()
	now := time.Unix(1_700_000_000, 0)
	led.baseline(reading{}, carried{}, origin{})
	for i, c := range []struct {
		gauges  map[string]float64
		noValue bool
	}{
		{map[string]float64{}, true},
		{map[string]float64{"ping": 0}, false}, // a real 0 is a value
		{map[string]float64{"ping": 2.5}, false},
	} {
		r, res := led.build(tr, now.Add(time.Duration(i+1)*10*time.Second), 10*time.Second, reading{gauges: c.gauges}, false)
		s := sampleOf(r, "ping")
		if s == nil {
			t.Fatalf("interval %d: the root was not streamed", i)
		}
		if s.GetNoValue() != c.noValue || s.GetValue() != c.gauges["ping"] {
			t.Errorf("interval %d: sample %v, want value %v, no_value %v", i, s, c.gauges["ping"], c.noValue)
		}
		if c.noValue && res.Own["ping"] != tree.Unknown {
			t.Errorf("interval %d: root without a value is %v, want UNKNOWN", i, res.Own["ping"])
		}
	}
}

// An interval in which a histogram had no samples sends it (in a
// snapshot) with no value and an OK state: 0 ms would read as a fast
// network. An interval with samples sends its quantile.
func TestLedgerEmptyHistogramHasNoValue(t *testing.T) {
	run := runLedger(t, []step{
		{values: []uint64{2 * ms}, sent: 0, full: true},
		{values: nil, sent: 0, full: true},
	})
	for i, want := range []struct {
		noValue bool
		state   nbsv1.State
	}{{false, nbsv1.State_STATE_OK}, {true, nbsv1.State_STATE_OK}} {
		s := sampleOf(run.reports[i], "ping/x")
		if s == nil || s.GetNoValue() != want.noValue || s.GetState() != want.state || (want.noValue && s.GetValue() != 0) || (!want.noValue && s.GetValue() <= 0) {
			t.Errorf("interval %d: ping/x sample %v; want no_value %v, state %v", i, s, want.noValue, want.state)
		}
	}
}
