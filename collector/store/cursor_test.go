package store

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// ReportsAfter returns, per node, the reports after its cursor and within
// its lookback of the node's newest report, in node and time order, with
// their keys (the evaluator tells reports apart by them) and ids resolvable
// by MetricPaths.
func TestReportsAfterCursors(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	nodes := map[string]int32{}
	var ids map[string]int32
	for _, name := range []string{"a", "b", "quiet"} {
		id, err := st.UpsertNode(ctx, Node{Name: name, InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = id
		if ids, err = st.UpsertDefinitions(ctx, id, []MetricDef{{Path: "tcp_reset", Kind: KindRate}, {Path: "tcp_reset/sent", Kind: KindRate}}); err != nil {
			t.Fatal(err)
		}
	}
	var reports []Report
	for _, name := range []string{"a", "b"} {
		for i := range 10 { // one report a second, t0+1s … t0+10s
			reports = append(reports, Report{NodeID: nodes[name], InstanceID: 1, Seq: uint64(i + 1), Time: t0.Add(time.Duration(i+1) * time.Second),
				IntervalMS: 1000, Samples: []Sample{
					{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: float64(i), State: StateOK},
					{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Value: float64(i), State: StateCrit}}})
		}
	}
	if _, err := st.WriteReports(ctx, reports); err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := []struct {
		name    string
		cursors []ReportCursor
		want    string // node:second of each report
	}{
		{"after a watermark", []ReportCursor{{nodes["a"], at(7), time.Hour}}, "a:8 a:9 a:10"},
		{"lookback from the node's newest report", []ReportCursor{{nodes["b"], time.Unix(0, 0), 3 * time.Second}}, "b:8 b:9 b:10"},
		{"both nodes in order", []ReportCursor{{nodes["b"], at(9), time.Hour}, {nodes["a"], at(8), time.Hour}}, "a:9 a:10 b:10"},
		{"nothing new", []ReportCursor{{nodes["a"], at(10), time.Hour}, {nodes["quiet"], time.Unix(0, 0), time.Hour}}, ""},
		{"no cursors", nil, ""},
	}
	names := map[int32]string{nodes["a"]: "a", nodes["b"]: "b"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := st.ReportsAfter(ctx, c.cursors)
			if err != nil {
				t.Fatal(err)
			}
			var b []string
			for _, r := range got {
				sec := r.Time.Sub(t0) / time.Second
				b = append(b, fmt.Sprintf("%s:%d", names[r.NodeID], sec))
				if want := (ReportKey{NodeID: r.NodeID, InstanceID: 1, Seq: uint64(sec)}); r.Key() != want {
					t.Errorf("report at second %d: key %+v, want %+v", sec, r.Key(), want)
				}
				if r.IntervalMS != 1000 || len(r.Samples) != 2 || r.Samples[1].State != StateCrit || r.Samples[1].MetricID != ids["tcp_reset/sent"] {
					t.Errorf("report %+v: want interval 1000 and both samples with their ids and states", r)
				}
			}
			if s := strings.Join(b, " "); s != c.want {
				t.Errorf("reports %q, want %q", s, c.want)
			}
		})
	}
	newest, err := st.NewestTimes(ctx)
	if err != nil || len(newest) != 2 || !newest[nodes["a"]].Equal(at(10)) || !newest[nodes["b"]].Equal(at(10)) {
		t.Errorf("NewestTimes = %v, %v; want a and b at their tenth second, quiet absent", newest, err)
	}
	// Into a map kept from an earlier read: what it held is gone.
	kept := map[int32]time.Time{nodes["quiet"]: at(3), nodes["a"]: at(1)}
	if again, err := st.NewestTimesInto(ctx, kept); err != nil || !maps.Equal(again, newest) || !maps.Equal(kept, newest) {
		t.Errorf("NewestTimesInto = %v, %v, into %v; want %v in the map it was given", again, err, kept, newest)
	}
	paths, err := st.MetricPaths(ctx, []int32{ids["tcp_reset"], ids["tcp_reset/sent"], 1_000_000})
	if err != nil || len(paths) != 2 || paths[ids["tcp_reset/sent"]] != "tcp_reset/sent" {
		t.Errorf("MetricPaths = %v, %v; want the two known ids", paths, err)
	}
}
