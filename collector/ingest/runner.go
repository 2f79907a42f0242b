package ingest

import (
	"sync"
	"sync/atomic"
	"time"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// runner runs tasks on goroutines that stay, for runnerIdle after a task,
// to take the next one, rather than on a goroutine a task or on the
// caller's.
//
// Handling a report takes about 9 KiB of stack below gRPC's frames
// (checkReport's frame alone is 3.4 KiB, checkFlows' 1.7 KiB): more than
// the 8 KiB an idle stream's handler goroutine keeps (Connect). Handled on
// the handler's goroutine, each report grew that stack to 16 KiB, a copy,
// and the next collection halved it again, another copy: at 10,000 nodes
// a report every 10 s, a good part of the handlers held 16 KiB at any
// time, and the copies were 7% of the collector's CPU (BENCHMARKS.md,
// "Collector memory per connected node"). A worker's stack grows once and
// stays grown while it has work; a handler's stays at 8 KiB.
//
// Workers have no owner to stop them: each ends runnerIdle after its last
// task, and a task's owner waits for it (handleAside) or tracks it.
type runner struct {
	// work hands a task to an idle worker; unbuffered, so a task never
	// waits for a busy one: without an idle worker, a new one starts.
	work chan task
	// idle counts the workers waiting for a task: a worker done with its
	// task ends at once when maxIdle wait already. A burst of reports (a
	// fleet's intervals fall together, or the writer's queue is full and
	// each waits in Submit) takes a worker each; without the bound, the
	// workers it started would pass the next tasks around and none would
	// ever wait runnerIdle.
	idle atomic.Int32
	// live counts the workers (for tests that count a stream's goroutines).
	live atomic.Int32
	// timers are ended workers' idle timers, for the next to start: a
	// burst of reports starts workers past maxIdle, which end at once,
	// and a timer each was 3% of the collector's allocations at 10,000
	// nodes.
	timers sync.Pool
}

// maxIdle bounds the workers waiting for a task: a few times the cores, as
// a task does not wait for long unless the writer's queue is full.
const maxIdle = 16

// runnerIdle is how long a worker waits for another task before it ends.
const runnerIdle = 5 * time.Second

type task interface{ run() }

func newRunner() *runner { return &runner{work: make(chan task)} }

// run runs t on an idle worker or a new one; it does not wait for t.
func (r *runner) run(t task) {
	select {
	case r.work <- t:
	default:
		r.live.Add(1)
		go r.worker(t)
	}
}

func (r *runner) worker(t task) {
	defer r.live.Add(-1)
	idle, ok := r.timers.Get().(*time.Timer)
	if !ok {
		idle = time.NewTimer(runnerIdle)
	}
	defer func() {
		// Stopped, its channel holds nothing for the next worker's
		// Reset to leave behind (Go 1.23's timers).
		idle.Stop()
		r.timers.Put(idle)
	}()
	for {
		t.run()
		t = nil // the task's owner may reuse it
		if r.idle.Add(1) > maxIdle {
			r.idle.Add(-1)
			return
		}
		idle.Reset(runnerIdle)
		select {
		case t = <-r.work:
			r.idle.Add(-1)
		case <-idle.C:
			r.idle.Add(-1)
			return
		}
	}
}

// reportTask is one message of a stream handled on a worker (handleAside).
type reportTask struct {
	s   *Server
	sv  *served
	m   *nbsv1.ConnectRequest
	err chan error
	// seen is checkReport's room for finding a metric twice in a large
	// report, kept with the task (made a report, it was 3% of the
	// collector's allocations at 10,000 nodes).
	seen map[string]bool
}

func (t *reportTask) run() {
	err := t.s.handle(t.sv, t.m, t.seen)
	if len(t.seen) > maxKeptSamples {
		t.seen = nil // a huge report's room is not kept
	}
	clear(t.seen)
	t.err <- err
}

// reportTasks are reused: a task a message was an allocation a report.
type reportTasks struct{ pool sync.Pool }

func (p *reportTasks) get(s *Server) *reportTask {
	if t, ok := p.pool.Get().(*reportTask); ok {
		return t
	}
	return &reportTask{s: s, err: make(chan error, 1), seen: map[string]bool{}}
}

func (p *reportTasks) put(t *reportTask) {
	t.sv, t.m = nil, nil
	p.pool.Put(t)
}

// handleAside is handle on a worker of the server's runner; the stream's
// handler goroutine waits for it, so the stream's messages are still
// handled one at a time and in order.
func (s *Server) handleAside(sv *served, m *nbsv1.ConnectRequest) error {
	t := s.tasks.get(s)
	t.sv, t.m = sv, m
	s.runner.run(t)
	err := <-t.err
	s.tasks.put(t)
	sv.in.done()
	return err
}
