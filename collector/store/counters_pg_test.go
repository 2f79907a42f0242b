package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Batches written at once, each with the same nodes' counters, none of
// them stored yet, add every increase exactly once: addCounters inserts
// without a conflict clause, which holds because each batch's node_latest
// merge makes batches with a node in common write their counters one
// after the other. A row deleted between batches (PruneCounters) starts
// again from the next increase.
func TestCountersFromConcurrentBatches(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	var defs []MetricDef
	for i := range 20 {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("drops/c%02d", i), Title: "c", Unit: "packets", Kind: KindRate})
	}
	nodes := make([]int32, 3)
	ids := make([]map[string]int32, len(nodes))
	for i := range nodes {
		id, err := st.UpsertNode(ctx, Node{Name: fmt.Sprintf("count-%d", i), IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if ids[i], err = st.UpsertDefinitions(ctx, id, defs); err != nil {
			t.Fatal(err)
		}
		nodes[i] = id
	}
	report := func(node int, seq uint64, at time.Time) Report {
		r := Report{NodeID: nodes[node], InstanceID: 1, Seq: seq, Time: at, IntervalMS: 1000}
		for _, d := range defs {
			r.Samples = append(r.Samples, Sample{MetricID: ids[node][d.Path], Path: d.Path, Value: 1, State: StateOK, Counter: true})
		}
		return r
	}
	const writers, batches = 6, 8
	start := time.Now().Add(-time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				seq := uint64(w*batches + b + 1)
				at := start.Add(time.Duration(seq) * time.Millisecond)
				// Every node in every batch, in an order of the writer's.
				var rs []Report
				for i := range nodes {
					rs = append(rs, report((i+w)%len(nodes), seq, at))
				}
				if _, err := st.WriteReports(ctx, rs); err != nil {
					errs <- fmt.Errorf("writer %d, batch %d: %w", w, b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	totals := func() map[[2]int32]float64 {
		rows, err := st.pool.Query(ctx, `SELECT node_id, metric_id, total FROM export_counters`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[[2]int32]float64{}
		for rows.Next() {
			var n, m int32
			var v float64
			if err := rows.Scan(&n, &m, &v); err != nil {
				t.Fatal(err)
			}
			out[[2]int32{n, m}] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := totals()
	if len(got) != len(nodes)*len(defs) {
		t.Errorf("%d counters stored, want %d", len(got), len(nodes)*len(defs))
	}
	for i, n := range nodes {
		for _, d := range defs {
			if v := got[[2]int32{n, ids[i][d.Path]}]; v != writers*batches {
				t.Errorf("node %d %s: total %v, want %d", n, d.Path, v, writers*batches)
			}
		}
	}

	// Pruned, then moving again: from the next increase on.
	if _, err := st.pool.Exec(ctx, `DELETE FROM export_counters WHERE node_id = $1`, nodes[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WriteReports(ctx, []Report{report(0, 1000, start.Add(time.Second)), report(1, 1000, start.Add(time.Second))}); err != nil {
		t.Fatal(err)
	}
	got = totals()
	for _, d := range defs {
		if v := got[[2]int32{nodes[0], ids[0][d.Path]}]; v != 1 {
			t.Errorf("pruned %s: total %v after one increase, want 1", d.Path, v)
		}
		if v := got[[2]int32{nodes[1], ids[1][d.Path]}]; v != writers*batches+1 {
			t.Errorf("kept %s: total %v, want %d", d.Path, v, writers*batches+1)
		}
	}
}
