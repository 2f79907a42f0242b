// Package evidence reads a probe's BPF ring buffer of evidence events: one
// consumer at a time, ended by its context or by the probe closing, with no
// goroutine outliving the read.
package evidence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
)

// Ring is the consumer side of one ring buffer map.
type Ring struct {
	name      string
	m         *ebpf.Map
	errClosed error

	mu     sync.Mutex
	closed bool
	active *ringbuf.Reader
}

// NewRing reads map m; name appears in errors, and errClosed (the probe's
// own "closed" error) is wrapped by a Read after Close.
func NewRing(name string, m *ebpf.Map, errClosed error) *Ring {
	return &Ring{name: name, m: m, errClosed: errClosed}
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
	r.active = rd
	r.mu.Unlock()

	// Closing the reader is the only way to interrupt a blocked Read
	// (SetDeadline waits for the lock a blocked Read holds). Wait for the
	// closer if it started, so no goroutine outlives this call.
	closerDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closerDone)
		_ = rd.Close()
	})
	defer func() {
		if !stop() {
			<-closerDone
		}
		r.mu.Lock()
		r.active = nil
		r.mu.Unlock()
		_ = rd.Close()
	}()

	var rec ringbuf.Record
	for {
		if err := rd.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read %s events: %w", r.name, err)
		}
		fn(rec.RawSample)
	}
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
