package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// agentService answers a stream as each test case says.
type agentService struct {
	nbsv1.UnimplementedAgentServiceServer
	connect func(grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error
}

func (s *agentService) Connect(st grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error {
	return s.connect(st)
}

// recorder is a stream's handler that keeps what it is told.
type recorder struct {
	mu   sync.Mutex
	msgs []*nbsv1.ConnectResponse
	end  chan error
}

func (r *recorder) message(b []byte) error {
	m := &nbsv1.ConnectResponse{}
	if err := decodeAnswer(b, m); err != nil {
		return err
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return nil
}

func (r *recorder) ended(err error) { r.end <- err }

// The simulator's own gRPC client against grpc-go's server: its Hello
// (larger than a frame and than the stream's first window) and a report
// arrive whole, answers arrive whole (one larger than the client's
// window, in many frames), and a stream's end carries the server's status:
// from trailers after answers, from a trailers-only response, or
// Unavailable when the server stops.
func TestH2StreamAgainstGRPCServer(t *testing.T) {
	tree := NewTree()
	c, err := newCodec(tree.Defs)
	if err != nil {
		t.Fatal(err)
	}
	ack := func(seq uint64) *nbsv1.ConnectResponse {
		return &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Ack{Ack: &nbsv1.Ack{Sequence: seq}}}
	}
	var targets []string
	for i := range 20000 {
		targets = append(targets, fmt.Sprintf("10.1.%d.%d", i/256, i%256))
	}
	// The Hello and the report as the collector decodes them.
	receive := func(st grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if h := m.GetHello(); h.GetNodeName() != "sim-1" || len(h.GetMetrics()) != len(tree.Defs) {
			return status.Errorf(codes.InvalidArgument, "hello of %q with %d definitions", h.GetNodeName(), len(h.GetMetrics()))
		}
		if m, err = st.Recv(); err != nil {
			return err
		}
		if r := m.GetReport(); r.GetSequence() != 7 || len(r.GetSamples()) != 1 {
			return status.Errorf(codes.InvalidArgument, "report %v", r)
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		connect  func(grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error
		stop     bool // the server stops once the answers are in
		answers  int
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "answers, then a status in trailers", answers: 2, wantCode: codes.Aborted, wantMsg: "new stream: 100% of the peer set changed, é",
			connect: func(st grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error {
				if err := receive(st); err != nil {
					return err
				}
				// A Config of ~300 KB: more than the client's window.
				if err := st.Send(&nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Config{Config: &nbsv1.Config{Version: 3, PingTargets: targets}}}); err != nil {
					return err
				}
				if err := st.Send(ack(7)); err != nil {
					return err
				}
				return status.Error(codes.Aborted, "new stream: 100% of the peer set changed, é")
			}},
		{name: "trailers only", wantCode: codes.PermissionDenied, wantMsg: "no",
			connect: func(grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error {
				return status.Error(codes.PermissionDenied, "no")
			}},
		{name: "the server stops", stop: true, answers: 1, wantCode: codes.Unavailable,
			connect: func(st grpc.BidiStreamingServer[nbsv1.ConnectRequest, nbsv1.ConnectResponse]) error {
				if err := receive(st); err != nil {
					return err
				}
				if err := st.Send(ack(7)); err != nil {
					return err
				}
				<-st.Context().Done()
				return nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			nbsv1.RegisterAgentServiceServer(srv, &agentService{connect: tc.connect})
			go srv.Serve(l)
			defer srv.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			conn, err := dialH2(ctx, l.Addr().String(), func(*h2conn) {})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.close()
			rec := &recorder{end: make(chan error, 1)}
			st, err := conn.newStream(rec)
			if err != nil {
				t.Fatal(err)
			}
			head, err := c.helloHead(5, &nbsv1.Hello{NodeName: "sim-1"})
			if err != nil {
				t.Fatal(err)
			}
			report, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 5), &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{
				Report: &nbsv1.Report{Sequence: 7, Samples: []*nbsv1.Sample{{MetricId: tree.Roots[0].Id, Value: 1}}}}})
			if err != nil {
				t.Fatal(err)
			}
			// A trailers-only answer may end the stream before the
			// client is done sending: then send says so (io.EOF).
			if err := st.send(head, c.tree); err == nil {
				st.send(report)
			}
			if tc.stop {
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					rec.mu.Lock()
					n := len(rec.msgs)
					rec.mu.Unlock()
					if n == tc.answers {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d answers before the server stops, want %d", n, tc.answers)
					}
				}
				srv.Stop()
			}
			var end error
			select {
			case end = <-rec.end:
			case <-ctx.Done():
				t.Fatal("the stream did not end")
			}
			if s, _ := status.FromError(end); s.Code() != tc.wantCode || tc.wantMsg != "" && s.Message() != tc.wantMsg {
				t.Fatalf("the stream ended with %v, want %v %q", end, tc.wantCode, tc.wantMsg)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.msgs) != tc.answers {
				t.Fatalf("%d answers, want %d: %v", len(rec.msgs), tc.answers, rec.msgs)
			}
			if last := rec.msgs; len(last) > 0 && last[len(last)-1].GetAck().GetSequence() != 7 {
				t.Fatalf("the last answer is %v, want the ack of 7", last[len(last)-1])
			}
			if tc.answers == 2 && rec.msgs[0].Msg != nil {
				t.Fatalf("the Config was decoded (%T), want it left undecoded", rec.msgs[0].Msg)
			}
			// A stream that ended sends nothing more.
			if err := st.send(report); err == nil || !strings.Contains(err.Error(), "EOF") && !errors.Is(err, net.ErrClosed) {
				t.Fatalf("send on an ended stream: %v", err)
			}
		})
	}
}
