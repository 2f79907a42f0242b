package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// gatedStore holds every write until its gate has a token, then stores it.
type gatedStore struct{ gate chan struct{} }

func (g gatedStore) WriteReportsInto(ctx context.Context, reports []store.Report, out map[store.ReportKey]bool) error {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	clear(out)
	for _, r := range reports {
		out[r.Key()] = true
	}
	return nil
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

// refusingStore stores every batch but one holding report refuse, which
// the database refuses for good (as a value out of range).
type refusingStore struct{ refuse uint64 }

func (s refusingStore) WriteReportsInto(ctx context.Context, reports []store.Report, out map[store.ReportKey]bool) error {
	clear(out)
	for _, r := range reports {
		if r.Seq == s.refuse {
			return &pgconn.PgError{Code: "22003", Message: "numeric value out of range"}
		}
		out[r.Key()] = true
	}
	return nil
}

// The arrays a report was checked into go back to be filled again only
// once the writer is done with it: its agent told (stored or refused)
// and, if stored, OnStored has seen it, each with its samples as
// checked; then they are emptied (nothing of the report stays reachable).
func TestWriterGivesArraysBackWhenDone(t *testing.T) {
	const refused = 3
	checked := func(seq uint64) (store.Report, *reportArrays) {
		arr := new(reportArrays)
		arr.samples = make([]store.Sample, 0, 4)
		r := store.Report{NodeID: 1, InstanceID: 1, Seq: seq, Samples: arr.samples[:2]}
		r.Samples[0] = store.Sample{Path: "tcp_reset", Value: float64(seq)}
		r.Samples[1] = store.Sample{Path: "tcp_reset/sent", Value: float64(seq)}
		arr.hold(&r)
		return r, arr
	}
	intact := func(r store.Report) bool {
		return len(r.Samples) == 2 && r.Samples[0].Path == "tcp_reset" && r.Samples[1].Path == "tcp_reset/sent" &&
			r.Samples[0].Value == float64(r.Seq) && r.Samples[1].Value == float64(r.Seq)
	}
	problems := make(chan string, 10)
	var w *Writer
	w = NewWriter(refusingStore{refuse: refused}, WriterOptions{Workers: 1, QueueSize: 10, MaxBatch: 10, MaxWait: 50 * time.Millisecond,
		OnStored: func(reports []store.Report) {
			for _, r := range reports {
				if !intact(r) {
					problems <- fmt.Sprintf("OnStored saw report %d's samples as %+v", r.Seq, r.Samples)
				}
			}
		}}, slog.New(slog.DiscardHandler), telemetry.New())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var reports []store.Report
	told := make(chan uint64, 4)
	for seq := uint64(1); seq <= 4; seq++ {
		r, arr := checked(seq)
		reports = append(reports, r)
		err := w.submit(ctx, r, arr, func(_ bool, err error) {
			if !intact(r) {
				problems <- fmt.Sprintf("report %d's agent told (%v) with its samples as %+v", r.Seq, err, r.Samples)
			}
			if (err != nil) != (r.Seq == refused) {
				problems <- fmt.Sprintf("report %d ended with %v", r.Seq, err)
			}
			told <- r.Seq
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	run, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { w.Run(run); close(ran) }()
	for range reports {
		select {
		case <-told:
		case <-ctx.Done():
			t.Fatal("not every report's agent was told")
		}
	}
	// The writer is done with all of them: stopped, what it gave back is
	// seen here.
	stop()
	<-ran
	for _, r := range reports {
		if r.Samples[0] != (store.Sample{}) || r.Samples[1] != (store.Sample{}) {
			t.Errorf("report %d's arrays not given back: %+v", r.Seq, r.Samples)
		}
	}
	close(problems)
	for p := range problems {
		t.Error(p)
	}
}
