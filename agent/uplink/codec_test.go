package uplink

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A report is encoded as gRPC's codec encodes it, into a buffer of about
// its size whatever its size (gRPC's own takes 1 MiB for anything past
// 32 KiB), and decoded back to itself.
func TestExactCodecEncodesIntoTheMessagesSize(t *testing.T) {
	c := newExactCodec()
	for _, tc := range []struct {
		name    string
		samples int
	}{
		{"small", 3},
		{"past 32 KiB", 1500},
		{"past 1 MiB", 40000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &nbsv1.Report{Sequence: 7, TimeUnixNano: 1, IntervalMs: 10000}
			for i := range tc.samples {
				r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: fmt.Sprintf("tcp_reset/sent/%s%d", strings.Repeat("r", 8), i), Value: float64(i)})
			}
			req := &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}}
			want, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			const runs = 8
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range runs {
				data, err := c.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				if len(data) != 1 || string(data[0].ReadOnlyData()) != string(want) {
					t.Fatalf("encoded %d bytes in %d buffers, differing from proto.Marshal's %d", data.Len(), len(data), len(want))
				}
				data.Free()
			}
			runtime.ReadMemStats(&after)
			if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > uint64(len(want)+8<<10) {
				t.Errorf("%d bytes allocated to encode %d", per, len(want))
			}
			data, err := c.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var back nbsv1.ConnectRequest
			if err := c.Unmarshal(data, &back); err != nil || !proto.Equal(&back, req) {
				t.Errorf("decoded %v, %v; want the request back", &back, err)
			}
		})
	}
}

// A report sent as the outbox encoded it, with the definitions of its new
// metrics appended, decodes to the report with those definitions, as the
// collector would have received a copy carrying them; without any, to the
// report itself.
func TestEncodedReportWithDefinitions(t *testing.T) {
	r := &nbsv1.Report{Sequence: 9, TimeUnixNano: 5, IntervalMs: 10000,
		Samples: []*nbsv1.Sample{{MetricId: "drops/x", Value: 2}, {MetricId: "tcp_reset", Value: 1}},
		Events:  []*nbsv1.Event{{MetricId: "drops/x", TimeUnixNano: 4, Fields: map[string]string{"netns": "1", "reason": "x"}}}}
	encoded, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	defs := []*nbsv1.MetricDefinition{{Id: "drops", Title: "Drops"}, {Id: "drops/x", Title: "x", Unit: "packets", DefaultThreshold: &nbsv1.Threshold{}}}
	for _, tc := range []struct {
		name string
		defs []*nbsv1.MetricDefinition
	}{{"none", nil}, {"two", defs}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := newEncodedReport(encoded, tc.defs)
			if err != nil {
				t.Fatal(err)
			}
			data, err := newExactCodec().Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if data.Len() != e.size() {
				t.Fatalf("%d bytes encoded, size says %d", data.Len(), e.size())
			}
			var back nbsv1.ConnectRequest
			if err := newExactCodec().Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			want := proto.Clone(r).(*nbsv1.Report)
			want.NewMetrics = tc.defs
			if !proto.Equal(back.GetReport(), want) {
				t.Errorf("decoded %v, want %v", back.GetReport(), want)
			}
		})
	}
}
