package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A hello's names follow schema's rules (tested there in full), and a
// rejection says which name and why.
func TestHelloNames(t *testing.T) {
	def := func(id string) *nbsv1.MetricDefinition {
		return &nbsv1.MetricDefinition{Id: id, Title: "x", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}
	}
	cases := []struct {
		name string
		mut  func(h *nbsv1.Hello)
		want string // "" = accepted
	}{
		{"valid", func(h *nbsv1.Hello) {}, ""},
		{"labels", func(h *nbsv1.Hello) { h.Labels = map[string]string{"customer": "acme", "site": "Zürich"} }, ""},
		{"a subtree", func(h *nbsv1.Hello) {
			h.Metrics = append(h.Metrics, def("tcp_reset/sent"), def("tcp_reset/sent/no_socket"))
		}, ""},

		{"empty node name", func(h *nbsv1.Hello) { h.NodeName = "" }, `hello: node_name "": empty (a node name is 1-253 letters`},
		{"space in node name", func(h *nbsv1.Hello) { h.NodeName = "no spaces" }, `hello: node_name "no spaces": ' ' is not allowed`},
		{"node name too long", func(h *nbsv1.Hello) { h.NodeName = strings.Repeat("a", 254) }, "254 bytes"},
		{"bad label key", func(h *nbsv1.Hello) { h.Labels = map[string]string{"Customer": "acme"} }, `hello: label key "Customer": 'C' is not allowed`},
		{"NUL in a label", func(h *nbsv1.Hello) { h.Labels = map[string]string{"customer": "a\x00"} }, "hello: label customer value: contains a NUL byte"},
		{"label too long", func(h *nbsv1.Hello) { h.Labels = map[string]string{"note": strings.Repeat("x", 4097)} }, "label note value: 4097 bytes, at most 4096"},
		{"bad metric id", func(h *nbsv1.Hello) { h.Metrics = append(h.Metrics, def("tcp_reset//sent")) },
			`hello: metric id "tcp_reset//sent" must be a lower-case path like tcp_reset/sent/no_socket: empty segment`},
		{"upper-case metric id", func(h *nbsv1.Hello) { h.Metrics = append(h.Metrics, def("TCP")) }, `'T' is not allowed in segment "TCP"`},
		{"metric id too long", func(h *nbsv1.Hello) { h.Metrics = append(h.Metrics, def("tcp_reset/"+strings.Repeat("a", 250))) }, "260 bytes, at most 255"},
		{"metric id too deep", func(h *nbsv1.Hello) { h.Metrics = append(h.Metrics, def("tcp_reset/a/b/c/d/e/f/g/h")) }, "9 segments, at most 8"},
		{"orphan", func(h *nbsv1.Hello) { h.Metrics = append(h.Metrics, def("tcp_reset/sent/no_socket")) }, "metric tcp_reset/sent/no_socket: parent tcp_reset/sent is not defined"},
		{"defined twice", func(h *nbsv1.Hello) { h.Metrics = append(h.Metrics, def("tcp_reset")) }, `hello: metric "tcp_reset" is defined twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &nbsv1.Hello{NodeName: "web-1", InstanceId: 1, IntervalMs: 1000, Metrics: []*nbsv1.MetricDefinition{def("tcp_reset")}}
			c.mut(h)
			_, _, rej := DefaultLimits().checkHello(h)
			switch {
			case c.want == "" && rej != nil:
				t.Fatalf("checkHello = %v, want accepted", rej)
			case c.want != "" && (rej == nil || !strings.Contains(rej.msg, c.want) || rej.reason != "bad_hello"):
				t.Fatalf("checkHello = %v, want a bad_hello rejection containing %q", rej, c.want)
			}
		})
	}
}

// A histogram's start_unix_nano (counts accumulated over several intervals)
// is kept when it lies before the report and within MaxHistogramSpan.
func TestHistogramStart(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name  string
		start int64
		want  string // "" = accepted
	}{
		{"the report's interval", 0, ""},
		{"five minutes back", now.Add(-5 * time.Minute).UnixNano(), ""},
		{"at the report's time", now.UnixNano(), "start_unix_nano"},
		{"after the report", now.Add(time.Second).UnixNano(), "start_unix_nano"},
		{"too far back", now.Add(-MaxHistogramSpan - time.Second).UnixNano(), "start_unix_nano"},
		{"negative", -1, "start_unix_nano"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &stream{metrics: metricSet{base: map[string]streamMetric{"ping": {id: 1, kind: store.KindHistogram}}}}
			r := &nbsv1.Report{Sequence: 1, TimeUnixNano: now.UnixNano(), IntervalMs: 10000,
				Histograms: []*nbsv1.Histogram{{MetricId: "ping", BucketIndex: []uint32{3}, BucketCount: []uint64{2}, Count: 2, Sum: 6, StartUnixNano: c.start}}}
			out, _, rej := DefaultLimits().checkReport(r, st, now)
			switch {
			case c.want == "" && rej != nil:
				t.Fatalf("checkReport = %v, want accepted", rej)
			case c.want == "":
				if got := out.Histograms[0].Start; (c.start == 0) != got.IsZero() || (c.start != 0 && got.UnixNano() != c.start) {
					t.Errorf("stored start %v, want %d", got, c.start)
				}
			case rej == nil || rej.reason != "bad_histogram" || !strings.Contains(rej.msg, c.want):
				t.Fatalf("checkReport = %v, want a bad_histogram rejection containing %q", rej, c.want)
			}
		})
	}
}

// A sample the agent had no value for keeps saying so into storage, and
// whatever value came with it is dropped: it means nothing. A rate's sample
// is a counter's increase (export_counters sums it), a gauge's is not.
func TestSampleWithoutValue(t *testing.T) {
	now := time.Now()
	st := &stream{metrics: metricSet{base: map[string]streamMetric{"ping": {id: 1, kind: store.KindGauge}, "drops": {id: 2, kind: store.KindRate}}}}
	r := &nbsv1.Report{Sequence: 1, TimeUnixNano: now.UnixNano(), IntervalMs: 10000, Samples: []*nbsv1.Sample{
		{MetricId: "ping", Value: 7, State: nbsv1.State_STATE_UNKNOWN, NoValue: true},
		{MetricId: "drops", Value: 3, State: nbsv1.State_STATE_OK},
	}}
	out, _, rej := DefaultLimits().checkReport(r, st, now)
	if rej != nil {
		t.Fatalf("checkReport = %v, want accepted", rej)
	}
	want := []store.Sample{{Path: "ping", Value: 0, State: store.StateUnknown, NoValue: true}, {Path: "drops", Value: 3, State: store.StateOK, Counter: true}}
	if len(out.Samples) != 2 || out.Samples[0] != want[0] || out.Samples[1] != want[1] {
		t.Errorf("samples %+v, want %+v", out.Samples, want)
	}
}

// A metric twice in one report is refused, whether the report has few
// samples (looked for among those before it) or many (in a map), and
// first or last; a metric the report itself defines may have a sample.
func TestSampleTwice(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name      string
		samples   int // distinct metrics m000, m001, …
		twice     int // index of the one sent again at the end; -1: none
		newMetric bool
	}{
		{"few, none twice", 3, -1, false},
		{"few, the first twice", 3, 0, false},
		{"few, the last twice", 3, 2, false},
		{"at the scan's bound, the first twice", maxScanned - 1, 0, false},
		{"many, none twice", maxScanned + 5, -1, false},
		{"many, the first twice", maxScanned + 5, 0, false},
		{"many, the last twice", maxScanned + 5, maxScanned + 4, false},
		{"a new metric's sample", 3, -1, true},
		{"a new metric's sample twice", 3, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &stream{metrics: metricSet{base: map[string]streamMetric{}}}
			r := &nbsv1.Report{Sequence: 1, TimeUnixNano: now.UnixNano(), IntervalMs: 10000}
			id := func(i int) string { return fmt.Sprintf("m%03d", i) }
			for i := range tc.samples {
				st.metrics.base[id(i)] = streamMetric{id: int32(i + 1), kind: store.KindGauge}
				r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id(i), Value: 1, State: nbsv1.State_STATE_OK})
			}
			if tc.newMetric {
				r.NewMetrics = []*nbsv1.MetricDefinition{{Id: id(tc.samples), Title: "new", Kind: nbsv1.MetricKind_METRIC_KIND_GAUGE}}
				r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id(tc.samples), Value: 1, State: nbsv1.State_STATE_OK})
			}
			if tc.twice >= 0 {
				r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: id(tc.twice), Value: 2, State: nbsv1.State_STATE_OK})
			}
			out, defs, rej := DefaultLimits().checkReport(r, st, now)
			if tc.twice >= 0 {
				want := fmt.Sprintf("metric %s appears twice", id(tc.twice))
				if rej == nil || rej.reason != "bad_value" || !strings.Contains(rej.msg, want) {
					t.Fatalf("checkReport = %v, want a bad_value rejection: %s", rej, want)
				}
				return
			}
			if rej != nil {
				t.Fatalf("checkReport = %v, want accepted", rej)
			}
			if len(out.Samples) != len(r.Samples) {
				t.Errorf("%d samples stored, want %d", len(out.Samples), len(r.Samples))
			}
			if tc.newMetric != (len(defs) == 1) {
				t.Errorf("new definitions %v, want one: %v", defs, tc.newMetric)
			}
		})
	}
}
