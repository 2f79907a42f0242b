package store

import (
	"context"
	"math"
	"testing"
	"time"
)

// A sample with no value (a ping root whose every echo was lost) counts in
// its state and nowhere else: the aggregate's n, sum, min and max are of
// values, and an aggregate of no value at all keeps min and max at the
// identities SQL's min() and max() pass over.
func TestSampleAggNoValue(t *testing.T) {
	type in struct {
		v     float64
		none  bool
		state State
	}
	inf := math.Inf(1)
	for _, c := range []struct {
		name     string
		samples  []in
		wantN    int64
		wantSum  float64
		min, max float64
		crit, ok float64
	}{
		{"values only", []in{{2, false, StateOK}, {6, false, StateOK}}, 2, 8, 2, 6, 0, 20},
		{"no value only", []in{{0, true, StateCrit}, {0, true, StateCrit}}, 0, 0, inf, -inf, 20, 0},
		{"no value first", []in{{0, true, StateCrit}, {5, false, StateOK}}, 1, 5, 5, 5, 10, 10},
		{"no value last", []in{{5, false, StateOK}, {0, true, StateCrit}}, 1, 5, 5, 5, 10, 10},
		{"no value between", []in{{3, false, StateOK}, {0, true, StateCrit}, {1, false, StateOK}}, 2, 4, 1, 3, 10, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := func(how string, a SampleAgg) {
				t.Helper()
				if a.N != c.wantN || a.Sum != c.wantSum || a.Min != c.min || a.Max != c.max || a.Crit != c.crit || a.OK != c.ok {
					t.Errorf("%s: %+v, want n %d sum %v min %v max %v crit %v ok %v", how, a, c.wantN, c.wantSum, c.min, c.max, c.crit, c.ok)
				}
			}
			// One report each, through Rollups.Add, as the write path and
			// the raw read path fold them.
			acc := NewRollups()
			for i, s := range c.samples {
				acc.Add(Report{NodeID: 1, Time: time.Unix(600+int64(i)*10, 0), IntervalMS: 10000,
					Samples: []Sample{{MetricID: 7, Value: s.v, State: s.state, NoValue: s.none}}}, RollupHour)
			}
			if len(acc.Samples) != 1 {
				t.Fatalf("%d buckets, want 1", len(acc.Samples))
			}
			for _, a := range acc.Samples {
				check("added", *a)
			}
			// The same, each sample its own aggregate merged in, as an hour
			// reads its minutes.
			var m SampleAgg
			for _, s := range c.samples {
				var one SampleAgg
				if s.none {
					one.addNoValue(s.state, 10)
				} else {
					one.add(s.v, s.state, 10)
				}
				m.Merge(one)
			}
			check("merged", m)
		})
	}
}

// An interval whose sample had no value stays without one in history: the
// raw series counts it in the step's state only, the minute rollup has it
// in crit seconds with n 0, an hour's min, max and mean are of the values,
// the inputs of a median skip it, and reading reports back gives it no
// value.
func TestNoValueStaysAbsentInHistory(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "lossy", InstanceID: 1, IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "ping", Title: "Ping", Unit: "ms", Kind: KindGauge}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	// Minute 0: 2, 4, 6 ms, OK. Minute 1: every echo lost, CRIT, no value.
	// Minute 2: 5 ms, then two intervals lost.
	type smp struct {
		v    float64
		none bool
	}
	minutes := [][]smp{{{2, false}, {4, false}, {6, false}}, {{0, true}, {0, true}, {0, true}}, {{5, false}, {0, true}, {0, true}}}
	var batch []Report
	seq := uint64(0)
	for m, reps := range minutes {
		for i, s := range reps {
			seq++
			state := StateOK
			if s.none {
				state = StateCrit
			}
			batch = append(batch, Report{NodeID: node, InstanceID: 1, Seq: seq, Time: t0.Add(time.Duration(m)*time.Minute + time.Duration(i)*20*time.Second),
				IntervalMS: 10000, Samples: []Sample{{MetricID: ids["ping"], Path: "ping", Value: s.v, State: state, NoValue: s.none}}})
		}
	}
	if _, err := st.WriteReports(ctx, batch); err != nil {
		t.Fatal(err)
	}

	buckets, err := st.Series(ctx, node, "ping", t0, t0.Add(3*time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wantBuckets := []struct {
		present int
		sum     float64
		max     float64
		worst   State
	}{{3, 12, 6, StateOK}, {0, 0, 0, StateCrit}, {1, 5, 5, StateCrit}}
	if len(buckets) != len(wantBuckets) {
		t.Fatalf("series: %d steps, want %d: %+v", len(buckets), len(wantBuckets), buckets)
	}
	for i, w := range wantBuckets {
		b := buckets[i]
		if b.Present != w.present || b.Sum != w.sum || b.Max != w.max || b.Worst != w.worst || b.Reports != 3 {
			t.Errorf("series step %d: present %d sum %v max %v worst %v reports %d, want %d %v %v %v 3", i, b.Present, b.Sum, b.Max, b.Worst, b.Reports, w.present, w.sum, w.max, w.worst)
		}
	}

	// The intervals without a value were CRIT: in breach, out of a baseline.
	vals, err := st.BaselineValues(ctx, node, "ping", t0, t0.Add(time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	var nan, values int
	for _, v := range vals {
		if math.IsNaN(v) {
			nan++
		} else {
			values++
		}
	}
	if nan != 0 || values != 4 {
		t.Errorf("baseline values %v: %d NaN and %d values, want 0 and 4", vals, nan, values)
	}

	reps, err := st.ReportsAfter(ctx, []ReportCursor{{NodeID: node, After: t0.Add(-time.Second), Lookback: 3 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	var none int
	for _, r := range reps {
		for _, s := range r.Samples {
			if s.NoValue {
				none++
				if s.Value != 0 {
					t.Errorf("report %d: no value carries %v", r.Seq, s.Value)
				}
			}
		}
	}
	if len(reps) != 9 || none != 5 {
		t.Errorf("reports after: %d reports, %d samples without a value; want 9 and 5", len(reps), none)
	}

	if _, err := st.FoldRollups(ctx, FoldOptions{Now: t0.Add(90 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	inf := math.Inf(1)
	for _, c := range []struct {
		name string
		res  int32
		raw  bool
		want []SampleAgg
	}{
		{"minutes", RollupMinute, false, []SampleAgg{
			{N: 3, Sum: 12, Min: 2, Max: 6, OK: 30},
			{N: 0, Sum: 0, Min: inf, Max: -inf, Crit: 30},
			{N: 1, Sum: 5, Min: 5, Max: 5, OK: 10, Crit: 20},
		}},
		{"minutes from raw reports", RollupMinute, true, []SampleAgg{
			{N: 3, Sum: 12, Min: 2, Max: 6, OK: 30},
			{N: 0, Sum: 0, Min: inf, Max: -inf, Crit: 30},
			{N: 1, Sum: 5, Min: 5, Max: 5, OK: 10, Crit: 20},
		}},
		{"hour", RollupHour, false, []SampleAgg{{N: 4, Sum: 17, Min: 2, Max: 6, OK: 40, Crit: 50}}},
	} {
		rows, _, err := st.ReadRollups(ctx, RollupQuery{NodeIDs: []int32{node}, Res: c.res, From: t0, To: t0.Add(time.Hour), Raw: c.raw})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(rows) != len(c.want) {
			t.Fatalf("%s: %d rows, want %d: %+v", c.name, len(rows), len(c.want), rows)
		}
		for _, r := range rows {
			i := int(r.TS.Sub(t0) / time.Duration(c.res) / time.Second)
			if r.SampleAgg != c.want[i] {
				t.Errorf("%s: row %d %+v, want %+v", c.name, i, r.SampleAgg, c.want[i])
			}
		}
	}
}

// BaselineValues are a baseline's inputs as the agent keeps them: reports
// in breach (stored state not OK) are left out and not counted in the
// limit; a report without the metric, or without its value, is NaN.
func TestBaselineValuesLeaveOutBreach(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "b", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "rtt", Title: "RTT", Unit: "ms", Kind: KindGauge},
		{Path: "other", Title: "Other", Unit: "", Kind: KindGauge}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	rtt := func(v float64, s State, none bool) []Sample {
		return []Sample{{MetricID: ids["rtt"], Path: "rtt", Value: v, State: s, NoValue: none}}
	}
	var batch []Report
	for i, smp := range [][]Sample{
		rtt(1, StateOK, false), rtt(2, StateOK, false), rtt(3, StateOK, false),
		rtt(50, StateCrit, false), rtt(60, StateWarn, false),
		{{MetricID: ids["other"], Path: "other", Value: 1, State: StateOK}},
		rtt(4, StateOK, false), rtt(0, StateOK, true),
	} {
		batch = append(batch, Report{NodeID: node, InstanceID: 1, Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Second), IntervalMS: 1000, Samples: smp})
	}
	if _, err := st.WriteReports(ctx, batch); err != nil {
		t.Fatal(err)
	}
	got, err := st.BaselineValues(ctx, node, "rtt", t0, t0.Add(time.Minute), 6)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{math.NaN(), 4, math.NaN(), 3, 2, 1}
	if len(got) != len(want) {
		t.Fatalf("baseline values %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			t.Fatalf("baseline values %v, want %v", got, want)
		}
	}
}
