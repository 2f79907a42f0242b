package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Deleting a node takes every row it reported and leaves other nodes alone;
// a report of the deleted node still in flight is refused by the database
// rather than stored without a node.
func TestDeleteNodeTakesItsDataOnly(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	write := func(name string) int32 {
		t.Helper()
		id, err := st.UpsertNode(ctx, Node{Name: name, InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, []MetricDef{{Path: "lat", Title: "latency", Unit: "ms", Kind: KindHistogram}})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		r := Report{NodeID: id, InstanceID: 1, Seq: 1, Time: now, IntervalMS: 1000,
			Samples:    []Sample{{MetricID: ids["lat"], Path: "lat", Value: 1, State: StateOK}},
			Histograms: []Histogram{{MetricID: ids["lat"], Path: "lat", Count: 1, Sum: 1, BucketIndex: []int32{3}, BucketCount: []int64{1}}},
			Events:     []Event{{MetricID: ids["lat"], Path: "lat", Time: now, Fields: map[string]string{"k": "v"}}}}
		if _, err := st.WriteReports(ctx, []Report{r}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	gone, kept := write("gone-1"), write("kept-1")
	// Their minute rollups folded: a sample's row and a histogram's.
	if r, err := st.FoldRollups(ctx, FoldOptions{Now: time.Now().Add(MinuteGrace + time.Minute)}); err != nil || r.Reports != 2 {
		t.Fatalf("fold: %+v, %v", r, err)
	}
	rows := func(id int32) (n int) {
		t.Helper()
		err := st.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM reports WHERE node_id = $1) + (SELECT count(*) FROM histograms WHERE node_id = $1)
			+ (SELECT count(*) FROM events WHERE node_id = $1) + (SELECT count(*) FROM node_latest WHERE node_id = $1)
			+ (SELECT count(*) FROM node_metrics WHERE node_id = $1)
			+ (SELECT count(*) FROM rollup_samples WHERE node_id = $1) + (SELECT count(*) FROM rollup_histograms WHERE node_id = $1)`, id).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if rows(gone) != 7 || rows(kept) != 7 {
		t.Fatalf("before: %d and %d rows, want 7 each", rows(gone), rows(kept))
	}
	if err := st.DeleteNode(ctx, "gone-1"); err != nil {
		t.Fatal(err)
	}
	if rows(gone) != 0 || rows(kept) != 7 {
		t.Errorf("after: %d rows of the deleted node (want 0), %d of the other (want 7)", rows(gone), rows(kept))
	}
	if _, err := st.NodeByName(ctx, "gone-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted node: %v, want ErrNotFound", err)
	}
	if err := st.DeleteNode(ctx, "gone-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	late := Report{NodeID: gone, InstanceID: 1, Seq: 2, Time: time.Now(), IntervalMS: 1000}
	if _, err := st.WriteReports(ctx, []Report{late}); err == nil {
		t.Error("a report of the deleted node was stored")
	}
	if rows(gone) != 0 {
		t.Errorf("the late report left %d rows", rows(gone))
	}
}

// A report stored while its node was being deleted (the delete's statement
// for reports ran before the report committed) is left without a node:
// the fold drops it, writes no rollup for it, and folds the rest.
func TestFoldDropsReportsOfDeletedNodes(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	f := newFoldFleet(t, st, 2)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	f.writeBatch(t, []Report{f.report(f.nodes[0], at), f.report(f.nodes[1], at)})
	// What deleteRows leaves behind in that race: the node row gone, its
	// report and pending key stored.
	if _, err := st.pool.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, f.nodes[0]); err != nil {
		t.Fatal(err)
	}
	r, err := st.FoldRollups(ctx, FoldOptions{Now: at.Add(MinuteGrace + time.Minute)})
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	if r.Reports != 2 || f.pending(t) != 0 {
		t.Errorf("fold took %d reports and left %d pending, want 2 and 0", r.Reports, f.pending(t))
	}
	for _, c := range []struct {
		node int32
		want int
	}{{f.nodes[0], 0}, {f.nodes[1], 3}} { // 2 samples, 1 histogram
		var n int
		if err := st.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM rollup_samples WHERE node_id = $1)
			+ (SELECT count(*) FROM rollup_histograms WHERE node_id = $1)`, c.node).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("node %d: %d rollup rows, want %d", c.node, n, c.want)
		}
	}
}
