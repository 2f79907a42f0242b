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
	rows := func(id int32) (n int) {
		t.Helper()
		err := st.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM reports WHERE node_id = $1) + (SELECT count(*) FROM histograms WHERE node_id = $1)
			+ (SELECT count(*) FROM events WHERE node_id = $1) + (SELECT count(*) FROM node_latest WHERE node_id = $1)
			+ (SELECT count(*) FROM node_metrics WHERE node_id = $1)`, id).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if rows(gone) != 5 || rows(kept) != 5 {
		t.Fatalf("before: %d and %d rows, want 5 each", rows(gone), rows(kept))
	}
	if err := st.DeleteNode(ctx, "gone-1"); err != nil {
		t.Fatal(err)
	}
	if rows(gone) != 0 || rows(kept) != 5 {
		t.Errorf("after: %d rows of the deleted node (want 0), %d of the other (want 5)", rows(gone), rows(kept))
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
