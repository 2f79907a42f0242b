package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// unfiltered is the store with every rollup read made without its metric
// filter, as the report read before it had one; it counts the rows each
// way so the test can tell the filter left some out.
type unfiltered struct {
	*store.Store
	noFilter     bool
	samples, hst atomic.Int64
}

func (u *unfiltered) ReadRollups(ctx context.Context, q store.RollupQuery) ([]store.SampleRow, []store.HistogramRow, error) {
	if u.noFilter {
		q.Match = nil
	}
	s, h, err := u.Store.ReadRollups(ctx, q)
	u.samples.Add(int64(len(s)))
	u.hst.Add(int64(len(h)))
	return s, h, err
}

// filterDefs are a busy node's metrics: what the report shows and, marked
// hidden, what it does not (the agent's root, ping/clock, a ping child,
// non-TX latency histograms, a reset direction's own rate, another root).
var filterDefs = []struct {
	def    store.MetricDef
	hidden bool
}{
	{store.MetricDef{Path: "ping", Unit: "ms", Kind: store.KindGauge}, false},
	{store.MetricDef{Path: "latency", Kind: store.KindGauge}, false},
	{store.MetricDef{Path: "tcp_reset", Unit: "resets/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "drops", Unit: "drops/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "agent", Kind: store.KindGauge}, true},
	{store.MetricDef{Path: "sock", Kind: store.KindGauge}, false}, // a root: availability shows every root
	{store.MetricDef{Path: "agent/cpu", Unit: "%", Kind: store.KindGauge}, true},
	{store.MetricDef{Path: "ping/clock", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6}, true},
	{store.MetricDef{Path: "ping/peer-a", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99}, false},
	{store.MetricDef{Path: "ping/peer-a/host_delay", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6}, false},
	{store.MetricDef{Path: "ping/peer-a/sent", Unit: "probes/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "ping/peer-a/lost", Unit: "probes/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "ping/peer-a/jitter", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6}, true},
	{store.MetricDef{Path: "ping/peer-b", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99}, false},
	{store.MetricDef{Path: "ping/peer-b/sent", Unit: "probes/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "ping/peer-b/lost", Unit: "probes/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "latency/tx/sendmsg_to_qdisc", Unit: "us", Kind: store.KindHistogram, Scale: 1e3}, false},
	{store.MetricDef{Path: "latency/rx_stack", Unit: "us", Kind: store.KindHistogram, Scale: 1e3}, false},
	{store.MetricDef{Path: "latency/srtt", Unit: "us", Kind: store.KindHistogram, Scale: 1e3}, true},
	{store.MetricDef{Path: "latency/retransmits", Unit: "segments/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "latency/rto", Unit: "timeouts/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "latency/segments_out", Unit: "segments/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "tcp_reset/sent", Unit: "resets/s", Kind: store.KindRate}, true},
	{store.MetricDef{Path: "tcp_reset/sent/no_socket", Unit: "resets/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "drops/netfilter_drop", Unit: "drops/s", Kind: store.KindRate}, false},
	{store.MetricDef{Path: "drops/netfilter_drop/by_rule", Unit: "drops/s", Kind: store.KindRate}, true},
	{store.MetricDef{Path: "sock/rmem", Unit: "bytes", Kind: store.KindGauge}, true},
	{store.MetricDef{Path: "sock/wait", Unit: "us", Kind: store.KindHistogram, Scale: 1e3}, true},
}

// seedFilterFleet writes 6 nodes of two customers (tenants) on three racks: 62 days of hour and
// day rollups (folded), then 3 hours of 10 s reports through the write
// path, every metric with values and some WARN and CRIT time.
func seedFilterFleet(t *testing.T, st *store.Store, end time.Time) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	var defs []store.MetricDef
	for _, d := range filterDefs {
		d.def.Title = d.def.Path
		defs = append(defs, d.def)
	}
	rawFrom := end.Add(-3 * time.Hour)
	report := func(id int32, ids map[string]int32, ts time.Time, interval time.Duration, seq uint64, draws int) store.Report {
		r := store.Report{NodeID: id, InstanceID: 1, Seq: seq, Time: ts, IntervalMS: uint32(interval.Milliseconds())}
		for _, d := range defs {
			if d.Kind == store.KindHistogram {
				h := loglinear.New()
				for range draws {
					h.Record(uint64(1e4 * (1 + rng.ExpFloat64()*float64(1+len(d.Path)%5))))
				}
				out := store.Histogram{MetricID: ids[d.Path], Path: d.Path, Count: h.Count, Sum: h.Sum}
				for _, b := range h.Sorted() {
					out.BucketIndex = append(out.BucketIndex, int32(b))
					out.BucketCount = append(out.BucketCount, int64(h.Counts[b]))
				}
				r.Histograms = append(r.Histograms, out)
				continue
			}
			state := store.StateOK
			switch rng.IntN(40) {
			case 0:
				state = store.StateWarn
			case 1:
				state = store.StateCrit
			}
			r.Samples = append(r.Samples, store.Sample{MetricID: ids[d.Path], Path: d.Path, Value: float64(rng.IntN(20)), State: state})
		}
		return r
	}
	for i := range 6 {
		customer := []string{"acme", "globex"}[i%2]
		id, err := st.UpsertNode(ctx, store.Node{Name: fmt.Sprintf("%s-%d", customer, i),
			Labels:     map[string]string{"customer": customer, "rack": fmt.Sprintf("r%d", i%3)},
			Tenant:     customer,
			InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			t.Fatal(err)
		}
		// History as one report an hour: folded into its hour and day.
		r := store.NewRollups()
		for ts := rawFrom.Add(-62 * 24 * time.Hour).Truncate(24 * time.Hour); ts.Before(rawFrom); ts = ts.Add(time.Hour) {
			// A node that starts late and one with a gap: rows missing for some.
			if (i == 3 && ts.Before(rawFrom.Add(-20*24*time.Hour))) || (i == 4 && ts.Hour() == 5) {
				continue
			}
			r.Add(report(id, ids, ts, time.Hour, 0, 20), store.RollupHour, store.RollupDay)
		}
		if err := st.SeedRollups(ctx, r); err != nil {
			t.Fatal(err)
		}
		var batch []store.Report
		for k := range 3 * 360 {
			batch = append(batch, report(id, ids, rawFrom.Add(time.Duration(k)*interval), interval, uint64(k+1), 3))
		}
		write(t, st, batch)
	}
	if err := st.SetFoldWatermark(ctx, store.RollupHour, rawFrom); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFoldWatermark(ctx, store.RollupDay, rawFrom.Truncate(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// TestMetricFilterEqualsUnfiltered: the report reads only the metrics its
// sections show, and each of its numbers is what reading every metric
// gave, for periods served by minute, hour and day rollups and raw
// reports, with target filters and objectives on a metric no section
// shows.
func TestMetricFilterEqualsUnfiltered(t *testing.T) {
	st, err := store.Open(context.Background(), pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	end := time.Now().UTC().Truncate(time.Minute)
	seedFilterFleet(t, st, end)
	objectives := []report.Objective{
		{Name: "ping", Metric: "ping", Quantile: 0.99, BelowMS: 0.05, Per: "hour"},
		{Name: "srtt", Metric: "latency/srtt", Quantile: 0.9, BelowMS: 0.04, Per: "hour"},
	}
	cases := []struct {
		name string
		ctx  context.Context
		q    report.Query
	}{
		{"30 days, staff", staff(), report.Query{From: end.Add(-30 * 24 * time.Hour), To: end}},
		{"30 days, a customer, objectives", customer("acme"), report.Query{From: end.Add(-30 * 24 * time.Hour), To: end, Objectives: objectives}},
		{"7 days, one target", staff(), report.Query{From: end.Add(-7 * 24 * time.Hour), To: end, Targets: []string{"peer-b"}}},
		{"40 days, selector", staff(), report.Query{Selector: access.Selector{"customer": "globex"}, From: end.Add(-40 * 24 * time.Hour), To: end}},
		{"1 day, objectives", staff(), report.Query{From: end.Add(-24 * time.Hour), To: end, Objectives: objectives}},
		{"2 hours, raw", customer("globex"), report.Query{From: end.Add(-2 * time.Hour), To: end, Raw: true, Objectives: objectives}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			filtered, all := &unfiltered{Store: st}, &unfiltered{Store: st, noFilter: true}
			got, err := report.Compute(c.ctx, filtered, c.q, end)
			if err != nil {
				t.Fatal(err)
			}
			want, err := report.Compute(c.ctx, all, c.q, end)
			if err != nil {
				t.Fatal(err)
			}
			if len(want.Ping.Targets) == 0 || len(want.KernelLatency) == 0 || want.Reliability.Retransmits.Segments == nil || len(want.Availability) == 0 {
				t.Fatalf("the seed left a section empty: %d targets, %d kernel, retransmits %v, %d availability",
					len(want.Ping.Targets), len(want.KernelLatency), want.Reliability.Retransmits.Segments, len(want.Availability))
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if !bytes.Equal(g, w) {
				t.Errorf("filtered report differs from the unfiltered one:\n got %.2000s\nwant %.2000s", g, w)
			}
			if !c.q.Raw && filtered.samples.Load()+filtered.hst.Load() >= all.samples.Load()+all.hst.Load() {
				t.Errorf("the filter left nothing out: %d+%d rows against %d+%d", filtered.samples.Load(), filtered.hst.Load(), all.samples.Load(), all.hst.Load())
			}
			t.Logf("rows read: filtered %d samples %d histograms, unfiltered %d and %d",
				filtered.samples.Load(), filtered.hst.Load(), all.samples.Load(), all.hst.Load())
		})
	}
}
