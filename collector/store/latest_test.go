package store_test

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestLatestHot: reports of root metrics only (a healthy node's) leave a
// node's stored values of every metric as they were and go to hot; a report
// carrying more folds hot in. Whatever went where, the newest values read
// back, the fleet summary and pruning are those of one merged map
// (migration 021).
func TestLatestHot(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	f := &fleetFixture{t: t, st: st, ids: map[string]int32{}, mid: map[int32]map[string]int32{}}
	id := f.node("hot-1", nil)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	type raw struct {
		// metrics: the values outside hot, the last covering report's
		// (base_*, migration 035) under those merged since (metrics).
		metrics, hot map[string]store.LatestValue
		since        *int64
		worst        int
	}
	read := func() raw {
		t.Helper()
		var m, h []byte
		var r raw
		if err := st.Pool().QueryRow(ctx, `SELECT nbs_latest_base(base_paths, base_vals, base_states, base_times, base_intervals, base_novalue, false, NULL) || metrics,
			hot, (roots->'ping'->>'since')::bigint, worst FROM node_latest WHERE node_id = $1`, id).
			Scan(&m, &h, &r.since, &r.worst); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(m, &r.metrics); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(h, &r.hot); err != nil {
			t.Fatal(err)
		}
		return r
	}
	latest := func() store.Latest {
		t.Helper()
		l, ok, err := st.Latest(ctx, id)
		if err != nil || !ok {
			t.Fatalf("Latest: ok %v, %v", ok, err)
		}
		all, err := st.LatestAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all[id].Metrics) != len(l.Metrics) {
			t.Errorf("LatestAll has %d values of the node, Latest %d", len(all[id].Metrics), len(l.Metrics))
		}
		return l
	}
	want := func(step string, l store.Latest, path string, s store.State, atS int) {
		t.Helper()
		v, ok := l.Metrics[path]
		if !ok || v.State != s || v.TimeMS != at(atS).UnixMilli() {
			t.Errorf("%s: %s = %+v (present %v), want state %v at %s", step, path, v, ok, s, at(atS))
		}
	}

	// A troubled report: the branch below the root is stored with it.
	f.report("hot-1", at(0), store.StateCrit)
	first := read()
	if len(first.hot) != 0 || len(first.metrics) != 3 {
		t.Fatalf("after a report with a child: metrics %v, hot %v; want the 3 in metrics", first.metrics, first.hot)
	}

	// Healthy reports: roots only, into hot; metrics as it was.
	f.report("hot-1", at(10), store.StateOK)
	f.report("hot-1", at(20), store.StateOK)
	r := read()
	if len(r.hot) != 2 || r.hot["ping"].TimeMS != at(20).UnixMilli() {
		t.Errorf("after healthy reports: hot %v, want ping and agent of the last one", r.hot)
	}
	if mb, _ := json.Marshal(r.metrics); string(mb) != string(must(json.Marshal(first.metrics))) {
		t.Errorf("a healthy report changed metrics: %v, was %v", r.metrics, first.metrics)
	}
	if r.since == nil || *r.since != at(10).UnixMilli() || r.worst != 1 {
		t.Errorf("fleet summary: ping since %v, worst %d; want since the first OK report (%d), worst 1 (OK)", r.since, r.worst, at(10).UnixMilli())
	}
	l := latest()
	want("healthy", l, "ping", store.StateOK, 20)
	want("healthy", l, "agent", store.StateOK, 20)
	want("healthy", l, "ping/peer", store.StateCrit, 0) // not reported since: kept as it was
	if !l.Time.Equal(at(20)) {
		t.Errorf("latest time %s, want %s", l.Time, at(20))
	}

	// A late healthy report changes nothing.
	f.report("hot-1", at(5), store.StateOK)
	want("late", latest(), "ping", store.StateOK, 20)

	// Trouble again: hot folds into metrics under the report's values.
	f.report("hot-1", at(30), store.StateWarn)
	r = read()
	if len(r.hot) != 0 || r.metrics["ping"].TimeMS != at(30).UnixMilli() || r.metrics["ping/peer"].State != store.StateWarn {
		t.Errorf("after a report with a child: metrics %v, hot %v; want everything in metrics, of this report", r.metrics, r.hot)
	}
	if r.since == nil || *r.since != at(30).UnixMilli() || r.worst != 3 {
		t.Errorf("fleet summary: ping since %v, worst %d; want since this report, worst 3 (WARN)", r.since, r.worst)
	}

	// Healthy once more, then prune what was last reported before the
	// healthy report: the child goes, from metrics; the roots stay (hot).
	f.report("hot-1", at(40), store.StateOK)
	n, err := st.PruneLatest(ctx, at(35), 100)
	if err != nil {
		t.Fatal(err)
	}
	l = latest()
	if _, ok := l.Metrics["ping/peer"]; ok || n != 1 {
		t.Errorf("pruned %d values; ping/peer still there: %v; want it gone, 1 value", n, ok)
	}
	want("pruned", l, "ping", store.StateOK, 40)
	if _, err := st.PruneLatest(ctx, at(45), 100); err != nil {
		t.Fatal(err)
	}
	if l := latest(); len(l.Metrics) != 0 {
		t.Errorf("pruned everything before the newest report: %v left", l.Metrics)
	}
	if r := read(); len(r.hot) != 0 || len(r.metrics) != 0 {
		t.Errorf("pruned everything: metrics %v, hot %v left", r.metrics, r.hot)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestLatestMergeKeySets: a report carrying more than roots replaces a
// node's stored values outright only when it carries every key stored
// (migration 032); whichever way it went, the newest values read back are
// those of merging every report in turn, a key not reported since kept
// with its time. metrics_keys is set exactly when the stored keys are the
// last report's.
func TestLatestMergeKeySets(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	id, err := st.UpsertNode(ctx, store.Node{Name: "keys-1", IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var defs []store.MetricDef
	for _, p := range []string{"a", "a/x", "a/y", "b", "b/z", "c"} {
		defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "x", Kind: store.KindGauge})
	}
	mids, err := st.UpsertDefinitions(ctx, id, defs)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	model := map[string]store.LatestValue{}
	for i, step := range []struct {
		name  string
		paths []string
		// keysKnown: metrics_keys is set after it (the stored keys are
		// the report's).
		keysKnown bool
	}{
		{"first report", []string{"a", "a/x", "a/y", "b"}, true},
		{"the same keys", []string{"a", "a/x", "a/y", "b"}, true},
		{"a key gone", []string{"a", "a/x", "b"}, false},
		{"still gone", []string{"a", "a/x", "b"}, false},
		{"more keys than stored", []string{"a", "a/x", "a/y", "b", "b/z"}, true},
		{"roots only, one new (into hot)", []string{"a", "b", "c"}, true},
		{"the stored keys but not hot's", []string{"a", "a/x", "a/y", "b", "b/z"}, false},
		{"every key", []string{"a", "a/x", "a/y", "b", "b/z", "c"}, true},
	} {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		r := store.Report{NodeID: id, InstanceID: 1, Seq: uint64(i + 1), Time: at, IntervalMS: 10000}
		for j, p := range step.paths {
			v := float64(i*10 + j)
			r.Samples = append(r.Samples, store.Sample{MetricID: mids[p], Path: p, Value: v, State: store.StateOK})
			model[p] = store.LatestValue{Value: v, State: store.StateOK, TimeMS: at.UnixMilli(), IntervalMS: 10000}
		}
		if _, err := st.WriteReports(ctx, []store.Report{r}); err != nil {
			t.Fatal(err)
		}
		l, ok, err := st.Latest(ctx, id)
		if err != nil || !ok {
			t.Fatalf("%s: Latest: ok %v, %v", step.name, ok, err)
		}
		if got, want := must(json.Marshal(l.Metrics)), must(json.Marshal(model)); string(got) != string(want) {
			t.Errorf("%s: newest values\n%s\nwant\n%s", step.name, got, want)
		}
		var known bool
		if err := st.Pool().QueryRow(ctx, `SELECT metrics_keys IS NOT NULL FROM node_latest WHERE node_id = $1`, id).Scan(&known); err != nil {
			t.Fatal(err)
		}
		if known != step.keysKnown {
			t.Errorf("%s: metrics_keys set %v, want %v", step.name, known, step.keysKnown)
		}
	}
	// A prune changes the stored keys: the next report must look.
	if _, err := st.PruneLatest(ctx, t0.Add(75*time.Second), 100); err != nil {
		t.Fatal(err)
	}
	var known bool
	if err := st.Pool().QueryRow(ctx, `SELECT metrics_keys IS NOT NULL FROM node_latest WHERE node_id = $1`, id).Scan(&known); err != nil {
		t.Fatal(err)
	}
	if known {
		t.Error("after a prune: metrics_keys still set")
	}
}

// TestLatestArraysRoundTrip: a report that carries every key is stored as
// arrays (base_*, migration 035) and built back into jsonb by readers; every
// shape of value reads back as it was written, as it does through jsonb (a
// roots-only report's, into hot), and a value that jsonb cannot hold is
// refused rather than stored as something else.
func TestLatestArraysRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	id, err := st.UpsertNode(ctx, store.Node{Name: "arrays-1", IntervalMS: 10000})
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]store.Sample{
		"a": {Value: 0}, "b": {Value: -0.5, State: store.StateWarn}, "c/d": {Value: 1e-7}, "c/e": {Value: 1e21},
		"c/f": {Value: 123456789.125, State: store.StateCrit}, "c/g": {Value: -3e-300}, "c/h": {Value: math.MaxFloat64},
		"c/i": {Value: 5e-324}, "c/j": {Value: 1e20}, "c/k": {Value: 0.000001}, "c/l": {NoValue: true, State: store.StateUnknown},
		"c/m": {NoValue: true, Value: 7, State: store.StateOK},
	}
	var defs []store.MetricDef
	for p := range values {
		defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "x", Kind: store.KindGauge})
	}
	mids, err := st.UpsertDefinitions(ctx, id, defs)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	report := func(seq uint64, at time.Time, paths ...string) store.Report {
		r := store.Report{NodeID: id, InstanceID: 1, Seq: seq, Time: at, IntervalMS: 10000}
		for _, p := range paths {
			s := values[p]
			s.MetricID, s.Path = mids[p], p
			r.Samples = append(r.Samples, s)
		}
		return r
	}
	var all []string
	for p := range values {
		all = append(all, p)
	}
	if _, err := st.WriteReports(ctx, []store.Report{report(1, at, all...)}); err != nil {
		t.Fatal(err)
	}
	var arrays int
	if err := st.Pool().QueryRow(ctx, `SELECT coalesce(cardinality(base_paths), -1) FROM node_latest WHERE node_id = $1`, id).Scan(&arrays); err != nil {
		t.Fatal(err)
	}
	if arrays != len(values) {
		t.Fatalf("base_paths holds %d values, want all %d (the report carried every key)", arrays, len(values))
	}
	if err := st.Pool().QueryRow(ctx, `SELECT coalesce(cardinality(base_times), -1) FROM node_latest WHERE node_id = $1`, id).Scan(&arrays); err != nil {
		t.Fatal(err)
	}
	if arrays != 1 {
		t.Errorf("base_times holds %d times, want 1 (every value is of one report)", arrays)
	}
	l, ok, err := st.Latest(ctx, id)
	if err != nil || !ok {
		t.Fatalf("Latest: ok %v, %v", ok, err)
	}
	want := map[string]store.LatestValue{}
	for p, s := range values {
		want[p] = store.LatestValue{Value: s.Value, State: s.State, TimeMS: at.UnixMilli(), IntervalMS: 10000, NoValue: s.NoValue}
	}
	if !reflect.DeepEqual(l.Metrics, want) {
		t.Errorf("read back from arrays:\n%+v\nwant\n%+v", l.Metrics, want)
	}
	// The roots the same through jsonb: a roots-only report goes to hot.
	at2 := at.Add(10 * time.Second)
	if _, err := st.WriteReports(ctx, []store.Report{report(2, at2, "a", "b")}); err != nil {
		t.Fatal(err)
	}
	if l, _, err = st.Latest(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		want[p] = store.LatestValue{Value: values[p].Value, State: values[p].State, TimeMS: at2.UnixMilli(), IntervalMS: 10000}
	}
	if !reflect.DeepEqual(l.Metrics, want) {
		t.Errorf("after a roots-only report:\n%+v\nwant\n%+v", l.Metrics, want)
	}
	// Two reports of a batch: every key, then some (one below a root) 10 s
	// later, one merge of values of two times.
	at3, at4 := at2.Add(10*time.Second), at2.Add(20*time.Second)
	if _, err := st.WriteReports(ctx, []store.Report{report(3, at3, all...), report(4, at4, "a", "c/d", "c/m")}); err != nil {
		t.Fatal(err)
	}
	for p, s := range values {
		want[p] = store.LatestValue{Value: s.Value, State: s.State, TimeMS: at3.UnixMilli(), IntervalMS: 10000, NoValue: s.NoValue}
		if p == "a" || p == "c/d" || p == "c/m" {
			want[p] = store.LatestValue{Value: s.Value, State: s.State, TimeMS: at4.UnixMilli(), IntervalMS: 10000, NoValue: s.NoValue}
		}
	}
	if l, _, err = st.Latest(ctx, id); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Metrics, want) {
		t.Errorf("after a batch of two reports:\n%+v\nwant\n%+v", l.Metrics, want)
	}
	if err := st.Pool().QueryRow(ctx, `SELECT coalesce(cardinality(base_times), -1) FROM node_latest WHERE node_id = $1`, id).Scan(&arrays); err != nil {
		t.Fatal(err)
	}
	if arrays != len(values) {
		t.Errorf("base_times holds %d times, want one a value (%d): they differ", arrays, len(values))
	}
	bad := report(5, at4.Add(10*time.Second), all...)
	bad.Samples[0].Value = math.Inf(1)
	if _, err := st.WriteReports(ctx, []store.Report{bad}); err == nil || !strings.Contains(err.Error(), "unsupported value") {
		t.Errorf("a report with an infinite value: %v, want refused (unsupported value)", err)
	}
}
