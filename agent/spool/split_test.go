package spool

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/internal/schema"
	"github.com/nbs-project/nbs/internal/wire"
	"github.com/nbs-project/nbs/internal/wire/wiretest"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A report over every limit of a default collector is cut into parts
// within them all, even with every definition a stream may attach to a part,
// losing and repeating nothing.
func TestOversizedReportIsSplitWithinTheCollectorsLimits(t *testing.T) {
	cases := []struct {
		name     string
		describe func(string) (*nbsv1.MetricDefinition, bool)
	}{
		// Each part pays for its definitions: bytes bind before most counts.
		{"with definitions", wiretest.Definition},
		// Nothing to attach: every count binds.
		{"without definitions", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, Options{Describe: c.describe})
			r := wiretest.Oversized(time.Now())
			if n := proto.Size(r); n <= wire.MaxMessageBytes {
				t.Fatalf("test report is %d bytes, want it over %d", n, wire.MaxMessageBytes)
			}
			s.Add(proto.Clone(r).(*nbsv1.Report))
			checkParts(t, s, r)
		})
	}
}

// checkParts checks what s holds are parts of r the collector takes.
func checkParts(t *testing.T, s *Spool, r *nbsv1.Report) {
	t.Helper()
	want := map[string]int{}
	for _, k := range wiretest.Entries(r) {
		want[k]++
	}
	parts := all(s)
	if len(parts) < 2 {
		t.Fatalf("%d parts, want a split", len(parts))
	}
	got := map[string]int{}
	for i, p := range parts {
		if p.GetSequence() != uint64(i+1) {
			t.Fatalf("part %d has sequence %d: parts must have consecutive sequences from 1", i, p.GetSequence())
		}
		if len(p.Samples) > wire.MaxSamples || len(p.Histograms) > wire.MaxHistograms || len(p.Events) > wire.MaxEvents {
			t.Errorf("part %d: %d samples, %d histograms, %d events: over the collector's limits", i, len(p.Samples), len(p.Histograms), len(p.Events))
		}
		// Even if a stream must define every metric of the part.
		withDefs := proto.Clone(p).(*nbsv1.Report)
		seen := map[string]bool{}
		for _, id := range wire.MetricIDs(p) {
			for q := id; q != "" && !seen[q]; q = schema.Parent(q) {
				seen[q] = true
				if d, ok := s.Definition(q); ok {
					withDefs.NewMetrics = append(withDefs.NewMetrics, d)
				}
			}
		}
		if n := proto.Size(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: withDefs}}); n > wire.MaxMessageBytes {
			t.Errorf("part %d with its definitions is %d bytes, over %d", i, n, wire.MaxMessageBytes)
		}
		if p.GetTimeUnixNano() != r.GetTimeUnixNano() || p.GetIntervalMs() != r.GetIntervalMs() || !p.GetSnapshot() {
			t.Errorf("part %d lost the report's time, interval or snapshot flag", i)
		}
		for _, k := range wiretest.Entries(p) {
			got[k]++
		}
	}
	if len(got) != len(want) {
		t.Fatalf("parts hold %d distinct entries, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("entry %s appears %d times in the parts, want %d", k, got[k], n)
		}
	}
	if root := parts[0].Samples[0].GetMetricId(); root != wiretest.RootRate {
		t.Errorf("first part starts with %s; roots go first", root)
	}
	if s.Dropped() != 0 {
		t.Errorf("dropped %d: splitting loses nothing", s.Dropped())
	}
}

func TestEntryTooLargeAloneIsDroppedAndCounted(t *testing.T) {
	s := open(t, Options{})
	r := &nbsv1.Report{TimeUnixNano: 1, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "drops"}},
		Events: []*nbsv1.Event{{MetricId: "drops/x", Fields: map[string]string{"huge": strings.Repeat("h", partBytes)}}, {MetricId: "drops/x"}}}
	s.Add(r)
	got, _ := s.After(0, wire.MaxMessageBytes)
	if len(got) != 1 || len(got[0].Samples) != 1 || len(got[0].Events) != 1 || s.Dropped() != 1 {
		t.Fatalf("got %d reports (%v), dropped %d; want the report without its huge event, 1 dropped", len(got), seqs(got), s.Dropped())
	}
}

// Flow edges and address holders past a report's limits go to further
// parts, every one of them once.
func TestFlowsAndAddressHoldersAreSplitWithinLimits(t *testing.T) {
	s := open(t, Options{})
	r := &nbsv1.Report{TimeUnixNano: 1, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "drops"}}}
	for i := range wire.MaxFlowEdges + 7 {
		r.Flows = append(r.Flows, &nbsv1.FlowEdge{PeerAddress: fmt.Sprintf("10.0.%d.%d", i/256, i%256), Opened: 1})
	}
	for i := range wire.MaxAddressHolders + 3 {
		r.AddressHolders = append(r.AddressHolders, &nbsv1.AddressHolder{Address: fmt.Sprintf("10.1.%d.%d", i/256, i%256)})
	}
	s.Add(proto.Clone(r).(*nbsv1.Report))
	parts := all(s)
	flows, holders := map[string]int{}, map[string]int{}
	for i, p := range parts {
		if len(p.Flows) > wire.MaxFlowEdges || len(p.AddressHolders) > wire.MaxAddressHolders {
			t.Errorf("part %d: %d flows, %d holders: over the limits", i, len(p.Flows), len(p.AddressHolders))
		}
		for _, f := range p.Flows {
			flows[f.GetPeerAddress()]++
		}
		for _, h := range p.AddressHolders {
			holders[h.GetAddress()]++
		}
	}
	if len(parts) < 2 || len(flows) != len(r.Flows) || len(holders) != len(r.AddressHolders) || s.Dropped() != 0 {
		t.Fatalf("%d parts with %d distinct flows of %d, %d holders of %d, %d dropped", len(parts), len(flows), len(r.Flows),
			len(holders), len(r.AddressHolders), s.Dropped())
	}
	for k, n := range flows {
		if n != 1 {
			t.Fatalf("flow %s in %d parts", k, n)
		}
	}
}

// The encoding each report is held and sent in (Take's, made with the
// sizes split computed) decodes to the report with its sequence, whole or
// in parts, with events whose fields are maps.
func TestEncodingIsTheReport(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    *nbsv1.Report
	}{
		{"one part", report(1, 20, 100)},
		{"parts", wiretest.Oversized(time.Now())},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t, Options{Dir: t.TempDir(), Node: "n1"})
			s.Add(tt.r)
			held, _ := s.Take(0, 1<<40)
			if len(held) == 0 {
				t.Fatal("nothing held")
			}
			for _, h := range held {
				var got nbsv1.Report
				if err := proto.Unmarshal(h.Encoded, &got); err != nil {
					t.Fatalf("part %d: %v", h.Report.GetSequence(), err)
				}
				if got.GetSequence() == 0 || !proto.Equal(&got, h.Report) {
					t.Errorf("part %d: its encoding decodes to another report (sequence %d)", h.Report.GetSequence(), got.GetSequence())
				}
			}
		})
	}
}
