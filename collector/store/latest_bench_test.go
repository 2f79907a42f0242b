package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkLatestMerge times what a batch of healthy nodes' reports (their
// 5 roots only) costs node_latest, where every node's newest values hold a
// busy tree (190 metrics, out of line): merged into hot (mergeLatest with
// root_states, what the write path does) against merged into metrics,
// rewriting the whole value (mergeLatest without root_states, what it did
// for every report before migration 021). Each round merges one batch of 500 nodes each way, in alternating
// order, on one database (two halves of the nodes), so the machine's load
// falls on both alike; the figures are the median time per batch, their
// ratio, and what the table (TOAST included) grew per 1,000 merges.
//
// A third way, on a third part of the nodes, is what a healthy node's
// report cost before migration 023: into hot, one upsert per node in a
// pipeline (perNodeHot), with the fleet summary's trigger run on every one.
// The write path's way passes the roots' states, so the trigger is skipped
// when they did not change, and merges the batch in one statement.
//
//	NBS_REQUIRE_PG=1 go test -run '^$' -bench LatestMerge -benchtime 40x ./collector/store
func BenchmarkLatestMerge(b *testing.B) {
	// perNodeHot is migration 021's statement for a roots-only report.
	const perNodeHot = `
INSERT INTO node_latest (node_id, ts, interval_ms, snapshot_ts, metrics)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (node_id) DO UPDATE SET
	hot = node_latest.hot || EXCLUDED.metrics,
	ts = EXCLUDED.ts,
	interval_ms = EXCLUDED.interval_ms,
	snapshot_ts = coalesce(EXCLUDED.snapshot_ts, node_latest.snapshot_ts)
WHERE node_latest.ts <= EXCLUDED.ts`
	const nodes, tree, roots, batchSize = 2000, 190, 5, 500
	ctx := context.Background()
	st := openTest(b)
	var defs []MetricDef
	paths := make([]string, tree)
	for m := range tree {
		paths[m] = fmt.Sprintf("root%d", m%roots)
		if m >= roots {
			paths[m] = fmt.Sprintf("root%d/branch%d/leaf-%d", m%roots, m%17, m)
		}
		defs = append(defs, MetricDef{Path: paths[m], Title: "m", Unit: "x/s", Kind: KindRate})
	}
	nodeIDs := make([]int32, nodes)
	var ids map[string]int32
	var err error
	start := time.Now().Add(-time.Hour)
	var snaps []Report
	for i := range nodes {
		if nodeIDs[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			b.Fatal(err)
		}
		if ids, err = st.UpsertDefinitions(ctx, nodeIDs[i], defs); err != nil {
			b.Fatal(err)
		}
		r := Report{NodeID: nodeIDs[i], InstanceID: 1, Seq: 1, Time: start, IntervalMS: 10000, Snapshot: true}
		for m, p := range paths {
			r.Samples = append(r.Samples, Sample{MetricID: ids[p], Path: p, Value: float64(m*i) + 0.25, State: StateOK})
		}
		snaps = append(snaps, r)
	}
	for i := 0; i < nodes; i += batchSize {
		if _, err := st.WriteReports(ctx, snaps[i:i+batchSize]); err != nil {
			b.Fatal(err)
		}
	}
	seq := uint64(1)
	// merge writes the newest values of a batch of part's nodes: into hot
	// or whole by the write path's statement, or into hot by perNodeHot.
	states := ""
	for r := range roots {
		states += fmt.Sprintf(",root%d=1", r)
	}
	states = states[1:]
	const intoHot, intoWhole, intoHotPerNode = 0, 1, 2
	merge := func(part, how int) time.Duration {
		seq++
		at := start.Add(time.Duration(seq) * 10 * time.Second)
		var ids []int32
		var tss []time.Time
		var intervals []int32
		var metrics []string
		var rootStates []*string
		batch := &pgx.Batch{}
		for i := part * batchSize; i < (part+1)*batchSize; i++ {
			m := `{`
			for r := range roots {
				if r > 0 {
					m += `,`
				}
				m += fmt.Sprintf(`"root%d": {"v": %d.5, "s": 1, "t": %d, "i": 10000}`, r, seq, at.UnixMilli())
			}
			m += `}`
			if how == intoHotPerNode {
				batch.Queue(perNodeHot, nodeIDs[i], at, int32(10000), nil, m)
				continue
			}
			ids, tss, intervals, metrics = append(ids, nodeIDs[i]), append(tss, at), append(intervals, 10000), append(metrics, m)
			if how == intoHot {
				rootStates = append(rootStates, &states)
			} else {
				rootStates = append(rootStates, nil)
			}
		}
		if how != intoHotPerNode {
			batch.Queue(mergeLatest, ids, tss, intervals, make([]*time.Time, len(ids)), metrics, rootStates)
		}
		t0 := time.Now()
		if err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() }); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	size := func() int64 {
		var n int64
		if err := st.pool.QueryRow(ctx, `SELECT pg_total_relation_size('node_latest')`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	var hot, whole, perNode []time.Duration
	var hotGrew, wholeGrew int64
	for i := 0; b.Loop(); i++ {
		s0 := size()
		if i%2 == 0 {
			hot = append(hot, merge(0, intoHot))
			s1 := size()
			whole = append(whole, merge(1, intoWhole))
			hotGrew, wholeGrew = hotGrew+s1-s0, wholeGrew+size()-s1
			perNode = append(perNode, merge(2, intoHotPerNode))
		} else {
			perNode = append(perNode, merge(2, intoHotPerNode))
			whole = append(whole, merge(1, intoWhole))
			s1 := size()
			hot = append(hot, merge(0, intoHot))
			wholeGrew, hotGrew = wholeGrew+s1-s0, hotGrew+size()-s1
		}
	}
	b.StopTimer()
	// Both ways read back the same newest values.
	all, err := st.LatestAll(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for part := range 3 {
		l := all[nodeIDs[part*batchSize]]
		if len(l.Metrics) != tree || l.Metrics["root0"].Value > float64(seq)+0.5 || l.Metrics["root0"].Value < float64(seq-2)+0.5 {
			b.Fatalf("node of part %d: %d values, root0 %+v", part, len(l.Metrics), l.Metrics["root0"])
		}
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	mh, mw, mp := median(hot), median(whole), median(perNode)
	merges := float64(len(hot) * batchSize)
	b.ReportMetric(float64(mh.Microseconds())/1000, "hot-ms/batch")
	b.ReportMetric(float64(mw.Microseconds())/1000, "whole-ms/batch")
	b.ReportMetric(float64(mp.Microseconds())/1000, "hot-per-node-triggered-ms/batch")
	b.ReportMetric(float64(mw)/float64(mh), "whole/hot")
	b.ReportMetric(float64(mp)/float64(mh), "per-node-triggered/hot")
	b.ReportMetric(float64(hotGrew)/merges*1000/1024, "hot-KiB/1k-merges")
	b.ReportMetric(float64(wholeGrew)/merges*1000/1024, "whole-KiB/1k-merges")
}
