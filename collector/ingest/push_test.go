package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// versionedConfig numbers every Config it computes; the Configs of nodes
// named big-* are about 200 KB, more than a stream's 64 KiB window.
type versionedConfig struct{ version atomic.Uint64 }

func (c *versionedConfig) ConfigFor(_ context.Context, n store.Node) (*nbsv1.Config, error) {
	cfg := &nbsv1.Config{Version: c.version.Add(1), Thresholds: map[string]*nbsv1.Threshold{}}
	if strings.HasPrefix(n.Name, "big-") {
		for i := range 800 {
			cfg.Thresholds[fmt.Sprintf("m/%04d-%s", i, strings.Repeat("x", 240))] = &nbsv1.Threshold{Warn: 1, Crit: 2}
		}
	}
	return cfg, nil
}

// An agent that stops reading holds up no push: PushConfig returns at once
// however often it is called, a reading agent gets the newest Config, and
// the stuck stream is ended after the send timeout with a status saying so.
// Both with InterruptibleStreams (the handler receives, and ending the
// stream cancels its Send) and without (a goroutine receives aside).
func TestPushNeverWaitsForAStuckAgent(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"interruptible", []grpc.ServerOption{InterruptibleStreams()}}, {"plain", nil}} {
		t.Run(tc.name, func(t *testing.T) { testPushWithStuckAgent(t, tc.opts) })
	}
}

func testPushWithStuckAgent(t *testing.T, opts []grpc.ServerOption) {
	src := &versionedConfig{}
	m := telemetry.New()
	log := slog.New(slog.DiscardHandler)
	srv := NewServer(&countingRegistry{upserts: map[string][]store.Node{}}, NewWriter(nil, WriterOptions{}, log, m),
		ServerOptions{Config: src, SendTimeout: time.Second}, log, m)
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(opts...)
	nbsv1.RegisterAgentServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	dial := func() nbsv1.AgentServiceClient {
		// Fixed windows: no reads, no window updates, so the server's Send
		// blocks once 64 KiB are in flight.
		conn, err := grpc.NewClient("passthrough:///bufconn",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(4<<20)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return nbsv1.NewAgentServiceClient(conn)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stuck, err := dial().Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := &nbsv1.Hello{NodeName: "big-stuck", InstanceId: 1, IntervalMs: 1000,
		Metrics: []*nbsv1.MetricDefinition{{Id: "tcp_reset", Title: "resets", Unit: "1/s", Kind: nbsv1.MetricKind_METRIC_KIND_RATE}}}
	if err := stuck.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Hello{Hello: h}}); err != nil {
		t.Fatal(err)
	}
	reader, first, err := open(t, dial(), "reader", nil, 2, nil)
	if err != nil || first.GetConfig() == nil {
		t.Fatalf("reader's first answer: %v, %v", first, err)
	}
	for !srv.Connected("big-stuck") {
		time.Sleep(10 * time.Millisecond)
	}

	// The old path queued 256 messages per stream and then waited until
	// the stream ended; 300 pushes cost only their Configs' computing.
	start := time.Now()
	for range 300 {
		srv.PushConfig(ctx)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("300 pushes with a stuck agent took %s; a push must not wait for any agent", took)
	}
	last := src.version.Load()
	for {
		cfg, err := nextConfig(reader)
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		// The stuck node's Config is computed too, so the reader's newest
		// is one of the last two.
		if cfg.GetVersion() >= last-1 {
			break
		}
	}

	// The stuck agent's stream ends after the send timeout; reading now,
	// it finds what was in flight and then the status.
	deadline := time.Now().Add(5 * time.Second)
	for srv.Connected("big-stuck") {
		if time.Now().After(deadline) {
			t.Fatal("the stuck stream is still registered 5s after a 1s send timeout")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		_, err := stuck.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "did not read") {
			t.Errorf("stuck stream ended with %v; want DeadlineExceeded saying the agent did not read", err)
		}
		break
	}
	if !srv.Connected("reader") {
		t.Error("the reading agent lost its stream")
	}
}

// The mailbox holds one Config: the newest replaces one not yet sent, and
// it goes before the acks queued with it.
func TestMailboxKeepsTheNewestConfig(t *testing.T) {
	st := &stream{ctx: t.Context(), room: make(chan struct{}, 1)}
	st.trySend(&nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Ack{Ack: &nbsv1.Ack{Sequence: 1}}})
	for v := range uint64(5) {
		st.offerConfig(&nbsv1.Config{Version: v + 1})
	}
	if m := st.next(); m.GetConfig().GetVersion() != 5 {
		t.Errorf("sent %v first, want the newest Config, version 5", m)
	}
	if m := st.next(); m.GetAck().GetSequence() != 1 {
		t.Errorf("sent %v second, want the ack", m)
	}
	if m := st.next(); m != nil {
		t.Errorf("sent %v from an empty stream", m)
	}
}

// A stream's sender runs only while there is something to send: once an
// agent has its Config and acks, its stream holds no sending goroutine.
func TestSenderEndsWhenIdle(t *testing.T) {
	srv, _, client := startServer(t)
	s, m, err := open(t, client, "n1", cred("cred-n1"), 1, nil)
	if err != nil || m.GetConfig() == nil {
		t.Fatalf("%v, %v; want the Config", m, err)
	}
	srv.mu.Lock()
	st := srv.streams["n1"]
	srv.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st.sendMu.Lock()
		sending := st.sending
		st.sendMu.Unlock()
		if !sending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sender still runs 5s after the Config was sent")
		}
	}
	srv.PushConfig(context.Background(), "n1")
	if _, err := nextConfig(s); err != nil {
		t.Fatalf("a push after the sender ended: %v", err)
	}
}
