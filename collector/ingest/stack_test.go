//go:build !race

// The race detector's instrumentation makes every frame larger: the stack
// an idle stream keeps is a property of the collector as built, without it.

package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A connected node's handler goroutine waits in Recv for the whole life of
// its stream. Registering the node may grow its stack; once the stream is
// idle, collections must shrink it back to 8 KiB, or a node costs 8 KiB
// more: the frames on the way to Recv must stay thin (Connect). Before,
// with Connect's deferred calls in the frame that waits, an idle stream
// kept 16 KiB in both cases. The figure includes the test client's
// goroutine per stream (about 2.7 KiB).
func TestIdleStreamStack(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth Authenticator
	}{
		{"registering within 8 KiB", credentialAuth{}},
		{"registering grows the stack past 16 KiB", deepAuth{}},
	} {
		t.Run(tc.name, func(t *testing.T) { testIdleStreamStack(t, tc.auth) })
	}
}

func testIdleStreamStack(t *testing.T, auth Authenticator) {
	const streams = 200
	limits := DefaultLimits()
	limits.MaxStreamsPerIP = 2 * streams
	_, _, c := startServerWith(t, ServerOptions{Auth: auth, Limits: limits})
	warm, m, err := open(t, c, "stack-warm", cred("cred-stack-warm"), 1, nil)
	if err != nil || m.GetConfig() == nil {
		t.Fatalf("first answer: %v, %v", m, err)
	}
	defer warm.cancel()
	settle := func() uint64 {
		time.Sleep(200 * time.Millisecond)
		var ms runtime.MemStats
		for range 3 {
			runtime.GC() // a collection halves the stacks it scans, where it can
		}
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	before, g0 := settle(), runtime.NumGoroutine()
	var opened []*agentStream
	for i := range streams {
		name := fmt.Sprintf("stack-%03d", i)
		s, m, err := open(t, c, name, cred("cred-"+name), 1, nil)
		if err != nil || m.GetConfig() == nil {
			t.Fatalf("stream %d: %v, %v", i, m, err)
		}
		opened = append(opened, s)
	}
	perStream := float64(settle()-before) / streams / 1024
	t.Logf("%d idle streams: %.1f KiB of stack each, %d goroutines more", streams, perStream, runtime.NumGoroutine()-g0)
	if perStream > 12 { // 18.6 KiB with Connect's defers
		t.Errorf("an idle stream holds %.1f KiB of stack, want its handler's 8 KiB", perStream)
	}
	for _, s := range opened {
		s.cancel()
	}
}

// deepAuth is credentialAuth from 20 KiB down the stack.
type deepAuth struct{}

func (deepAuth) Authenticate(ctx context.Context, h *nbsv1.Hello) (Grant, error) {
	return deepAuthenticate(ctx, h, 40)
}

//go:noinline
func deepAuthenticate(ctx context.Context, h *nbsv1.Hello, depth int) (Grant, error) {
	var frame [512]byte
	if depth > 0 {
		frame[depth%len(frame)] = byte(depth)
		g, err := deepAuthenticate(ctx, h, depth-1)
		runtime.KeepAlive(frame)
		return g, err
	}
	return credentialAuth{}.Authenticate(ctx, h)
}

// storeAll stores every report it is given.
type storeAll struct{}

func (storeAll) WriteReportsInto(_ context.Context, reports []store.Report, out map[store.ReportKey]bool) error {
	clear(out)
	for _, r := range reports {
		out[r.Key()] = true
	}
	return nil
}

// Handling a report takes more stack than an idle stream's handler keeps
// (8 KiB): handled on the handler's goroutine, each report grew its stack
// to 16 KiB, a copy the next collection undid with another (runner).
// Reports are handled on the runner's workers instead: a stream's
// handler stack does not grow with its reports. Measured with the
// collector's GC off, so nothing is shrunk back in between.
func TestReportsLeaveHandlerStacks(t *testing.T) {
	const streams = 200
	limits := DefaultLimits()
	limits.MaxStreamsPerIP = 2 * streams
	log := slog.New(slog.DiscardHandler)
	m := telemetry.New()
	w := NewWriter(storeAll{}, WriterOptions{Workers: 1, QueueSize: 1000, MaxBatch: 500, MaxWait: time.Millisecond}, log, m)
	go w.Run(t.Context())
	srv := NewServer(&countingRegistry{upserts: map[string][]store.Node{}}, w, ServerOptions{Limits: limits}, log, m)
	c := serve(t, srv, InterruptibleStreams())
	report := func(s *agentStream, seq uint64) {
		t.Helper()
		r := &nbsv1.Report{Sequence: seq, TimeUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
			Samples: []*nbsv1.Sample{{MetricId: "tcp_reset", Value: 1, State: nbsv1.State_STATE_OK}}}
		if err := s.Send(&nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("report %d: %v", seq, err)
			}
			if a := m.GetAck(); a != nil && a.GetSequence() == seq {
				return
			}
			if r := m.GetReject(); r != nil {
				t.Fatalf("report %d rejected: %s", seq, r.GetReason())
			}
		}
	}
	var opened []*agentStream
	for i := range streams {
		name := fmt.Sprintf("reports-%03d", i)
		s, m, err := open(t, c, name, nil, 1, nil)
		if err != nil || m.GetConfig() == nil {
			t.Fatalf("stream %d: %v, %v", i, m, err)
		}
		opened = append(opened, s)
	}
	report(opened[0], 1) // a worker's stack grows once
	for range 3 {
		runtime.GC() // the handlers' stacks halved where they can be
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	stackInuse := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	before := stackInuse()
	for _, s := range opened[1:] {
		report(s, 1)
	}
	perStream := (float64(stackInuse()) - float64(before)) / (streams - 1) / 1024
	t.Logf("a report on each of %d streams: %.2f KiB of stack more a stream", streams-1, perStream)
	if perStream > 2 { // 8 KiB when each handler grew
		t.Errorf("handling a report grew the stack by %.2f KiB a stream, want its handler's stack to stay at 8 KiB", perStream)
	}
	for _, s := range opened {
		s.cancel()
	}
}
