package e2e

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/internal/pgcluster"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

func dialCollector(t *testing.T, addr string) nbsv1.AgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return nbsv1.NewAgentServiceClient(conn)
}

func hello(node string) *nbsv1.ConnectRequest {
	return &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: &nbsv1.Hello{
		NodeName: node, InstanceId: 42, IntervalMs: 1000, AgentVersion: "test",
		Metrics: []*nbsv1.MetricDefinition{
			{Id: "tcp_reset", Title: "TCP resets", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE},
			{Id: "tcp_reset/sent", Title: "Sent", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE},
		},
	}}}
}

func report(seq uint64, samples ...*nbsv1.Sample) *nbsv1.ConnectRequest {
	return &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: &nbsv1.Report{
		Sequence: seq, TimeUnixNano: time.Now().UnixNano(), IntervalMs: 1000, Samples: samples}}}
}

func sample(id string, v float64) *nbsv1.Sample {
	return &nbsv1.Sample{MetricId: id, Value: v, State: nbsv1.State_STATE_OK}
}

// Bad reports are rejected one by one with a reason, and the stream goes on:
// a good report after them is still stored and acked.
func TestBadReportsAreRejectedAndTheStreamSurvives(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	client := dialCollector(t, col.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(hello("bad-input")); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetConfig() == nil {
		t.Fatalf("first answer = %v, %v; want the node's Config", m, err)
	}
	future := report(4, sample("tcp_reset", 1))
	future.GetReport().TimeUnixNano = time.Now().Add(48 * time.Hour).UnixNano()
	badHist := report(7, sample("tcp_reset", 1))
	badHist.GetReport().Histograms = []*nbsv1.Histogram{{MetricId: "tcp_reset", BucketIndex: []uint32{1}, BucketCount: []uint64{1}, Count: 1}}
	cases := []struct {
		msg  *nbsv1.ConnectRequest
		want string
	}{
		{report(1, sample("tcp_reset", 1), sample("no/such/metric", 1)), `unknown metric "no/such/metric"`},
		{report(2, sample("tcp_reset", math.NaN())), "not a finite number"},
		{report(3, sample("tcp_reset", -5)), "cannot be negative"},
		{future, "ahead of the collector's clock"},
		{report(5, sample("tcp_reset", 1), sample("tcp_reset", 2)), "appears twice"},
		{report(6, &nbsv1.Sample{MetricId: "tcp_reset", Value: 1, State: nbsv1.State(99)}), "state"},
		{badHist, "not a defined histogram metric"},
		{report(3, sample("tcp_reset", 1)), "sequence went backwards"},
	}
	for _, c := range cases {
		if err := stream.Send(c.msg); err != nil {
			t.Fatalf("send: %v", err)
		}
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %q: stream ended: %v", c.want, err)
		}
		rej := m.GetReject()
		if rej == nil || rej.GetSequence() != c.msg.GetReport().GetSequence() || !strings.Contains(rej.GetReason(), c.want) {
			t.Errorf("got %v; want a Reject of %d mentioning %q", m, c.msg.GetReport().GetSequence(), c.want)
		}
	}
	// A new metric announced in the report itself is fine.
	good := report(10, sample("tcp_reset", 3), sample("tcp_reset/sent/no_socket", 3))
	good.GetReport().NewMetrics = []*nbsv1.MetricDefinition{{Id: "tcp_reset/sent/no_socket", Title: "no socket", Unit: "resets/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}
	if err := stream.Send(good); err != nil {
		t.Fatal(err)
	}
	m, err := recvSkippingConfigs(stream)
	if err != nil || m.GetAck().GetSequence() != 10 || m.GetAck().GetDuplicate() {
		t.Fatalf("good report: got %v, %v; want a fresh Ack of 10", m, err)
	}
	// A resend of the same report is acked as a duplicate, on a new stream.
	cancel()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	s2, err := client.Connect(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	_ = s2.Send(hello("bad-input"))
	_, _ = s2.Recv() // config
	_ = s2.Send(good)
	if m, err := recvSkippingConfigs(s2); err != nil || !m.GetAck().GetDuplicate() {
		t.Fatalf("resend: got %v, %v; want an Ack marked duplicate", m, err)
	}
	if total := storedTotal(t, col, "bad-input", "tcp_reset/sent/no_socket"); total != 3 {
		t.Errorf("stored total %v, want 3 (stored once)", total)
	}
}

// recvSkippingConfigs returns the next message that is not a Config: a
// report that adds a metric gets the node's Config again (it may now carry
// overrides for that metric), before or after its Ack.
func recvSkippingConfigs(s grpc.BidiStreamingClient[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) (*nbsv1.ConnectResponse, error) {
	for {
		m, err := s.Recv()
		if err != nil || m.GetConfig() == nil {
			return m, err
		}
	}
}

// Protocol violations end the stream with a status that says what was wrong.
func TestProtocolViolationsEndTheStreamWithAReason(t *testing.T) {
	t.Parallel()
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	client := dialCollector(t, col.grpcAddr)
	badHello := hello("bad")
	badHello.GetHello().Metrics = append(badHello.GetHello().Metrics, &nbsv1.MetricDefinition{Id: "orphan/child", Title: "x", Kind: nbsv1.MetricKind_METRIC_KIND_RATE})
	noInstance := hello("n")
	noInstance.GetHello().InstanceId = 0
	cases := []struct {
		name string
		msgs []*nbsv1.ConnectRequest
		code codes.Code
		want string
	}{
		{"report before hello", []*nbsv1.ConnectRequest{report(1, sample("tcp_reset", 1))}, codes.InvalidArgument, "first message of a stream must be a Hello"},
		{"bad node name", []*nbsv1.ConnectRequest{hello("no spaces allowed")}, codes.InvalidArgument, "node_name"},
		{"orphan metric", []*nbsv1.ConnectRequest{badHello}, codes.InvalidArgument, "parent orphan is not defined"},
		{"no instance", []*nbsv1.ConnectRequest{noInstance}, codes.InvalidArgument, "instance_id"},
		{"second hello", []*nbsv1.ConnectRequest{hello("twice"), hello("twice")}, codes.InvalidArgument, "second Hello"},
		{"empty message", []*nbsv1.ConnectRequest{hello("empty"), {}}, codes.InvalidArgument, "empty or unknown message"},
		{"oversized", []*nbsv1.ConnectRequest{hello("big"), report(1, sample(strings.Repeat("x", 5<<20), 1))}, codes.ResourceExhausted, "larger than max"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stream, err := client.Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.msgs {
				_ = stream.Send(m)
			}
			for {
				_, err = stream.Recv()
				if err != nil {
					break
				}
			}
			if status.Code(err) != c.code || !strings.Contains(err.Error(), c.want) {
				t.Errorf("stream ended with %v; want %v mentioning %q", err, c.code, c.want)
			}
		})
	}
	// The collector is still fine.
	if code := col.getJSON(t, "/readyz", nil); code != 200 {
		t.Errorf("readyz after bad input: HTTP %d", code)
	}
}
