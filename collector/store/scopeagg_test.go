package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// The day fold keeps the per-scope pre-aggregate: each scope's day is the
// sum of its nodes' day rollups, and a read serves only what it covers
// exactly (its nodes all in the report, every day folded, nothing pending
// or dirty, retention not past it).
func TestScopeDaysFoldedWithTheDay(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	f := newFoldFleet(t, st, 3)
	a, b := f.nodes[:2], f.nodes[2:]
	if _, err := st.pool.Exec(ctx, `UPDATE nodes SET tenant = CASE WHEN id = ANY($1) THEN 'a' ELSE 'b' END`, a); err != nil {
		t.Fatal(err)
	}
	const day = 24 * time.Hour
	d0 := time.Now().UTC().Truncate(day).Add(-2 * day)
	d1 := d0.Add(day)
	if err := st.SetFoldWatermark(ctx, RollupHour, d0.Add(22*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFoldWatermark(ctx, RollupDay, d0); err != nil {
		t.Fatal(err)
	}
	f.write(t, d0.Add(22*time.Hour), d1.Add(30*time.Minute))
	read := func(t *testing.T, scope string, nodes []int32, from, to time.Time) ([]SampleRow, []HistogramRow, bool) {
		t.Helper()
		s, h, ok, err := st.ReadScopeDays(ctx, ScopeDayQuery{Scope: scope, NodeIDs: nodes, From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		return s, h, ok
	}
	if _, _, ok := read(t, FleetScope, f.nodes, d0, d1); ok {
		t.Fatal("served a day not folded yet")
	}
	f.fold(t, d1.Add(30*time.Minute))

	// The sums of the day rollups of nodes, a row per metric.
	want := func(t *testing.T, nodes []int32) map[string]SampleAgg {
		t.Helper()
		s, h, err := st.ReadRollups(ctx, RollupQuery{NodeIDs: nodes, Res: RollupDay, From: d0, To: d1})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]SampleAgg{}
		for _, r := range s {
			a := out[r.Path]
			a.Merge(r.SampleAgg)
			out[r.Path] = a
		}
		for _, r := range h {
			a := out[r.Path]
			a.N += int64(r.Count)
			for _, c := range r.Counts {
				a.Sum += float64(c)
			}
			out[r.Path] = a
		}
		return out
	}
	got := func(s []SampleRow, h []HistogramRow) map[string]SampleAgg {
		out := map[string]SampleAgg{}
		for _, r := range s {
			if r.NodeID != 0 || !r.TS.Equal(d0) {
				t.Errorf("row %+v: want node 0 at %s", r, d0)
			}
			out[r.Path] = r.SampleAgg
		}
		for _, r := range h {
			a := out[r.Path]
			a.N += int64(r.Count)
			for _, c := range r.Counts {
				a.Sum += float64(c)
			}
			out[r.Path] = a
		}
		return out
	}
	for _, c := range []struct {
		name  string
		scope string
		nodes []int32
	}{{"fleet", FleetScope, f.nodes}, {"tenant a", "a", a}, {"tenant b", "b", b}} {
		t.Run(c.name, func(t *testing.T) {
			s, h, ok := read(t, c.scope, c.nodes, d0, d1)
			if !ok {
				t.Fatal("a folded day not served")
			}
			g, w := got(s, h), want(t, c.nodes)
			if len(w) != 3 || len(g) != len(w) {
				t.Fatalf("metrics %v, want %v", g, w)
			}
			for p, wa := range w {
				ga := g[p]
				if ga.N != wa.N || ga.Min != wa.Min || ga.Max != wa.Max || ga.Sum != wa.Sum || ga.OK != wa.OK || ga.Warn != wa.Warn || ga.Crit != wa.Crit {
					t.Errorf("%s: %+v, want the day rollups' sum %+v", p, ga, wa)
				}
			}
		})
	}
	t.Run("not covered exactly", func(t *testing.T) {
		if _, _, ok := read(t, "a", a[:1], d0, d1); ok {
			t.Error("tenant a served for one of its two nodes")
		}
		if _, _, ok := read(t, FleetScope, a, d0, d1); ok {
			t.Error("the fleet served for tenant a's nodes")
		}
		if _, _, ok := read(t, "c", nil, d0, d1); ok {
			t.Error("a scope with no pre-aggregate served")
		}
		if _, _, ok := read(t, FleetScope, f.nodes, d0, d1.Add(day)); ok {
			t.Error("a day not folded served")
		}
	})
	// The fold's per-node copy (migration 033) is the day rollups of the
	// roots and ping targets, row for row; a day folded before it was
	// there is read from the day rollups, and a metric it does not copy is
	// refused.
	t.Run("per-node copy", func(t *testing.T) {
		q := NodePeriodQuery{NodeIDs: f.nodes, From: d0, To: d1}
		key := func(r HistogramRow) string { return fmt.Sprintf("%d %s %s", r.NodeID, r.Path, r.TS.UTC()) }
		_, wantH, err := st.ReadRollups(ctx, RollupQuery{NodeIDs: f.nodes, Res: RollupDay, From: d0, To: d1})
		if err != nil {
			t.Fatal(err)
		}
		gotH, ok, err := st.ReadNodeDayHistograms(ctx, q)
		if err != nil || !ok {
			t.Fatalf("ReadNodeDayHistograms of a folded day: ok %v, %v", ok, err)
		}
		if len(gotH) == 0 || len(gotH) != len(wantH) {
			t.Fatalf("%d histogram rows, want the day rollups' %d", len(gotH), len(wantH))
		}
		byKey := map[string]HistogramRow{}
		for _, r := range wantH {
			byKey[key(r)] = r
		}
		for _, r := range gotH {
			w, ok := byKey[key(r)]
			if !ok || r.Count != w.Count || r.Sum != w.Sum || !slices.Equal(r.Index, w.Index) || !slices.Equal(r.Counts, w.Counts) {
				t.Errorf("copy %s: %d %g %v %v, want %+v", key(r), r.Count, r.Sum, r.Index, r.Counts, w)
			}
		}
		sums := func(t *testing.T) map[string]SampleAgg {
			t.Helper()
			rows, ok, err := st.ReadNodePeriodSamples(ctx, q)
			if err != nil || !ok {
				t.Fatalf("ReadNodePeriodSamples: ok %v, %v", ok, err)
			}
			out := map[string]SampleAgg{}
			for _, r := range rows {
				out[fmt.Sprintf("%d %s", r.NodeID, r.Path)] = r.SampleAgg
			}
			return out
		}
		copied := sums(t)
		if len(copied) != 2*len(f.nodes) {
			t.Errorf("%d per-node sums, want 2 metrics of %d nodes", len(copied), len(f.nodes))
		}
		// As folded before the migration: no copy of the day.
		if _, err := st.pool.Exec(ctx, `UPDATE rollup_scope_nodes SET per_node = false WHERE day = $1`, d0); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := st.ReadNodeDayHistograms(ctx, q); err != nil || ok {
			t.Errorf("served a day without its copy (%v)", err)
		}
		if perNode := sums(t); !maps.Equal(perNode, copied) {
			t.Errorf("sums of the copy %v, of the day rollups %v", copied, perNode)
		}
		if n, err := st.BackfillScopeDays(ctx, time.Time{}, 0, 10); err != nil || n != 1 {
			t.Fatalf("backfilled %d days (%v), want the one without its copy", n, err)
		}
		if _, ok, err := st.ReadNodeDayHistograms(ctx, q); err != nil || !ok {
			t.Errorf("not served after the backfill (%v)", err)
		}
		// A metric outside the copy, asked for: refused.
		if _, err := st.pool.Exec(ctx, `INSERT INTO metric_paths (path) VALUES ('latency/tx')`); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := st.ReadNodeDayHistograms(ctx, NodePeriodQuery{NodeIDs: f.nodes, From: d0, To: d1,
			Match: func(p string) bool { return p == "latency/tx" || p == "ping/a" }}); err != nil || ok {
			t.Errorf("served a metric the fold does not copy (%v)", err)
		}
	})
	t.Run("late report: refused until folded, then its sum", func(t *testing.T) {
		f.writeBatch(t, []Report{f.report(a[0], d0.Add(23*time.Hour+10*time.Second))})
		if _, _, ok := read(t, "a", a, d0, d1); ok {
			t.Error("served with a report pending for the day")
		}
		f.fold(t, d1.Add(40*time.Minute))
		s, h, ok := read(t, "a", a, d0, d1)
		if !ok {
			t.Fatal("not served after the fold")
		}
		g, w := got(s, h), want(t, a)
		for p, wa := range w {
			if g[p].N != wa.N {
				t.Errorf("%s: n %d, want %d", p, g[p].N, wa.N)
			}
		}
	})
	t.Run("backfill of days folded before the pre-aggregate", func(t *testing.T) {
		if _, err := st.pool.Exec(ctx, `DELETE FROM rollup_scope_nodes; DELETE FROM rollup_scope_samples; DELETE FROM rollup_scope_histograms`); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := read(t, "a", a, d0, d1); ok {
			t.Fatal("served a day without its pre-aggregate")
		}
		// The one day folded (d0): none before it, where no node was seen
		// yet, though retention (800 days) reaches back that far.
		n, err := st.BackfillScopeDays(ctx, time.Time{}, 0, 10)
		if err != nil || n != 1 {
			t.Fatalf("backfilled %d days (%v), want 1", n, err)
		}
		s, h, ok := read(t, "a", a, d0, d1)
		if !ok {
			t.Fatal("not served after the backfill")
		}
		g, w := got(s, h), want(t, a)
		for p, wa := range w {
			if g[p].N != wa.N || g[p].Sum != wa.Sum {
				t.Errorf("%s: %+v, want %+v", p, g[p], wa)
			}
		}
		if n, err := st.BackfillScopeDays(ctx, d1, 2*day, 2); err != nil || n != 0 {
			t.Errorf("backfilled %d days (%v) with every day in retention built, want 0", n, err)
		}
	})
	t.Run("a deleted node's days are rebuilt without it", func(t *testing.T) {
		if err := st.DeleteNode(ctx, "fold-2"); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := read(t, FleetScope, a, d0, d1); ok {
			t.Error("served the sums of a deleted node")
		}
		if n, err := st.BackfillScopeDays(ctx, d1, 2*day, 2); err != nil || n != 1 {
			t.Fatalf("backfilled %d days (%v), want 1", n, err)
		}
		s, h, ok := read(t, FleetScope, a, d0, d1)
		if !ok {
			t.Fatal("not served after the backfill")
		}
		g, w := got(s, h), want(t, a)
		for p, wa := range w {
			if g[p].N != wa.N || g[p].Sum != wa.Sum {
				t.Errorf("%s: %+v, want %+v", p, g[p], wa)
			}
		}
	})
	t.Run("retention", func(t *testing.T) {
		if _, err := st.DeleteRollupsBefore(ctx, RollupDay, d1); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := read(t, FleetScope, f.nodes, d0, d1); ok {
			t.Error("served a day retention deleted")
		}
	})
}
