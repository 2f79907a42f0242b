package source

import (
	"context"
	"log/slog"
	"sync"
	"time"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// stopWait bounds how long Stop waits for the reader.
const stopWait = 5 * time.Second

// Evidence gathers a probe's evidence events between collections: a reader
// goroutine runs from StartEvidence until Stop, and keeps at most max
// events an interval (the kernel already rate-limits; this bounds the
// report if the interval is long).
type Evidence struct {
	branch string
	log    *slog.Logger
	max    int

	mu     sync.Mutex
	events []*nbsv1.Event

	cancel context.CancelFunc
	done   chan struct{}
}

// StartEvidence runs read, a probe's event loop handing each event to add,
// until Stop. The reader keeps ctx's values but not its end: it stops at
// Stop, with the source.
func StartEvidence(ctx context.Context, branch string, log *slog.Logger, max int,
	read func(ctx context.Context, add func(*nbsv1.Event)) error) *Evidence {
	e := &Evidence{branch: branch, log: log, max: max, done: make(chan struct{})}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	go func() {
		defer close(e.done)
		if err := read(rctx, e.add); err != nil {
			e.log.Error(e.branch+": evidence reader stopped", "err", err)
		}
	}()
	return e
}

func (e *Evidence) add(ev *nbsv1.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.events) < e.max {
		e.events = append(e.events, ev)
	}
}

// Take returns the events gathered since the previous Take.
func (e *Evidence) Take() []*nbsv1.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	evs := e.events
	e.events = nil
	return evs
}

// Stop ends the reader and waits for it, for a while. Close the probe
// first: that is what wakes a reader blocked on its ring buffer.
func (e *Evidence) Stop() {
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(stopWait):
		e.log.Warn(e.branch + ": evidence reader did not stop within 5s")
	}
}
