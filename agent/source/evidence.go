package source

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nbs-project/nbs/internal/wire"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// stopWait bounds how long Stop waits for the reader.
const stopWait = 5 * time.Second

// syncWait bounds how long a collection waits for the reader to take in
// what waits in the kernel (Evidence.Sync): what it does not take by then
// goes into the next report. At most the old poll period, so a reader
// starved on a loaded node delays a report no more than it used to.
const syncWait = 100 * time.Millisecond

// MaxEvidencePerInterval is the most evidence events one source may put in
// a report (--evidence.per-interval): a quarter of what the collector takes
// in one report (wire.MaxEvents), so the two evidence sources (tcp_reset,
// drops) and the rest fit in one report, unsplit.
const MaxEvidencePerInterval = wire.MaxEvents / 4

// EvidencePerInterval is the default cap on one source's events in a
// report: all the kernel's rate limit lets through in an interval (its
// bucket of perSec events, plus perSec a second), with 2 s for the
// collections' jitter, at most MaxEvidencePerInterval. With it, the cap
// gives up nothing the rate limit let through.
func EvidencePerInterval(perSec uint32, interval time.Duration) int {
	n := float64(perSec) * (interval.Seconds() + 2)
	return int(min(n, MaxEvidencePerInterval))
}

// The caps under which evidence is given up, as the agent branch names them
// (agent/evidence/dropped/<branch>/<cap>).
const (
	// CapRateLimit: withheld by the kernel's rate limit (--evidence.per-second).
	CapRateLimit = "rate_limit"
	// CapRingFull: lost in the kernel because the ring buffer was full (the
	// agent read too slowly).
	CapRingFull = "ring_full"
	// CapInterval: read, then given up beyond --evidence.per-interval.
	CapInterval = "interval_cap"
	// CapAgentDown: read from the kernel's ring by an agent that was killed
	// before it reported them (counted by the next agent, from the ring's
	// consumer position and what the reports counted; see
	// EvidenceCounts.Consumed).
	CapAgentDown = "agent_down"
)

// EvidenceCaps lists every cap, in the order the agent branch shows them.
var EvidenceCaps = []string{CapRateLimit, CapRingFull, CapInterval}

// EvidenceCounts are a source's evidence events since it started.
type EvidenceCounts struct {
	// Branch is the source's branch ("tcp_reset").
	Branch string
	// Kept events went into reports.
	Kept uint64
	// Dropped are the events given up, by cap (CapRateLimit, ... or a
	// source's own, named as a metric segment: lower case, digits, _).
	Dropped map[string]uint64
	// Consumed is how many events readers had taken from the source's
	// kernel ring when this source started, before its reader ran: with a
	// ring adopted from the previous agent (source.Continuing), every
	// agent's before it (evidence.Ring.Consumed). ConsumedKnown is false
	// for a source without a ring or when it could not be read. With it,
	// the agent counts what the previous agent read but never reported
	// (CapAgentDown).
	Consumed      uint64
	ConsumedKnown bool
}

// EvidenceLosses is implemented by sources with evidence, so the agent
// branch shows what each cap gave up (agent/evidence/dropped).
type EvidenceLosses interface {
	EvidenceCounts() (EvidenceCounts, error)
}

// Evidence gathers a probe's evidence events between collections: a reader
// goroutine runs from StartEvidence until Stop, and keeps at most max
// events an interval (the kernel already rate-limits; this bounds the
// report if the interval is long), counting those it gives up.
type Evidence struct {
	branch string
	log    *slog.Logger
	max    int
	sync   func(context.Context) error

	mu     sync.Mutex
	events []*nbsv1.Event
	kept   uint64 // events taken into readings, since the start
	capped uint64 // events given up beyond max, since the start

	cancel context.CancelFunc
	done   chan struct{}
}

// StartEvidence runs read, a probe's event loop handing each event to add,
// until Stop. The reader keeps ctx's values but not its end: it stops at
// Stop, with the source. sync (the probe's SyncEvents; nil for none)
// returns once read has added every event the kernel wrote before it.
func StartEvidence(ctx context.Context, branch string, log *slog.Logger, max int,
	read func(ctx context.Context, add func(*nbsv1.Event)) error, sync func(context.Context) error) *Evidence {
	e := &Evidence{branch: branch, log: log, max: max, sync: sync, done: make(chan struct{})}
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
		return
	}
	e.capped++
}

// Sync has the reader take in the events the kernel wrote before it (for
// up to syncWait): a collection calls it before it reads its counters, so
// that the report carries the evidence of what it counts (the reader polls
// the kernel only every evidence.PollPeriod).
func (e *Evidence) Sync(ctx context.Context) {
	if e.sync == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	if err := e.sync(ctx); err != nil {
		e.log.Debug(e.branch+": evidence left for the next report", "err", err)
	}
}

// Take returns the events gathered since the previous Take.
func (e *Evidence) Take() []*nbsv1.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	evs := e.events
	e.events = nil
	e.kept += uint64(len(evs))
	return evs
}

// Counts returns the events taken and those given up beyond the cap, since
// the start.
func (e *Evidence) Counts() (kept, capped uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kept, e.capped
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
