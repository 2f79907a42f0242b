// Package report measures the customer report (collector/report): a
// 30-day report over 100 nodes at the default 10 s interval, served by
// the real HTTP handler from the rollups, and the rollup path against the
// raw path on the same (smaller) data:
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 60m ./bench/report/
//
// 30 days of 100 nodes are 25.9M reports. Writing all of them through the
// write path would take hours on this machine, so the benchmark writes the
// newest hour (36,000 reports) through store.WriteReports — the collector's
// real write path, which maintains the minute rollups as it stores them —
// folds that hour into its hour rollups with store.FoldRollups, as the
// collector's fold job does once the hour is closed, and writes the older 59
// days (the period and the previous period it is compared with) as hour and
// day rollups through store.WriteRollups, the same code the write path
// merges rollups with, built per node and hour from the same distributions
// (bucket counts of 3,600 observations per histogram and hour, counter
// sums, state seconds). The fold watermarks (migration 012) then say every
// hour and day before the newest hour's end is folded: the report reads
// folded rows, as it would in a running collector.
package report

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

const (
	nodes       = 100
	targets     = 2 // ping targets per node
	seedDays    = 60
	intervalSec = 10
)

// fleet is the benchmark's node ids and metric ids.
type fleet struct {
	ids     []int32
	metrics []map[string]int32
}

func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

func pingPaths(i int) []string {
	var out []string
	for k := 1; k <= targets; k++ {
		out = append(out, "ping/"+nodeName((i+k)%nodes))
	}
	return out
}

var txStages = []string{"latency/tx/sendmsg_to_qdisc", "latency/tx/qdisc_to_driver", "latency/tx/driver_to_ack"}

func seedNodes(b *testing.B, st *store.Store) fleet {
	ctx := context.Background()
	var f fleet
	for i := range nodes {
		id, err := st.UpsertNode(ctx, store.Node{Name: nodeName(i), Labels: map[string]string{"customer": fmt.Sprintf("c%d", i%10)},
			InstanceID: 1, IntervalMS: intervalSec * 1000})
		if err != nil {
			b.Fatal(err)
		}
		defs := []store.MetricDef{
			{Path: "ping", Title: "Ping", Unit: "ms", Kind: store.KindGauge},
			{Path: "latency", Title: "Latency", Kind: store.KindGauge},
			{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
			{Path: "drops", Title: "Drops", Unit: "drops/s", Kind: store.KindRate},
			{Path: "tcp_reset/sent/no_socket", Title: "No socket", Unit: "resets/s", Kind: store.KindRate},
			{Path: "drops/netfilter_drop", Title: "Netfilter", Unit: "drops/s", Kind: store.KindRate},
			{Path: "latency/retransmits", Title: "Retransmits", Unit: "segments/s", Kind: store.KindRate},
			{Path: "latency/rto", Title: "RTOs", Unit: "timeouts/s", Kind: store.KindRate},
		}
		for _, p := range pingPaths(i) {
			defs = append(defs,
				store.MetricDef{Path: p, Title: p, Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
				store.MetricDef{Path: p + "/host_delay", Title: "Host delay", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
				store.MetricDef{Path: p + "/sent", Title: "Sent", Unit: "probes/s", Kind: store.KindRate},
				store.MetricDef{Path: p + "/lost", Title: "Lost", Unit: "probes/s", Kind: store.KindRate})
		}
		for _, p := range txStages {
			defs = append(defs, store.MetricDef{Path: p, Title: p, Unit: "us", Kind: store.KindHistogram, Scale: 1e3, Quantile: 0.99})
		}
		m, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			b.Fatal(err)
		}
		f.ids = append(f.ids, id)
		f.metrics = append(f.metrics, m)
	}
	return f
}

// rtt draws a ping RTT for node i: each node its own log-normal median.
func rtt(rng *rand.Rand, i int) uint64 {
	return uint64(float64(3e5+1e4*float64(i%20)) * math.Exp(0.5*rng.NormFloat64()))
}

func txv(rng *rand.Rand) uint64 { return uint64(2e3 * math.Exp(rng.NormFloat64())) }

// seedHours writes hour rollups for [from, to) hour by hour: 3,600
// observations per histogram (a probe per second, 60 draws of 60 each)
// and a node-hour's counters and states.
func seedHours(b *testing.B, st *store.Store, f fleet, from, to time.Time) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for day := from; day.Before(to); day = day.Add(24 * time.Hour) {
		r := store.NewRollups()
		for h := day; h.Before(day.Add(24*time.Hour)) && h.Before(to); h = h.Add(time.Hour) {
			ts := h.Unix()
			for i, id := range f.ids {
				m := f.metrics[i]
				dayKey := store.RollupKey{NodeID: id, Res: store.RollupDay, TS: h.Truncate(24 * time.Hour).Unix()}
				samp := func(path string, perReport float64) {
					a := store.SampleAgg{N: 3600 / intervalSec, Sum: perReport * 3600 / intervalSec, Min: perReport, Max: perReport, OK: 3600}
					r.Samples[store.RollupKey{NodeID: id, MetricID: m[path], Res: store.RollupHour, TS: ts}] = &a
					k := dayKey
					k.MetricID = m[path]
					if r.Samples[k] == nil {
						r.Samples[k] = &store.SampleAgg{}
					}
					r.Samples[k].Merge(a)
				}
				hist := func(path string, draw func() uint64) {
					hh := loglinear.New()
					for range 60 {
						hh.RecordN(draw(), 60)
					}
					r.Histograms[store.RollupKey{NodeID: id, MetricID: m[path], Res: store.RollupHour, TS: ts}] = hh
					k := dayKey
					k.MetricID = m[path]
					if r.Histograms[k] == nil {
						r.Histograms[k] = loglinear.New()
					}
					r.Histograms[k].Merge(hh)
				}
				for _, p := range []string{"ping", "latency", "tcp_reset", "drops"} {
					samp(p, 0)
				}
				samp("tcp_reset/sent/no_socket", float64(rng.IntN(3)))
				samp("drops/netfilter_drop", float64(rng.IntN(5)))
				samp("latency/retransmits", float64(rng.IntN(4)))
				samp("latency/rto", float64(rng.IntN(2))/10)
				for _, p := range pingPaths(i) {
					hist(p, func() uint64 { return rtt(rng, i) })
					hist(p+"/host_delay", func() uint64 { return uint64(1e4 + rng.IntN(5e4)) })
					samp(p+"/sent", intervalSec)
					samp(p+"/lost", float64(rng.IntN(100)/99))
				}
				for _, p := range txStages {
					hist(p, func() uint64 { return txv(rng) })
				}
			}
		}
		if err := st.SeedRollups(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// seedRaw writes every report of [from, to) through store.WriteReports in
// batches of 500, as the collector's writer does.
func seedRaw(b *testing.B, st *store.Store, f fleet, from, to time.Time) int {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	var batch []store.Report
	n := 0
	for i, id := range f.ids {
		m := f.metrics[i]
		seq := uint64(0)
		for t := from; t.Before(to); t = t.Add(intervalSec * time.Second) {
			seq++
			rep := store.Report{NodeID: id, InstanceID: 1, Seq: seq, Time: t, IntervalMS: intervalSec * 1000}
			samp := func(path string, v float64) {
				rep.Samples = append(rep.Samples, store.Sample{MetricID: m[path], Path: path, Value: v, State: store.StateOK})
			}
			hist := func(path string, draw func() uint64) {
				hh := loglinear.New()
				for range intervalSec {
					hh.Record(draw())
				}
				h := store.Histogram{MetricID: m[path], Path: path, Count: hh.Count, Sum: hh.Sum}
				for _, bi := range hh.Sorted() {
					h.BucketIndex = append(h.BucketIndex, int32(bi))
					h.BucketCount = append(h.BucketCount, int64(hh.Counts[bi]))
				}
				rep.Histograms = append(rep.Histograms, h)
			}
			for _, p := range []string{"ping", "latency", "tcp_reset", "drops"} {
				samp(p, 0)
			}
			samp("tcp_reset/sent/no_socket", float64(rng.IntN(3)))
			samp("latency/retransmits", float64(rng.IntN(4)))
			for _, p := range pingPaths(i) {
				hist(p, func() uint64 { return rtt(rng, i) })
				hist(p+"/host_delay", func() uint64 { return uint64(1e4 + rng.IntN(5e4)) })
				samp(p+"/sent", intervalSec)
				samp(p+"/lost", float64(rng.IntN(100)/99))
			}
			for _, p := range txStages {
				hist(p, func() uint64 { return txv(rng) })
			}
			batch = append(batch, rep)
			if len(batch) == 500 {
				if _, err := st.WriteReports(ctx, batch); err != nil {
					b.Fatal(err)
				}
				n += len(batch)
				batch = batch[:0]
			}
		}
	}
	if len(batch) > 0 {
		if _, err := st.WriteReports(ctx, batch); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
	}
	return n
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// timeIt runs fn runs times and returns the median duration.
func timeIt(b *testing.B, runs int, fn func()) time.Duration {
	ds := make([]time.Duration, runs)
	for i := range ds {
		start := time.Now()
		fn()
		ds[i] = time.Since(start)
	}
	return p50(ds)
}

// fetchOnly runs the rollup reads of a report over [from, to) with
// PostgreSQL's share of the time in mind: the same tables, resolutions and
// ranges as report.Compute (hour rollups for the partial days at either
// end, day rollups between, for the period and the previous one, and the
// chart's days at either end — of every metric, where the report reads the
// charted ones), each row fetched but nothing decoded.
func fetchOnly(b *testing.B, st *store.Store, ids []int32, from, to time.Time) {
	ctx := context.Background()
	day := 24 * time.Hour
	type part struct {
		res      int32
		from, to time.Time
	}
	var parts []part
	var d0, d1 time.Time
	for _, p := range [][2]time.Time{{from.Add(-to.Sub(from)), from}, {from, to}} {
		d0, d1 = p[0].Truncate(day), p[1].Truncate(day)
		if d0.Before(p[0]) {
			d0 = d0.Add(day)
		}
		parts = append(parts, part{store.RollupHour, p[0], d0}, part{store.RollupDay, d0, d1}, part{store.RollupHour, d1, p[1]})
	}
	parts = append(parts, part{store.RollupDay, from.Truncate(day), d0}, part{store.RollupDay, d1, to})
	for _, p := range parts {
		for _, q := range []string{
			`SELECT node_id, metric_id, ts, n, sum, min, max, ok_s, warn_s, crit_s FROM rollup_samples WHERE res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4`,
			`SELECT node_id, metric_id, ts, count, sum, buckets FROM rollup_histograms WHERE res = $1 AND node_id = ANY($2) AND ts >= $3 AND ts < $4`,
		} {
			rows, err := st.Pool().Query(ctx, q, p.res, ids, p.from, p.to)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkReport(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgcluster.Database(b), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	end := time.Now().UTC().Truncate(time.Hour)
	rawFrom := end.Add(-time.Hour)

	start := time.Now()
	f := seedNodes(b, st)
	seedHours(b, st, f, end.Add(-seedDays*24*time.Hour), rawFrom)
	b.Logf("seeded %d days x %d nodes of hour rollups in %s", seedDays, nodes, time.Since(start).Round(time.Second))
	start = time.Now()
	n := seedRaw(b, st, f, rawFrom, end)
	b.Logf("wrote %d raw reports through store.WriteReports in %s (%.0f reports/s; minute rollups folded from them)", n, time.Since(start).Round(time.Second),
		float64(n)/time.Since(start).Seconds())
	// The seeded hours and days before the newest hour count as folded.
	if err := st.SetFoldWatermark(ctx, store.RollupHour, rawFrom); err != nil {
		b.Fatal(err)
	}
	if err := st.SetFoldWatermark(ctx, store.RollupDay, rawFrom.Truncate(24*time.Hour)); err != nil {
		b.Fatal(err)
	}
	// The collector folds stored reports into minute rollups every 15 s:
	// the newest hour's are folded, the hour itself not yet.
	if r, err := st.FoldRollups(ctx, store.FoldOptions{Now: end.Add(store.MinuteGrace)}); err != nil || r.Hours != 0 {
		b.Fatalf("fold the newest hour's minutes: %+v, %v", r, err)
	}
	if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}

	staff := access.WithPrincipal(ctx, access.Principal{Name: "bench", Role: access.RoleViewer, Via: access.ViaToken})
	svc := report.New(st, st.Pool(), slog.New(slog.DiscardHandler))
	serve := func(target string) int {
		w := httptest.NewRecorder()
		svc.GetReport(w, httptest.NewRequest(http.MethodGet, target, nil).WithContext(staff))
		if w.Code != 200 {
			b.Fatalf("GET %s: %d %.300s", target, w.Code, w.Body.String())
		}
		return w.Body.Len()
	}
	const runs = 7
	q30 := fmt.Sprintf("/api/v1/reports?from=%d&to=%d", end.Add(-30*24*time.Hour).UnixMilli(), end.UnixMilli())
	// Before its fold, the newest hour is computed from its minute
	// rollups: what every report ending now does for its open hour.
	openP50 := timeIt(b, 3, func() { serve(q30) })
	b.ReportMetric(float64(openP50.Milliseconds()), "ms-p50-30d-json-open-hour")
	b.Logf("30-day report, %d nodes, JSON, newest hour not folded yet (read from its minute rollups): p50 %s over 3 runs", nodes, openP50.Round(time.Millisecond))

	// The newest hour folded, as the fold job does FoldGrace after it
	// closes.
	start = time.Now()
	folded, err := st.FoldRollups(ctx, store.FoldOptions{Now: end.Add(store.FoldGrace)})
	if err != nil {
		b.Fatal(err)
	}
	if !folded.HourThrough.Equal(end) {
		b.Fatalf("fold %+v, want hours folded through %s", folded, end)
	}
	b.Logf("folded the newest hour (and %d day) in %s", folded.Days, time.Since(start).Round(time.Millisecond))
	if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	var size int
	b.ResetTimer()
	jsonP50 := timeIt(b, runs, func() { size = serve(q30) })
	b.ReportMetric(float64(jsonP50.Milliseconds()), "ms-p50-30d-json")
	b.Logf("30-day report, %d nodes, JSON: p50 %s over %d runs, %d bytes", nodes, jsonP50.Round(time.Millisecond), runs, size)
	csvP50 := timeIt(b, runs, func() { size = serve(q30 + "&format=csv") })
	b.ReportMetric(float64(csvP50.Milliseconds()), "ms-p50-30d-csv")
	b.Logf("30-day report, %d nodes, CSV: p50 %s over %d runs, %d bytes", nodes, csvP50.Round(time.Millisecond), runs, size)
	custP50 := timeIt(b, runs, func() { serve(q30 + "&selector=customer%3Dc3") })
	b.Logf("30-day report, one customer (10 nodes), JSON: p50 %s", custP50.Round(time.Millisecond))
	sqlP50 := timeIt(b, runs, func() { fetchOnly(b, st, f.ids, end.Add(-30*24*time.Hour), end) })
	b.ReportMetric(float64(sqlP50.Milliseconds()), "ms-p50-30d-sql")
	b.Logf("30-day report's rollup reads alone (rows fetched one query after another, not decoded): p50 %s", sqlP50.Round(time.Millisecond))

	// The rollup path against the raw path on the same data: the hour
	// written through the write path.
	var rollup, raw *report.Report
	qr := report.Query{From: rawFrom, To: end}
	rollupP50 := timeIt(b, runs, func() {
		if rollup, err = report.Compute(staff, st, qr, end); err != nil {
			b.Fatal(err)
		}
	})
	qr.Raw = true
	rawP50 := timeIt(b, 3, func() {
		if raw, err = report.Compute(staff, st, qr, end); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(rollupP50.Milliseconds()), "ms-p50-1h-rollup")
	b.ReportMetric(float64(rawP50.Milliseconds()), "ms-p50-1h-raw")
	worst := 0.0
	for i, t := range rollup.Ping.Targets {
		r := raw.Ping.Targets[i]
		for _, pair := range [][2]*float64{{t.P50, r.P50}, {t.P90, r.P90}, {t.P99, r.P99}, {t.Max, r.Max}} {
			worst = max(worst, math.Abs(*pair[0]-*pair[1]) / *pair[1])
		}
		if *t.Sent != *r.Sent || *t.Lost != *r.Lost {
			b.Errorf("target %s: rollup sent/lost %d/%d, raw %d/%d", t.Target, *t.Sent, *t.Lost, *r.Sent, *r.Lost)
		}
	}
	b.Logf("1 hour, %d nodes, %d reports: rollup path p50 %s, raw path p50 %s; %d ping targets, largest relative difference of p50/p90/p99/max %.3g (bound %.4f)",
		nodes, n, rollupP50.Round(time.Millisecond), rawP50.Round(time.Millisecond), len(rollup.Ping.Targets), worst, report.ErrorBound)
	if worst > report.ErrorBound {
		b.Errorf("rollup and raw disagree by %.4f, more than the layout's bound", worst)
	}
}
