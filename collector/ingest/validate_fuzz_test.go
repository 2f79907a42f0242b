package ingest

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/internal/schema"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func fuzzSeed(f *testing.F, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatalf("marshal seed: %v", err)
	}
	f.Add(b)
}

func fuzzDef(id string, kind nbsv1.MetricKind) *nbsv1.MetricDefinition {
	return &nbsv1.MetricDefinition{Id: id, Title: "x", Kind: kind}
}

// A Hello is whatever bytes the agent sends: checkHello either refuses it
// with a reason or accepts a node whose names obey the schema.
func FuzzCheckHello(f *testing.F) {
	fuzzSeed(f, &nbsv1.Hello{NodeName: "web-1", InstanceId: 1, IntervalMs: 1000,
		Labels:       map[string]string{"customer": "acme"},
		PingAddress:  "10.0.0.1",
		Capabilities: []*nbsv1.Capability{{Name: "tcp_reset", Available: true}},
		Metrics: []*nbsv1.MetricDefinition{fuzzDef("tcp_reset", nbsv1.MetricKind_METRIC_KIND_RATE),
			fuzzDef("tcp_reset/sent", nbsv1.MetricKind_METRIC_KIND_RATE),
			{Id: "latency", Title: "lat", Kind: nbsv1.MetricKind_METRIC_KIND_HISTOGRAM, Scale: 1000, Quantile: 0.99,
				DefaultThreshold: &nbsv1.Threshold{Comparison: nbsv1.Comparison_COMPARISON_ABOVE, Warn: 1, Crit: 2}}}})
	fuzzSeed(f, &nbsv1.Hello{NodeName: "no spaces", InstanceId: 1, IntervalMs: 1000})
	fuzzSeed(f, &nbsv1.Hello{NodeName: "a", InstanceId: 1, IntervalMs: 1000, PingAddress: "fe80::1%eth0"})
	fuzzSeed(f, &nbsv1.Hello{NodeName: "a", InstanceId: 1, IntervalMs: 1000, Metrics: []*nbsv1.MetricDefinition{fuzzDef("tcp_reset/sent/no_socket", nbsv1.MetricKind_METRIC_KIND_RATE)}})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h nbsv1.Hello
		if proto.Unmarshal(data, &h) != nil {
			return
		}
		n, defs, rej := DefaultLimits().checkHello(&h)
		if rej != nil {
			if rej.reason == "" || rej.msg == "" {
				t.Fatalf("rejection without reason or message: %+v", rej)
			}
			return
		}
		if !schema.ValidNodeName(n.Name) || n.InstanceID == 0 {
			t.Fatalf("accepted node %q instance %d", n.Name, n.InstanceID)
		}
		if err := schema.CheckLabels(n.Labels); err != nil {
			t.Fatalf("accepted labels %v: %v", n.Labels, err)
		}
		for _, d := range defs {
			if !schema.ValidID(d.Path) {
				t.Fatalf("accepted metric id %q", d.Path)
			}
			if math.IsNaN(d.Scale) || math.IsNaN(d.Quantile) {
				t.Fatalf("accepted NaN in definition %q: scale %v quantile %v", d.Path, d.Scale, d.Quantile)
			}
		}
	})
}

// A report is checked against a stream that knows a rate, a gauge and a
// histogram; whatever it holds, checkReport refuses it or converts it into
// finite values for known metrics.
func FuzzCheckReport(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	hello := &nbsv1.Hello{NodeName: "web-1", InstanceId: 1, IntervalMs: 1000, Metrics: []*nbsv1.MetricDefinition{
		fuzzDef("tcp_reset", nbsv1.MetricKind_METRIC_KIND_RATE),
		fuzzDef("conns", nbsv1.MetricKind_METRIC_KIND_GAUGE),
		{Id: "latency", Title: "lat", Kind: nbsv1.MetricKind_METRIC_KIND_HISTOGRAM, Scale: 1000, Quantile: 0.99},
	}}
	ts := now.UnixNano()
	fuzzSeed(f, &nbsv1.Report{Sequence: 1, TimeUnixNano: ts, IntervalMs: 1000, Snapshot: true,
		Samples:    []*nbsv1.Sample{{MetricId: "tcp_reset", Value: 3}, {MetricId: "conns", Value: 10}, {MetricId: "latency", Value: 7}},
		Histograms: []*nbsv1.Histogram{{MetricId: "latency", BucketIndex: []uint32{3, 40}, BucketCount: []uint64{1, 2}, Count: 3, Sum: 500}},
		Events:     []*nbsv1.Event{{MetricId: "tcp_reset", TimeUnixNano: ts, Fields: map[string]string{"saddr": "10.0.0.1"}}},
		NewMetrics: []*nbsv1.MetricDefinition{fuzzDef("tcp_reset/sent", nbsv1.MetricKind_METRIC_KIND_RATE)}})
	fuzzSeed(f, &nbsv1.Report{Sequence: 2, TimeUnixNano: ts, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "tcp_reset", Value: math.NaN()}}})
	fuzzSeed(f, &nbsv1.Report{Sequence: 2, TimeUnixNano: ts, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "nope", Value: 1}}})
	fuzzSeed(f, &nbsv1.Report{Sequence: 2, TimeUnixNano: ts, IntervalMs: 1000,
		Histograms: []*nbsv1.Histogram{{MetricId: "latency", BucketIndex: []uint32{40, 3}, BucketCount: []uint64{1}, Count: 9}}})
	fuzzSeed(f, &nbsv1.Report{Sequence: 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r nbsv1.Report
		if proto.Unmarshal(data, &r) != nil {
			return
		}
		l := DefaultLimits()
		node, defs, rej := l.checkHello(hello)
		if rej != nil {
			t.Fatalf("seed hello refused: %v", rej)
		}
		st := &stream{node: node}
		for i, d := range defs {
			st.metrics.add(d.Path, streamMetric{id: int32(i + 1), kind: d.Kind})
		}
		rep, _, rej := l.checkReport(&r, st, now)
		if rej != nil {
			if rej.reason == "" || rej.msg == "" {
				t.Fatalf("rejection without reason or message: %+v", rej)
			}
			return
		}
		if rep.Seq == 0 {
			t.Fatalf("accepted sequence 0")
		}
		for _, s := range rep.Samples {
			if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) || math.Abs(s.Value) > l.MaxAbsoluteValue {
				t.Fatalf("accepted sample %s = %v", s.Path, s.Value)
			}
		}
		for _, h := range rep.Histograms {
			if len(h.BucketIndex) != len(h.BucketCount) {
				t.Fatalf("accepted histogram %s with %d indexes and %d counts", h.Path, len(h.BucketIndex), len(h.BucketCount))
			}
			if math.IsNaN(h.Sum) || math.IsInf(h.Sum, 0) {
				t.Fatalf("accepted histogram %s sum %v", h.Path, h.Sum)
			}
			for i := 1; i < len(h.BucketIndex); i++ {
				if h.BucketIndex[i] <= h.BucketIndex[i-1] {
					t.Fatalf("accepted histogram %s with indexes out of order: %v", h.Path, h.BucketIndex)
				}
			}
		}
	})
}
