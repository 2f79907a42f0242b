package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/source"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// flowSource hands fixed flow-map data, as agent/source/flows does.
type flowSource struct {
	fakeSource
	r source.Reading
}

func (f *flowSource) Collect(context.Context) (source.Reading, error) { return f.r, nil }

// A source's flow edges and address holders reach the report as they are.
func TestFlowsAndAddressHoldersGoIntoTheReport(t *testing.T) {
	a := New(Config{NodeName: "n1", BufferReports: 10}, slog.New(slog.DiscardHandler))
	s, _ := a.openSpool()
	defer s.Close()
	a.outbox = s
	edge := &nbsv1.FlowEdge{Local: &nbsv1.FlowOwner{Id: "netns:blue", Kind: "netns", Name: "blue"}, Role: nbsv1.FlowRole_FLOW_ROLE_CLIENT,
		LocalAddress: "10.0.0.1", PeerAddress: "10.0.0.2", PeerPort: 80, Opened: 3}
	holder := &nbsv1.AddressHolder{Address: "10.0.0.1", Owner: edge.Local}
	a.sources = []source.Source{&flowSource{fakeSource: fakeSource{name: "flows"},
		r: source.Reading{Flows: []*nbsv1.FlowEdge{edge}, AddressHolders: []*nbsv1.AddressHolder{holder}}}}
	led := newLedger()
	car := newCarry("", "n1", origin{}, slog.New(slog.DiscardHandler))
	a.collect(context.Background(), led)
	a.report(led, car, time.Now(), time.Second, a.collect(context.Background(), led), false)
	got, _ := s.After(0, 1<<20)
	if len(got) != 1 || len(got[0].GetFlows()) != 1 || len(got[0].GetAddressHolders()) != 1 ||
		got[0].GetFlows()[0].GetOpened() != 3 || got[0].GetAddressHolders()[0].GetOwner().GetId() != "netns:blue" {
		t.Fatalf("reports %v; want one with the edge and the holder", got)
	}
}
