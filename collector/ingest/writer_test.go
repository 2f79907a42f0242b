package ingest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// gatedStore holds every write until its gate has a token, then stores it.
type gatedStore struct{ gate chan struct{} }

func (g gatedStore) WriteReports(ctx context.Context, reports []store.Report) (map[store.ReportKey]bool, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := map[store.ReportKey]bool{}
	for _, r := range reports {
		out[r.Key()] = true
	}
	return out, nil
}

// The writer's queue is bounded in bytes as well as in reports: with room
// for one report's bytes, a second waits in Submit (its stream stops
// reading) until the first is stored; a report larger than the whole
// budget still goes through, alone.
func TestWriterQueueIsBoundedInBytes(t *testing.T) {
	report := func(seq uint64, samples int) store.Report {
		r := store.Report{NodeID: 1, InstanceID: 1, Seq: seq}
		for range samples {
			r.Samples = append(r.Samples, store.Sample{Path: "tcp_reset/sent/no_socket"})
		}
		return r
	}
	one := new(report(1, 100)).Bytes()
	g := gatedStore{gate: make(chan struct{})}
	log := slog.New(slog.DiscardHandler)
	w := NewWriter(g, WriterOptions{Workers: 1, QueueSize: 100, QueueBytes: one + one/2, MaxBatch: 1, MaxWait: time.Millisecond}, log, telemetry.New())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go w.Run(ctx)

	stored := make(chan uint64, 3)
	done := func(seq uint64) Stored {
		return func(bool, error) { stored <- seq }
	}
	if err := w.Submit(ctx, report(1, 100), done(1)); err != nil {
		t.Fatal(err)
	}
	submitted := make(chan error, 1)
	go func() { submitted <- w.Submit(ctx, report(2, 100), done(2)) }()
	select {
	case err := <-submitted:
		t.Fatalf("a second report was queued (%v) beyond the byte budget", err)
	case <-time.After(200 * time.Millisecond):
	}
	g.gate <- struct{}{}
	if seq := <-stored; seq != 1 {
		t.Fatalf("stored report %d first, want 1", seq)
	}
	if err := <-submitted; err != nil {
		t.Fatalf("the second report once the first was stored: %v", err)
	}
	g.gate <- struct{}{}
	<-stored
	if err := w.Submit(ctx, report(3, 1000), done(3)); err != nil {
		t.Fatalf("a report larger than the budget: %v", err)
	}
	g.gate <- struct{}{}
	if seq := <-stored; seq != 3 {
		t.Fatalf("stored report %d, want 3", seq)
	}
}
