package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// shardedTables are the tables that grow with the fleet and are keyed by
// node: with Citus they are distributed on node_id (co-located), here each
// is hash-partitioned on node_id into shardCount partitions in the schema
// "shard", a simulation of Citus's distribution on one server
// (docs/scaling.md). Everything else (nodes' names, metric_paths,
// metric_defs, access, alert rules, rollup_folds...) stays in public: the
// reference tables.
var shardedTables = []string{"reports", "histograms", "events", "rollup_samples", "rollup_histograms",
	"rollup_pending", "node_latest", "node_metrics"}

const shardCount = 8

// The simulation of Citus distribution: the same fleet's data in the
// current layout and hash-partitioned on node_id, the minute fold run per
// partition equals the fold of the whole, and EXPLAIN shows which reads
// are shard-local (one partition) and which fan out to every partition.
// The time of each, on both layouts in the same run, is logged (the
// figures in docs/scaling.md).
func TestShardedLayoutSimulation(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	// 20 minutes at 10 s of 10 metrics; NBS_SHARD_SIM_NODES measures a
	// bigger fleet (docs/scaling.md) than the default CI keeps quick.
	const metrics, reportsPerNode = 10, 120
	nodes := 128
	if v := os.Getenv("NBS_SHARD_SIM_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < shardCount || n > 10000 {
			t.Fatalf("NBS_SHARD_SIM_NODES=%q: want %d..10000", v, shardCount)
		}
		nodes = n
	}
	var defs []MetricDef
	for m := range metrics {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("r%d", m), Title: "m", Unit: "x/s", Kind: KindRate})
	}
	nodeIDs := make([]int32, nodes)
	var ids map[string]int32
	var err error
	for i := range nodes {
		if nodeIDs[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			t.Fatal(err)
		}
		if ids, err = st.UpsertDefinitions(ctx, nodeIDs[i], defs); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now().Add(-time.Hour).Truncate(time.Minute)
	for seq := range reportsPerNode {
		batch := make([]Report, 0, nodes)
		for n, id := range nodeIDs {
			r := Report{NodeID: id, InstanceID: 1, Seq: uint64(seq + 1), Time: start.Add(time.Duration(seq)*10*time.Second + time.Duration(n)*time.Millisecond), IntervalMS: 10000}
			for m := range metrics {
				p := fmt.Sprintf("r%d", m)
				r.Samples = append(r.Samples, Sample{MetricID: ids[p], Path: p, Value: float64(n*m + seq), State: StateOK})
			}
			if n%4 == 0 {
				// A troubled quarter of the fleet sends evidence: resets
				// with the peer addresses counterparts look up.
				for e := range 2 {
					r.Events = append(r.Events, Event{MetricID: ids["r3"], Path: "r3", Time: r.Time,
						Fields: map[string]string{"src": fmt.Sprintf("10.0.%d.%d", n%200, e), "dst": fmt.Sprintf("10.1.0.%d", seq%50)}})
				}
			}
			batch = append(batch, r)
		}
		if _, err := st.WriteReports(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}

	// The same rows, hash-partitioned on node_id.
	ddl := []string{`CREATE SCHEMA shard`}
	for _, tbl := range shardedTables {
		ddl = append(ddl, fmt.Sprintf(`CREATE TABLE shard.%[1]s (LIKE public.%[1]s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES) PARTITION BY HASH (node_id)`, tbl))
		for k := range shardCount {
			ddl = append(ddl, fmt.Sprintf(`CREATE TABLE shard.%[1]s_p%[2]d PARTITION OF shard.%[1]s FOR VALUES WITH (MODULUS %[3]d, REMAINDER %[2]d)`, tbl, k, shardCount))
		}
		ddl = append(ddl, fmt.Sprintf(`INSERT INTO shard.%[1]s SELECT * FROM public.%[1]s`, tbl))
	}
	ddl = append(ddl, `ANALYZE`)
	for _, q := range ddl {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// The minute fold: the current layout's in one transaction, the
	// partitioned one's per partition (as Citus runs it on each shard),
	// each with the collector's own statements.
	through := time.Now().Add(time.Hour)
	foldWith := func(rename func(string) string) time.Duration {
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
			for _, q := range []string{foldPendingDDL, rename(takePending), rename(foldPendingSamples)} {
				args := []any{}
				switch {
				case strings.Contains(q, "$3"): // takePending
					args = []any{through, 1 << 30, 0}
				case strings.Contains(q, "$2"): // foldPendingSamples: every row new
					args = []any{time.Time{}, 0}
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return fmt.Errorf("%s: %w", q, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	word := func(tbl string) *regexp.Regexp { return regexp.MustCompile(`\b` + tbl + `\b`) }
	whole := foldWith(func(q string) string { return q })
	var perShard []time.Duration
	for k := range shardCount {
		perShard = append(perShard, foldWith(func(q string) string {
			for _, tbl := range []string{"rollup_pending", "reports", "rollup_samples"} {
				q = word(tbl).ReplaceAllString(q, fmt.Sprintf("shard.%s_p%d", tbl, k))
			}
			return q
		}))
	}
	var sum, slowest time.Duration
	for _, d := range perShard {
		sum += d
		slowest = max(slowest, d)
	}
	t.Logf("minute fold of %d reports (%d samples): one table %v; %d partitions %v in all, the slowest %v",
		nodes*reportsPerNode, nodes*reportsPerNode*metrics, whole.Round(time.Millisecond), shardCount, sum.Round(time.Millisecond), slowest.Round(time.Millisecond))
	// The per-partition folds make the same minute rollups as the whole.
	var diff, folded int64
	if err := st.Pool().QueryRow(ctx, `
SELECT (SELECT count(*) FROM ((TABLE public.rollup_samples EXCEPT ALL TABLE shard.rollup_samples) UNION ALL
	(TABLE shard.rollup_samples EXCEPT ALL TABLE public.rollup_samples)) x), (SELECT count(*) FROM shard.rollup_samples)`).Scan(&diff, &folded); err != nil {
		t.Fatal(err)
	}
	if folded != int64(nodes*metrics*20) || diff != 0 {
		t.Fatalf("the per-partition folds made %d minute rollups (want %d), %d rows differ from the whole fold's", folded, nodes*metrics*20, diff)
	}
	// The folds took every pending key; put them back (in both layouts)
	// so that the fold's join below reads a node's pending reports.
	for _, q := range []string{
		`INSERT INTO public.rollup_pending SELECT node_id, instance_id, seq, ts, NULL FROM public.reports`,
		`INSERT INTO shard.rollup_pending SELECT node_id, instance_id, seq, ts, NULL FROM shard.reports`,
		`ANALYZE`,
	} {
		if _, err := st.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// Reads, in the shapes the API runs them (collector/store), with the
	// node and time as literals so the planner prunes as it would for a
	// Citus router query.
	node, metric := nodeIDs[4], ids["r3"] // a node with evidence
	var all []string
	for _, id := range nodeIDs {
		all = append(all, fmt.Sprint(id))
	}
	from, to := start.Format(time.RFC3339), start.Add(20*time.Minute).Format(time.RFC3339)
	reads := []struct {
		name   string
		sql    string
		shards int // partitions the plan touches
	}{
		// The tree joins reference tables (metric_defs, metric_paths):
		// on Citus those are on every worker, so the join stays local.
		{"tree (node_metrics, node_latest)", fmt.Sprintf(`SELECT p.path, m.title, l.ts FROM node_metrics nm JOIN metric_defs m ON m.id = nm.def_id JOIN metric_paths p ON p.id = nm.metric_id
			LEFT JOIN node_latest l ON l.node_id = nm.node_id WHERE nm.node_id = %d`, node), 1},
		{"series (minute rollups of one metric)", fmt.Sprintf(`SELECT ts, n, sum, min, max FROM rollup_samples WHERE res = 60 AND node_id = %d AND metric_id = %d AND ts >= '%s' AND ts < '%s' ORDER BY ts`, node, metric, from, to), 1},
		{"series (raw reports)", fmt.Sprintf(`SELECT ts, vals[1] FROM reports WHERE node_id = %d AND ts >= '%s' AND ts < '%s'`, node, from, to), 1},
		{"evidence (events)", fmt.Sprintf(`SELECT e.ts, p.path, e.fields FROM events e JOIN metric_paths p ON p.id = e.metric_id WHERE e.node_id = %d AND e.metric_id = %d AND e.ts >= '%s' AND e.ts < '%s'`, node, metric, from, to), 1},
		{"fold (one node's pending reports)", fmt.Sprintf(`SELECT count(*) FROM rollup_pending p JOIN reports r USING (node_id, instance_id, seq, ts) WHERE p.node_id = %d`, node), 1},
		{"fleet page (latest of every node)", `SELECT n.name, l.ts FROM nodes n JOIN node_latest l ON l.node_id = n.id ORDER BY n.name LIMIT 50`, shardCount},
		{"report (minute rollups of every node)", fmt.Sprintf(`SELECT metric_id, sum(n), sum(sum), min(min), max(max) FROM rollup_samples WHERE res = 60 AND node_id = ANY('{%s}') AND ts >= '%s' AND ts < '%s' GROUP BY metric_id`, strings.Join(all, ","), from, to), shardCount},
		{"counterparts (events by peer)", fmt.Sprintf(`SELECT node_id, count(*) FROM events WHERE fields->>'src' = '10.0.4.1' AND ts >= '%s' GROUP BY node_id`, from), shardCount},
	}
	partition := regexp.MustCompile(`_p(\d+)$`)
	for _, r := range reads {
		for _, layout := range []string{"public", "shard, public"} {
			var plan []byte
			var took []time.Duration
			err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL search_path = `+layout); err != nil {
					return err
				}
				if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+r.sql).Scan(&plan); err != nil {
					return err
				}
				for range 30 {
					t0 := time.Now()
					rows, err := tx.Query(ctx, r.sql)
					if err != nil {
						return err
					}
					rows.Close()
					if rows.Err() != nil {
						return rows.Err()
					}
					took = append(took, time.Since(t0))
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			rels := relations(t, plan)
			shards := map[string]bool{}
			for _, rel := range rels {
				if m := partition.FindStringSubmatch(rel); m != nil {
					shards[m[1]] = true
				}
			}
			slices.Sort(took)
			t.Logf("%-40s %-14s median %8v  partitions %d  %v", r.name, layout, took[len(took)/2].Round(time.Microsecond), len(shards), rels)
			if layout != "public" && len(shards) != r.shards {
				t.Errorf("%s touches %d partitions (%v), want %d", r.name, len(shards), rels, r.shards)
			}
		}
	}
}

// relations lists the tables a JSON plan scans, sorted and distinct.
func relations(t *testing.T, plan []byte) []string {
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	seen := map[string]bool{}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Relation Name"].(string); ok {
			seen[r] = true
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	walk(doc[0].Plan)
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
