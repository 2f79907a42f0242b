package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/loglinear"
)

func TestSplit(t *testing.T) {
	h := func(n int) time.Time { return time.Unix(int64(n)*3600, 0).UTC() }
	iv := func(a, b int) interval { return interval{h(a), h(b)} }
	cases := []struct {
		name             string
		from, to, thr    int
		dirty            []int
		stored, computed []interval
	}{
		{"all folded", 0, 5, 10, nil, []interval{iv(0, 5)}, nil},
		{"none folded", 3, 5, 2, nil, nil, []interval{iv(3, 5)}},
		{"open end", 0, 5, 3, nil, []interval{iv(0, 3)}, []interval{iv(3, 5)}},
		{"dirty inside", 0, 6, 4, []int{1, 2}, []interval{iv(0, 1), iv(3, 4)}, []interval{iv(1, 3), iv(4, 6)}},
		{"dirty at the watermark's edge", 0, 6, 4, []int{3}, []interval{iv(0, 3)}, []interval{iv(3, 6)}},
		{"dirty outside the range or not folded", 2, 4, 3, []int{0, 3, 7}, []interval{iv(2, 3)}, []interval{iv(3, 4)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dirty []time.Time
			for _, d := range c.dirty {
				dirty = append(dirty, h(d))
			}
			stored, computed := split(h(c.from), h(c.to), h(c.thr), dirty, time.Hour)
			eq := func(a, b interval) bool { return a.from.Equal(b.from) && a.to.Equal(b.to) }
			if !slices.EqualFunc(stored, c.stored, eq) || !slices.EqualFunc(computed, c.computed, eq) {
				t.Errorf("stored %v computed %v, want %v %v", stored, computed, c.stored, c.computed)
			}
		})
	}
}

// foldFleet is a few nodes whose reports the fold tests write.
type foldFleet struct {
	st    *Store
	nodes []int32
	ids   map[string]int32
	mu    sync.Mutex // writers run at once
	seq   map[int32]uint64
	// hists says which reports carry a histogram (nil: all): a batch
	// with none takes another statement than one with some (moveStaged).
	hists func(k int64) bool
}

func newFoldFleet(t *testing.T, st *Store, n int) *foldFleet {
	t.Helper()
	ctx := context.Background()
	f := &foldFleet{st: st, seq: map[int32]uint64{}}
	for i := range n {
		id, err := st.UpsertNode(ctx, Node{Name: fmt.Sprintf("fold-%d", i), InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if f.ids, err = st.UpsertDefinitions(ctx, id, []MetricDef{
			{Path: "tcp_reset", Title: "r", Unit: "resets/s", Kind: KindRate},
			{Path: "ping", Title: "p", Unit: "ms", Kind: KindGauge},
			{Path: "ping/a", Title: "a", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99},
		}); err != nil {
			t.Fatal(err)
		}
		f.nodes = append(f.nodes, id)
	}
	return f
}

// report is node's next report at ts: values and states vary with ts, so
// min, max, sums and state seconds all differ between buckets.
func (f *foldFleet) report(node int32, ts time.Time) Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq[node]++
	k := ts.Unix()/20 + int64(node)
	st := []State{StateOK, StateOK, StateWarn, StateOK, StateCrit}[k%5]
	h := loglinear.New()
	for v := range 3 + k%4 {
		h.Record(uint64(1e5 * (1 + (k*7+v*13)%50)))
	}
	hist := Histogram{MetricID: f.ids["ping/a"], Path: "ping/a", Count: h.Count, Sum: h.Sum}
	for _, b := range h.Sorted() {
		hist.BucketIndex = append(hist.BucketIndex, int32(b))
		hist.BucketCount = append(hist.BucketCount, int64(h.Counts[b]))
	}
	ping := Sample{MetricID: f.ids["ping"], Path: "ping", Value: 0.25 * float64(k%11), State: st}
	if (k/3)%5 == 0 { // every echo lost: no value, for runs long enough to empty a minute
		ping = Sample{MetricID: f.ids["ping"], Path: "ping", State: StateCrit, NoValue: true}
	}
	r := Report{NodeID: node, InstanceID: 1, Seq: f.seq[node], Time: ts, IntervalMS: 20000,
		Samples: []Sample{
			{MetricID: f.ids["tcp_reset"], Path: "tcp_reset", Value: float64(k % 7), State: st},
			ping,
		}}
	if f.hists == nil || f.hists(k) {
		r.Histograms = []Histogram{hist}
	}
	return r
}

// write stores every node's reports of [from, to), one each 20 s.
func (f *foldFleet) write(t testing.TB, from, to time.Time) {
	t.Helper()
	var batch []Report
	for ts := from; ts.Before(to); ts = ts.Add(20 * time.Second) {
		for _, n := range f.nodes {
			batch = append(batch, f.report(n, ts))
		}
		if len(batch) >= 200 {
			f.writeBatch(t, batch)
			batch = batch[:0]
		}
	}
	f.writeBatch(t, batch)
}

func (f *foldFleet) writeBatch(t testing.TB, batch []Report) {
	t.Helper()
	if len(batch) == 0 {
		return
	}
	if _, err := f.st.WriteReports(context.Background(), batch); err != nil {
		t.Error(err)
	}
}

// rowsOf sorts rows and renders them for comparison; sums may differ in
// their last bits with the order they were added in.
func rowsOf(samples []SampleRow, hists []HistogramRow) []string {
	var out []string
	round := func(v float64) string { return fmt.Sprintf("%.9g", v) }
	for _, r := range samples {
		out = append(out, fmt.Sprintf("%d %s %s n=%d sum=%s min=%v max=%v ok=%s warn=%s crit=%s", r.NodeID, r.Path, r.TS.UTC().Format(time.RFC3339),
			r.N, round(r.Sum), r.Min, r.Max, round(r.OK), round(r.Warn), round(r.Crit)))
	}
	for _, r := range hists {
		out = append(out, fmt.Sprintf("%d %s %s count=%d sum=%s buckets=%v %v", r.NodeID, r.Path, r.TS.UTC().Format(time.RFC3339),
			r.Count, round(r.Sum), r.Index, r.Counts))
	}
	slices.Sort(out)
	return out
}

// read is what ReadRollups returns for res over [from, to), and what the
// raw path computes.
func (f *foldFleet) read(t *testing.T, res int32, from, to time.Time) (got, raw []string) {
	t.Helper()
	q := RollupQuery{NodeIDs: f.nodes, Res: res, From: from, To: to}
	s, h, err := f.st.ReadRollups(context.Background(), q)
	if err != nil {
		t.Fatalf("read %ds rollups: %v", res, err)
	}
	q.Raw = true
	rs, rh, err := f.st.ReadRollups(context.Background(), q)
	if err != nil {
		t.Fatalf("read raw as %ds rollups: %v", res, err)
	}
	return rowsOf(s, h), rowsOf(rs, rh)
}

// stored is the rows of res in the tables, nothing computed.
func (f *foldFleet) stored(t *testing.T, res int32, from, to time.Time) []string {
	t.Helper()
	paths, err := f.st.metricPaths(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out rollupRows
	if err := out.read(context.Background(), f.st.pool, paths,
		`SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples WHERE res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4`,
		`SELECT node_id, metric_id, ts, count, sum, buckets FROM rollup_histograms WHERE res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4`,
		res, f.nodes, from, to); err != nil {
		t.Fatal(err)
	}
	return rowsOf(out.samples, out.hists)
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: no rows to compare; the test checks nothing", what)
	}
	if !slices.Equal(got, want) {
		var diff []string
		for _, g := range got {
			if !slices.Contains(want, g) {
				diff = append(diff, "+ "+g)
			}
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				diff = append(diff, "- "+w)
			}
		}
		t.Errorf("%s: %d rows, want %d (the raw path's):\n%s", what, len(got), len(want), strings.Join(diff[:min(len(diff), 12)], "\n"))
	}
}

func (f *foldFleet) fold(t *testing.T, now time.Time) FoldResult {
	t.Helper()
	r, err := f.st.FoldRollups(context.Background(), FoldOptions{Now: now, NodesPerStatement: 2})
	if err != nil {
		t.Fatalf("fold at %s: %v", now, err)
	}
	if r.Busy {
		t.Fatalf("fold at %s: busy with no other fold running", now)
	}
	return r
}

func (f *foldFleet) pending(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.st.pool.QueryRow(context.Background(), `SELECT count(*) FROM rollup_pending`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *foldFleet) dirtyMarks(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.st.pool.QueryRow(context.Background(), `SELECT count(*) FROM rollup_dirty`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Hours and days folded from minutes, read before and after their fold,
// and late data, are the raw path's buckets exactly: what the write path
// used to maintain itself.
func TestFoldRollups(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	var hourThrough, dayThrough time.Time
	if err := st.pool.QueryRow(ctx, `SELECT (SELECT through FROM rollup_folds WHERE res = 3600), (SELECT through FROM rollup_folds WHERE res = 86400)`).
		Scan(&hourThrough, &dayThrough); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); hourThrough.After(now.Add(-time.Hour)) || hourThrough.Before(now.Add(-2*time.Hour)) || !dayThrough.Equal(hourThrough.Truncate(24*time.Hour)) {
		t.Errorf("a new database's watermarks: hour %s day %s at %s; want the hour before the last and its day", hourThrough, dayThrough, now)
	}

	f := newFoldFleet(t, st, 3)
	const day = 24 * time.Hour
	// Two days ago by the real clock, so every write is late to the
	// writers (which mark by PostgreSQL's clock); the fold's clock is
	// set. Hours 22 and 23 of d0 and 0 of d1 close, hour 1 of d1 is open.
	d0 := time.Now().UTC().Truncate(day).Add(-2 * day)
	d1 := d0.Add(day)
	if err := st.SetFoldWatermark(ctx, RollupHour, d0.Add(22*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFoldWatermark(ctx, RollupDay, d0); err != nil {
		t.Fatal(err)
	}
	f.write(t, d0.Add(22*time.Hour), d1.Add(time.Hour+30*time.Minute))
	if n, want := f.pending(t), 3*(2*60+90)*3; n != want {
		t.Fatalf("%d reports pending after the writes, want every one of the %d", n, want)
	}
	hours := func(t *testing.T) {
		t.Helper()
		got, raw := f.read(t, RollupHour, d0.Add(20*time.Hour), d1.Add(3*time.Hour))
		same(t, "hour rollups", got, raw)
		got, raw = f.read(t, RollupDay, d0.Add(-day), d1.Add(day))
		same(t, "day rollups", got, raw)
		// A range starting inside a day takes the days that start in it,
		// as the stored rows always did (the raw path takes part of it).
		got, _ = f.read(t, RollupDay, d0.Add(time.Hour), d1.Add(2*day))
		_, raw = f.read(t, RollupDay, d1, d1.Add(2*day))
		same(t, "day rollups from inside a day", got, raw)
	}

	t.Run("reports not folded are read from their raw rows", func(t *testing.T) {
		hours(t)
		got, raw := f.read(t, RollupMinute, d0.Add(22*time.Hour), d1.Add(2*time.Hour))
		same(t, "minute rollups", got, raw)
		for _, res := range []int32{RollupMinute, RollupHour} {
			if n := len(f.stored(t, res, d0, d1.Add(day))); n != 0 {
				t.Errorf("%d rows of %ds stored by the write path, want none", n, res)
			}
		}
	})

	now := d1.Add(time.Hour + 30*time.Minute)
	t.Run("closed hours and the closed day are folded", func(t *testing.T) {
		r := f.fold(t, now)
		if r.Hours != 3 || r.Days != 1 || !r.HourThrough.Equal(d1.Add(time.Hour)) || !r.DayThrough.Equal(d1) {
			t.Errorf("fold %+v, want 3 hours through %s and 1 day through %s", r, d1.Add(time.Hour), d1)
		}
		// Every report but the open minute's (within its grace).
		if want := 3 * (2*60 + 90 - 1) * 3; r.Reports != want || f.pending(t) != 9 {
			t.Errorf("fold took %d reports and left %d, want %d and 9", r.Reports, f.pending(t), want)
		}
		_, raw := f.read(t, RollupMinute, d0, now.Add(-time.Minute))
		same(t, "stored minutes", f.stored(t, RollupMinute, d0, now.Add(-time.Minute)), raw)
		_, raw = f.read(t, RollupHour, d0, d1.Add(time.Hour))
		same(t, "stored hours", f.stored(t, RollupHour, d0, d1.Add(day)), raw)
		_, raw = f.read(t, RollupDay, d0, d1)
		same(t, "stored day", f.stored(t, RollupDay, d0, d1.Add(day)), raw)
		if n := f.dirtyMarks(t); n != 0 {
			t.Errorf("%d dirty marks left", n)
		}
		hours(t)
		// The hour just closed but within the grace is not folded.
		r = f.fold(t, d1.Add(2*time.Hour+time.Minute))
		if r.Hours != 0 || r.Days != 0 || r.Recomputed != 0 || r.Reports != 9 {
			t.Errorf("a second fold %+v, want nothing to do", r)
		}
	})

	t.Run("a late report counts once, before and after its fold", func(t *testing.T) {
		late := f.report(f.nodes[1], d0.Add(22*time.Hour+17*time.Minute+5*time.Second))
		f.writeBatch(t, []Report{late})
		// The fold above, at the next hour, took the rest.
		if f.pending(t) != 1 || f.dirtyMarks(t) != 0 {
			t.Fatalf("%d reports pending and %d dirty marks after one late report, want 1 and none", f.pending(t), f.dirtyMarks(t))
		}
		_, raw := f.read(t, RollupHour, d0, d1.Add(time.Hour))
		if slices.Equal(f.stored(t, RollupHour, d0, d1.Add(time.Hour)), raw) {
			t.Fatal("the stored hour already has the late report; the test checks nothing")
		}
		hours(t)
		r := f.fold(t, now)
		if r.Recomputed != 1 || r.Hours != 0 || r.Reports != 1 {
			t.Errorf("fold %+v, want the late report folded and its hour recomputed", r)
		}
		same(t, "stored hours", f.stored(t, RollupHour, d0, d1.Add(time.Hour)), raw)
		_, raw = f.read(t, RollupDay, d0, d1)
		same(t, "stored day", f.stored(t, RollupDay, d0, d1), raw)
		hours(t)

		// The same report again (the agent's spool resending it) adds
		// nothing and marks nothing.
		f.writeBatch(t, []Report{late})
		if n := f.pending(t); n != 0 {
			t.Errorf("a resent report left %d reports pending, want none", n)
		}
		if r := f.fold(t, now); r.Recomputed != 0 || r.Reports != 0 {
			t.Errorf("fold after a resend %+v, want nothing recomputed", r)
		}
		hours(t)
	})

	t.Run("writers and folds at once", func(t *testing.T) {
		// Late reports into folded hours, the open hour and hours about
		// to be folded, while two folders take turns with the clock
		// moving over the next two hours.
		var wg sync.WaitGroup
		from := d1.Add(time.Hour + 30*time.Minute)
		wg.Go(func() { f.write(t, from, from.Add(2*time.Hour)) })
		wg.Go(func() {
			for i := range 30 {
				f.writeBatch(t, []Report{f.report(f.nodes[i%3], d0.Add(22*time.Hour+time.Duration(i)*313*time.Second))})
			}
		})
		busy := 0
		var mu sync.Mutex
		for w := range 2 {
			wg.Go(func() {
				for i := range 12 {
					r, err := st.FoldRollups(ctx, FoldOptions{Now: from.Add(time.Duration(i*10+w) * time.Minute), NodesPerStatement: 2})
					if err != nil {
						t.Error(err)
						return
					}
					if r.Busy {
						mu.Lock()
						busy++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d of 24 folds found another folding", busy)
		hours(t)
		end := from.Add(2*time.Hour + 30*time.Minute)
		r := f.fold(t, end)
		if !r.HourThrough.Equal(from.Add(90*time.Minute)) || f.dirtyMarks(t) != 0 {
			t.Errorf("final fold %+v, %d marks left; want hours through %s", r, f.dirtyMarks(t), from.Add(90*time.Minute))
		}
		_, raw := f.read(t, RollupHour, d0, r.HourThrough)
		same(t, "stored hours", f.stored(t, RollupHour, d0, r.HourThrough), raw)
		_, raw = f.read(t, RollupDay, d0, r.DayThrough)
		same(t, "stored day", f.stored(t, RollupDay, d0, r.DayThrough), raw)
		hours(t)
	})
}

// A dirty hour older than the minute rollups' retention keeps its folded
// row: recomputing it from what retention left would lose the rest.
func TestFoldSkipsHoursPastRetention(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	f := newFoldFleet(t, st, 1)
	h := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	f.write(t, h, h.Add(time.Hour))
	f.fold(t, time.Time{}) // PostgreSQL's clock: folds the hour's mark
	before := f.stored(t, RollupHour, h, h.Add(time.Hour))
	if _, err := st.DeleteRollupsBefore(ctx, RollupMinute, h.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.writeBatch(t, []Report{f.report(f.nodes[0], h.Add(40*time.Minute+time.Second))})
	r, err := st.FoldRollups(ctx, FoldOptions{MinuteRetention: 4 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped != 1 || r.Recomputed != 0 {
		t.Errorf("fold %+v, want the dirty hour skipped", r)
	}
	if after := f.stored(t, RollupHour, h, h.Add(time.Hour)); !slices.Equal(after, before) || len(before) == 0 {
		t.Errorf("hour rows changed from %v to %v", before, after)
	}
}
