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
	if ok, _, err := st.AdmitNode(ctx, "n1", 2); err != nil || !ok {
		t.Fatalf("AdmitNode on an empty store = %v %v", ok, err)
	}
	node, err := st.UpsertNode(ctx, Node{Name: "n1", InstanceID: 7, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertNode(ctx, Node{Name: "n2", InstanceID: 8, IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		ok    bool
		total int
	}{{"n1", true, 0}, {"n3", false, 2}} {
		if ok, total, err := st.AdmitNode(ctx, c.name, 2); err != nil || ok != c.ok || total != c.total {
			t.Errorf("AdmitNode(%s, 2) = %v %d %v, want %v %d", c.name, ok, total, err, c.ok, c.total)
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

// The node limit holds exactly, without counting the nodes on every Hello:
// across deletes, Hellos of known nodes (which use up node ids) and nodes
// another collector registers.
func TestAdmitNode(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	other, err := Open(ctx, st.pool.Config().ConnString(), st.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	const max = 4
	upsert := func(s *Store, names ...string) {
		t.Helper()
		for _, n := range names {
			if _, err := s.UpsertNode(ctx, Node{Name: n, InstanceID: 1, IntervalMS: 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}
	counts := 0
	admit := func(name string, wantOK bool, wantTotal int) {
		t.Helper()
		before := st.nodes
		ok, total, err := st.AdmitNode(ctx, name, max)
		if err != nil || ok != wantOK || (!ok && total != wantTotal) {
			t.Fatalf("AdmitNode(%s, %d) = %v %d %v, want %v %d", name, max, ok, total, err, wantOK, wantTotal)
		}
		if st.nodes != before {
			counts++
		}
	}
	upsert(st, "a", "b")
	admit("c", true, 0) // counts once: 2 nodes
	admit("c", true, 0) // on the bound: 2 + 0 ids since
	if counts != 1 {
		t.Errorf("%d counts for two Hellos of one new node, want 1", counts)
	}
	upsert(st, "c")
	upsert(other, "d") // another collector's node
	admit("a", true, 0)
	admit("e", false, 4)
	if err := st.DeleteNode(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	admit("e", true, 0)
	// Known nodes saying Hello again use up ids: the bound passes the
	// limit, a count finds room.
	upsert(st, "a", "a", "a", "b", "b")
	admit("e", true, 0)
	upsert(other, "e")
	admit("f", false, 4)
	admit("e", true, 0)
}
