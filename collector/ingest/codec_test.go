package ingest

import (
	"math"
	"testing"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// codecMetrics is a stream's metrics as the codec interns from.
func codecMetrics() *metricSet {
	m := &metricSet{base: map[string]streamMetric{}}
	for i, p := range []string{"tcp_reset", "tcp_reset/sent", "ping", "latency/rx"} {
		m.base[p] = streamMetric{id: int32(i + 1), kind: store.KindRate, path: p}
	}
	return m
}

// encoded is a message's encoding with raw fields appended (what the agent's
// protobuf runtime would never write, but a hostile client may).
func encoded(t testing.TB, m proto.Message, raw ...[]byte) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raw {
		b = append(b, r...)
	}
	return b
}

// reportField wraps a Report's bytes as a ConnectRequest's report.
func reportField(body []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), body)
}

func tag(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }

// decodeBoth decodes b with the collector's codec into an inbound, split
// into pieces (gRPC hands a message over in several buffers when it
// spans frames), and with gRPC's protobuf codec, and says whether the
// codec took its own path.
func decodeBoth(t testing.TB, b []byte, pieces int) (got, want *nbsv1.ConnectRequest, gotErr, wantErr error, fast bool) {
	t.Helper()
	split := func() mem.BufferSlice {
		var s mem.BufferSlice
		rest := b
		for i := pieces; i > 1 && len(rest) > 0; i-- {
			n := len(rest) / i
			s = append(s, mem.SliceBuffer(rest[:n]))
			rest = rest[n:]
		}
		return append(s, mem.SliceBuffer(rest))
	}
	in := &inbound{metrics: codecMetrics()}
	gotErr = NewCodec().Unmarshal(split(), in)
	fast = in.scratch != nil
	got = proto.Clone(&in.ConnectRequest).(*nbsv1.ConnectRequest)
	in.done()
	want = new(nbsv1.ConnectRequest)
	wantErr = encoding.GetCodecV2("proto").Unmarshal(split(), want)
	return got, want, gotErr, wantErr, fast
}

// The codec decodes what it takes exactly as the protobuf runtime does,
// and leaves everything else to it: the same message, or the same error
// (gRPC's status for the stream quotes it).
func TestCodecAsRuntime(t *testing.T) {
	healthy := &nbsv1.Report{Sequence: 7, TimeUnixNano: 1_764_460_800_000_000_000, IntervalMs: 10000, Samples: []*nbsv1.Sample{
		{MetricId: "tcp_reset", Value: 3, State: nbsv1.State_STATE_WARN},
		{MetricId: "ping", NoValue: true, State: nbsv1.State_STATE_UNKNOWN},
		{MetricId: "latency/rx", Value: math.Inf(-1)},
	}}
	troubled := &nbsv1.Report{Sequence: 1 << 62, TimeUnixNano: -5, IntervalMs: math.MaxUint32, Snapshot: true,
		Samples: []*nbsv1.Sample{{MetricId: "not/defined", Value: math.NaN(), State: nbsv1.State(-3)}},
		Histograms: []*nbsv1.Histogram{
			{MetricId: "latency/rx", BucketIndex: []uint32{1, 5, 300}, BucketCount: []uint64{1, math.MaxUint64, 2}, Count: 4, Sum: 1.5, StartUnixNano: -1},
			{MetricId: "ping"},
			{MetricId: "latency/rx", BucketIndex: []uint32{9}, BucketCount: []uint64{9}, Count: 9},
		}}
	hb := func(h *nbsv1.Histogram) []byte { return encoded(t, h) }
	for _, tc := range []struct {
		name string
		b    []byte
		fast bool // the codec's own path
	}{
		{"a healthy report", encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: healthy}}), true},
		{"histograms, odd values", encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: troubled}}), true},
		{"an empty report", reportField(nil), true},
		{"fields twice: the last scalar wins, repeated ones add up", reportField(encoded(t, healthy, encoded(t, &nbsv1.Report{Sequence: 9, Snapshot: true, IntervalMs: 1,
			Samples: []*nbsv1.Sample{{MetricId: "tcp_reset/sent", Value: 1}}}))), true},
		{"a sample's fields twice", reportField(protowire.AppendBytes(tag(5, protowire.BytesType),
			encoded(t, &nbsv1.Sample{MetricId: "ping", Value: 1}, encoded(t, &nbsv1.Sample{MetricId: "tcp_reset", State: 2})))), true},
		{"a bool and a uint32 as wide varints", reportField(append(protowire.AppendVarint(tag(4, protowire.VarintType), 2),
			protowire.AppendVarint(tag(3, protowire.VarintType), 1<<40+5)...)), true},
		{"buckets unpacked and packed", reportField(protowire.AppendBytes(tag(6, protowire.BytesType),
			append(append(hb(&nbsv1.Histogram{MetricId: "ping", BucketIndex: []uint32{4}}),
				protowire.AppendVarint(tag(2, protowire.VarintType), 6)...),
				protowire.AppendVarint(tag(3, protowire.VarintType), 1<<33)...))), true},
		{"a Hello", encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: &nbsv1.Hello{NodeName: "n"}}}), false},
		{"nothing", nil, false},
		{"a report with events", encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{Sequence: 1,
			Events: []*nbsv1.Event{{MetricId: "tcp_reset", Fields: map[string]string{"a": "b"}}}}}}), false},
		{"a report with new metrics", encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{Sequence: 1,
			NewMetrics: []*nbsv1.MetricDefinition{{Id: "x", Title: "X"}}}}}), false},
		{"two reports (merged)", append(encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: healthy}}),
			encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{Sequence: 99}}})...), false},
		{"an unknown report field", reportField(encoded(t, healthy, protowire.AppendVarint(tag(99, protowire.VarintType), 1))), false},
		{"an unknown sample field", reportField(protowire.AppendBytes(tag(5, protowire.BytesType),
			encoded(t, &nbsv1.Sample{MetricId: "ping"}, protowire.AppendFixed32(tag(7, protowire.Fixed32Type), 1)))), false},
		{"a field of another wire type", reportField(encoded(t, healthy, protowire.AppendFixed64(tag(1, protowire.Fixed64Type), 3))), false},
		{"a metric id not UTF-8", reportField(protowire.AppendBytes(tag(5, protowire.BytesType),
			protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xff, 'a'}))), false},
		{"a truncated varint", reportField(append(tag(1, protowire.VarintType), 0x80)), false},
		{"a truncated sample", reportField(append(tag(5, protowire.BytesType), 10, 1)), false},
		{"a truncated report", append(tag(2, protowire.BytesType), 5, 8), false},
		{"a packed bucket list cut short", reportField(protowire.AppendBytes(tag(6, protowire.BytesType),
			protowire.AppendBytes(tag(2, protowire.BytesType), []byte{0x81}))), false},
		{"field number 0", reportField([]byte{0, 1}), false},
	} {
		for _, pieces := range []int{1, 3} {
			got, want, gotErr, wantErr, fast := decodeBoth(t, tc.b, pieces)
			if fast != tc.fast {
				t.Errorf("%s (%d pieces): the codec's own path %v, want %v", tc.name, pieces, fast, tc.fast)
			}
			if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Errorf("%s (%d pieces): error %v, the runtime's %v", tc.name, pieces, gotErr, wantErr)
			}
			if wantErr == nil && !proto.Equal(got, want) {
				t.Errorf("%s (%d pieces): decoded\n%v\nthe runtime\n%v", tc.name, pieces, got, want)
			}
		}
	}
}

// A sample's metric id is the stream's own string, and a healthy report
// is decoded without an allocation once the codec's scratch has grown.
func TestCodecSharesIDsAndAllocatesNothing(t *testing.T) {
	b := encoded(t, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{Sequence: 1, IntervalMs: 10000,
		Samples:    []*nbsv1.Sample{{MetricId: "tcp_reset", Value: 1}, {MetricId: "ping"}, {MetricId: "latency/rx", Value: 2}},
		Histograms: []*nbsv1.Histogram{{MetricId: "latency/rx", BucketIndex: []uint32{1, 2}, BucketCount: []uint64{3, 4}, Count: 7}}}}})
	metrics := codecMetrics()
	in := &inbound{metrics: metrics}
	c := NewCodec()
	data := mem.BufferSlice{mem.SliceBuffer(b)}
	if err := c.Unmarshal(data, in); err != nil {
		t.Fatal(err)
	}
	own, _ := metrics.get("latency/rx")
	if got := in.GetReport().GetSamples()[2].GetMetricId(); unsafe.StringData(got) != unsafe.StringData(own.path) {
		t.Errorf("sample's metric id %q is a string of its own", got)
	}
	in.done()
	if in.GetMsg() != nil || in.scratch != nil {
		t.Errorf("done left the message held: %v", in.GetMsg())
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.Unmarshal(data, in); err != nil || in.scratch == nil {
			t.Fatalf("decode: %v (own path %v)", err, in.scratch != nil)
		}
		in.done()
	})
	if allocs > 0 {
		t.Errorf("a healthy report decoded with %.1f allocations", allocs)
	}
}

// Whatever the bytes, the codec answers as the protobuf runtime does.
func FuzzCodecAsRuntime(f *testing.F) {
	f.Add(encoded(f, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{Sequence: 3, TimeUnixNano: 9, IntervalMs: 10,
		Samples:    []*nbsv1.Sample{{MetricId: "ping", Value: 1, State: 1, NoValue: true}, {MetricId: "zz", Value: -2}},
		Histograms: []*nbsv1.Histogram{{MetricId: "latency/rx", BucketIndex: []uint32{1, 2}, BucketCount: []uint64{3, 4}, Count: 7, Sum: 2, StartUnixNano: 5}}}}}))
	f.Add(reportField(append(tag(6, protowire.BytesType), 4, 0x10, 1, 0x18, 2)))
	f.Add([]byte{0x12, 0x02, 0x2a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want, gotErr, wantErr, _ := decodeBoth(t, b, 1)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("error %v, the runtime's %v", gotErr, wantErr)
		}
		if wantErr == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded\n%v\nthe runtime\n%v", got, want)
		}
	})
}
