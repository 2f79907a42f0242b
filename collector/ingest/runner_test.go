package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// A burst of tasks starts a worker each, but no more than maxIdle stay
// waiting for the next once it is over.
func TestRunnerKeepsFewIdleWorkers(t *testing.T) {
	r := newRunner()
	const burst = 10 * maxIdle
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(burst)
	for range burst {
		r.run(taskFunc(func() { started.Done(); <-release }))
	}
	started.Wait() // every task runs at once: a worker each
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for r.idle.Load() != maxIdle && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := r.idle.Load(); n != maxIdle {
		t.Fatalf("%d workers wait after a burst of %d tasks, want %d", n, burst, maxIdle)
	}
	// An idle worker takes the next task.
	done := make(chan struct{})
	r.run(taskFunc(func() { close(done) }))
	<-done
}

type taskFunc func()

func (f taskFunc) run() { f() }

// A report task's room for finding a metric twice is emptied after each
// report: the same large report's metrics, sent again with the next
// sequence on a task reused from the pool, are not taken for duplicates.
func TestReportTaskSeenEmptied(t *testing.T) {
	m := telemetry.New()
	log := slog.New(slog.DiscardHandler)
	w := NewWriter(nil, WriterOptions{QueueSize: 4}, log, m)
	s := NewServer(&countingRegistry{upserts: map[string][]store.Node{}}, w, ServerOptions{}, log, m)
	st := &stream{metrics: metricSet{base: map[string]streamMetric{}}, ctx: context.Background()}
	var samples []*nbsv1.Sample
	for i := range 2 * maxScanned {
		p := fmt.Sprintf("m%d", i)
		st.metrics.base[p] = streamMetric{id: int32(i + 1), kind: store.KindGauge, path: p}
		samples = append(samples, &nbsv1.Sample{MetricId: p, Value: 1, State: nbsv1.State_STATE_OK})
	}
	sv := &served{ctx: context.Background(), st: st}
	task := s.tasks.get(s)
	for seq := range uint64(2) {
		r := &nbsv1.Report{Sequence: seq + 1, TimeUnixNano: time.Now().UnixNano(), IntervalMs: 10000, Samples: samples}
		task.sv, task.m = sv, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}}
		task.run()
		if err := <-task.err; err != nil {
			t.Fatal(err)
		}
		if got := len(w.queue); got != int(seq)+1 {
			t.Fatalf("report %d: %d queued, want %d (answered %v)", seq+1, got, seq+1, st.queue)
		}
		if len(task.seen) != 0 {
			t.Fatalf("report %d: the task's room still holds %d metrics", seq+1, len(task.seen))
		}
	}
}
