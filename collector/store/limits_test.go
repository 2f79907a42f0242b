package store

import (
	"context"
	"testing"
	"time"
)

// The counts the ingest limits need, and the latest values clamped to the
// collector's clock when a report is dated ahead of it.
func TestLimitCountsAndClampedLatest(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	if total, exists, err := st.NodeCount(ctx, "n1"); err != nil || total != 0 || exists {
		t.Fatalf("NodeCount on an empty store = %d %v %v", total, exists, err)
	}
	node, err := st.UpsertNode(ctx, Node{Name: "n1", InstanceID: 7, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertNode(ctx, Node{Name: "n2", InstanceID: 8, IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		total  int
		exists bool
	}{{"n1", 2, true}, {"n3", 2, false}} {
		if total, exists, err := st.NodeCount(ctx, c.name); err != nil || total != c.total || exists != c.exists {
			t.Errorf("NodeCount(%s) = %d %v %v, want %d %v", c.name, total, exists, err, c.total, c.exists)
		}
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{
		{Path: "a", Title: "a", Kind: KindRate}, {Path: "b", Title: "b", Kind: KindRate}, {Path: "c", Title: "c", Kind: KindRate},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		paths []string
		want  int
	}{{nil, 3}, {[]string{"a"}, 2}, {[]string{"a", "b", "c", "d"}, 0}} {
		if n, err := st.DefinitionsOutside(ctx, node, c.paths); err != nil || n != c.want {
			t.Errorf("DefinitionsOutside(%v) = %d %v, want %d", c.paths, n, err, c.want)
		}
	}

	now := time.Now().Truncate(time.Millisecond)
	ahead := Report{NodeID: node, InstanceID: 7, Seq: 1, Time: now.Add(9 * time.Minute), Received: now, IntervalMS: 1000,
		Samples: []Sample{{Path: "a", MetricID: ids["a"], Value: 100}}}
	real := Report{NodeID: node, InstanceID: 7, Seq: 2, Time: now.Add(time.Second), Received: now.Add(time.Second), IntervalMS: 1000,
		Samples: []Sample{{Path: "a", MetricID: ids["a"], Value: 7}}}
	for _, r := range []Report{ahead, real} {
		if _, err := st.WriteReports(ctx, []Report{r}); err != nil {
			t.Fatal(err)
		}
	}
	l, _, err := st.Latest(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if v := l.Metrics["a"]; v.Value != 7 || !l.Time.Equal(real.Time) {
		t.Errorf("latest after a report 9 min ahead and a real one: %+v at %s, want 7 at %s", v, l.Time, real.Time)
	}
}
