package store

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/migrations"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func openTest(t testing.TB) *Store {
	t.Helper()
	ctx := context.Background()
	st, err := Open(ctx, pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func TestLoadMigrationsRejectsBadNumbering(t *testing.T) {
	cases := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"gap", fstest.MapFS{"001_a.sql": {}, "003_c.sql": {}}, "expected version 002"},
		{"duplicate", fstest.MapFS{"001_a.sql": {}, "001_b.sql": {}}, "expected version 002"},
		{"bad name", fstest.MapFS{"001_a.sql": {}, "2_b.sql": {}}, "must be NNN_lower_snake.sql"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadMigrations(c.files)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("loadMigrations = %v, want error containing %q", err, c.want)
			}
		})
	}
}

func TestMigrateIsIdempotentAndRefusesAnOlderCollector(t *testing.T) {
	st := openTest(t)
	n, err := Migrate(context.Background(), st.pool, migrations.FS)
	if err != nil || n != 0 {
		t.Fatalf("second migrate: applied %d, err %v; want 0, nil", n, err)
	}
	_, err = Migrate(context.Background(), st.pool, fstest.MapFS{"001_init.sql": {Data: []byte("SELECT 1")}})
	if err == nil || !strings.Contains(err.Error(), "upgrade the collector") {
		t.Fatalf("migrate with fewer migrations than applied: %v; want an error asking to upgrade", err)
	}
}

func TestWriteReportsIsIdempotentAndMergesLatest(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "n1", Labels: map[string]string{"customer": "acme"}, InstanceID: 7, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{
		{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: KindRate, DefaultThreshold: &Threshold{Warn: 1, Crit: 2, Comparison: "above"}},
		{Path: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: KindRate},
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	mk := func(seq uint64, at time.Time, root, sent float64) Report {
		r := Report{NodeID: node, InstanceID: 7, Seq: seq, Time: at, IntervalMS: 1000,
			Samples: []Sample{{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: root, State: StateWarn}}}
		if sent > 0 {
			r.Samples = append(r.Samples, Sample{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Value: sent, State: StateCrit})
			r.Events = []Event{{MetricID: ids["tcp_reset/sent"], Path: "tcp_reset/sent", Time: at, Fields: map[string]string{"reason": "no_socket"}}}
		}
		return r
	}
	first := []Report{mk(1, t0, 5, 5), mk(2, t0.Add(time.Second), 3, 0)}
	got, err := st.WriteReports(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range first {
		if !got[r.Key()] {
			t.Errorf("report %d: inserted = false on first write", r.Seq)
		}
	}
	// A resend (after a reconnect) plus one new report, with a duplicate
	// inside the batch itself.
	again := []Report{mk(2, t0.Add(time.Second), 3, 0), mk(3, t0.Add(2*time.Second), 4, 4), mk(3, t0.Add(2*time.Second), 4, 4)}
	got, err = st.WriteReports(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if got[again[0].Key()] || !got[again[1].Key()] {
		t.Errorf("resend: inserted = %v; want seq 2 false, seq 3 true", got)
	}
	// The first batch went straight in (copyDirect), the second through
	// staging (writeStaged): each report once, with one pending key.
	var reports, events, pending int
	if err := st.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM reports), (SELECT count(*) FROM events), (SELECT count(*) FROM rollup_pending)`).
		Scan(&reports, &events, &pending); err != nil {
		t.Fatal(err)
	}
	if reports != 3 || events != 2 || pending != 3 {
		t.Errorf("stored %d reports, %d events and %d pending keys; want 3, 2 and 3", reports, events, pending)
	}

	l, ok, err := st.Latest(ctx, node)
	if err != nil || !ok {
		t.Fatalf("latest: ok=%v err=%v", ok, err)
	}
	if !l.Time.Equal(t0.Add(2*time.Second)) || l.Metrics["tcp_reset"].Value != 4 || l.Metrics["tcp_reset/sent"].State != StateCrit {
		t.Errorf("latest = %+v; want time t0+2s, root 4, sent CRIT", l)
	}
	// An old report arriving late must not move the latest state backwards.
	if _, err := st.WriteReports(ctx, []Report{mk(9, t0.Add(-time.Hour), 99, 0)}); err != nil {
		t.Fatal(err)
	}
	if l2, _, _ := st.Latest(ctx, node); l2.Metrics["tcp_reset"].Value != 4 {
		t.Errorf("late report overwrote latest: root = %v, want 4", l2.Metrics["tcp_reset"].Value)
	}

	buckets, err := st.Series(ctx, node, "tcp_reset/sent", t0.Add(-time.Minute), t0.Add(time.Minute), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	var present int
	for _, b := range buckets {
		sum += b.Sum
		present += b.Present
	}
	if len(buckets) != 3 || sum != 9 || present != 2 {
		t.Errorf("series: %d buckets, sum %v, present %d; want 3, 9, 2", len(buckets), sum, present)
	}
	evs, err := st.Events(ctx, node, "tcp_reset", t0.Add(-time.Minute), t0.Add(time.Minute), 10)
	if err != nil || len(evs) != 2 || evs[0].Fields["reason"] != "no_socket" {
		t.Errorf("events under tcp_reset = %+v, %v; want 2 with reason no_socket", evs, err)
	}
}

func TestRetentionDropsWholeDays(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "old", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "drops", Title: "Drops", Unit: "drops/s", Kind: KindRate}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var batch []Report
	for i, age := range []time.Duration{0, 3 * 24 * time.Hour, 10 * 24 * time.Hour} {
		batch = append(batch, Report{NodeID: node, InstanceID: 1, Seq: uint64(i + 1), Time: now.Add(-age), IntervalMS: 1000,
			Samples: []Sample{{MetricID: ids["drops"], Path: "drops", Value: 1, State: StateOK}}})
	}
	if _, err := st.WriteReports(ctx, batch); err != nil {
		t.Fatal(err)
	}
	dropped, err := st.DropPartitionsBefore(ctx, now.Add(-5*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 3 { // reports, histograms, events of the 10-day-old day
		t.Errorf("dropped %v; want the three partitions of one day", dropped)
	}
	var n int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM reports`).Scan(&n); err != nil || n != 2 {
		t.Errorf("reports left = %d (%v); want 2", n, err)
	}
}

// Histograms of several reports merge exactly within a step.
func TestHistogramSeriesMergesBuckets(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "h", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "ping", Title: "Ping", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Minute)
	all := loglinear.New()
	var batch []Report
	for i := range 4 {
		h := loglinear.New()
		for v := range 100 {
			h.Record(uint64((v + 1) * (i + 1) * 10000)) // 10 µs .. 4 ms
		}
		all.Merge(h)
		hist := Histogram{MetricID: ids["ping"], Path: "ping", Count: h.Count, Sum: h.Sum}
		for _, b := range h.Sorted() {
			hist.BucketIndex = append(hist.BucketIndex, int32(b))
			hist.BucketCount = append(hist.BucketCount, int64(h.Counts[b]))
		}
		batch = append(batch, Report{NodeID: node, InstanceID: 1, Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Second),
			IntervalMS: 1000, Samples: []Sample{{MetricID: ids["ping"], Path: "ping", Value: h.Quantile(0.99) / 1e6, State: StateOK}},
			Histograms: []Histogram{hist}})
	}
	if _, err := st.WriteReports(ctx, batch); err != nil {
		t.Fatal(err)
	}
	steps, err := st.HistogramSeries(ctx, node, "ping", t0.Add(-time.Minute), t0.Add(time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Hist.Count != 400 {
		t.Fatalf("got %d steps (first count %v), want one step of 400 samples", len(steps), steps)
	}
	for _, q := range []float64{0.5, 0.99} {
		if got, want := steps[0].Hist.Quantile(q), all.Quantile(q); got != want {
			t.Errorf("p%v of the merged step = %v, want %v", q*100, got, want)
		}
	}
}

// A Hello repeating the definitions it sent before writes nothing (no new
// row version); a changed one is updated; a path given twice keeps the
// last.
func TestUpsertDefinitionsWritesOnlyChanges(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "defs-1", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defs := []MetricDef{
		{Path: "ping", Title: "Ping", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99,
			DefaultThreshold: &Threshold{Warn: 5, Crit: 10, Comparison: "above"}},
		{Path: "ping/peer", Title: "Peer", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99},
	}
	versions := func() map[string]string {
		rows, err := st.pool.Query(ctx, `SELECT m.path, nm.xmin::text || '/' || md.title FROM node_metrics nm
			JOIN metric_paths m ON m.id = nm.metric_id JOIN metric_defs md ON md.id = nm.def_id WHERE nm.node_id = $1`, node)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv [2]string, err error) {
			err = r.Scan(&kv[0], &kv[1])
			return kv, err
		})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, kv := range out {
			m[kv[0]] = kv[1]
		}
		return m
	}
	if _, err := st.UpsertDefinitions(ctx, node, defs); err != nil {
		t.Fatal(err)
	}
	before := versions()
	if len(before) != 2 {
		t.Fatalf("stored %v", before)
	}
	if _, err := st.UpsertDefinitions(ctx, node, defs); err != nil {
		t.Fatal(err)
	}
	if after := versions(); !maps.Equal(before, after) {
		t.Fatalf("the same definitions rewrote rows: %v → %v", before, after)
	}
	changed := []MetricDef{defs[0], defs[1], defs[1]}
	changed[1].Title = "Peer (old)"
	changed[2].Title = "Peer (new)"
	if _, err := st.UpsertDefinitions(ctx, node, changed); err != nil {
		t.Fatal(err)
	}
	after := versions()
	if after["ping"] != before["ping"] || !strings.HasSuffix(after["ping/peer"], "/Peer (new)") {
		t.Fatalf("after a change of ping/peer: %v (before %v)", after, before)
	}

	// Nodes of one fleet share their definitions: a second node with the
	// same tree adds pairs, not definitions, and reads the same tree back.
	var before2 int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM metric_defs`).Scan(&before2); err != nil {
		t.Fatal(err)
	}
	other, err := st.UpsertNode(ctx, Node{Name: "defs-2", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpsertDefinitions(ctx, other, changed); err != nil {
		t.Fatal(err)
	}
	var after2 int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM metric_defs`).Scan(&after2); err != nil {
		t.Fatal(err)
	}
	if after2 != before2 {
		t.Fatalf("a second node with the same definitions added %d definitions", after2-before2)
	}
	a, err := st.Definitions(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Definitions(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2 || !slices.EqualFunc(a, b, func(x, y MetricDef) bool {
		return x.Path == y.Path && x.Title == y.Title && x.Unit == y.Unit && x.Kind == y.Kind && x.Scale == y.Scale &&
			x.Quantile == y.Quantile && (x.DefaultThreshold == nil) == (y.DefaultThreshold == nil)
	}) {
		t.Fatalf("the two nodes read back %+v and %+v", a, b)
	}
	if a[0].DefaultThreshold == nil || a[0].DefaultThreshold.Warn != 5 || a[1].Title != "Peer (new)" {
		t.Fatalf("read back %+v", a)
	}
}

// A Hello's definitions are known by their hash until any definition of the
// node changes; the hash ignores order and sees every field.
func TestKnownDefinitions(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "known-1", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defs := []MetricDef{{Path: "drops", Title: "Drops", Unit: "drops/s", Kind: KindRate},
		{Path: "drops/no_socket", Title: "No socket", Unit: "drops/s", Kind: KindRate}}
	h := DefinitionsHash(defs)
	if !bytes.Equal(h, DefinitionsHash([]MetricDef{defs[1], defs[0]})) {
		t.Fatal("the hash depends on the order of the definitions")
	}
	changed := slices.Clone(defs)
	changed[1].Description = "changed"
	if bytes.Equal(h, DefinitionsHash(changed)) {
		t.Fatal("the hash does not see a changed description")
	}
	if got, total, err := st.KnownDefinitions(ctx, node); err != nil || got != nil || total != 0 {
		t.Fatalf("before any Hello: %x, %d, %v", got, total, err)
	}
	if _, err := st.UpsertDefinitions(ctx, node, defs); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkDefinitions(ctx, node, h); err != nil {
		t.Fatal(err)
	}
	if got, total, err := st.KnownDefinitions(ctx, node); err != nil || !bytes.Equal(got, h) || total != 2 {
		t.Fatalf("after a Hello: %x, %d, %v; want %x, 2", got, total, err, h)
	}
	// A report adding a metric makes the hash stale.
	if _, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "drops/other", Title: "Other", Unit: "drops/s", Kind: KindRate}}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := st.KnownDefinitions(ctx, node); err != nil || got != nil {
		t.Fatalf("after a new definition: %x, %v; want no hash", got, err)
	}
}

// The latest values keep a sample's "no value" until a report with a value
// replaces it.
func TestLatestKeepsNoValue(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	node, err := st.UpsertNode(ctx, Node{Name: "quiet", InstanceID: 1, IntervalMS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.UpsertDefinitions(ctx, node, []MetricDef{{Path: "ping", Title: "Ping", Unit: "ms", Kind: KindGauge}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Millisecond)
	for i, smp := range []Sample{
		{MetricID: ids["ping"], Path: "ping", State: StateUnknown, NoValue: true},
		{MetricID: ids["ping"], Path: "ping", Value: 1.5, State: StateOK},
	} {
		if _, err := st.WriteReports(ctx, []Report{{NodeID: node, InstanceID: 1, Seq: uint64(i + 1), Time: t0.Add(time.Duration(i) * time.Second),
			IntervalMS: 1000, Samples: []Sample{smp}}}); err != nil {
			t.Fatal(err)
		}
		l, ok, err := st.Latest(ctx, node)
		if err != nil || !ok {
			t.Fatalf("latest: %v %v", ok, err)
		}
		if got := l.Metrics["ping"]; got.NoValue != smp.NoValue || got.Value != smp.Value || got.State != smp.State {
			t.Errorf("report %d: latest %+v, want value %v, no value %v, state %v", i+1, got, smp.Value, smp.NoValue, smp.State)
		}
	}
}

// The collector remembers at most maxDefIDs definition ids: a flood of
// distinct definitions makes it forget and look them up again, and every
// node still reads back its own.
func TestDefinitionIDsAreBounded(t *testing.T) {
	st := openTest(t)
	st.maxDefIDs = 3
	ctx := context.Background()
	for n := range 3 {
		node, err := st.UpsertNode(ctx, Node{Name: fmt.Sprintf("bound-%d", n), InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var defs []MetricDef
		for i := range 5 {
			defs = append(defs, MetricDef{Path: fmt.Sprintf("m%d", i), Title: fmt.Sprintf("node %d metric %d", n, i), Unit: "1/s", Kind: KindRate})
		}
		if _, err := st.UpsertDefinitions(ctx, node, defs); err != nil {
			t.Fatal(err)
		}
		if len(st.defIDs) > st.maxDefIDs {
			t.Fatalf("remembers %d definition ids, at most %d allowed", len(st.defIDs), st.maxDefIDs)
		}
		got, err := st.Definitions(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 || got[4].Title != fmt.Sprintf("node %d metric 4", n) {
			t.Fatalf("node %d reads back %+v", n, got)
		}
	}
}
