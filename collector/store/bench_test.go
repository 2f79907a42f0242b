package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// BenchmarkWriteReports measures the ingest path (COPY into staging, dedup
// insert, pending keys, latest merge) for batches of reports shaped like a
// fleet's: each report carries samplesPerReport samples. It reports
// samples/s, the same for the minute fold of everything written
// (fold-samples/s) and for both (with-fold-samples/s), and the bytes each
// sample costs on disk (heap + indexes of reports).
func BenchmarkWriteReports(b *testing.B) {
	for _, shape := range []struct{ nodes, samples, batch int }{
		{100, 4, 500},   // healthy fleet: roots only
		{100, 40, 500},  // a troubled fleet: roots and many children
		{100, 40, 50},   // small batches
		{100, 400, 100}, // full snapshots
	} {
		b.Run(fmt.Sprintf("nodes=%d/samples=%d/batch=%d", shape.nodes, shape.samples, shape.batch), func(b *testing.B) {
			benchWrite(b, shape.nodes, shape.samples, shape.batch)
		})
	}
}

func benchWrite(b *testing.B, nodes, samples, batchSize int) {
	ctx := context.Background()
	st := openTest(b)
	nodeIDs := make([]int32, nodes)
	var err error
	var defs []MetricDef
	for m := range samples {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("r%d", m), Title: "m", Unit: "x/s", Kind: KindRate})
	}
	var ids map[string]int32
	for i := range nodes {
		if nodeIDs[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			b.Fatal(err)
		}
		if ids, err = st.UpsertDefinitions(ctx, nodeIDs[i], defs); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now().Add(-time.Hour)
	seq := uint64(0)
	batch := make([]Report, 0, batchSize)
	b.ResetTimer()
	written := 0
	for i := 0; b.Loop(); i++ {
		batch = batch[:0]
		for len(batch) < batchSize {
			n := int(seq) % nodes
			if n == 0 {
				seq++
			}
			r := Report{NodeID: nodeIDs[n], InstanceID: 1, Seq: seq + uint64(n)<<32, Time: start.Add(time.Duration(seq) * 10 * time.Millisecond), IntervalMS: 10000}
			for m := range samples {
				p := fmt.Sprintf("r%d", m)
				r.Samples = append(r.Samples, Sample{MetricID: ids[p], Path: p, Value: float64(m), State: StateOK})
			}
			batch = append(batch, r)
			seq++
		}
		if _, err := st.WriteReports(ctx, batch); err != nil {
			b.Fatal(err)
		}
		written += len(batch) * samples
	}
	b.StopTimer()
	b.ReportMetric(float64(written)/b.Elapsed().Seconds(), "samples/s")
	// The rollups are the fold's, from what was stored: its time, for
	// every report written, is the rest of the cost of ingest.
	foldStart := time.Now()
	r, err := st.FoldRollups(ctx, FoldOptions{Now: time.Now().Add(MinuteGrace + time.Minute)})
	if err != nil {
		b.Fatal(err)
	}
	fold := time.Since(foldStart)
	if r.Reports == 0 {
		b.Fatalf("fold %+v: nothing folded", r)
	}
	b.ReportMetric(float64(written)/fold.Seconds(), "fold-samples/s")
	b.ReportMetric(float64(written)/(b.Elapsed()+fold).Seconds(), "with-fold-samples/s")
	var bytes int64
	if err := st.pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'reports'`).Scan(&bytes); err != nil {
		b.Fatal(err)
	}
	if written > 0 {
		b.ReportMetric(float64(bytes)/float64(written), "disk-B/sample")
	}
}

// BenchmarkCounterparts measures the other side of a page of evidence: the
// events route reads a node's newest events (the anchor, Events) and then
// one flow lookup per event (Counterparts), over an hour of evidence from
// a fleet in which every flow was seen by two nodes. "without the index"
// drops events_flow, the same lookups then filter every event of the
// window.
func BenchmarkCounterparts(b *testing.B) {
	const nodes, perNode, page = 50, 2000, 200
	ctx := context.Background()
	st := openTest(b)
	ids := make([]int32, nodes)
	var err error
	var metric int32
	for i := range nodes {
		if ids[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			b.Fatal(err)
		}
		m, err := st.UpsertDefinitions(ctx, ids[i], []MetricDef{{Path: "tcp_reset", Title: "r", Unit: "x/s", Kind: KindRate}})
		if err != nil {
			b.Fatal(err)
		}
		metric = m["tcp_reset"]
	}
	// Node i's flow k is also seen, swapped, by node i+1: each lookup has
	// exactly one counterpart among nodes*perNode events.
	start := time.Now().Add(-time.Hour)
	step := time.Hour / perNode
	for i := range nodes {
		r := Report{NodeID: ids[i], InstanceID: 1, Seq: 1, Time: start, IntervalMS: 10000}
		for k := range perNode {
			a := fmt.Sprintf("10.%d.%d.%d:%d", i, k/250, k%250, 1000+k)
			bEnd := fmt.Sprintf("10.%d.%d.%d:%d", (i+1)%nodes, k/250, k%250, 80)
			r.Events = append(r.Events, Event{MetricID: metric, Path: "tcp_reset", Time: start.Add(time.Duration(k) * step),
				Fields: map[string]string{"src": bEnd, "dst": a, "state": "established"}})
			prev := (i + nodes - 1) % nodes
			r.Events = append(r.Events, Event{MetricID: metric, Path: "tcp_reset", Time: start.Add(time.Duration(k)*step + time.Millisecond),
				Fields: map[string]string{"src": fmt.Sprintf("10.%d.%d.%d:%d", prev, k/250, k%250, 1000+k),
					"dst": fmt.Sprintf("10.%d.%d.%d:%d", i, k/250, k%250, 80), "reason": "netfilter_drop", "protocol": "tcp"}})
		}
		if _, err := st.WriteReports(ctx, []Report{r}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := st.pool.Exec(ctx, `ANALYZE events`); err != nil {
		b.Fatal(err)
	}
	events, err := st.Events(ctx, ids[0], "tcp_reset", start, time.Now(), page)
	if err != nil || len(events) != page {
		b.Fatalf("events: %d, %v", len(events), err)
	}
	probes := make([]FlowProbe, 0, page)
	for _, e := range events {
		probes = append(probes, FlowProbe{Src: e.Fields["src"], Dst: e.Fields["dst"], Protocol: "tcp",
			From: e.Time.Add(-7 * time.Second), To: e.Time.Add(7 * time.Second), Near: e.Time})
	}
	lookup := func(b *testing.B) {
		found := 0
		for b.Loop() {
			got, err := st.Counterparts(ctx, All{}, ids[0], "", probes, 6)
			if err != nil {
				b.Fatal(err)
			}
			found = 0
			for _, cs := range got {
				found += len(cs)
			}
		}
		if found != page {
			b.Fatalf("%d counterparts for %d events, want one each", found, page)
		}
	}
	b.Run(fmt.Sprintf("events/page=%d", page), func(b *testing.B) {
		for b.Loop() {
			if _, err := st.Events(ctx, ids[0], "tcp_reset", start, time.Now(), page); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("counterparts/page=%d", page), lookup)
	if _, err := st.pool.Exec(ctx, `DROP INDEX events_flow`); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("counterparts-without-the-index/page=%d", page), lookup)
}

// BenchmarkRegisterDefinitions measures storing a new node's catalogue: 185
// definitions with operator-length descriptions, the same for every node, as
// a fleet's agents send them (the fleet simulator's tree size). The first
// node stores the definitions themselves; each one after stores its
// (metric, definition) pairs.
func BenchmarkRegisterDefinitions(b *testing.B) {
	ctx := context.Background()
	st := openTest(b)
	defs := agentCatalogue()
	for i := 0; b.Loop(); i++ {
		node, err := st.UpsertNode(ctx, Node{Name: fmt.Sprintf("reg-%d", i), InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.UpsertDefinitions(ctx, node, defs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegisterNodes registers new nodes with the agent's catalogue
// (190 definitions) in batches of 1 and 64 (RegisterNodes, as the
// registrar does), against the anchor of one node the old way in the same
// run (UpsertNode, UpsertDefinitions, MarkDefinitions): time per node.
func BenchmarkRegisterNodes(b *testing.B) {
	ctx := context.Background()
	st := openTest(b)
	defs := agentCatalogue()
	hash := DefinitionsHash(defs)
	n := 0
	b.Run("anchor=one-by-one", func(b *testing.B) {
		for b.Loop() {
			n++
			node, err := st.UpsertNode(ctx, Node{Name: fmt.Sprintf("reg-%d", n), InstanceID: 1, IntervalMS: 10000})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.UpsertDefinitions(ctx, node, defs); err != nil {
				b.Fatal(err)
			}
			if err := st.MarkDefinitions(ctx, node, hash); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, size := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			for b.Loop() {
				batch := make([]Registration, size)
				for i := range batch {
					n++
					batch[i] = Registration{Node: Node{Name: fmt.Sprintf("reg-%d", n), InstanceID: 1, IntervalMS: 10000}, Defs: defs, Hash: hash}
				}
				for _, r := range st.RegisterNodes(ctx, batch, 1000) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*size), "ms/node")
		})
	}
}

// BenchmarkFoldRollups measures the fold's cost per hour of fleet data:
// 1,000 nodes × 10 metrics (8 sample metrics, 2 histograms of a ping's
// 60 RTTs a minute) × 60 minute rollups folded into their hour, and 24 of
// those hours into their day. Each iteration folds the same bucket again
// (a fold is a recompute: the same work whether or not it ran before).
func BenchmarkFoldRollups(b *testing.B) {
	const nodes, samples, hists = 1000, 8, 2
	ctx := context.Background()
	st := openTest(b)
	var defs []MetricDef
	for m := range samples {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("r%d", m), Title: "m", Unit: "x/s", Kind: KindRate})
	}
	for m := range hists {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("ping/t%d", m), Title: "t", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99})
	}
	ids := make([]int32, nodes)
	var metrics map[string]int32
	for i := range nodes {
		var err error
		if ids[i], err = st.UpsertNode(ctx, Node{Name: fmt.Sprintf("n%d", i), InstanceID: 1, IntervalMS: 10000}); err != nil {
			b.Fatal(err)
		}
		if metrics, err = st.UpsertDefinitions(ctx, ids[i], defs); err != nil {
			b.Fatal(err)
		}
	}
	// An hour (H) of minutes and a day (D, before H's) of hours.
	h := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	d := h.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	rng := uint64(1)
	draw := func() uint64 { // xorshift: fixed, cheap, spread over many buckets
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return 2e5 + rng%3e6
	}
	seed := func(res int32, start time.Time, n int, perBucket uint64) {
		for lo := 0; lo < nodes; lo += 100 {
			r := NewRollups()
			for _, id := range ids[lo : lo+100] {
				for k := range n {
					ts := start.Add(time.Duration(k) * time.Duration(res) * time.Second).Unix()
					for m := range samples {
						r.Samples[RollupKey{id, metrics[fmt.Sprintf("r%d", m)], res, ts}] = &SampleAgg{N: 6, Sum: float64(k % 7), Max: float64(k % 7), OK: 60}
					}
					for m := range hists {
						hh := loglinear.New()
						for range perBucket / 2 {
							hh.RecordN(draw(), 2)
						}
						r.Histograms[RollupKey{id, metrics[fmt.Sprintf("ping/t%d", m)], res, ts}] = hh
					}
				}
			}
			if err := st.SeedRollups(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	seed(RollupMinute, h, 60, 60)
	seed(RollupHour, d, 24, 3600)
	if _, err := st.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		res       int32
		hour, day time.Time // watermarks before the fold
		now       time.Time
	}{
		{"hour", RollupHour, h, h.Add(24 * time.Hour), h.Add(time.Hour + FoldGrace)},
		{"day", RollupDay, h.Add(time.Hour), d, h.Add(time.Hour)},
	} {
		b.Run(fmt.Sprintf("%s/nodes=%d/metrics=%d", c.name, nodes, samples+hists), func(b *testing.B) {
			for b.Loop() {
				if err := st.SetFoldWatermark(ctx, RollupHour, c.hour); err != nil {
					b.Fatal(err)
				}
				if err := st.SetFoldWatermark(ctx, RollupDay, c.day); err != nil {
					b.Fatal(err)
				}
				r, err := st.FoldRollups(ctx, FoldOptions{Now: c.now})
				if err != nil {
					b.Fatal(err)
				}
				if r.Hours+r.Days != 1 {
					b.Fatalf("fold %+v, want one %ds bucket", r, c.res)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/fleet-"+c.name)
		})
	}
}

// agentCatalogue is a fleet agent's catalogue as the registration
// benchmarks store it: 185 metrics under 5 roots, with operator-length
// descriptions, the same for every node.
func agentCatalogue() []MetricDef {
	var defs []MetricDef
	for m := range 185 {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("root%d/m%d", m%5, m), Title: fmt.Sprintf("Metric %d", m), Unit: "1/s", Kind: KindRate,
			Description: strings.Repeat(fmt.Sprintf("What metric %d means, what usually causes it and what to look at next. ", m), 6)})
	}
	for m := range 5 {
		defs = append(defs, MetricDef{Path: fmt.Sprintf("root%d", m), Title: "Root", Unit: "1/s", Kind: KindRate})
	}
	return defs
}
