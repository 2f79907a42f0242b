package evidence

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// Flags of bpf_ringbuf_output.
const (
	rbNoWakeup    = 1
	rbForceWakeup = 2
)

// ringWriter is a ring and a socket filter that writes one 8-byte record
// to it each run, with the flags given.
func ringWriter(t *testing.T, flags int32) (*ebpf.Map, *ebpf.Program) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 4096})
	if err != nil {
		netlab.SkipOrFail(t, "create a ring buffer: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R1, 42),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, 8),
		asm.Mov.Imm(asm.R4, flags),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}})
	if err != nil {
		netlab.SkipOrFail(t, "load a ring writer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return m, p
}

func write(t *testing.T, p *ebpf.Program) {
	t.Helper()
	if _, err := p.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
		t.Fatalf("run the ring writer: %v", err)
	}
}

// TestWaitWokenByKernel checks that a Read waiting between polls in the
// runtime's poller is woken by the kernel's wakeup of the ring's readers
// (which the probes force once a quarter of the ring waits, so a storm
// cannot fill it between polls), and only by that: a record written
// without a wakeup leaves it waiting for its poll.
func TestWaitWokenByKernel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags int32
		woken bool
	}{
		{"wakeup", rbForceWakeup, true},
		{"no wakeup", rbNoWakeup, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, p := ringWriter(t, tc.flags)
			r := NewRing("test", m, errors.New("closed"))
			wake := r.waiter()
			if wake == nil {
				t.Fatal("the ring's descriptor cannot wait in the runtime's poller")
			}
			rd, err := ringbuf.NewReader(m)
			if err != nil {
				t.Fatal(err)
			}
			act := &activeRead{rd: rd, wake: wake}
			defer act.release()
			done := make(chan bool, 1)
			// A poll far away: only a wakeup ends the wait.
			go func() { done <- act.wait(time.Now().Add(time.Hour)) }()
			time.Sleep(50 * time.Millisecond) // let it wait
			write(t, p)
			// How long a wakeup may take to reach a goroutine on a busy
			// machine; a record without one must still wait as long.
			const patience = 2 * time.Second
			select {
			case ok := <-done:
				if !tc.woken {
					t.Fatalf("the wait ended (%v) on a record written without a wakeup", ok)
				}
				if !ok {
					t.Fatal("the wait says the read was closed")
				}
				if rd.AvailableBytes() == 0 {
					t.Fatal("woken with nothing in the ring")
				}
			case <-time.After(patience):
				if tc.woken {
					t.Fatalf("the kernel's wakeup did not end the wait within %s", patience)
				}
				// Closing ends the wait, as Ring.Close does a Read's.
				act.Close()
				if ok := <-done; ok {
					t.Fatal("a closed wait says it was not closed")
				}
			}
		})
	}
}

// TestSyncReadsWhatWaits checks that Sync returns once the Read has handed
// its fn every record written before it, records written without a wakeup
// and a poll far away (a collection does not wait for the poll), and at
// once when no Read runs.
func TestSyncReadsWhatWaits(t *testing.T) {
	m, p := ringWriter(t, rbNoWakeup)
	r := NewRing("test", m, errors.New("closed"))
	r.poll = time.Hour // only a Sync has the ring read
	sync := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return r.Sync(ctx)
	}
	if err := sync(); err != nil {
		t.Fatalf("Sync with no Read running: %v, want nil at once", err)
	}
	var got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Read(ctx, func([]byte) { got.Add(1) }) }()
	for !r.Reading() {
		time.Sleep(time.Millisecond)
	}
	want := int64(0)
	for _, n := range []int{1, 0, 3, 1} {
		for range n {
			write(t, p)
		}
		want += int64(n)
		if err := sync(); err != nil {
			t.Fatalf("Sync after %d records: %v", n, err)
		}
		if g := got.Load(); g != want {
			t.Fatalf("after Sync the Read has handed over %d records, want %d", g, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Read: %v", err)
	}
	if err := sync(); err != nil {
		t.Fatalf("Sync after the Read ended: %v, want nil at once", err)
	}
}
