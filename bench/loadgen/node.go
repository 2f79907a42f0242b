package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/agent/catalog"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// errReconnect ends a session on purpose: the simulated agent reconnects.
var errReconnect = errors.New("reconnect")

// errReplaced ends a node for good: a new node takes its slot (churn).
var errReplaced = errors.New("replaced")

// pending is a report sent and not yet acknowledged: not the report
// itself but what rebuilds it byte for byte (its draws of the node's
// random numbers start from rng), so that a node waiting minutes for its
// first ack, as a fleet registering does, holds a few words a report
// rather than the report.
type pending struct {
	seq      uint64
	timeNano int64
	snapshot bool
	rng      rand.PCG                  // the node's generator before the report drew from it
	pods     []*nbsv1.MetricDefinition // the node's pods then (never changed in place)
	announce []*nbsv1.MetricDefinition // those of them the report announced
	sent     time.Time
	items    int
}

// node is one simulated agent. Its instance id and numbering survive a
// reconnect, as the real agent's spool keeps them across reconnects.
type node struct {
	f        *Fleet
	slot     int // its index in the fleet; a replacement takes the slot
	gen      int // how many nodes had the slot before
	name     string
	pcg      *rand.PCG // rng's source, whose state a pending report keeps
	rng      *rand.Rand
	troubled bool
	delay    time.Duration
	backoff  time.Duration // before the next try after a failed session

	instance     uint64
	seq          uint64
	lastSnapshot time.Time
	day          time.Time                 // the Clock day of the last report
	pods         []*nbsv1.MetricDefinition // today's owner children

	mu         sync.Mutex
	registered bool // a report of this node has been acknowledged
	credential string
	unacked    []pending // by sequence: sent in order, and few (a map costs a KiB a node)
}

// run starts the node after its delay. From then on the node holds a
// goroutine of its own only while a stream is open, the one waiting in
// Recv (receive), and that goroutine does nothing else: it starts afresh
// for each stream, so its stack holds Recv's frames and not those of a
// Hello or a resend sent before (a goroutine's stack, once grown, keeps
// its size while it waits, and that was most of a simulated node's
// memory: BENCHMARKS.md, "The simulator's memory per node"). Waits (the
// ramp, a backoff) are timers, and a session is opened on the goroutine
// that ended the previous one or on a timer's.
//
// The node holds one count of the fleet's WaitGroup from run until it
// stops for good, when ctx ends; whichever of its timers or goroutines
// has it then gives it back.
func (n *node) run(ctx context.Context) {
	n.backoff = time.Second
	n.f.after(ctx, n.delay, func() {
		n.start()
		n.connect(ctx)
	})
}

// connect opens a session, whose stream's end is then handled on a
// goroutine of its own (session.finish), or schedules the next try after
// a backoff.
func (n *node) connect(ctx context.Context) {
	s, err := n.open(ctx)
	if err != nil {
		n.next(ctx, err, nil)
		return
	}
	s.opened()
}

// next follows a session that ended with err (recvErr: what Recv
// returned, nil when the session did not open): the node stops when ctx
// ended, starts again at once after a planned reconnect, a replacement or
// the collector's asking for a new stream, and otherwise after a backoff.
func (n *node) next(ctx context.Context, err, recvErr error) {
	switch {
	case ctx.Err() != nil:
		n.f.wg.Done()
		return
	case errors.Is(err, errReplaced):
		n.f.replaced.Add(1)
		n.gen++
		n.name = fmt.Sprintf("%s%d-%d", n.f.cfg.Prefix, n.slot, n.gen)
		n.start()
		n.backoff = time.Second
		n.connect(ctx)
		return
	case errors.Is(err, errReconnect), recvErr != nil && status.Code(recvErr) == codes.Aborted:
		// Aborted: the collector asked for a new stream (an operator's
		// change, pruned definitions): an agent reconnects at once.
		n.f.reconnects.Add(1)
		n.backoff = time.Second
		n.connect(ctx)
		return
	}
	n.f.errs.Add(1)
	n.f.cfg.Log.Debug("stream ended", "node", n.name, "err", err)
	wait := n.backoff + time.Duration(n.rng.Int64N(int64(n.backoff)))
	n.backoff = min(2*n.backoff, 30*time.Second)
	n.f.after(ctx, wait, func() { n.connect(ctx) })
}

// start makes the node a fresh agent: a new instance with nothing sent.
func (n *node) start() {
	n.instance, n.seq, n.day, n.pods = n.rng.Uint64()|1, 0, time.Time{}, nil
	// Snapshots spread over the fleet, as agents start at different times.
	n.lastSnapshot = n.f.cfg.Clock().Add(-time.Duration(n.rng.Int64N(int64(n.f.cfg.SnapshotEvery))))
	n.mu.Lock()
	n.unacked, n.credential = nil, ""
	n.mu.Unlock()
}

// session is one stream: Hello, resend what is unacked, then a report
// every interval from timers until the stream ends (the collector ended
// it, the connection ended, or this side ended it: a reconnect, a
// replacement, a failed send, the fleet's end). The node's answers are
// handled on its connection's reader (message); it holds no goroutine
// while the stream is open.
type session struct {
	n       *node
	ctx     context.Context // the fleet's
	stream  *h2stream
	release func() // the connection's, when the session ends
	t       *ticker

	mu     sync.Mutex
	cause  error // why this side ended the stream (end)
	ready  bool  // open returned: the stream's end goes to finish
	gone   bool  // the stream ended before that
	endErr error // and why
}

// open dials (or takes the node's shared connection), opens the stream,
// sends the Hello and what is unacknowledged, and starts the session's
// timers.
func (n *node) open(ctx context.Context) (_ *session, err error) {
	cfg := n.f.cfg
	conn, release, err := n.f.conns.get(ctx, n.slot)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	s := &session{n: n, ctx: ctx, release: release}
	stream, err := conn.newStream(s)
	if err != nil {
		release()
		return nil, fmt.Errorf("connect: %w", err)
	}
	s.stream = stream
	defer func() {
		if err != nil {
			stream.cancel()
			release()
		}
	}()
	head, err := n.f.codec.helloHead(5, n.hello())
	if err != nil {
		return nil, fmt.Errorf("encode hello: %w", err)
	}
	if err := stream.send(head, n.f.codec.tree); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	t := &ticker{n: n, stream: stream, end: s.end, began: time.Now(), announced: map[string]bool{}}
	// Resent from here, before any timer runs: the timers' reports
	// follow them in sequence.
	for _, p := range n.resend() {
		r := n.build(p, rand.New(&p.rng))
		if err := n.sendMsg(stream, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}}); err != nil {
			return nil, fmt.Errorf("resend: %w", err)
		}
		n.f.resent.Add(1)
	}
	n.f.connected.Add(1)
	s.t = t
	t.start(cfg)
	return s, nil
}

// opened hands the stream's end to finish from now on: at once if the
// stream ended while open ran.
func (s *session) opened() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = true
	if s.gone {
		go s.finish(s.endErr)
	}
}

// ended is the stream's end (streamHandler): the session ends on a
// goroutine of its own, which may wait for a timer still sending.
func (s *session) ended(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		s.gone, s.endErr = true, err
		return
	}
	go s.finish(err)
}

// message is one of the collector's answers (streamHandler): an Ack is
// decoded by hand, a Config not at all (codec.go).
func (s *session) message(b []byte) error {
	var r nbsv1.ConnectResponse
	if err := decodeAnswer(b, &r); err != nil {
		return status.Errorf(codes.Internal, "decode an answer: %v", err)
	}
	s.n.handle(&r)
	return nil
}

// end ends the stream from this side for cause.
func (s *session) end(cause error) {
	s.mu.Lock()
	if s.cause == nil {
		s.cause = cause
	}
	s.mu.Unlock()
	s.stream.cancel()
}

// finish ends the session once its stream has ended (recvErr: how) and
// goes on to the node's next.
func (s *session) finish(recvErr error) {
	s.n.next(s.ctx, s.close(s.ctx, recvErr), recvErr)
}

// close ends the session once its stream ended and says why it ended.
func (s *session) close(ctx context.Context, recvErr error) error {
	// Whatever ended the stream, no timer may touch the node once this
	// returns: the next session (or a replacement node) owns it.
	s.stream.cancel()
	s.t.stop()
	s.release()
	s.n.f.connected.Add(-1)
	s.mu.Lock()
	cause := s.cause
	s.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return nil
	case cause != nil:
		return cause // a reconnect, a replacement, or a send failed
	}
	return fmt.Errorf("receive: %w", recvErr)
}

// ticker sends a session's reports from timers: one every interval on
// the session's schedule, and the reconnect, if one is due.
type ticker struct {
	n         *node
	stream    *h2stream
	end       func(cause error)
	began     time.Time
	announced map[string]bool // what this stream announced: the tree in its Hello, today's pods with the first report that carries them

	// busy is held by a timer's function while it runs: stop waits for
	// it, and a function that finds stopped set returns at once.
	busy    sync.Mutex
	mu      sync.Mutex
	stopped bool
	due     int64 // reports due so far on the session's schedule (Stats.Due)
	report  *time.Timer
	restart *time.Timer
}

func (t *ticker) start(cfg Config) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.report = time.AfterFunc(cfg.Interval, t.tick)
	if cfg.ReconnectsPerHour > 0 {
		// Exponential times between one node's reconnects, the fleet's
		// rate spread over its nodes.
		mean := time.Hour.Seconds() * float64(cfg.Nodes) / cfg.ReconnectsPerHour
		t.restart = time.AfterFunc(time.Duration(t.n.rng.ExpFloat64()*mean*float64(time.Second)), t.reconnect)
	}
}

// stop stops the timers and waits for a function of theirs still running
// (the stream is cancelled first, so its Send returns).
func (t *ticker) stop() {
	t.mu.Lock()
	t.stopped = true
	if t.report != nil {
		t.report.Stop()
	}
	if t.restart != nil {
		t.restart.Stop()
	}
	t.mu.Unlock()
	// Taking busy waits for a timer function still running.
	t.busy.Lock()
	t.busy.Unlock()
}

// enter starts a timer function's turn: false once the session stopped.
func (t *ticker) enter() bool {
	t.busy.Lock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		t.busy.Unlock()
		return false
	}
	return true
}

func (t *ticker) tick() {
	if !t.enter() {
		return
	}
	defer t.busy.Unlock()
	n, cfg := t.n, t.n.f.cfg
	now := cfg.Clock()
	if d := now.UTC().Truncate(24 * time.Hour); !d.Equal(n.day) {
		first := n.day.IsZero()
		n.day = d
		if !first && n.rng.Float64() < cfg.ChurnPerDay {
			t.end(errReplaced)
			return
		}
		n.newPods(d)
	}
	p, r := n.report(now, t.announced)
	// A report still being sent when the next was due delays it to the
	// next slot of the schedule: those skipped were due and not offered,
	// counted as offered at this one's size.
	d := int64(time.Since(t.began) / cfg.Interval)
	missed := max(d-t.due, 1)
	t.due += missed
	n.f.due.Add(uint64(missed))
	n.f.offered.Add(uint64(missed) * uint64(p.items))
	if err := n.send(t.stream, p, r); err != nil {
		t.failed(err)
		return
	}
	next := t.began.Add(time.Duration(max(t.due, int64(time.Since(t.began)/cfg.Interval))+1) * cfg.Interval)
	t.mu.Lock()
	if !t.stopped {
		t.report.Reset(time.Until(next))
	}
	t.mu.Unlock()
}

// failed ends the session after a failed send. io.EOF is the collector
// having ended the stream: Recv has its status (an Aborted one asks for a
// new stream at once), so the session ends with that instead.
func (t *ticker) failed(err error) {
	if !errors.Is(err, io.EOF) {
		t.end(err)
	}
}

func (t *ticker) reconnect() {
	if !t.enter() {
		return
	}
	defer t.busy.Unlock()
	if t.n.f.cfg.ReconnectInFlight {
		// Send the next report now and drop the stream before its ack:
		// the next session resends it.
		p, r := t.n.report(t.n.f.cfg.Clock(), t.announced)
		if err := t.n.send(t.stream, p, r); err != nil {
			t.failed(err)
			return
		}
	}
	t.end(errReconnect)
}

// send sends a new report, kept as unacknowledged until its ack comes.
func (n *node) send(stream *h2stream, p pending, r *nbsv1.Report) error {
	p.sent = time.Now()
	n.mu.Lock()
	n.unacked = append(n.unacked, p)
	n.mu.Unlock()
	n.f.reports.Add(1)
	err := n.sendMsg(stream, &nbsv1.ConnectRequest{Msg: &nbsv1.ConnectRequest_Report{Report: r}})
	n.f.sendWait.Add(uint64(time.Since(p.sent)))
	if err != nil {
		return fmt.Errorf("send report: %w", err)
	}
	return nil
}

func (n *node) hello() *nbsv1.Hello {
	h := &nbsv1.Hello{
		NodeName: n.name, InstanceId: n.instance, AgentVersion: "loadgen", KernelRelease: "sim",
		IntervalMs: uint32(n.f.cfg.Interval.Milliseconds()), // Metrics: the fleet's tree, added by the codec (treeHello)
		// A node's customer is its own for life, as a real node's tenant
		// is (a changed tenant starts a new history: migration 014).
		Labels: map[string]string{"customer": fmt.Sprintf("c%d", n.slot%20), "sim": "true"},
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.credential != "":
		h.Auth = &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_NodeCredential{NodeCredential: n.credential}}
	case n.f.cfg.BootstrapToken != "":
		h.Auth = &nbsv1.NodeAuth{Proof: &nbsv1.NodeAuth_BootstrapToken{BootstrapToken: n.f.cfg.BootstrapToken}}
	}
	return h
}

// resend returns the unacknowledged reports in sequence order, stamped as
// sent now; each is built as it is sent, not all of them at once.
func (n *node) resend() []pending {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	for i := range n.unacked {
		n.unacked[i].sent = now
	}
	return slices.Clone(n.unacked)
}

// acked takes the unacknowledged report seq out of those kept.
func (n *node) acked(seq uint64) (pending, bool) {
	i := slices.IndexFunc(n.unacked, func(p pending) bool { return p.seq == seq })
	if i < 0 {
		return pending{}, false
	}
	p := n.unacked[i]
	n.unacked = slices.Delete(n.unacked, i, i+1)
	if len(n.unacked) == 0 {
		n.unacked = nil // let a backlog's array go
	}
	return p, true
}

// sendMsg encodes m into a buffer of the fleet's and writes it on
// stream; the buffer goes back once written, so a node holds no encoded
// report between its sends.
func (n *node) sendMsg(stream *h2stream, m proto.Message) error {
	bp, _ := n.f.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(append((*bp)[:0], 0, 0, 0, 0, 0), m)
	if err == nil {
		err = stream.send(b)
	}
	*bp = b[:0]
	n.f.bufs.Put(bp)
	return err
}

func (n *node) handle(msg *nbsv1.ConnectResponse) {
	switch m := msg.Msg.(type) {
	case *nbsv1.ConnectResponse_Ack:
		n.mu.Lock()
		p, ok := n.acked(m.Ack.GetSequence())
		first := !n.registered
		n.registered = true
		n.mu.Unlock()
		if first {
			n.f.firstAck()
		}
		if ok {
			n.f.observe(time.Since(p.sent), p.items)
			if n.f.cfg.OnAcked != nil {
				n.f.cfg.OnAcked(n.name, n.instance, m.Ack.GetSequence())
			}
		}
	case *nbsv1.ConnectResponse_Reject:
		n.mu.Lock()
		n.acked(m.Reject.GetSequence())
		n.mu.Unlock()
		n.f.rejected.Add(1)
		n.f.cfg.Log.Warn("report rejected", "node", n.name, "seq", m.Reject.GetSequence(), "reason", m.Reject.GetReason())
	case *nbsv1.ConnectResponse_Enrolled:
		n.mu.Lock()
		n.credential = m.Enrolled.GetNodeCredential()
		n.mu.Unlock()
	}
}

// report makes the next report: roots; a troubled node's tcp_reset
// subtree and evidence; everything when a snapshot is due. The pending
// record rebuilds it for a resend.
func (n *node) report(now time.Time, announced map[string]bool) (pending, *nbsv1.Report) {
	n.seq++
	p := pending{seq: n.seq, timeNano: now.UnixNano(), rng: *n.pcg, pods: n.pods}
	if now.Sub(n.lastSnapshot) >= n.f.cfg.SnapshotEvery {
		n.lastSnapshot = now
		p.snapshot = true
	}
	for _, d := range n.pods {
		if !announced[d.Id] {
			announced[d.Id] = true
			p.announce = append(p.announce, d)
		}
	}
	r := n.build(p, n.rng)
	p.items = len(r.Samples) + len(r.Histograms)
	return p, r
}

// build makes the report p describes, drawing its values from rng (the
// node's own, or a copy of its state then for a resend).
func (n *node) build(p pending, rng *rand.Rand) *nbsv1.Report {
	r := &nbsv1.Report{Sequence: p.seq, TimeUnixNano: p.timeNano, IntervalMs: uint32(n.f.cfg.Interval.Milliseconds()),
		Snapshot: p.snapshot, NewMetrics: p.announce}
	t := n.f.tree
	if p.snapshot {
		for _, d := range t.Defs {
			fill(r, d, n.troubled && d.Id == catalog.TCPReset, rng, n.f.shapes)
		}
	} else {
		for _, d := range t.Roots {
			fill(r, d, n.troubled && d.Id == catalog.TCPReset, rng, n.f.shapes)
		}
		if n.troubled {
			for _, d := range t.Troubled[1:] { // the root is in already
				fill(r, d, true, rng, n.f.shapes)
			}
		}
	}
	if n.troubled {
		events(r, p.timeNano, rng)
	}
	for _, d := range p.pods {
		fill(r, d, false, rng, n.f.shapes)
	}
	return r
}

// newPods names the pods the node runs on day d, as owner children of a
// reset reason: new names every day, as a Kubernetes node's pods have.
func (n *node) newPods(d time.Time) {
	// A new slice: pending reports keep the old one.
	n.pods = nil
	parent := catalog.ResetSentReason("reason_0")
	for k := range n.f.cfg.PodsPerDay {
		pod := fmt.Sprintf("shop.cart-%s-%d-%d-%d", d.Format("0102"), n.slot, n.gen, k)
		n.pods = append(n.pods, catalog.OwnerChild(parent, "pod:"+pod, "pod "+pod, catalog.DefaultTopOwners).Proto())
	}
	n.f.pods.Add(uint64(len(n.pods)))
}
