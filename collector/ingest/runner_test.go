package ingest

import (
	"sync"
	"testing"
	"time"
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
