package ingest

import (
	"context"
	"testing"
	"time"
	"unsafe"

	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// One stream is kept per connected node: it stays in the 512-byte size
// class.
func TestStreamSize(t *testing.T) {
	if size := unsafe.Sizeof(stream{}); size > 512 {
		t.Errorf("a stream takes %d bytes, want at most 512 (the next size class is 576)", size)
	}
}

// The channels a stream makes only when something waits on them: a send
// that finds the queue full waits for room, and a close waits for a
// sender whose Send is stuck.
func TestStreamWaitsWithoutStandingChannels(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	release := make(chan struct{})
	sent := make(chan *nbsv1.ConnectResponse, maxQueued+2)
	st := &stream{ctx: ctx, end: cancel}
	st.transmit = func(m *nbsv1.ConnectResponse) error {
		<-release
		sent <- m
		return nil
	}
	ack := func(seq uint64) *nbsv1.ConnectResponse {
		return &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Ack{Ack: &nbsv1.Ack{Sequence: seq}}}
	}
	// The sender takes the first and waits in its Send; 256 more fill the queue.
	for i := range maxQueued + 1 {
		if !st.send(ack(uint64(i))) {
			t.Fatal("send on an open stream failed")
		}
	}
	waited := make(chan bool)
	go func() { waited <- st.send(ack(maxQueued + 1)) }()
	select {
	case <-waited:
		t.Fatal("a send into a full queue did not wait")
	case <-time.After(100 * time.Millisecond):
	}
	close(release) // the agent reads again
	if !<-waited {
		t.Fatal("the waiting send failed")
	}
	for i := range maxQueued + 2 {
		if m := <-sent; m.GetAck().GetSequence() != uint64(i) {
			t.Fatalf("message %d is ack %d", i, m.GetAck().GetSequence())
		}
	}

	// A close waits for a running sender until its Send is found stuck.
	block := make(chan struct{})
	defer close(block)
	st2 := &stream{ctx: ctx, end: cancel}
	st2.transmit = func(*nbsv1.ConnectResponse) error { <-block; return nil }
	st2.send(ack(1))
	closed := make(chan struct{})
	go func() { st2.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close did not wait for the running sender")
	case <-time.After(100 * time.Millisecond):
	}
	st2.markStuck()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close still waits after the sender was found stuck")
	}
	st2.close() // once stuck, a close does not wait
}
