package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// seeded is what the golden test wrote, kept raw so the expected numbers
// are computed here from the values themselves, not from any histogram.
type seeded struct {
	rtt        map[string][]uint64 // ns, by node
	acmeHour   map[int][]uint64    // acme's RTTs by hour of the period
	sent, lost map[string]int64
	resets     map[string]int64
	tx         []uint64
	host       map[string][]uint64 // ns, by node
	childWorst float64             // ping/peer-a's highest value in acme-1's WARN span, ms
}

var defs = []store.MetricDef{
	{Path: "ping", Title: "Ping", Unit: "ms", Kind: store.KindGauge},
	{Path: "ping/peer-a", Title: "peer-a", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
	{Path: "ping/peer-a/host_delay", Title: "Host delay", Unit: "ms", Kind: store.KindHistogram, Scale: 1e6, Quantile: 0.99},
	{Path: "ping/peer-a/sent", Title: "Sent", Unit: "probes/s", Kind: store.KindRate},
	{Path: "ping/peer-a/lost", Title: "Lost", Unit: "probes/s", Kind: store.KindRate},
	{Path: "latency", Title: "Latency", Unit: "", Kind: store.KindGauge},
	{Path: "latency/tx/sendmsg_to_qdisc", Title: "sendmsg → qdisc", Unit: "us", Kind: store.KindHistogram, Scale: 1e3, Quantile: 0.99},
	{Path: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: store.KindRate},
	{Path: "tcp_reset/sent/no_socket", Title: "No socket", Unit: "resets/s", Kind: store.KindRate},
}

const interval = 10 * time.Second

// seed writes three hours of 10 s reports for acme-1, acme-2 (customer
// acme) and globex-1 (customer globex) through the store's write path,
// with a 15-minute gap for every node in the third hour and a 5-minute
// WARN of acme-1's ping explained by ping/peer-a.
func seed(t *testing.T, st *store.Store, base time.Time) seeded {
	t.Helper()
	ctx := context.Background()
	s := seeded{rtt: map[string][]uint64{}, host: map[string][]uint64{}, acmeHour: map[int][]uint64{}, sent: map[string]int64{}, lost: map[string]int64{}, resets: map[string]int64{}}
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := []struct {
		name, customer string
		rtt            func() uint64
	}{
		// Log-normal around 0.5 ms, uniform 1–3 ms, and a far-away 80–120 ms
		// that would move every total if it leaked into acme's.
		{"acme-1", "acme", func() uint64 { return uint64(5e5 * math.Exp(0.6*rng.NormFloat64())) }},
		{"acme-2", "acme", func() uint64 { return uint64(1e6 + rng.Float64()*2e6) }},
		{"globex-1", "globex", func() uint64 { return uint64(8e7 + rng.Float64()*4e7) }},
	}
	for ni, n := range nodes {
		id, err := st.UpsertNode(ctx, store.Node{Name: n.name, Labels: map[string]string{"customer": n.customer}, InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			t.Fatal(err)
		}
		var batch []store.Report
		for i := range 3 * 360 {
			ts := base.Add(time.Duration(i) * interval)
			if off := ts.Sub(base); off >= 2*time.Hour && off < 2*time.Hour+15*time.Minute {
				continue
			}
			warn := n.name == "acme-1" && ts.Sub(base) >= 30*time.Minute && ts.Sub(base) < 35*time.Minute
			rootState, childState := store.StateOK, store.StateOK
			if warn {
				rootState, childState = store.StateWarn, store.StateWarn
			}
			rtt, host, tx := loglinear.New(), loglinear.New(), loglinear.New()
			for range 10 {
				v := n.rtt()
				if warn {
					v *= 20
				}
				rtt.Record(v)
				s.rtt[n.name] = append(s.rtt[n.name], v)
				if n.customer == "acme" {
					h := int(ts.Sub(base) / time.Hour)
					s.acmeHour[h] = append(s.acmeHour[h], v)
				}
				hv := uint64(2e4 + rng.IntN(1e4))
				host.Record(hv)
				s.host[n.name] = append(s.host[n.name], hv)
				tv := uint64(1e3 + rng.IntN(1e5))
				tx.Record(tv)
				if n.customer == "acme" {
					s.tx = append(s.tx, tv)
				}
			}
			if warn {
				s.childWorst = max(s.childWorst, rtt.Quantile(0.99)/1e6)
			}
			lost := int64(0)
			if i%97 == 0 {
				lost = int64(1 + ni)
			}
			resets := int64(i % 3)
			s.sent[n.name] += 10
			s.lost[n.name] += lost
			s.resets[n.name] += resets
			hist := func(path string, h *loglinear.Histogram) store.Histogram {
				out := store.Histogram{MetricID: ids[path], Path: path, Count: h.Count, Sum: h.Sum}
				for _, b := range h.Sorted() {
					out.BucketIndex = append(out.BucketIndex, int32(b))
					out.BucketCount = append(out.BucketCount, int64(h.Counts[b]))
				}
				return out
			}
			sample := func(path string, v float64, st store.State) store.Sample {
				return store.Sample{MetricID: ids[path], Path: path, Value: v, State: st}
			}
			batch = append(batch, store.Report{NodeID: id, InstanceID: 1, Seq: uint64(i + 1), Time: ts, IntervalMS: 10000,
				Samples: []store.Sample{
					sample("ping", rtt.Quantile(0.99)/1e6, rootState), sample("ping/peer-a/sent", 10, store.StateOK),
					sample("ping/peer-a/lost", float64(lost), store.StateOK), sample("latency", 0, store.StateOK),
					sample("tcp_reset", float64(resets), store.StateOK), sample("tcp_reset/sent/no_socket", float64(resets), store.StateOK),
					// A child's own sample in the report: the explanation.
					sample("ping/peer-a", rtt.Quantile(0.99)/1e6, childState),
				},
				Histograms: []store.Histogram{hist("ping/peer-a", rtt), hist("ping/peer-a/host_delay", host), hist("latency/tx/sendmsg_to_qdisc", tx)},
			})
			if len(batch) == 200 {
				write(t, st, batch)
				batch = batch[:0]
			}
		}
		write(t, st, batch)
		// A resend of already stored reports changes nothing.
		write(t, st, []store.Report{{NodeID: id, InstanceID: 1, Seq: 1, Time: base, IntervalMS: 10000,
			Samples: []store.Sample{{MetricID: ids["ping/peer-a/sent"], Path: "ping/peer-a/sent", Value: 1e6, State: store.StateOK}}}})
	}
	return s
}

func write(t *testing.T, st *store.Store, batch []store.Report) {
	t.Helper()
	if len(batch) == 0 {
		return
	}
	if _, err := st.WriteReports(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// exact is the nearest-rank quantile of raw values, as loglinear ranks.
func exact(vals []uint64, q float64) float64 {
	v := slices.Clone(vals)
	slices.Sort(v)
	rank := int(math.Ceil(q * float64(len(v))))
	return float64(v[max(rank, 1)-1])
}

func within(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: null, want %.6g", what, want)
		return
	}
	if rel := math.Abs(*got-want) / want; rel > report.ErrorBound+1e-12 {
		t.Errorf("%s: %.6g, want %.6g (relative error %.4f > bound %.4f)", what, *got, want, rel, report.ErrorBound)
	}
}

func customer(name string) context.Context {
	return access.WithPrincipal(context.Background(), access.Principal{Name: name + "-portal", Role: access.RoleCustomer,
		Via: access.ViaToken, Selector: access.Selector{"customer": name}})
}

func staff() context.Context {
	return access.WithPrincipal(context.Background(), access.Principal{Name: "vic", Role: access.RoleViewer, Via: access.ViaToken})
}

func TestGolden(t *testing.T) {
	st, err := store.Open(context.Background(), pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	base := time.Now().UTC().Truncate(time.Hour).Add(-4 * time.Hour)
	s := seed(t, st, base)
	now := base.Add(4 * time.Hour)
	q := report.Query{From: base, To: base.Add(3 * time.Hour),
		Objectives: []report.Objective{{Name: "ping p99 < 5 ms per hour", Metric: "ping", Quantile: 0.99, BelowMS: 5, Per: "hour"}}}

	acmeRTT := append(slices.Clone(s.rtt["acme-1"]), s.rtt["acme-2"]...)
	rep, err := report.Compute(customer("acme"), st, q, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("percentiles from merged buckets", func(t *testing.T) {
		if len(rep.Ping.Targets) != 1 {
			t.Fatalf("ping targets %+v, want peer-a only", rep.Ping.Targets)
		}
		pt := rep.Ping.Targets[0]
		for _, c := range []struct {
			name string
			got  *float64
			q    float64
		}{{"p50", pt.P50, 0.5}, {"p90", pt.P90, 0.9}, {"p99", pt.P99, 0.99}} {
			within(t, "acme ping "+c.name, c.got, exact(acmeRTT, c.q)/1e6)
		}
		if pt.Max == nil || *pt.Max < exact(acmeRTT, 1)/1e6 || *pt.Max > exact(acmeRTT, 1)/1e6*(1+2*report.ErrorBound) {
			t.Errorf("max %v, want the upper edge of the bucket of %v", pt.Max, exact(acmeRTT, 1)/1e6)
		}
		if len(rep.Ping.PerNode) != 2 {
			t.Fatalf("per node %+v, want acme-1 and acme-2", rep.Ping.PerNode)
		}
		// Every column of the per-node table has data: p90 and the host
		// delay too, not only what the per-target table shows.
		for _, n := range rep.Ping.PerNode {
			within(t, n.Node+" p50", n.P50, exact(s.rtt[n.Node], 0.5)/1e6)
			within(t, n.Node+" p90", n.P90, exact(s.rtt[n.Node], 0.9)/1e6)
			within(t, n.Node+" p99", n.P99, exact(s.rtt[n.Node], 0.99)/1e6)
			within(t, n.Node+" host delay p50", n.HostDelayP50, exact(s.host[n.Node], 0.5)/1e6)
			within(t, n.Node+" host delay p99", n.HostDelayP99, exact(s.host[n.Node], 0.99)/1e6)
		}
		// The per-target drill-down: a count, and each node's numbers to
		// the target, equal to its own here (one target).
		if pt.NodeCount != 2 || len(pt.PerNode) != 2 || pt.PerNode[0].Node != "acme-1" || pt.PerNode[1].Node != "acme-2" {
			t.Fatalf("target %s: node count %d, drill-down %+v", pt.Target, pt.NodeCount, pt.PerNode)
		}
		for i, n := range pt.PerNode {
			within(t, "drill-down "+n.Node+" p90", n.P90, exact(s.rtt[n.Node], 0.9)/1e6)
			if *n.Sent != *rep.Ping.PerNode[i].Sent {
				t.Errorf("drill-down %s sent %d, per node %d", n.Node, *n.Sent, *rep.Ping.PerNode[i].Sent)
			}
		}
		if len(rep.KernelLatency) != 1 {
			t.Fatalf("kernel latency %+v", rep.KernelLatency)
		}
		within(t, "tx p99 (us)", rep.KernelLatency[0].P99, exact(s.tx, 0.99)/1e3)
		if rep.KernelLatency[0].Count != int64(len(s.tx)) {
			t.Errorf("tx count %d, want %d", rep.KernelLatency[0].Count, len(s.tx))
		}
	})
	t.Run("counts", func(t *testing.T) {
		pt := rep.Ping.Targets[0]
		sent, lost := s.sent["acme-1"]+s.sent["acme-2"], s.lost["acme-1"]+s.lost["acme-2"]
		if pt.Sent == nil || *pt.Sent != sent || pt.Lost == nil || *pt.Lost != lost {
			t.Errorf("sent %v lost %v, want %d %d (acme's only, each report once)", deref(pt.Sent), deref(pt.Lost), sent, lost)
		}
		if pt.Loss == nil || math.Abs(*pt.Loss-float64(lost)/float64(sent)) > 1e-12 {
			t.Errorf("loss %v, want %v", pt.Loss, float64(lost)/float64(sent))
		}
		resets := s.resets["acme-1"] + s.resets["acme-2"]
		if len(rep.Reliability.Resets) != 1 || rep.Reliability.Resets[0].Count != resets || rep.Reliability.Resets[0].Reason != "no_socket" {
			t.Errorf("resets %+v, want no_socket %d", rep.Reliability.Resets, resets)
		}
		if rep.Reliability.Retransmits.Segments != nil {
			t.Errorf("retransmits %v with no retransmit data, want null", *rep.Reliability.Retransmits.Segments)
		}
	})
	t.Run("gaps are null and no data", func(t *testing.T) {
		pts := rep.Ping.Series[0].Points
		if len(pts) != 180 {
			t.Fatalf("%d points, want 180 minutes", len(pts))
		}
		for i, p := range pts {
			inGap := i >= 120 && i < 135
			if (p.P50 == nil) != inGap || (p.Loss == nil) != inGap {
				t.Errorf("minute %d: p50 %v loss %v; gap %v", i, p.P50, p.Loss, inGap)
			}
		}
		for _, a := range rep.Availability {
			if a.Root != "ping" && a.Root != "latency" && a.Root != "tcp_reset" {
				if a.NoData != 1 {
					t.Errorf("%s %s: no data %v, want 1 (never reported)", a.Node, a.Root, a.NoData)
				}
				continue
			}
			warn := 0.0
			if a.Node == "acme-1" && a.Root == "ping" {
				warn = 5.0 / 180
			}
			if math.Abs(a.NoData-15.0/180) > 1e-9 || math.Abs(a.Warn-warn) > 1e-9 || math.Abs(a.OK-(165.0/180-warn)) > 1e-9 {
				t.Errorf("%+v: want no_data 15/180, warn %v", a, warn)
			}
		}
		if rep.Ping.Targets[0].Previous.Sent != nil || rep.Ping.Targets[0].Previous.P99 != nil {
			t.Errorf("previous period has no data but shows %+v", rep.Ping.Targets[0].Previous)
		}
	})
	t.Run("incidents", func(t *testing.T) {
		if len(rep.Incidents) != 1 {
			t.Fatalf("incidents %+v, want acme-1's one", rep.Incidents)
		}
		in := rep.Incidents[0]
		if in.Node != "acme-1" || in.Root != "ping" || in.State != "warn" || !in.Start.Equal(base.Add(30*time.Minute)) ||
			in.Seconds != 300 || in.Child == nil || *in.Child != "ping/peer-a" {
			t.Errorf("incident %+v", in)
		}
		// The value shown is the explaining child's, in its unit, and the
		// link opens the tree at the incident on that child.
		if in.Metric != "ping/peer-a" || in.Unit != "ms" || in.WorstValue == nil || math.Abs(*in.WorstValue-s.childWorst) > 1e-9 {
			t.Errorf("incident worst %v %s of %s, want %v ms of ping/peer-a", in.WorstValue, in.Unit, in.Metric, s.childWorst)
		}
		if want := fmt.Sprintf("/nodes/acme-1?from=%d&metric=ping%%2Fpeer-a&to=%d", base.Add(25*time.Minute).UnixMilli(), base.Add(35*time.Minute).UnixMilli()); in.TreeURL != want {
			t.Errorf("tree url %s, want %s", in.TreeURL, want)
		}
	})
	t.Run("availability timeline", func(t *testing.T) {
		byRoot := map[string]report.AvailabilityRoot{}
		for _, a := range rep.AvailabilityTimeline {
			byRoot[a.Root] = a
		}
		if len(byRoot) != 3 || byRoot["agent"].Points != nil {
			t.Fatalf("timeline roots %v, want ping, latency and tcp_reset (what was reported)", rep.AvailabilityTimeline)
		}
		// Three hours of two nodes: acme-1's ping WARN 5 min in the first,
		// both silent for 15 min in the third.
		want := []report.AvailabilityPoint{
			{T: base, OK: 115.0 / 120, Warn: 5.0 / 120},
			{T: base.Add(time.Hour), OK: 1},
			{T: base.Add(2 * time.Hour), OK: 0.75, NoData: 0.25},
		}
		for _, root := range []string{"ping", "tcp_reset"} {
			a := byRoot[root]
			if a.StepSeconds != 3600 || len(a.Points) != 3 {
				t.Fatalf("%s: step %d, %d points", root, a.StepSeconds, len(a.Points))
			}
			for i, w := range want {
				if root != "ping" {
					w.OK, w.Warn = w.OK+w.Warn, 0
				}
				g := a.Points[i]
				if !g.T.Equal(w.T) || math.Abs(g.OK-w.OK) > 1e-9 || math.Abs(g.Warn-w.Warn) > 1e-9 || g.Crit != 0 || math.Abs(g.NoData-w.NoData) > 1e-9 {
					t.Errorf("%s point %d: %+v, want %+v", root, i, g, w)
				}
			}
		}
	})
	t.Run("objectives", func(t *testing.T) {
		o := rep.Objectives[0]
		if o.Hours != 3 || o.NoDataHours != 0 || o.Attainment == nil {
			t.Fatalf("objective %+v", o)
		}
		var missed []time.Time
		for h := range 3 {
			if exact(s.acmeHour[h], 0.99)/1e6 >= 5 {
				missed = append(missed, base.Add(time.Duration(h)*time.Hour))
			}
		}
		if len(missed) == 0 {
			t.Fatal("the seeded WARN span should miss its hour; the test checks nothing")
		}
		if !slices.EqualFunc(o.Missed, missed, time.Time.Equal) || math.Abs(*o.Attainment-float64(3-len(missed))/3) > 1e-12 {
			t.Errorf("missed %v attainment %v, want %v", o.Missed, *o.Attainment, missed)
		}
	})
	t.Run("rollups agree with raw", func(t *testing.T) {
		for _, res := range []int32{store.RollupMinute, store.RollupHour} {
			rq, raw := q, q
			rq.Res, raw.Res, raw.Raw = res, store.RollupMinute, true
			a, err := report.Compute(staff(), st, rq, now)
			if err != nil {
				t.Fatal(err)
			}
			b, err := report.Compute(staff(), st, raw, now)
			if err != nil {
				t.Fatal(err)
			}
			pa, pb := a.Ping.Targets[0], b.Ping.Targets[0]
			within(t, "rollup vs raw p50", pa.P50, *pb.P50)
			within(t, "rollup vs raw p99", pa.P99, *pb.P99)
			if *pa.Sent != *pb.Sent || *pa.Lost != *pb.Lost {
				t.Errorf("res %d: rollup sent/lost %d/%d, raw %d/%d", res, *pa.Sent, *pa.Lost, *pb.Sent, *pb.Lost)
			}
			all := append(slices.Clone(acmeRTT), s.rtt["globex-1"]...)
			within(t, "staff p99 over every node", pa.P99, exact(all, 0.99)/1e6)
		}
	})
	t.Run("long periods read day and hour rollups", func(t *testing.T) {
		long := q
		long.From = base.Add(-5*24*time.Hour - 30*time.Minute)
		r, err := report.Compute(customer("acme"), st, long, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.Resolution != store.RollupHour || len(r.Ping.Targets) != 1 {
			t.Fatalf("resolution %d, targets %+v", r.Resolution, r.Ping.Targets)
		}
		pt, want := r.Ping.Targets[0], rep.Ping.Targets[0]
		if *pt.Sent != *want.Sent || *pt.P99 != *want.P99 || *pt.P50 != *want.P50 {
			t.Errorf("5-day report: sent %d p50 %v p99 %v; 3-hour report: %d %v %v", *pt.Sent, *pt.P50, *pt.P99, *want.Sent, *want.P50, *want.P99)
		}
		nonNull := 0
		for _, p := range r.Ping.Series[0].Points {
			if p.P50 != nil {
				nonNull++
			}
		}
		if nonNull != 3 {
			t.Errorf("%d hourly points with data, want 3", nonNull)
		}
	})
	t.Run("month-long periods chart days from the day rollups", func(t *testing.T) {
		// Acme's RTTs by UTC day: what each day point must estimate.
		byDay := map[time.Time][]uint64{}
		for h, vs := range s.acmeHour {
			d := base.Add(time.Duration(h) * time.Hour).Truncate(24 * time.Hour)
			byDay[d] = append(byDay[d], vs...)
		}
		day := 24 * time.Hour
		end := base.Add(3 * time.Hour)
		// Ending inside a day, its point comes from a read of its own;
		// ending at midnight, every day with data is one of the totals'
		// day rollups, reused for the chart.
		for _, to := range []time.Time{end, end.Truncate(day).Add(day)} {
			long := q
			long.From, long.To = base.Add(-20*day-30*time.Minute), to
			r, err := report.Compute(customer("acme"), st, long, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Ping.Series) != 1 {
				t.Fatalf("to %s: %d ping series", to, len(r.Ping.Series))
			}
			withData := 0
			for _, p := range r.Ping.Series[0].Points {
				if p.T.Sub(p.T.Truncate(day)) != 0 {
					t.Fatalf("to %s: point at %s, want day points", to, p.T)
				}
				vals := byDay[p.T]
				if len(vals) == 0 {
					if p.P50 != nil {
						t.Errorf("to %s: day %s has no data but p50 %v", to, p.T, *p.P50)
					}
					continue
				}
				withData++
				within(t, "day p50", p.P50, exact(vals, 0.5)/1e6)
				within(t, "day p99", p.P99, exact(vals, 0.99)/1e6)
			}
			if withData != len(byDay) {
				t.Errorf("to %s: %d day points with data, want %d", to, withData, len(byDay))
			}
			if pt := r.Ping.Targets[0]; *pt.P99 != *rep.Ping.Targets[0].P99 || *pt.Sent != *rep.Ping.Targets[0].Sent {
				t.Errorf("to %s: p99 %v sent %d, 3-hour report %v %d", to, *pt.P99, *pt.Sent, *rep.Ping.Targets[0].P99, *rep.Ping.Targets[0].Sent)
			}
		}
	})
	t.Run("data starts at its first minute", func(t *testing.T) {
		if rep.DataFrom == nil || !rep.DataFrom.Equal(base) {
			t.Errorf("acme's data from %v, want %s (its first report)", rep.DataFrom, base)
		}
		// A node of its own tenant whose first report comes 2 h 37 min
		// into the period: the report says so to the minute, not the
		// hour its first hourly bucket starts.
		ctx := context.Background()
		id, err := st.UpsertNode(ctx, store.Node{Name: "late-1", Labels: map[string]string{"customer": "late"}, InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, defs)
		if err != nil {
			t.Fatal(err)
		}
		first := base.Add(2*time.Hour + 37*time.Minute + 10*time.Second)
		write(t, st, []store.Report{{NodeID: id, InstanceID: 1, Seq: 1, Time: first, IntervalMS: 10000,
			Samples: []store.Sample{{MetricID: ids["tcp_reset"], Path: "tcp_reset", Value: 1, State: store.StateOK}}}})
		r, err := report.Compute(customer("late"), st, q, now)
		if err != nil {
			t.Fatal(err)
		}
		if want := first.Truncate(time.Minute); r.DataFrom == nil || !r.DataFrom.Equal(want) {
			t.Errorf("late's data from %v, want %s", r.DataFrom, want)
		}
		r, err = report.Compute(customer("nobody"), st, q, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.DataFrom != nil {
			t.Errorf("a report of no node has data from %v, want null", r.DataFrom)
		}
	})
	t.Run("tenant isolation", func(t *testing.T) {
		for _, sel := range []access.Selector{nil, {"customer": "globex"}} {
			q := q
			q.Selector = sel
			r, err := report.Compute(customer("acme"), st, q, now)
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var csv bytes.Buffer
			if err := report.WriteCSV(&csv, r); err != nil {
				t.Fatal(err)
			}
			for _, out := range []string{string(js), csv.String()} {
				if strings.Contains(out, "globex-1") {
					t.Errorf("selector %v: acme's report names globex-1: %.400s", sel, out)
				}
			}
			if sel != nil && (len(r.Scope.Nodes) != 0 || len(r.Ping.Targets) != 0) {
				t.Errorf("acme asking for globex got %v nodes, %d targets", r.Scope.Nodes, len(r.Ping.Targets))
			}
		}
		if !strings.Contains(mustCSV(t, rep), "section,target,nodes,p50_ms") {
			t.Errorf("CSV has no header naming units:\n%s", mustCSV(t, rep)[:300])
		}
	})
}

func mustCSV(t *testing.T, r *report.Report) string {
	var b bytes.Buffer
	if err := report.WriteCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
