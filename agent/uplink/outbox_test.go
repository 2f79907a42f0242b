package uplink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/spool"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func seqs(rs []*nbsv1.Report) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.GetSequence()
	}
	return out
}

func memOutbox(t *testing.T, opts spool.Options, def func(string) (*nbsv1.MetricDefinition, bool)) *Outbox {
	t.Helper()
	sp, err := spool.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	return NewOutbox(sp, def, nil)
}

func TestOutboxKeepsUnackedInOrderAndDropsOldestWhenFull(t *testing.T) {
	o := memOutbox(t, spool.Options{MaxReports: 3}, nil)
	_, changed := o.After(0)
	for s := uint64(1); s <= 4; s++ {
		// The outbox numbers reports itself: 1, 2, 3, 4.
		o.Add(&nbsv1.Report{Samples: []*nbsv1.Sample{{MetricId: "tcp_reset", Value: float64(s)}}})
	}
	select {
	case <-changed:
	default:
		t.Fatal("Add did not signal a waiting sender")
	}
	if got, _ := o.After(0); len(got) != 3 || got[0].GetSequence() != 2 {
		t.Fatalf("after 4 adds into 3 slots: %v, want [2 3 4]", seqs(got))
	}
	if o.Dropped() != 1 { // the one sample of report 1
		t.Errorf("dropped %d, want 1", o.Dropped())
	}
	o.Ack(3)
	o.Ack(99) // unknown: ignored
	if got, _ := o.After(0); len(got) != 2 || got[0].GetSequence() != 2 || got[1].GetSequence() != 4 {
		t.Fatalf("after ack 3: %v, want [2 4]", seqs(got))
	}
	if got, _ := o.After(2); len(got) != 1 || got[0].GetSequence() != 4 {
		t.Fatalf("After(2) = %v, want [4]", seqs(got))
	}
}

// oversized is a report no collector with default limits would take as one
// message: over every per-report count, and over 4 MiB.
func oversized() *nbsv1.Report {
	r := &nbsv1.Report{TimeUnixNano: time.Now().UnixNano(), IntervalMs: 1000, Snapshot: true}
	for i := range MaxSamples + 5000 {
		r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: fmt.Sprintf("drops/reason_%05d", i), Value: 1, State: nbsv1.State_STATE_OK})
	}
	r.Samples = append(r.Samples, &nbsv1.Sample{MetricId: "drops", Value: 1, State: nbsv1.State_STATE_WARN})
	for i := range MaxHistograms + 100 {
		r.Histograms = append(r.Histograms, &nbsv1.Histogram{MetricId: fmt.Sprintf("latency/h_%04d", i),
			BucketIndex: []uint32{1, 2}, BucketCount: []uint64{1, 2}, Count: 3, Sum: 1})
	}
	for i := range MaxEvents + 200 {
		r.Events = append(r.Events, &nbsv1.Event{MetricId: fmt.Sprintf("drops/reason_%05d", i%100), TimeUnixNano: r.TimeUnixNano,
			Fields: map[string]string{"i": fmt.Sprint(i), "detail": strings.Repeat("d", 3000)}})
	}
	return r
}

// definitions answers for every metric, with a sizeable description, as
// an agent's catalogue does.
func definitions(id string) (*nbsv1.MetricDefinition, bool) {
	return &nbsv1.MetricDefinition{Id: id, Title: id, Unit: "x/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE,
		Description: strings.Repeat("what it means and what to look at next. ", 8)}, true
}

func entryKeys(r *nbsv1.Report) []string {
	var out []string
	for _, s := range r.GetSamples() {
		out = append(out, "s:"+s.GetMetricId())
	}
	for _, h := range r.GetHistograms() {
		out = append(out, "h:"+h.GetMetricId())
	}
	for _, e := range r.GetEvents() {
		out = append(out, "e:"+e.GetFields()["i"]+":"+e.GetMetricId())
	}
	return out
}

func TestOversizedReportIsSplitWithinTheCollectorsLimits(t *testing.T) {
	o := memOutbox(t, spool.Options{}, definitions)
	r := oversized()
	if n := proto.Size(r); n <= MaxMessageBytes {
		t.Fatalf("test report is %d bytes, want it over %d", n, MaxMessageBytes)
	}
	want := map[string]int{}
	for _, k := range entryKeys(r) {
		want[k]++
	}
	o.Add(proto.Clone(r).(*nbsv1.Report))

	var parts []*nbsv1.Report
	for after := uint64(0); ; {
		got, _ := o.After(after)
		if len(got) == 0 {
			break
		}
		parts = append(parts, got...)
		after = got[len(got)-1].GetSequence()
	}
	if len(parts) < 2 {
		t.Fatalf("%d parts, want a split", len(parts))
	}
	got := map[string]int{}
	for i, p := range parts {
		if p.GetSequence() != uint64(i+1) {
			t.Fatalf("part %d has sequence %d: parts must have consecutive sequences from 1", i, p.GetSequence())
		}
		if len(p.Samples) > MaxSamples || len(p.Histograms) > MaxHistograms || len(p.Events) > MaxEvents {
			t.Errorf("part %d: %d samples, %d histograms, %d events: over the collector's limits", i, len(p.Samples), len(p.Histograms), len(p.Events))
		}
		// Even if a stream must define every metric of the part.
		withDefs := proto.Clone(p).(*nbsv1.Report)
		seen := map[string]bool{}
		for _, k := range entryKeys(p) {
			id := k[strings.LastIndex(k, ":")+1:]
			for q := id; q != "" && !seen[q]; q = parent(q) {
				seen[q] = true
				d, _ := definitions(q)
				withDefs.NewMetrics = append(withDefs.NewMetrics, d)
			}
		}
		if n := proto.Size(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: withDefs}}); n > MaxMessageBytes {
			t.Errorf("part %d with its definitions is %d bytes, over %d", i, n, MaxMessageBytes)
		}
		if p.GetTimeUnixNano() != r.GetTimeUnixNano() || p.GetIntervalMs() != r.GetIntervalMs() || !p.GetSnapshot() {
			t.Errorf("part %d lost the report's time, interval or snapshot flag", i)
		}
		for _, k := range entryKeys(p) {
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
	if parts[0].Samples[0].GetMetricId() != "drops" {
		t.Errorf("first part starts with %s; roots go first", parts[0].Samples[0].GetMetricId())
	}
	if o.Dropped() != 0 {
		t.Errorf("dropped %d: splitting loses nothing", o.Dropped())
	}
}

func TestEntryTooLargeAloneIsDroppedAndCounted(t *testing.T) {
	o := memOutbox(t, spool.Options{}, nil)
	r := &nbsv1.Report{TimeUnixNano: 1, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "drops"}},
		Events: []*nbsv1.Event{{MetricId: "drops/x", Fields: map[string]string{"huge": strings.Repeat("h", partBytes)}}, {MetricId: "drops/x"}}}
	o.Add(r)
	got, _ := o.After(0)
	if len(got) != 1 || len(got[0].Samples) != 1 || len(got[0].Events) != 1 || o.Dropped() != 1 {
		t.Fatalf("got %d reports (%v), dropped %d; want the report without its huge event, 1 dropped", len(got), seqs(got), o.Dropped())
	}
}

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
		case len(r.Samples) > MaxSamples || len(r.Histograms) > MaxHistograms || len(r.Events) > MaxEvents:
			why = "too large"
		}
		for _, k := range entryKeys(r) {
			if id := k[strings.LastIndex(k, ":")+1:]; !known[id] {
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
	if strings.HasPrefix(id, "drops/reason_0") { // as if retired since: the outbox recorded them
		return nil, false
	}
	return definitions(id)
}
func (agent) ApplyConfig(*nbsv1.Config) {}

func startCollector(t *testing.T) (*collector, []grpc.DialOption) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	c := &collector{stored: map[uint64]*nbsv1.Report{}}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageBytes))
	nbsv1.RegisterAgentServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })}
}

func runUplink(t *testing.T, o *Outbox, dial []grpc.DialOption) {
	t.Helper()
	hello := &nbsv1.Hello{NodeName: "n1", InstanceId: o.Instance(), IntervalMs: 1000}
	for _, root := range []string{"drops", "latency"} {
		d, _ := definitions(root)
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

func waitEmpty(t *testing.T, o *Outbox) {
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
// is split, and every part is stored and acked.
func TestOversizedReportIsDeliveredWhole(t *testing.T) {
	c, dial := startCollector(t)
	o := memOutbox(t, spool.Options{}, definitions)
	r := oversized()
	o.Add(proto.Clone(r).(*nbsv1.Report))
	parts := o.Len()
	o.Add(&nbsv1.Report{TimeUnixNano: r.GetTimeUnixNano(), IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "drops"}}})
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
	for _, k := range entryKeys(r) {
		want[k] = true
	}
	got := 0
	for seq := uint64(1); seq <= uint64(parts); seq++ {
		for _, k := range entryKeys(c.stored[seq]) {
			if !want[k] {
				t.Fatalf("stored entry %s is not in the report", k)
			}
			got++
		}
	}
	if got != len(entryKeys(r)) {
		t.Fatalf("stored %d entries of the report, want %d", got, len(entryKeys(r)))
	}
}

// Should a report over the collector's message limit ever reach the uplink
// (an older spool, a bug), it is dropped and counted, and what follows is
// delivered: the agent never wedges on it.
func TestUnsendableReportDoesNotWedge(t *testing.T) {
	c, dial := startCollector(t)
	sp, err := spool.Open(spool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := NewOutbox(sp, definitions, nil)
	huge := &nbsv1.Report{TimeUnixNano: 1, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "drops"}},
		Events: []*nbsv1.Event{{MetricId: "drops", Fields: map[string]string{"huge": strings.Repeat("h", MaxMessageBytes)}}}}
	sp.Append(huge) // bypassing the outbox's split
	o.Add(&nbsv1.Report{TimeUnixNano: 2, IntervalMs: 1000, Samples: []*nbsv1.Sample{{MetricId: "drops"}}})
	runUplink(t, o, dial)
	waitEmpty(t, o)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stored[2] == nil || c.stored[1] != nil || o.Dropped() != 2 {
		t.Fatalf("stored %d reports (seq 2: %v), dropped %d; want report 2 stored and the huge one's 2 entries dropped",
			len(c.stored), c.stored[2] != nil, o.Dropped())
	}
}
