package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nbs-project/nbs/collector/store"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

type streamMetric struct {
	id   int32
	kind store.Kind
	// path is the metric's id, the string a decoded report's samples
	// share (Codec) rather than one each.
	path string
}

// stream is the state of one agent connection. Only the receiving goroutine
// touches metrics and lastSeq; out is drained by the sending goroutine.
//
// It is allocated once per connected node and kept small: 512 bytes is a
// size class (TestStreamSize), and its channels are made only when
// something waits on them.
type stream struct {
	node    store.Node
	metrics metricSet
	// otherDefs counts the node's stored definitions this stream's Hello
	// did not repeat, so the per-node limit holds across streams (at most
	// Limits.MaxMetrics). Beside nOffsets: together they take one word.
	otherDefs int32
	// nOffsets counts the reports noted in offsets (noteClock); wrapping
	// keeps its place in them, as clockSamples divides 2^32.
	nOffsets uint32
	lastSeq  uint64
	// tenancy is what tenancy checks found of the stream (tenancy.go):
	// nil for most streams, which are kept to 512 bytes.
	tenancy *streamTenancy
	// offsets are the last reports' time minus their receipt time.
	offsets [clockSamples]time.Duration
	peer    string
	// runner runs the stream's sender (drain); nil: a goroutine of its own.
	runner *runner
	// What waits to be sent to the agent. No goroutine waits with it: a
	// sender is started when there is something to send and ends when it
	// has sent it all (an agent is acked once an interval, and each
	// goroutine's stack costs several KiB per connected node).
	sendMu sync.Mutex
	// queue holds acks and rejects, oldest first, at most maxQueued.
	queue []*nbsv1.ConnectResponse
	// cfg is a one-slot mailbox: the newest Config not yet sent, replaced
	// by each push, so a stream that reads slowly gets fewer Configs, not
	// a queue of stale ones, and a push never waits for it.
	cfg     *nbsv1.Config
	sending bool // a sender is running
	closed  bool // the stream is over: no sender starts again
	// stuck: one Send has waited longer than the send timeout (the agent
	// stopped reading), and the stream is ended.
	stuck bool
	// recheckPing is set by a Config push (peers may have changed
	// tenant): the next report checks the stream's ping targets again.
	recheckPing atomic.Bool
	// room, made by a send that waits for the queue to have room, gets a
	// token when a message leaves the queue.
	room chan struct{}
	// unstuck, made by a close that waits for a running sender, is closed
	// when stuck is set.
	unstuck chan struct{}
	senders sync.WaitGroup
	// transmit sends one message on the gRPC stream.
	transmit func(*nbsv1.ConnectResponse) error
	ctx      context.Context
	// end closes the stream from outside, with the status the agent gets:
	// a newer stream of the node replaced it, or an operator revoked it.
	end context.CancelCauseFunc
}

// maxQueued bounds the acks and rejects waiting for one agent.
const maxQueued = 256

// send queues a message for the agent, waiting while the queue is full;
// false if the stream has ended.
func (st *stream) send(m *nbsv1.ConnectResponse) bool {
	for {
		st.sendMu.Lock()
		if st.ctx.Err() != nil {
			st.sendMu.Unlock()
			return false
		}
		if len(st.queue) < maxQueued {
			st.queue = append(st.queue, m)
			st.startSender()
			st.sendMu.Unlock()
			return true
		}
		if st.room == nil {
			st.room = make(chan struct{}, 1)
		}
		room := st.room
		st.sendMu.Unlock()
		select {
		case <-room:
		case <-st.ctx.Done():
			return false
		}
	}
}

// offerConfig puts cfg in the stream's mailbox, replacing a Config not yet
// sent; it never waits.
func (st *stream) offerConfig(cfg *nbsv1.Config) {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.cfg = cfg
	st.startSender()
}

// trySend is for the database writers, which serve every stream and must
// not wait on one slow agent. A dropped ack is safe: the agent resends and
// the duplicate is acked again.
func (st *stream) trySend(m *nbsv1.ConnectResponse) {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	if len(st.queue) < maxQueued {
		st.queue = append(st.queue, m)
		st.startSender()
	}
}

// startSender starts a sender unless one runs; sendMu is held.
func (st *stream) startSender() {
	if st.sending || st.closed || st.transmit == nil { // nil: not registered yet
		return
	}
	st.sending = true
	st.senders.Add(1)
	if st.runner != nil {
		st.runner.run(st)
		return
	}
	go st.drain()
}

// run is drain as the runner's task: on a worker whose stack has grown
// to what a Send takes already, rather than on a new goroutine that grows
// its stack each time an ack is sent (a few times an interval per node).
func (st *stream) run() { st.drain() }

// drain sends what waits, Configs first, so the agent has its Config
// before the acks of its first reports, and ends when nothing is left.
// A failed Send ends the stream.
func (st *stream) drain() {
	defer st.senders.Done()
	for {
		m := st.next()
		if m == nil {
			return
		}
		if err := st.transmit(m); err != nil {
			st.end(err)
			return
		}
	}
}

// next takes the next message to send, or stops the sender (nil).
func (st *stream) next() *nbsv1.ConnectResponse {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	var m *nbsv1.ConnectResponse
	switch {
	case st.ctx.Err() != nil:
	case st.cfg != nil:
		m = &nbsv1.ConnectResponse{Msg: &nbsv1.ConnectResponse_Config{Config: st.cfg}}
		st.cfg = nil
	case len(st.queue) > 0:
		m = st.queue[0]
		st.queue[0] = nil
		if st.queue = st.queue[1:]; len(st.queue) == 0 {
			st.queue = nil // the array goes with the burst
		}
		if st.room != nil {
			select {
			case st.room <- struct{}{}:
			default:
			}
		}
	}
	if m == nil {
		st.sending = false
	}
	return m
}

// close stops senders from starting and waits for a running one to end,
// or for its Send to have waited longer than the send timeout: returning
// from the handler then ends the gRPC stream, which ends that Send.
func (st *stream) close() {
	st.sendMu.Lock()
	st.closed = true
	if !st.sending || st.stuck {
		st.sendMu.Unlock()
		return
	}
	if st.unstuck == nil {
		st.unstuck = make(chan struct{})
	}
	unstuck := st.unstuck
	st.sendMu.Unlock()
	done := make(chan struct{})
	go func() { st.senders.Wait(); close(done) }()
	select {
	case <-done:
	case <-unstuck:
	}
}

// markStuck records that a Send waited longer than the send timeout and
// lets a close waiting for that sender return.
func (st *stream) markStuck() {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	if st.stuck {
		return
	}
	st.stuck = true
	if st.unstuck != nil {
		close(st.unstuck)
	}
}

// transmitter sends one message to the agent. A Send that waits longer
// than the send timeout (the agent stopped reading, so gRPC's flow control
// window is full) ends the stream: it then holds nothing more than its one
// pending Config and its bounded queue.
//
// Its timer is made with the first Send and reset for each after: one a
// Send was, with its function, 3% of the collector's allocations at
// 10,000 nodes (an agent is acked every report). Only the stream's one
// sender calls it, one Send at a time.
func (s *Server) transmitter(gs nbsv1.AgentService_ConnectServer, st *stream) func(*nbsv1.ConnectResponse) error {
	var t *time.Timer
	return func(m *nbsv1.ConnectResponse) error {
		if t == nil {
			t = time.AfterFunc(s.sendTimeout, func() {
				s.metrics.Rejects.WithLabelValues("send_timeout").Inc()
				s.log.Warn("agent stopped reading its stream; ending it", "node", st.node.Name, "peer", st.peer, "send_timeout", s.sendTimeout)
				st.end(status.Errorf(codes.DeadlineExceeded, "the agent did not read its stream for %s", s.sendTimeout))
				st.markStuck()
			})
		} else {
			t.Reset(s.sendTimeout)
		}
		defer t.Stop()
		return gs.Send(m)
	}
}
