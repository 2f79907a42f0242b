package api

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/bench/loadgen"
	"github.com/nbs-project/nbs/collector/ingest"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const (
	interval      = 10 * time.Second
	snapshotEvery = 30 // reports: a full tree every 5 minutes, as the agent's default
	troubledEvery = 20 // every 20th node is troubled: 5% of the fleet
	eventsPerRep  = 5  // evidence a troubled node sends per interval (as bench/loadgen)
	day           = 24 * time.Hour
	copyBlock     = 500 // nodes whose reports of one hour go in one COPY
	// registerWorkers register nodes concurrently (register).
	registerWorkers = 4
)

// seedConfig is what to seed; see the package comment for why each part
// has the size it has.
type seedConfig struct {
	Nodes int // registered nodes
	Deep  int // the Deep nodes from node-0001 on get raw reports for all of Days
	Days  int // history of the deep nodes' raw reports; their day rollups reach back 2×Days (the report's previous period)
	// History is how many days back the other nodes' day rollups reach
	// (2×Days unless a fleet's size asks for fewer).
	History  int
	Raw      time.Duration // raw reports of every node for the newest Raw
	Window   time.Duration // raw reports of the troubled node-0000 for the newest Window (the tree's longest window)
	MinuteOf time.Duration // minute rollups of the deep nodes' newest MinuteOf
}

// fleet is the seeded fleet: its nodes and the one metric tree they share.
type fleet struct {
	cfg   seedConfig
	names []string
	ids   []int32
	defs  []store.MetricDef
	kinds map[string]store.Kind
	// The paths a report of each kind carries.
	roots, troubled []string
	inTrouble       map[string]bool // the troubled branch, root included
	metric          map[string]int32
	hists           []string // the tree's histogram metrics
	eventMetric     string
	shapes          []shape
	// End is where the seeded history ends; reports after it are written
	// through store.WriteReports.
	end time.Time
}

// shape is one interval's histogram as the agent sends it (bench/loadgen's
// shapes: 20–60 observations of 0.5–2 ms).
type shape struct {
	index []int32
	count []int64
	n     uint64
	sum   float64
	q99   float64
}

func newShapes(rng *rand.Rand, k int) []shape {
	out := make([]shape, k)
	for j := range out {
		h := loglinear.New()
		for range 20 + rng.IntN(40) {
			h.Record(uint64(500_000 + rng.IntN(1_500_000)))
		}
		s := shape{n: h.Count, sum: h.Sum, q99: h.Quantile(0.99)}
		for _, i := range h.Sorted() {
			s.index = append(s.index, int32(i))
			s.count = append(s.count, int64(h.Counts[i]))
		}
		out[j] = s
	}
	return out
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

func isTroubled(i int) bool { return i%troubledEvery == 0 }

// register registers every node the way the collector does on a Hello:
// the Hello's definitions as ingest validates them (the agent's catalogue,
// shaped as bench/loadgen's busy node), then store.UpsertNode,
// UpsertDefinitions and MarkDefinitions.
func register(ctx context.Context, st *store.Store, cfg seedConfig, end time.Time) (*fleet, error) {
	tree := loadgen.NewTree()
	f := &fleet{cfg: cfg, kinds: map[string]store.Kind{}, end: end,
		shapes: newShapes(rand.New(rand.NewPCG(1, 2)), 64), eventMetric: catalog.TCPResetSent + "/reason_0"}
	for _, d := range tree.Defs {
		def := store.MetricDef{Path: d.Id, Title: d.Title, Unit: d.Unit, Kind: store.Kind(d.Kind), Description: d.Description,
			Scale: d.Scale, Quantile: d.Quantile}
		if def.Scale == 0 {
			def.Scale = 1
		}
		if t := d.DefaultThreshold; t != nil {
			thr, err := ingest.ThresholdFromProto(t)
			if err != nil {
				return nil, fmt.Errorf("threshold of %s: %w", d.Id, err)
			}
			def.DefaultThreshold = &thr
		}
		f.defs = append(f.defs, def)
		f.kinds[d.Id] = def.Kind
		if d.Kind == nbsv1.MetricKind_METRIC_KIND_HISTOGRAM {
			f.hists = append(f.hists, d.Id)
		}
	}
	for _, d := range tree.Roots {
		f.roots = append(f.roots, d.Id)
	}
	f.inTrouble = map[string]bool{}
	for _, d := range tree.Troubled {
		f.inTrouble[d.Id] = true
		if d.Id != catalog.TCPReset { // the root is among the roots
			f.troubled = append(f.troubled, d.Id)
		}
	}
	hash := store.DefinitionsHash(f.defs)
	one := func(i int) (int32, map[string]int32, error) {
		id, err := st.UpsertNode(ctx, store.Node{Name: nodeName(i), InstanceID: 1, IntervalMS: uint32(interval.Milliseconds()),
			AgentVersion: "bench", KernelRelease: "6.18",
			Labels: map[string]string{"customer": fmt.Sprintf("c%d", i%20), "rack": fmt.Sprintf("r%d", i%50)}})
		if err != nil {
			return 0, nil, err
		}
		metric, err := st.UpsertDefinitions(ctx, id, f.defs)
		if err != nil {
			return 0, nil, err
		}
		return id, metric, st.MarkDefinitions(ctx, id, hash)
	}
	f.ids = make([]int32, cfg.Nodes)
	for i := range cfg.Nodes {
		f.names = append(f.names, nodeName(i))
	}
	if cfg.Nodes == 0 {
		return f, nil
	}
	// The first node stores the tree's dictionary entries; the others,
	// sharing them, register concurrently (a collector's Hellos do too):
	// one at a time, 10,000 nodes are minutes of commit round trips.
	var err error
	if f.ids[0], f.metric, err = one(0); err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	next := atomic.Int64{}
	next.Store(1)
	for range registerWorkers {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.Nodes || gctx.Err() != nil {
					return nil
				}
				id, metric, err := one(i)
				if err != nil {
					return fmt.Errorf("register %s: %w", nodeName(i), err)
				}
				if !maps.Equal(metric, f.metric) {
					return fmt.Errorf("register %s: its metric ids differ from node-0000's", nodeName(i))
				}
				f.ids[i] = id
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return f, nil
}

// seq numbers a node's reports by their time, so every report of the run
// has its own.
// writeRound writes one report of every node at t, spread over the
// interval, in batches of 500 through store.WriteReports; snapshot makes
// each carry the whole tree. seqOf numbers node i's report at at. It
// returns the time the writes took.
func (f *fleet) writeRound(ctx context.Context, tb testing.TB, st *store.Store, t time.Time, snapshot bool, seqOf func(i int, at time.Time) uint64) time.Duration {
	var took time.Duration
	batch := make([]store.Report, 0, 500)
	flush := func() {
		s := time.Now()
		if _, err := st.WriteReports(ctx, batch); err != nil {
			tb.Fatal(err)
		}
		took += time.Since(s)
		batch = batch[:0]
	}
	for i := range f.ids {
		rng := rand.New(rand.NewPCG(uint64(i), uint64(t.Unix())))
		at := t.Add(time.Duration(i) * interval / time.Duration(len(f.ids)))
		// report() decides a snapshot by the time: ask at one that is.
		probe := at
		for snapshot != ((probe.Unix()/10+int64(i))%snapshotEvery == 0) {
			probe = probe.Add(interval)
		}
		r := f.report(rng, i, probe)
		r.Time, r.Seq = at, seqOf(i, at)
		for k := range r.Events {
			r.Events[k].Time = at
		}
		if batch = append(batch, r); len(batch) == cap(batch) {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return took
}

func seq(t time.Time) uint64 { return uint64(t.Unix() / int64(interval/time.Second)) }

// report is node i's report at t, shaped as bench/loadgen's: roots when
// healthy; a troubled node's tcp_reset branch (WARN) and evidence too;
// everything, with histograms, in every 30th report.
func (f *fleet) report(rng *rand.Rand, i int, t time.Time) store.Report {
	r := store.Report{NodeID: f.ids[i], InstanceID: 1, Seq: seq(t), Time: t, IntervalMS: uint32(interval.Milliseconds())}
	troubled := isTroubled(i)
	r.Snapshot = (t.Unix()/10+int64(i))%snapshotEvery == 0
	sample := func(p string, warn bool) {
		v, st := rng.Float64()*2, store.StateOK
		if warn {
			v, st = 50+rng.Float64()*50, store.StateWarn
		}
		r.Samples = append(r.Samples, store.Sample{MetricID: f.metric[p], Path: p, Value: v, State: st, Counter: f.kinds[p] == store.KindRate})
	}
	if r.Snapshot {
		for _, d := range f.defs {
			if d.Kind != store.KindHistogram {
				sample(d.Path, troubled && f.inTrouble[d.Path])
				continue
			}
			s := f.shapes[rng.IntN(len(f.shapes))]
			r.Histograms = append(r.Histograms, store.Histogram{MetricID: f.metric[d.Path], Path: d.Path, Count: s.n, Sum: s.sum,
				BucketIndex: s.index, BucketCount: s.count})
			r.Samples = append(r.Samples, store.Sample{MetricID: f.metric[d.Path], Path: d.Path, Value: s.q99 / d.Scale, State: store.StateOK})
		}
	} else {
		for _, p := range f.roots {
			sample(p, troubled && p == catalog.TCPReset)
		}
		if troubled {
			for _, p := range f.troubled {
				sample(p, true)
			}
		}
	}
	if troubled {
		for k := range eventsPerRep {
			r.Events = append(r.Events, store.Event{MetricID: f.metric[f.eventMetric], Path: f.eventMetric,
				Time: t.Add(-time.Duration(k) * time.Millisecond),
				Fields: map[string]string{"direction": "sent", "reason": "reason_0", "state": "established",
					"src": fmt.Sprintf("10.0.%d.1:%d", i/250, 1024+rng.IntN(60000)), "dst": "10.0.0.2:443"}})
		}
	}
	return r
}

// seedCounts is what seeding wrote.
type seedCounts struct {
	Reports, Samples, Histograms, Events int64
	RollupRows                           int64
}

func (c *seedCounts) add(o seedCounts) {
	c.Reports += o.Reports
	c.Samples += o.Samples
	c.Histograms += o.Histograms
	c.Events += o.Events
	c.RollupRows += o.RollupRows
}

// seedRaw writes the reports of nodes [n0, n1) over [from, to): the first
// report of each UTC day through store.WriteReports (which creates the
// day's partitions, as the collector does), the rest by COPY straight into
// the partitioned tables, and their rollups of the given resolutions folded
// by the write path's own code (store.Rollups) and merged by
// store.SeedRollups. minuteFrom: minute rollups only for reports from then.
func (f *fleet) seedRaw(ctx context.Context, st *store.Store, n0, n1 int, from, to, minuteFrom time.Time, rollups bool) (seedCounts, error) {
	var c seedCounts
	written := map[string]bool{}
	// Minute and hour rollups are flushed with each hour's reports, day
	// rollups when the day is over: each row is written once, as the
	// write path's merges would leave it.
	days := store.NewRollups()
	flushDays := func() error {
		c.RollupRows += int64(len(days.Samples) + len(days.Histograms))
		err := st.SeedRollups(ctx, days)
		days = store.NewRollups()
		return err
	}
	for t0 := from; t0.Before(to); {
		t1 := t0.Truncate(time.Hour).Add(time.Hour)
		if t1.After(to) {
			t1 = to
		}
		if t0.Truncate(day) != t1.Add(-time.Nanosecond).Truncate(day) {
			t1 = t1.Truncate(day)
		}
		roll := store.NewRollups()
		// COPY a block of nodes at a time: a fleet's hour held in memory
		// at once would be gigabytes.
		for b0 := n0; b0 < n1; b0 += copyBlock {
			var reps, hists, events [][]any
			for i := b0; i < min(b0+copyBlock, n1); i++ {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(t0.Unix())))
				for t := t0; t.Before(t1); t = t.Add(interval) {
					r := f.report(rng, i, t)
					if dayKey := t.UTC().Format("20060102"); !written[dayKey] {
						written[dayKey] = true
						if _, err := st.WriteReports(ctx, []store.Report{r}); err != nil {
							return c, err
						}
						c.Reports++
						continue
					}
					switch {
					case !rollups:
					case t.Before(minuteFrom):
						roll.Add(r, store.RollupHour)
						days.Add(r, store.RollupDay)
					default:
						roll.Add(r, store.RollupMinute, store.RollupHour)
						days.Add(r, store.RollupDay)
					}
					rep, hs, es, err := store.CopyRows(r)
					if err != nil {
						return c, err
					}
					reps = append(reps, rep)
					hists = append(hists, hs...)
					events = append(events, es...)
					c.Reports++
					c.Samples += int64(len(r.Samples))
					c.Histograms += int64(len(r.Histograms))
					c.Events += int64(len(r.Events))
				}
			}
			for _, cp := range []struct {
				table string
				cols  []string
				rows  [][]any
			}{
				{"reports", []string{"node_id", "instance_id", "seq", "ts", "interval_ms", "snapshot", "metric_ids", "vals", "states"}, reps},
				{"histograms", []string{"node_id", "instance_id", "seq", "ts", "metric_id", "count", "sum", "bucket_index", "bucket_count"}, hists},
				{"events", []string{"node_id", "instance_id", "seq", "ts", "metric_id", "fields"}, events},
			} {
				if len(cp.rows) == 0 {
					continue
				}
				if _, err := st.Pool().CopyFrom(ctx, pgx.Identifier{cp.table}, cp.cols, pgx.CopyFromRows(cp.rows)); err != nil {
					return c, fmt.Errorf("copy %s: %w", cp.table, err)
				}
			}
		}
		c.RollupRows += int64(len(roll.Samples) + len(roll.Histograms))
		if err := st.SeedRollups(ctx, roll); err != nil {
			return c, err
		}
		if t1.Truncate(day).Equal(t1) {
			if err := flushDays(); err != nil {
				return c, err
			}
		}
		t0 = t1
	}
	return c, flushDays()
}

// seedHistory writes, for nodes [n0, n1), rollups of [from, to) with no
// raw reports behind them: a day rollup for each whole UTC day and hour
// rollups for the hours of a partial last day. Each row is what the write
// path makes of a node reporting every 10 s in the shape of report():
// count, sum, min, max and state seconds of every metric (every report's
// for the roots and a troubled node's tcp_reset branch, every snapshot's
// for the rest), and each histogram merged from its snapshots' shapes. At
// a fleet's size they are generated by PostgreSQL (INSERT … SELECT): the
// same rows through store.SeedRollups would take most of an hour.
func (f *fleet) seedHistory(ctx context.Context, st *store.Store, n0, n1 int, from, to time.Time) (seedCounts, error) {
	var c seedCounts
	rng := rand.New(rand.NewPCG(7, 8))
	var metrics, hists []int32
	var root, trouble []bool
	for _, d := range f.defs {
		metrics = append(metrics, f.metric[d.Path])
		root, trouble = append(root, slices.Contains(f.roots, d.Path)), append(trouble, f.inTrouble[d.Path])
		if d.Kind == store.KindHistogram {
			hists = append(hists, f.metric[d.Path])
		}
	}
	var nodes []int32
	var troubled []bool
	for i := n0; i < n1; i++ {
		nodes, troubled = append(nodes, f.ids[i]), append(troubled, isTroubled(i))
	}
	// Merged shapes: 16 of each size, picked by node, metric and time.
	const kinds = 16
	if _, err := st.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_shapes (snaps int, k int, count bigint, sum float8, bucket_index int[], bucket_count bigint[])`); err != nil {
		return c, fmt.Errorf("create shapes: %w", err)
	}
	var shapes [][]any
	for _, snaps := range []int{12, 288} { // an hour's, a day's
		for k := range kinds {
			h := loglinear.New()
			for range snaps {
				s := f.shapes[rng.IntN(len(f.shapes))]
				for j, b := range s.index {
					h.Counts[uint32(b)] += uint64(s.count[j])
				}
				h.Count += s.n
				h.Sum += s.sum
			}
			var idx []int32
			var cnt []int64
			for _, b := range h.Sorted() {
				idx, cnt = append(idx, int32(b)), append(cnt, int64(h.Counts[b]))
			}
			shapes = append(shapes, []any{snaps, k, int64(h.Count), h.Sum, idx, cnt})
		}
	}
	if _, err := st.Pool().Exec(ctx, `TRUNCATE bench_shapes`); err != nil {
		return c, err
	}
	if _, err := st.Pool().CopyFrom(ctx, pgx.Identifier{"bench_shapes"}, []string{"snaps", "k", "count", "sum", "bucket_index", "bucket_count"},
		pgx.CopyFromRows(shapes)); err != nil {
		return c, fmt.Errorf("copy shapes: %w", err)
	}
	gen := func(res int32, from, to time.Time) error {
		reports := int64(res) / int64(interval/time.Second)
		snaps := reports / snapshotEvery
		tag, err := st.Pool().Exec(ctx, `
			INSERT INTO rollup_samples AS r (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
			SELECT $1, b, n.id, m.id, x.n,
				CASE WHEN x.warn THEN 75 * x.n ELSE x.n END,
				CASE WHEN x.warn THEN 50.1 ELSE 0.01 END, CASE WHEN x.warn THEN 99.9 ELSE 1.99 END,
				CASE WHEN x.warn THEN 0 ELSE 10 * x.n END, CASE WHEN x.warn THEN 10 * x.n ELSE 0 END, 0
			FROM unnest($4::int[], $5::bool[]) n(id, troubled),
				generate_series($2::timestamptz, $3::timestamptz - make_interval(secs => $1), make_interval(secs => $1)) b,
				unnest($6::int[], $7::bool[], $8::bool[]) m(id, root, trouble),
				LATERAL (SELECT CASE WHEN m.root OR n.troubled AND m.trouble THEN $9::bigint ELSE $10::bigint END AS n,
					n.troubled AND m.trouble AS warn) x
			ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET n = r.n + EXCLUDED.n, sum = r.sum + EXCLUDED.sum,
				min = least(r.min, EXCLUDED.min), max = greatest(r.max, EXCLUDED.max),
				ok_s = r.ok_s + EXCLUDED.ok_s, warn_s = r.warn_s + EXCLUDED.warn_s, crit_s = r.crit_s + EXCLUDED.crit_s`, res, from, to, nodes, troubled, metrics, root, trouble, reports, snaps)
		if err != nil {
			return fmt.Errorf("generate sample rollups: %w", err)
		}
		c.RollupRows += tag.RowsAffected()
		tag, err = st.Pool().Exec(ctx, `
			INSERT INTO rollup_histograms (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
			SELECT $1, b, n, m, s.count, s.sum, s.bucket_index, s.bucket_count
			FROM unnest($4::int[]) n,
				generate_series($2::timestamptz, $3::timestamptz - make_interval(secs => $1), make_interval(secs => $1)) b,
				unnest($5::int[]) m, bench_shapes s
			WHERE s.snaps = $6 AND s.k = abs(hashint4(n * 7919 + m * 31 + extract(epoch FROM b)::int)) % $7
			ON CONFLICT DO NOTHING`, res, from, to, nodes, hists, snaps, kinds)
		if err != nil {
			return fmt.Errorf("generate histogram rollups: %w", err)
		}
		c.RollupRows += tag.RowsAffected()
		return nil
	}
	last := to.Truncate(day)
	if from.Before(last) {
		if err := gen(store.RollupDay, from, last); err != nil {
			return c, err
		}
	}
	if lastHour := to.Truncate(time.Hour); last.Before(lastHour) {
		if err := gen(store.RollupHour, last, lastHour); err != nil {
			return c, err
		}
		// The partial day's day rollup: the sum of its hours.
		tag, err := st.Pool().Exec(ctx, `
			INSERT INTO rollup_samples AS r (res, ts, node_id, metric_id, n, sum, min, max, ok_s, warn_s, crit_s)
			SELECT 86400, $1, node_id, metric_id, sum(n), sum(sum), min(min), max(max), sum(ok_s), sum(warn_s), sum(crit_s)
			FROM rollup_samples WHERE res = 3600 AND node_id = ANY($2) AND ts >= $1 AND ts < $3
			GROUP BY node_id, metric_id ORDER BY node_id, metric_id
			ON CONFLICT (res, node_id, ts, metric_id) DO UPDATE SET n = r.n + EXCLUDED.n, sum = r.sum + EXCLUDED.sum,
				min = least(r.min, EXCLUDED.min), max = greatest(r.max, EXCLUDED.max),
				ok_s = r.ok_s + EXCLUDED.ok_s, warn_s = r.warn_s + EXCLUDED.warn_s, crit_s = r.crit_s + EXCLUDED.crit_s`, last, nodes, lastHour)
		if err != nil {
			return c, fmt.Errorf("sum partial day: %w", err)
		}
		c.RollupRows += tag.RowsAffected()
		tag, err = st.Pool().Exec(ctx, `
			WITH hours AS (SELECT * FROM rollup_histograms WHERE res = 3600 AND node_id = ANY($2) AND ts >= $1 AND ts < $3),
			b AS (SELECT node_id, metric_id, u.i, sum(u.c)::bigint AS c FROM hours, unnest(bucket_index, bucket_count) u(i, c) GROUP BY 1, 2, 3),
			t AS (SELECT node_id, metric_id, sum(count) AS count, sum(sum) AS sum FROM hours GROUP BY 1, 2)
			INSERT INTO rollup_histograms (res, ts, node_id, metric_id, count, sum, bucket_index, bucket_count)
			SELECT 86400, $1, t.node_id, t.metric_id, t.count, t.sum, array_agg(b.i ORDER BY b.i), array_agg(b.c ORDER BY b.i)
			FROM t JOIN b USING (node_id, metric_id) GROUP BY t.node_id, t.metric_id, t.count, t.sum
			ON CONFLICT DO NOTHING`, last, nodes, lastHour)
		if err != nil {
			return c, fmt.Errorf("merge partial day: %w", err)
		}
		c.RollupRows += tag.RowsAffected()
	}
	return c, nil
}

// writeLive writes every node's reports over [from, to) through
// store.WriteReports in batches of 500, as the collector's writer does,
// and returns how long the writes took and what they carried.
func (f *fleet) writeLive(ctx context.Context, st *store.Store, from, to time.Time) (time.Duration, seedCounts, error) {
	var c seedCounts
	var took time.Duration
	rngs := make([]*rand.Rand, len(f.ids))
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), uint64(from.Unix())))
	}
	batch := make([]store.Report, 0, 500)
	flush := func() error {
		start := time.Now()
		_, err := st.WriteReports(ctx, batch)
		took += time.Since(start)
		batch = batch[:0]
		return err
	}
	for t := from; t.Before(to); t = t.Add(interval) {
		for i := range f.ids {
			// Spread over the interval, as a fleet's clocks are.
			r := f.report(rngs[i], i, t.Add(time.Duration(i)*interval/time.Duration(len(f.ids))))
			c.Reports++
			c.Samples += int64(len(r.Samples))
			c.Histograms += int64(len(r.Histograms))
			c.Events += int64(len(r.Events))
			if batch = append(batch, r); len(batch) == cap(batch) {
				if err := flush(); err != nil {
					return took, c, err
				}
			}
		}
	}
	if len(batch) > 0 {
		if err := flush(); err != nil {
			return took, c, err
		}
	}
	return took, c, nil
}

// durable turns synchronous_commit on (the cluster's setting) or off for
// the test binary's throwaway cluster: seeding needs no commit on disk
// before the next begins, the timed writes through store.WriteReports
// wait for theirs as the collector's do.
func durable(ctx context.Context, st *store.Store, on bool) error {
	q := `ALTER SYSTEM SET synchronous_commit = off`
	if on {
		q = `ALTER SYSTEM RESET synchronous_commit`
	}
	if _, err := st.Pool().Exec(ctx, q); err != nil {
		return fmt.Errorf("set synchronous_commit: %w", err)
	}
	if _, err := st.Pool().Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("reload configuration: %w", err)
	}
	// Each session reloads on its next statement; the signal takes a
	// moment to reach them.
	time.Sleep(200 * time.Millisecond)
	return nil
}

func dbSize(ctx context.Context, st *store.Store) (int64, error) {
	var n int64
	err := st.Pool().QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n)
	return n, err
}

// seed builds the benchmark's data (package comment) and times the write
// path at three sizes of stored data: after the newest tenth of the raw
// window, after all of it, and after everything. vacuum: VACUUM ANALYZE at
// the end, as autovacuum would have by then.
func seed(tb testing.TB, st *store.Store, cfg seedConfig, vacuum bool) (*fleet, []ingestRate) {
	ctx := context.Background()
	start := time.Now()
	end := start.UTC().Truncate(time.Minute)
	step := func(what string, c seedCounts, t0 time.Time) {
		size, _ := dbSize(ctx, st)
		fmt.Fprintf(os.Stderr, "seed: %-44s %9d reports %6.1fs\n", what, c.Reports, time.Since(t0).Seconds())
		tb.Logf("seed: %-44s %9d reports %10d samples %9d histograms %8d events %9d rollup rows  %6.1fs  db %.2f GB",
			what, c.Reports, c.Samples, c.Histograms, c.Events, c.RollupRows, time.Since(t0).Seconds(), float64(size)/1e9)
	}
	setDurable := func(on bool) {
		if err := durable(ctx, st, on); err != nil {
			tb.Fatal(err)
		}
	}
	setDurable(false)
	defer setDurable(true)
	t0 := time.Now()
	f, err := register(ctx, st, cfg, end)
	if err != nil {
		tb.Fatal(err)
	}
	step(fmt.Sprintf("registered %d nodes", cfg.Nodes), seedCounts{}, t0)
	raw, window := cfg.Raw, max(cfg.Window, cfg.Raw)
	minuteFrom := end.Add(-cfg.MinuteOf)
	var rates []ingestRate
	slot := end
	timeWrites := func() {
		size, err := dbSize(ctx, st)
		if err != nil {
			tb.Fatal(err)
		}
		setDurable(true)
		took, c, err := f.writeLive(ctx, st, slot, slot.Add(2*time.Minute))
		if err != nil {
			tb.Fatal(err)
		}
		setDurable(false)
		slot = slot.Add(2 * time.Minute)
		r := ingestRate{stored: size, rate: float64(c.Reports) / took.Seconds()}
		rates = append(rates, r)
		tb.Logf("ingest: %d reports (%d samples, %d histograms) through store.WriteReports in %s: %.0f reports/s, %.0f samples/s, with %.2f GB stored",
			c.Reports, c.Samples, c.Histograms, took.Round(time.Millisecond), r.rate, float64(c.Samples+c.Histograms)/took.Seconds(), float64(size)/1e9)
	}
	seedRaw := func(what string, n0, n1 int, from, to time.Time) {
		t0 := time.Now()
		// Rollups of node-0000's and the deep nodes' reports only (package
		// comment).
		var c seedCounts
		for _, part := range []struct {
			n0, n1  int
			rollups bool
		}{{n0, min(n1, cfg.Deep+1), true}, {max(n0, cfg.Deep+1), n1, false}} {
			if part.n0 >= part.n1 {
				continue
			}
			d, err := f.seedRaw(ctx, st, part.n0, part.n1, from, to, minuteFrom, part.rollups)
			if err != nil {
				tb.Fatal(err)
			}
			c.add(d)
		}
		step(what, c, t0)
	}
	tenth := end.Add(-raw / 10).Truncate(time.Minute)
	seedRaw("raw, every node, newest tenth of the window", 0, cfg.Nodes, tenth, end)
	timeWrites()
	seedRaw("raw, every node, rest of the window", 0, cfg.Nodes, end.Add(-raw), tenth)
	timeWrites()
	// node-0000's from a whole hour, so that its hour rollups before it
	// (seedHistory's) and after it (seedRaw's) meet.
	windowFrom := end.Add(-window).Truncate(time.Hour)
	if windowFrom.Before(end.Add(-raw)) {
		seedRaw(fmt.Sprintf("raw, node-0000 (troubled), the tree's %s", window), 0, 1, windowFrom, end.Add(-raw))
	}
	deepFrom := end.Add(-time.Duration(cfg.Days) * day)
	if deepFrom.Before(end.Add(-raw)) && cfg.Deep > 0 {
		seedRaw(fmt.Sprintf("raw, %d deep nodes, %d days", cfg.Deep, cfg.Days), 1, 1+cfg.Deep, deepFrom, end.Add(-raw))
	}
	t0 = time.Now()
	var c seedCounts
	histFrom := end.Add(-time.Duration(2*cfg.Days) * day).Truncate(day)
	for _, h := range []struct {
		n0, n1   int
		from, to time.Time
	}{
		{0, 1, histFrom, windowFrom},
		{1, 1 + cfg.Deep, histFrom, deepFrom},
		{1 + cfg.Deep, cfg.Nodes, end.Add(-time.Duration(cfg.History) * day).Truncate(day), end.Add(-raw)},
	} {
		if h.n0 >= h.n1 || !h.from.Before(h.to) {
			continue
		}
		d, err := f.seedHistory(ctx, st, h.n0, h.n1, h.from, h.to)
		if err != nil {
			tb.Fatal(err)
		}
		c.add(d)
	}
	step("rollups of the history before the raw reports", c, t0)
	timeWrites()
	// Up to now: the minutes seeding took (at 10,000 nodes, many) COPYed
	// as the raw window was, then at least one snapshot of every node (5
	// minutes) through store.WriteReports, so the newest values hold the
	// whole tree.
	if gapTo := time.Now().UTC().Add(-5 * time.Minute).Truncate(time.Minute); slot.Before(gapTo) {
		seedRaw("raw, every node, the minutes seeding took", 0, cfg.Nodes, slot, gapTo)
		slot = gapTo
	}
	setDurable(true)
	t0 = time.Now()
	liveTo := slot.Add(5 * time.Minute)
	if now := time.Now().UTC().Truncate(interval); now.After(liveTo) {
		liveTo = now
	}
	_, c, err = f.writeLive(ctx, st, slot, liveTo)
	if err != nil {
		tb.Fatal(err)
	}
	step("live tail through store.WriteReports", c, t0)
	if vacuum {
		t0 = time.Now()
		if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
			tb.Fatal(err)
		}
		step("VACUUM ANALYZE", seedCounts{}, t0)
	}
	tb.Logf("seed: done in %s", time.Since(start).Round(time.Second))
	return f, rates
}
