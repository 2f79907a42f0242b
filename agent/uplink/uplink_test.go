package uplink

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/spool"
	"github.com/nbs-project/nbs/internal/wire"
	"github.com/nbs-project/nbs/internal/wire/wiretest"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// collector is a stand-in for collector/ingest with its default limits: it
// refuses messages over 4 MiB (ending the stream, as gRPC does), rejects
// reports over the per-report counts or naming a metric the stream has not
// defined, and acks the rest.
type collector struct {
	nbsv1.UnimplementedAgentServiceServer
	mu       sync.Mutex
	stored   map[uint64]*nbsv1.Report
	rejected []string
}

func (c *collector) Connect(s nbsv1.AgentService_ConnectServer) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, d := range m.GetHello().GetMetrics() {
		known[d.GetId()] = true
	}
	last := uint64(0)
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		r := m.GetReport()
		for _, d := range r.GetNewMetrics() {
			known[d.GetId()] = true
		}
		var why string
		switch {
		case r.GetSequence() <= last:
			why = "sequence went backwards"
		case len(r.Samples) > wire.MaxSamples || len(r.Histograms) > wire.MaxHistograms || len(r.Events) > wire.MaxEvents:
			why = "too large"
		}
		for _, id := range wire.MetricIDs(r) {
			if !known[id] {
				why = "unknown metric " + id
			}
		}
		last = max(last, r.GetSequence())
		c.mu.Lock()
		if why != "" {
			c.rejected = append(c.rejected, why)
		} else if c.stored[r.GetSequence()] == nil {
			c.stored[r.GetSequence()] = r
		}
		c.mu.Unlock()
		resp := &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Ack{Ack: &nbsv1.Ack{Sequence: r.GetSequence()}}}
		if why != "" {
			resp = &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Reject{Reject: &nbsv1.Reject{Sequence: r.GetSequence(), Reason: why}}}
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

type agent struct{ hello *nbsv1.Hello }

func (a agent) Hello() *nbsv1.Hello { return a.hello }
func (a agent) Definition(id string) (*nbsv1.MetricDefinition, bool) {
	if strings.HasPrefix(id, wiretest.RootRate+"/reason_0") { // as if retired since: the outbox recorded them
		return nil, false
	}
	return wiretest.Definition(id)
}
func (agent) ApplyConfig(*nbsv1.Config) {}

func startCollector(t *testing.T) (*collector, []grpc.DialOption) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	c := &collector{stored: map[uint64]*nbsv1.Report{}}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(wire.MaxMessageBytes))
	nbsv1.RegisterAgentServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })}
}

func runUplink(t *testing.T, o Outbox, dial []grpc.DialOption) {
	t.Helper()
	hello := &nbsv1.Hello{NodeName: "n1", InstanceId: 1, IntervalMs: 1000}
	for _, root := range []string{wiretest.RootRate, wiretest.RootHistogram} {
		d, _ := wiretest.Definition(root)
		hello.Metrics = append(hello.Metrics, d)
	}
	up := New(Options{Address: "passthrough:///bufnet", DialOpts: dial, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		o, agent{hello}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = up.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func waitEmpty(t *testing.T, o Outbox) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for o.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reports still un-acked after 30s", o.Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The report that would wedge an agent on a collector with default limits
// is split, and every part is stored and acked, described from the spool
// where the agent no longer knows a metric.
func TestOversizedReportIsDeliveredWhole(t *testing.T) {
	c, dial := startCollector(t)
	o, err := spool.Open(spool.Options{Describe: wiretest.Definition})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	r := wiretest.Oversized(time.Now())
	o.Add(proto.Clone(r).(*nbsv1.Report))
	parts := o.Len()
	o.Add(&nbsv1.Report{TimeUnixNano: r.GetTimeUnixNano(), IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: wiretest.RootRate}}})
	runUplink(t, o, dial)
	waitEmpty(t, o)

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.rejected) > 0 {
		t.Fatalf("collector rejected %d parts: %v", len(c.rejected), c.rejected[0])
	}
	if len(c.stored) != parts+1 {
		t.Fatalf("collector stored %d reports, want %d parts and the next report", len(c.stored), parts+1)
	}
	want := map[string]bool{}
	for _, k := range wiretest.Entries(r) {
		want[k] = true
	}
	got := 0
	for seq := uint64(1); seq <= uint64(parts); seq++ {
		for _, k := range wiretest.Entries(c.stored[seq]) {
			if !want[k] {
				t.Fatalf("stored entry %s is not in the report", k)
			}
			got++
		}
	}
	if got != len(want) {
		t.Fatalf("stored %d entries of the report, want %d", got, len(want))
	}
}

// unsplit is an outbox that hands the uplink reports as they were given,
// not cut to the collector's limits: what an older agent's spool, or a bug,
// could hold.
type unsplit struct {
	mu        sync.Mutex
	held      []*nbsv1.Report
	discarded []uint64
}

func (u *unsplit) Take(seq uint64, _ int64) ([]spool.Sending, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []spool.Sending
	for _, r := range u.held {
		if r.GetSequence() > seq {
			b, err := proto.Marshal(r)
			if err != nil {
				panic(err)
			}
			out = append(out, spool.Sending{Report: r, Encoded: b})
		}
	}
	return out, make(chan struct{}) // nothing is added later
}

func (u *unsplit) forget(seq uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.held)
	u.held = slices.DeleteFunc(u.held, func(r *nbsv1.Report) bool { return r.GetSequence() == seq })
	return len(u.held) < n
}

func (u *unsplit) Ack(seq uint64) { u.forget(seq) }

func (u *unsplit) Discard(seq uint64) {
	if u.forget(seq) {
		u.mu.Lock()
		u.discarded = append(u.discarded, seq)
		u.mu.Unlock()
	}
}

func (u *unsplit) Definition(string) (*nbsv1.MetricDefinition, bool) { return nil, false }

func (u *unsplit) Len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.held)
}

// Should a report over the collector's message limit ever reach the uplink,
// it is discarded, and what follows is delivered: the agent never wedges
// on it.
func TestUnsendableReportDoesNotWedge(t *testing.T) {
	c, dial := startCollector(t)
	o := &unsplit{held: []*nbsv1.Report{
		{Sequence: 1, TimeUnixNano: 1, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: wiretest.RootRate}},
			Events: []*nbsv1.Event{{MetricId: wiretest.RootRate, Fields: map[string]string{"huge": strings.Repeat("h", wire.MaxMessageBytes)}}}},
		{Sequence: 2, TimeUnixNano: 2, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: wiretest.RootRate}}},
	}}
	runUplink(t, o, dial)
	waitEmpty(t, o)
	c.mu.Lock()
	defer c.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	if c.stored[2] == nil || c.stored[1] != nil || !slices.Equal(o.discarded, []uint64{1}) {
		t.Fatalf("stored %d reports (seq 2: %v), discarded %v; want report 2 stored and the huge one discarded",
			len(c.stored), c.stored[2] != nil, o.discarded)
	}
}

// What the collector receives is the report the agent added, sent as the
// spool encoded it (roots the Hello announced) or encoded anew with the
// definitions the stream has not had (a child), from memory or read back
// from the spool's files.
func TestReportsArriveAsAdded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		metric  string
		started bool // the uplink runs when the reports are added: they are sent from memory
	}{
		{"announced, from memory", wiretest.RootRate, true},
		{"announced, read back", wiretest.RootRate, false},
		{"with new definitions, from memory", wiretest.RootRate + "/reason_1", true},
		{"with new definitions, read back", wiretest.RootRate + "/reason_1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, dial := startCollector(t)
			o, err := spool.Open(spool.Options{Dir: t.TempDir(), Node: "n1", Describe: wiretest.Definition})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.Close() })
			if tc.started {
				runUplink(t, o, dial)
			}
			var added []*nbsv1.Report
			for i := range 3 {
				r := &nbsv1.Report{TimeUnixNano: int64(i + 1), IntervalMs: 1000,
					Samples: []*nbsv1.Sample{{MetricId: wiretest.RootRate, Value: 1}, {MetricId: tc.metric, Value: float64(i)}},
					Events:  []*nbsv1.Event{{MetricId: tc.metric, TimeUnixNano: int64(i + 1), Fields: map[string]string{"a": "1", "b": "2"}}}}
				o.Add(r)
				added = append(added, proto.Clone(r).(*nbsv1.Report))
			}
			if !tc.started {
				runUplink(t, o, dial)
			}
			waitEmpty(t, o)
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.rejected) > 0 || len(c.stored) != len(added) {
				t.Fatalf("stored %d, rejected %v; want %d stored", len(c.stored), c.rejected, len(added))
			}
			for _, want := range added {
				got := proto.Clone(c.stored[want.GetSequence()]).(*nbsv1.Report)
				got.NewMetrics = nil
				if !proto.Equal(got, want) {
					t.Errorf("stored %v, want %v", got, want)
				}
			}
		})
	}
}
