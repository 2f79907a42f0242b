// Package loadgen simulates a fleet of agents against a real collector: N
// nodes, each on its own gRPC connection and stream as a real agent is,
// announcing a realistic tree (the agent's catalogue, about 200 metrics),
// reporting every interval — roots only when healthy, a subtree with
// evidence when troubled, everything in a periodic snapshot — resending
// what was not acknowledged after a reconnect, and now and then restarting
// (a new instance). It measures what a fleet operator cares about:
// acknowledged samples per second and the time from a report's send to its
// acknowledgement, which the collector sends only once the report is
// committed to PostgreSQL.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nbs-project/nbs/internal/loglinear"
)

// Config says what fleet to simulate.
type Config struct {
	// Addr is the collector's gRPC address.
	Addr string
	// Nodes is the fleet's size; node names are Prefix0, Prefix1, ...
	Nodes  int
	Prefix string
	// Interval between one node's reports (the agent's --interval).
	Interval time.Duration
	// Ramp spreads the nodes' first connects over this long, as a fleet
	// rolling out or reconnecting does (0: Interval).
	Ramp time.Duration
	// Troubled is the share of nodes (0..1) whose tcp_reset branch is in
	// trouble: they stream its children and evidence every interval.
	Troubled float64
	// SnapshotEvery is how often a node sends its full tree (the agent's
	// --snapshot.every).
	SnapshotEvery time.Duration
	// ReconnectsPerHour is how often, over the whole fleet, an agent reconnects:
	// it drops its stream and connects again (the same instance, as the
	// agent's spool keeps it), resending
	// what was not acknowledged.
	ReconnectsPerHour float64
	// ReconnectInFlight makes each of those reconnects drop the stream
	// right after sending a report, before its acknowledgement can
	// arrive, as a connection lost mid-report does: the report is resent
	// on the new stream, and the collector may have stored it already (it
	// must store it once and acknowledge it again).
	ReconnectInFlight bool
	// Clock stamps reports and paces snapshots, churn and pods (default
	// time.Now). One running faster than real time compresses months
	// into minutes (bench/lifecycle); the collector must accept its times.
	Clock func() time.Time
	// ChurnPerDay is the share of nodes replaced each day of Clock, as
	// Kubernetes nodes are: the node stops for good and a new one, with a
	// new name and instance, takes its place.
	ChurnPerDay float64
	// PodsPerDay is how many new pods each node runs each day of Clock:
	// each is an owner child of a reset reason (as the agent names them,
	// agent/owner), announced when first reported and reported all day.
	PodsPerDay int
	// BootstrapToken enrolls the nodes with a collector in enroll mode.
	BootstrapToken string
	// OnAck, when set, is told of every acknowledgement: when it came and
	// how long after its report was sent. A test that compares phases of
	// one run keeps its own tallies with it.
	OnAck func(at time.Time, latency time.Duration)
	// OnAcked, when set, is told which report each acknowledgement was
	// for (node name, instance, sequence), so that a test can hold the
	// database to storing every acknowledged report exactly once. It is
	// called from the node's receiving goroutine and must not block.
	OnAcked func(node string, instance, seq uint64)
	// NodesPerConn, above 1, carries that many nodes' streams on one gRPC
	// connection (HTTP/2 streams of one TCP connection), as a relay in
	// front of agents would: one connection per node stops near 9,000
	// nodes where a process may hold 20,000 open files (the simulator's
	// and the collector's ends). A node's reconnect is then a new stream
	// on its shared connection. 0 or 1: a connection per node, as real
	// agents have.
	NodesPerConn int
	// Seed makes a run's choices repeatable.
	Seed uint64
	Log  *slog.Logger
}

func (c *Config) defaults() error {
	if c.Addr == "" {
		return errors.New("loadgen: no collector address")
	}
	if c.Nodes <= 0 {
		return fmt.Errorf("loadgen: %d nodes", c.Nodes)
	}
	if c.Troubled < 0 || c.Troubled > 1 {
		return fmt.Errorf("loadgen: troubled share %v is not within 0..1", c.Troubled)
	}
	if c.Prefix == "" {
		c.Prefix = "sim-"
	}
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.Ramp <= 0 {
		c.Ramp = c.Interval
	}
	if c.SnapshotEvery <= 0 {
		c.SnapshotEvery = 5 * time.Minute
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.ChurnPerDay < 0 || c.ChurnPerDay > 1 {
		return fmt.Errorf("loadgen: churn %v per day is not within 0..1", c.ChurnPerDay)
	}
	if c.NodesPerConn < 0 || c.NodesPerConn > 10000 {
		return fmt.Errorf("loadgen: %d nodes per connection is not within 0..10000", c.NodesPerConn)
	}
	if c.PodsPerDay < 0 || c.PodsPerDay > 1000 {
		return fmt.Errorf("loadgen: %d pods per day is not within 0..1000", c.PodsPerDay)
	}
	return nil
}

// Stats are a run's counts so far.
type Stats struct {
	Elapsed   time.Duration
	Connected int64 // streams open now
	Reports   uint64
	Acked     uint64
	Samples   uint64 // in acknowledged reports (histograms count as samples too)
	// Due is how many reports the nodes' schedules called for (one a node
	// and interval since each session began), OfferedSamples their
	// samples: a node still blocked sending when its next report was due
	// (the collector pushing back through gRPC flow control) skips it, so
	// Reports falls behind Due when the collector cannot take what is
	// offered. SendWait is the time nodes spent blocked in Send.
	Due            uint64
	OfferedSamples uint64
	SendWait       time.Duration
	Rejected       uint64
	Resent         uint64
	Reconnects     uint64
	Replaced       uint64 // nodes replaced by new ones (ChurnPerDay)
	Pods           uint64 // owner children named (PodsPerDay), each a new metric path
	Errors         uint64 // streams that ended with an error
	Dials          uint64 // gRPC connections made (NodesPerConn)
	// Registered nodes have had a report acknowledged; AllRegistered is
	// when the last of them did (0 until then): how long the fleet took
	// to (re)connect.
	Registered    int64
	AllRegistered time.Duration
	// Ack latency from send to acknowledgement, over the whole run.
	AckP50, AckP99, AckMax time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("%5.0fs registered %d streams %d reports %d acked %d (%.0f samples/s) ack p50 %v p99 %v max %v rejected %d resent %d reconnects %d errors %d",
		s.Elapsed.Seconds(), s.Registered, s.Connected, s.Reports, s.Acked, s.SamplesPerSecond(),
		s.AckP50.Round(time.Millisecond), s.AckP99.Round(time.Millisecond), s.AckMax.Round(time.Millisecond),
		s.Rejected, s.Resent, s.Reconnects, s.Errors)
}

// Since is what happened between before and s (counts and elapsed time;
// the latencies are s's).
func (s Stats) Since(before Stats) Stats {
	s.Elapsed -= before.Elapsed
	s.Reports -= before.Reports
	s.Acked -= before.Acked
	s.Samples -= before.Samples
	s.Rejected -= before.Rejected
	s.Resent -= before.Resent
	s.Reconnects -= before.Reconnects
	s.Errors -= before.Errors
	s.Due -= before.Due
	s.OfferedSamples -= before.OfferedSamples
	s.SendWait -= before.SendWait
	return s
}

// OfferedPerSecond is the samples the schedules called for over the
// elapsed time: what the fleet offered, taken or not.
func (s Stats) OfferedPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.OfferedSamples) / s.Elapsed.Seconds()
}

// SamplesPerSecond is acknowledged samples over the elapsed time.
func (s Stats) SamplesPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Samples) / s.Elapsed.Seconds()
}

// Fleet is a running simulation.
type Fleet struct {
	cfg    Config
	tree   Tree
	codec  *codec
	shapes []shape
	start  time.Time // Run's, under mu (Stats may be called while Run starts)

	connected, registered                                       atomic.Int64
	allRegistered                                               atomic.Int64 // ns since start
	reports, acked, samples, rejected, resent, reconnects, errs atomic.Uint64
	replaced, pods, dials                                       atomic.Uint64
	due, offered, sendWait                                      atomic.Uint64

	mu  sync.Mutex
	lat *loglinear.Histogram // ack latency, microseconds

	conns *conns    // the connections to the collector (conns.go)
	bufs  sync.Pool // of *[]byte: a message's encoding while it is written (node.sendMsg)

	wg sync.WaitGroup // a count for each node until it stops (node.run)
}

// after runs fn on a goroutine of its own once d has passed, unless ctx
// ends first: then the waiting node stops (its count of wg is given back)
// without waiting for the timer. A node waiting holds a timer, not a
// goroutine.
func (f *Fleet) after(ctx context.Context, d time.Duration, fn func()) {
	w := &wait{}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(d, func() {
		if w.claim() {
			w.stop()
			fn()
		}
	})
	w.stop = context.AfterFunc(ctx, func() {
		if w.claim() {
			w.timer.Stop()
			f.wg.Done()
		}
	})
}

// wait is one of after's: its timer and ctx race, the first to claim it
// acts.
type wait struct {
	mu      sync.Mutex // held while after sets timer and stop
	claimed bool
	timer   *time.Timer
	stop    func() bool
}

func (w *wait) claim() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claimed {
		return false
	}
	w.claimed = true
	return true
}

// New prepares a fleet; Run runs it.
func New(cfg Config) (*Fleet, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tree := NewTree()
	c, err := newCodec(tree.Defs)
	if err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, tree: tree, codec: c, lat: loglinear.New(),
		shapes: newShapes(rand.New(rand.NewPCG(cfg.Seed, 0)), 64)}
	f.conns = newConns(cfg.Addr, cfg.NodesPerConn, func() { f.dials.Add(1) })
	return f, nil
}

// Tree is what every node announces.
func (f *Fleet) Tree() Tree { return f.tree }

// Run runs every node until ctx ends, then closes their streams and
// returns. progress, when not nil, gets a line every progressEvery.
func (f *Fleet) Run(ctx context.Context, progress io.Writer, progressEvery time.Duration) Stats {
	f.mu.Lock()
	f.start = time.Now()
	f.mu.Unlock()
	// When ctx ends, closing the connections ends every stream; each
	// node then stops (node.next).
	stop := context.AfterFunc(ctx, f.conns.close)
	defer stop()
	for i := range f.cfg.Nodes {
		pcg := rand.NewPCG(f.cfg.Seed, uint64(i))
		n := &node{
			f: f, slot: i, name: fmt.Sprintf("%s%d", f.cfg.Prefix, i),
			pcg: pcg, rng: rand.New(pcg),
			troubled: float64(i) < f.cfg.Troubled*float64(f.cfg.Nodes),
		}
		// Spread first connects over the ramp and reports over the
		// interval, as a real fleet's clocks are spread.
		n.delay = time.Duration(float64(f.cfg.Ramp) * float64(i) / float64(f.cfg.Nodes))
		f.wg.Add(1)
		n.run(ctx)
	}
	if progress != nil && progressEvery > 0 {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-t.C:
				fmt.Fprintln(progress, f.Stats())
			}
		}
	}
	f.wg.Wait()
	f.conns.close()
	return f.Stats()
}

// Stats returns the counts so far.
func (f *Fleet) Stats() Stats {
	s := Stats{
		Connected:  f.connected.Load(),
		Registered: f.registered.Load(), AllRegistered: time.Duration(f.allRegistered.Load()),
		Reports: f.reports.Load(), Acked: f.acked.Load(), Samples: f.samples.Load(),
		Rejected: f.rejected.Load(), Resent: f.resent.Load(), Reconnects: f.reconnects.Load(), Replaced: f.replaced.Load(), Pods: f.pods.Load(), Errors: f.errs.Load(), Dials: f.dials.Load(),
		Due: f.due.Load(), OfferedSamples: f.offered.Load(), SendWait: time.Duration(f.sendWait.Load()),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Elapsed = time.Since(f.start)
	if f.lat.Count > 0 {
		s.AckP50 = time.Duration(f.lat.Quantile(0.5)) * time.Microsecond
		s.AckP99 = time.Duration(f.lat.Quantile(0.99)) * time.Microsecond
		s.AckMax = time.Duration(f.lat.Max()) * time.Microsecond
	}
	return s
}

// ResetLatency forgets the acknowledgement latencies seen so far, so that
// the percentiles describe the steady state after a warm-up.
func (f *Fleet) ResetLatency() {
	f.mu.Lock()
	f.lat = loglinear.New()
	f.mu.Unlock()
}

// firstAck counts a node's first acknowledged report.
func (f *Fleet) firstAck() {
	if f.registered.Add(1) == int64(f.cfg.Nodes) {
		f.mu.Lock()
		f.allRegistered.Store(int64(time.Since(f.start)))
		f.mu.Unlock()
	}
}

func (f *Fleet) observe(d time.Duration, samples int) {
	if f.cfg.OnAck != nil {
		f.cfg.OnAck(time.Now(), d)
	}
	f.acked.Add(1)
	f.samples.Add(uint64(samples))
	f.mu.Lock()
	f.lat.Record(uint64(max(d.Microseconds(), 1)))
	f.mu.Unlock()
}
