package remotewrite

import (
	"math"
	"slices"
	"testing"
	"time"

	writev2 "github.com/prometheus/client_golang/exp/api/remote/genproto/v2"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/export"
)

func testSnapshot() export.Snapshot {
	lp := func(n, v string) *dto.LabelPair { return &dto.LabelPair{Name: proto.String(n), Value: proto.String(v)} }
	return export.Snapshot{Now: time.UnixMilli(1_764_410_000_123), Families: []*dto.MetricFamily{
		{Name: proto.String("nbs_tcp_resets_total"), Help: proto.String("resets"), Type: dto.MetricType_COUNTER.Enum(), Metric: []*dto.Metric{
			// Labels out of order: the sender sorts them.
			{Label: []*dto.LabelPair{lp("tenant", "acme"), lp("node", "web-1")}, Counter: &dto.Counter{Value: proto.Float64(12)}},
		}},
		{Name: proto.String("nbs_ping_delay_seconds"), Help: proto.String("delay"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{
			{Label: []*dto.LabelPair{lp("node", "web-1")}, Gauge: &dto.Gauge{Value: proto.Float64(0.00075)}},
		}},
		// Not made by the exporter: left out rather than sent wrong.
		{Name: proto.String("nbs_summary"), Type: dto.MetricType_SUMMARY.Enum(), Metric: []*dto.Metric{{Summary: &dto.Summary{}}}},
	}}
}

func TestFlatten(t *testing.T) {
	got := Flatten(testSnapshot())
	want := []Series{
		{Labels: []Label{{"__name__", "nbs_tcp_resets_total"}, {"node", "web-1"}, {"tenant", "acme"}}, Value: 12, TimeMS: 1_764_410_000_123, Counter: true, Help: "resets"},
		{Labels: []Label{{"__name__", "nbs_ping_delay_seconds"}, {"node", "web-1"}}, Value: 0.00075, TimeMS: 1_764_410_000_123, Help: "delay"},
	}
	if !slices.EqualFunc(got, want, func(a, b Series) bool {
		return slices.Equal(a.Labels, b.Labels) && a.Value == b.Value && a.TimeMS == b.TimeMS && a.Counter == b.Counter && a.Help == b.Help
	}) {
		t.Fatalf("Flatten:\n got %+v\nwant %+v", got, want)
	}
}

// decodeV1 reads a prometheus.WriteRequest back with protowire.
func decodeV1(t *testing.T, b []byte) []Series {
	t.Helper()
	fields := func(b []byte, each func(num protowire.Number, typ protowire.Type, v []byte, x uint64)) {
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				t.Fatal("bad tag")
			}
			b = b[n:]
			switch typ {
			case protowire.BytesType:
				v, n := protowire.ConsumeBytes(b)
				each(num, typ, v, 0)
				b = b[n:]
			case protowire.Fixed64Type:
				v, n := protowire.ConsumeFixed64(b)
				each(num, typ, nil, v)
				b = b[n:]
			case protowire.VarintType:
				v, n := protowire.ConsumeVarint(b)
				each(num, typ, nil, v)
				b = b[n:]
			default:
				t.Fatalf("unexpected wire type %d", typ)
			}
		}
	}
	var out []Series
	fields(b, func(num protowire.Number, _ protowire.Type, ts []byte, _ uint64) {
		var s Series
		fields(ts, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) {
			switch num {
			case 1:
				var l Label
				fields(v, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) {
					if num == 1 {
						l.Name = string(v)
					} else {
						l.Value = string(v)
					}
				})
				s.Labels = append(s.Labels, l)
			case 2:
				fields(v, func(num protowire.Number, _ protowire.Type, _ []byte, x uint64) {
					if num == 1 {
						s.Value = math.Float64frombits(x)
					} else {
						s.TimeMS = int64(x)
					}
				})
			}
		})
		out = append(out, s)
	})
	return out
}

func TestEncodeV1(t *testing.T) {
	series := Flatten(testSnapshot())
	got := decodeV1(t, EncodeV1(series))
	if len(got) != len(series) {
		t.Fatalf("%d series decoded, want %d", len(got), len(series))
	}
	for i := range got {
		if !slices.Equal(got[i].Labels, series[i].Labels) || got[i].Value != series[i].Value || got[i].TimeMS != series[i].TimeMS {
			t.Errorf("series %d: got %+v, want %+v", i, got[i], series[i])
		}
	}
}

func TestEncodeV2(t *testing.T) {
	series := Flatten(testSnapshot())
	b, err := EncodeV2(series)
	if err != nil {
		t.Fatal(err)
	}
	var req writev2.Request
	if err := req.UnmarshalVT(b); err != nil {
		t.Fatal(err)
	}
	if req.Symbols[0] != "" || len(req.Timeseries) != 2 {
		t.Fatalf("symbols %q, %d series", req.Symbols, len(req.Timeseries))
	}
	for i, ts := range req.Timeseries {
		var ls []Label
		for j := 0; j < len(ts.LabelsRefs); j += 2 {
			ls = append(ls, Label{req.Symbols[ts.LabelsRefs[j]], req.Symbols[ts.LabelsRefs[j+1]]})
		}
		want := series[i]
		typ := writev2.Metadata_METRIC_TYPE_GAUGE
		if want.Counter {
			typ = writev2.Metadata_METRIC_TYPE_COUNTER
		}
		if !slices.Equal(ls, want.Labels) || len(ts.Samples) != 1 || ts.Samples[0].Value != want.Value || ts.Samples[0].Timestamp != want.TimeMS ||
			ts.Metadata.Type != typ || req.Symbols[ts.Metadata.HelpRef] != want.Help {
			t.Errorf("series %d: labels %v samples %v metadata %v; want %+v", i, ls, ts.Samples, ts.Metadata, want)
		}
	}
}

func TestStatusErrorOutOfOrder(t *testing.T) {
	tests := []struct {
		code int
		body string
		want bool
	}{
		// Prometheus 2.42 and 3.x, remote write 1.0.
		{400, "out of order sample\n", true},
		{400, "out of bounds\n", true},
		{400, "duplicate sample for timestamp\n", true},
		{400, "too old sample", true},
		{400, "invalid labels", false},
		{500, "out of order sample", false},
	}
	for _, tc := range tests {
		if got := (&StatusError{Code: tc.code, Body: tc.body}).OutOfOrder(); got != tc.want {
			t.Errorf("%d %q: OutOfOrder %v, want %v", tc.code, tc.body, got, tc.want)
		}
	}
}

func TestNewChecksReceiver(t *testing.T) {
	for _, r := range []export.Receiver{
		{Name: "a", URL: "ftp://x/"},
		{Name: "a", URL: "http://x/", Version: "1.1"},
	} {
		if _, err := New(r, nil); err == nil {
			t.Errorf("New(%+v) accepted", r)
		}
	}
}
