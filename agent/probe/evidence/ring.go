// Package evidence reads a probe's BPF ring buffer of evidence events: one
// consumer at a time, ended by its context or by the probe closing, with no
// goroutine outliving the read.
//
// The BPF programs submit evidence without waking the reader
// (BPF_RB_NO_WAKEUP, bpf/include/nbs.h nbs_evidence_submit_flags): a wakeup
// per event cost the packet 18-37 µs on a VM. The reader polls the ring every
// PollPeriod instead, and each collection has it read what waits first
// (Ring.Sync), so a report carries the evidence of every event the kernel
// wrote before its collection however long the period is. The rate limit
// bounds what can wait: while a quarter of the ring holds 4 s of
// the limit and its burst (the default 20/s on every probe), the programs
// never look at the ring's fill; above that rate they wake the reader at once
// when a quarter of the ring is waiting, so a storm cannot fill the ring
// between polls (nbs_evidence_submit_flags in bpf/include/nbs.h).
package evidence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// PollPeriod is how often Read looks at the ring for records the kernel did
// neither wake it for nor were read by a Sync: it only keeps the ring from
// filling between collections (intervals may be an hour). Below the rate at
// which the programs wake the reader, a quarter of the ring holds the burst
// and 3 s of the rate limit (bpf/include/nbs.h), the ring 16 s of it: a
// poll every 4 s finds at most the burst and 4 s waiting, half the ring
// with 3 s of a late poll. It was 100 ms, then 1 s: each poll wakes the
// process (a timer, a thread, the runtime's monitor), and those wakeups
// were most of what an idle agent cost (at 1 s: 20 context switches a
// second, bench/agentcost BenchmarkAgentIdle); a report does not wait for
// a poll since the collections Sync.
const PollPeriod = 4 * time.Second

// Ring is the consumer side of one ring buffer map.
type Ring struct {
	name      string
	m         *ebpf.Map
	errClosed error
	poll      time.Duration // PollPeriod; tests set it

	mu     sync.Mutex
	closed bool
	active *activeRead
}

// NewRing reads map m; name appears in errors, and errClosed (the probe's
// own "closed" error) is wrapped by a Read after Close.
func NewRing(name string, m *ebpf.Map, errClosed error) *Ring {
	return &Ring{name: name, m: m, errClosed: errClosed, poll: PollPeriod}
}

// GuardedRing reads map m of the probe object g, whose Close closes the
// ring first: that ends a running Read before g frees m.
func GuardedRing(g *bpfload.Guarded, name string, m *ebpf.Map) *Ring {
	r := NewRing(name, m, bpfload.ErrClosed)
	g.BeforeClose = r.Close
	return r
}

// Read calls fn with each record until ctx is done or Close is called, then
// returns nil. fn runs on the calling goroutine and should be quick: while it
// blocks, the kernel drops events when the ring is full.
func (r *Ring) Read(ctx context.Context, fn func(raw []byte)) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("read %s events: %w", r.name, r.errClosed)
	}
	if r.active != nil {
		r.mu.Unlock()
		return fmt.Errorf("read %s events: already being read", r.name)
	}
	rd, err := ringbuf.NewReader(r.m)
	if err != nil {
		r.mu.Unlock()
		return fmt.Errorf("open %s event ring: %w", r.name, err)
	}
	act := &activeRead{rd: rd, wake: r.waiter()}
	r.active = act
	r.mu.Unlock()

	// Closing the reader is the only way to interrupt a blocked Read
	// (SetDeadline waits for the lock a blocked Read holds). Wait for the
	// closer if it started, so no goroutine outlives this call.
	closerDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closerDone)
		_ = act.Close()
	})
	defer func() {
		if !stop() {
			<-closerDone
		}
		r.mu.Lock()
		r.active = nil
		r.mu.Unlock()
		act.end() // nothing more will be read: no Sync waits on it
		_ = act.release()
	}()

	var rec ringbuf.Record
	for {
		if act.wake != nil {
			if act.closed.Load() {
				return nil
			}
			// The ring is read only when it holds something: an empty
			// poll makes no system call (each would wake the runtime's
			// monitor thread, see activeRead).
			if rd.AvailableBytes() == 0 {
				// Every record written before a waiting Sync asked has
				// been handed to fn.
				act.synced()
				if !act.wait(nextPoll(r.poll)) {
					return nil // closed
				}
				continue
			}
			// Never block in the reader: a deadline now reads what the
			// ring holds and returns.
			rd.SetDeadline(time.Now())
		} else {
			rd.SetDeadline(nextPoll(r.poll))
		}
		err := rd.ReadInto(&rec)
		switch {
		case err == nil:
			fn(rec.RawSample)
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The records written without a wakeup have been read (a
			// deadline returns only once the ring is empty): poll again.
			act.synced()
		case errors.Is(err, os.ErrClosed):
			return nil
		default:
			return fmt.Errorf("read %s events: %w", r.name, err)
		}
	}
}

// nextPoll is when the next poll of every ring is due: polls fall on
// multiples of the period, so the agent's rings are polled together, in
// one wakeup of the process rather than one each.
func nextPoll(period time.Duration) time.Time { return time.Now().Truncate(period).Add(period) }

// Sync returns once the running Read has handed its fn every record the
// ring held when Sync was called: a collection calls it before it reads
// the probe's counters, so the report carries the evidence of what it
// counts without waiting for a poll. It returns at once when no Read runs
// or the Read cannot be woken (it waits in the reader: the records come at
// its next poll), and with ctx's error when ctx ends first.
func (r *Ring) Sync(ctx context.Context) error {
	r.mu.Lock()
	act := r.active
	r.mu.Unlock()
	if act == nil || act.wake == nil {
		return nil
	}
	done := act.askSync()
	// After asking: a wait that starts meanwhile sees the request
	// (activeRead.wait); one under way is ended by the deadline.
	_ = act.wake.SetReadDeadline(time.Now())
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("read %s events waiting in the ring: %w", r.name, ctx.Err())
	}
}

// activeRead is a running Read: the ring's reader and, where it could be
// made, a descriptor of the ring in the Go runtime's poller that the Read
// waits on between polls.
//
// Why not wait in the reader (epoll_wait with a timeout)? A goroutine
// blocked in a system call holds its OS thread and, until the runtime takes
// it back, a P: every poll of every ring woke the runtime's monitor thread
// (sysmon) into a run of 20 µs sleeps, which made the ring polls most of
// what an idle agent cost: 0.7% of a core of its 0.9 with three rings
// (bench/agentcost BenchmarkAgentIdle). In the runtime's poller a waiting
// ring costs a timer, all of them one wakeup per PollPeriod, and an empty
// ring no system call.
type activeRead struct {
	rd     *ringbuf.Reader
	wake   *os.File // nil: Read waits in rd
	closed atomic.Bool

	syncMu sync.Mutex
	syncs  []chan struct{} // of Syncs waiting for the ring to be read empty
	ended  bool            // the Read returned: a Sync has nothing to wait for
}

// askSync returns a channel closed once the Read has found the ring empty
// after this call (or has ended).
func (a *activeRead) askSync() <-chan struct{} {
	done := make(chan struct{})
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	if a.ended {
		close(done)
		return done
	}
	a.syncs = append(a.syncs, done)
	return done
}

// end releases every Sync, now and from now on: the Read returns.
func (a *activeRead) end() {
	a.syncMu.Lock()
	a.ended = true
	a.syncMu.Unlock()
	a.synced()
}

// synced releases the Syncs asked so far: the ring was read empty after
// they asked.
func (a *activeRead) synced() {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	for _, done := range a.syncs {
		close(done)
	}
	a.syncs = nil
}

// syncWanted says whether a Sync waits.
func (a *activeRead) syncWanted() bool {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	return len(a.syncs) > 0
}

// waiter returns a non-blocking duplicate of the ring's descriptor in the
// runtime's poller (readable when the kernel wakes the ring's readers, at a
// quarter full), or nil where that cannot be made.
func (r *Ring) waiter() *os.File {
	fd, err := unix.FcntlInt(uintptr(r.m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	// O_NONBLOCK is the open file's: it affects the map's descriptor too,
	// which only bpf(2) and mmap use.
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), r.name+" ring")
	if f.SetReadDeadline(time.Time{}) != nil { // not pollable
		_ = f.Close()
		return nil
	}
	return f
}

// wait returns at until, or earlier when the kernel wakes the ring's
// readers; false once the read is closed.
func (a *activeRead) wait(until time.Time) bool {
	if err := a.wake.SetReadDeadline(until); err != nil {
		return false
	}
	// A Sync that asked after the ring was last found empty may have set
	// its deadline before ours: read again now rather than at the poll.
	if a.syncWanted() {
		return true
	}
	rc, err := a.wake.SyscallConn()
	if err != nil {
		return false
	}
	// Nothing is read from the descriptor itself: the first call's false
	// has the runtime wait for it to become readable (or the deadline),
	// the second's true ends the wait.
	waited := false
	err = rc.Read(func(uintptr) bool {
		defer func() { waited = true }()
		return waited
	})
	return err == nil || errors.Is(err, os.ErrDeadlineExceeded)
}

// Close ends the read. With a wait, only the Read's goroutine closes the
// reader (release), so it never looks at a ring the reader has let go.
func (a *activeRead) Close() error {
	if a.wake == nil {
		return a.rd.Close()
	}
	a.closed.Store(true)
	return a.wake.Close()
}

// release frees what the Read held, on its goroutine.
func (a *activeRead) release() error {
	if a.wake != nil {
		_ = a.wake.Close() // closed already when Close ended the read
	}
	return a.rd.Close()
}

// ReadDecoded is Read for a probe's events: decode turns each record into
// an event for fn, and records it cannot decode are logged and skipped.
func ReadDecoded[E any](ctx context.Context, r *Ring, log *slog.Logger, decode func(raw []byte) (E, error), fn func(E)) error {
	return r.Read(ctx, func(raw []byte) {
		ev, err := decode(raw)
		if err != nil {
			log.Warn("skip malformed "+r.name+" event", "err", err)
			return
		}
		fn(ev)
	})
}

// Close ends a running Read and refuses new ones. Call it before closing
// the map.
func (r *Ring) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.active == nil {
		return nil
	}
	if err := r.active.Close(); err != nil {
		return fmt.Errorf("close %s event reader: %w", r.name, err)
	}
	return nil
}

// Reading reports whether a Read is running (for tests that must wait for it).
func (r *Ring) Reading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active != nil
}

// Consumed returns how many records readers have taken from the ring since
// the kernel created it: its consumer position, which lives in the map (so
// a pinned ring keeps it across agents), over the size of one record of
// eventSize bytes (an 8-byte header, rounded up to 8). It holds for rings
// whose records are all eventSize bytes and never discarded, as the
// probes' evidence rings are. The agent uses it to count the evidence a
// killed agent had read but not reported.
func (r *Ring) Consumed(eventSize int) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, fmt.Errorf("read %s ring position: %w", r.name, r.errClosed)
	}
	// The consumer page is the map's first page; a read-only mapping of
	// it is allowed (only the producer pages must not be writable).
	page, err := unix.Mmap(r.m.FD(), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("map %s ring's consumer page: %w", r.name, err)
	}
	defer func() { _ = unix.Munmap(page) }()
	pos := atomic.LoadUint64((*uint64)(unsafe.Pointer(&page[0])))
	return pos / RecordSize(eventSize), nil
}

// RecordSize is the bytes one record of eventSize bytes takes in a ring
// buffer: the kernel's 8-byte header and the event, rounded up to 8.
func RecordSize(eventSize int) uint64 {
	return (uint64(eventSize) + 8 + 7) &^ 7
}
