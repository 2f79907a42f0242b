// Package ping is the ping branch: ICMP echo to configured targets and to
// the fleet peers the collector assigns, timed by kernel timestamps
// (agent/probe/ping), folded into one subtree per target, plus the clock's
// sync state.
package ping

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/nbs-project/nbs/agent/catalog"
	probe "github.com/nbs-project/nbs/agent/probe/ping"
	"github.com/nbs-project/nbs/agent/source"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

const capICMP = "ping.icmp"

// Options configure Open.
type Options struct {
	// Env's Netns is where echoes are sent from.
	source.Env
	// Targets are pinged always (--ping.targets); the collector's peers
	// come and go on top of them (SetPeers).
	Targets []Target
	// Interval spaces the echoes to each target (default 1s).
	Interval time.Duration
	// Timeout after which an echo counts as lost (default 3s).
	Timeout time.Duration
	// Size is the ICMP payload (default 56 bytes, like ping).
	Size int
	// LossWindow is how many of the latest echoes the loss gauge covers
	// (default 100: 1% resolution).
	LossWindow int
	// Retry is the wait before a target whose name did not resolve or
	// whose socket failed is tried again (default 30s).
	Retry time.Duration
}

// Source is the ping branch. Its pingers run from Open (or SetPeers) until
// Close.
type Source struct {
	opts Options
	log  *slog.Logger
	mode probe.Mode // what a socket in the namespace turned out to be; 0: none
	why  string     // why not, when mode is 0

	ctx    context.Context // parent of every pinger; ends at Close
	cancel context.CancelFunc

	mu      sync.Mutex
	peers   []Target
	targets map[string]*target // by subtree id
	retired []string           // subtrees to forget at the next Collect
	closed  bool
}

// Open checks that ICMP sockets can be opened in the namespace (and which
// kind) and starts pinging the static targets. Without any ICMP socket the
// source still runs: the clock is reported, targets stay UNKNOWN and the
// capability says why.
func Open(ctx context.Context, opts Options) (*Source, error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.LossWindow <= 0 {
		opts.LossWindow = 100
	}
	if opts.Retry <= 0 {
		opts.Retry = 30 * time.Second
	}
	if _, err := ReadClock(); err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	s := &Source{opts: opts, log: opts.Log(catalog.Ping), targets: map[string]*target{}}
	// A throwaway socket to loopback tells which kind of socket works.
	if p, err := probe.Open(probe.Options{Netns: opts.Netns, Target: netip.MustParseAddr("127.0.0.1")}); err != nil {
		s.why = err.Error()
		s.log.Warn("ping: no ICMP socket; ping targets will be UNKNOWN", "err", err)
	} else {
		s.mode = p.Mode()
		_ = p.Close()
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	s.reconcile()
	s.mu.Unlock()
	return s, nil
}

func (s *Source) Name() string { return "ping" }

func (s *Source) Capabilities() []*nbsv1.Capability {
	switch s.mode {
	case probe.ModeDgram:
		return []*nbsv1.Capability{{Name: capICMP, Available: true, Reason: "ICMP datagram sockets with kernel timestamps"}}
	case probe.ModeRaw:
		return []*nbsv1.Capability{{Name: capICMP, Available: true,
			Reason: "raw ICMP sockets with kernel timestamps (net.ipv4.ping_group_range forbids datagram sockets)"}}
	}
	return []*nbsv1.Capability{{Name: capICMP, Available: false, Reason: s.why}}
}

// SetPeers replaces the collector-assigned targets ("name=address"
// strings from Config.ping_targets); pingers start and stop to match,
// without touching the static targets. Entries that do not parse are
// skipped and logged. It returns the subtrees it retired, for the agent
// to forget at once: a peer the collector no longer gives is, after a
// change of tenant, another tenant's node, whose name must not reach the
// next Hello or report (the next Collect retires them too, for the
// ledger).
func (s *Source) SetPeers(specs []string) []string {
	var peers []Target
	for _, spec := range specs {
		t, err := ParseTarget(spec)
		if err != nil {
			s.log.Warn("ping: ignoring a peer from the collector", "err", err)
			continue
		}
		peers = append(peers, t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers = peers
	before := len(s.retired)
	s.reconcile()
	return slices.Clone(s.retired[before:])
}

// Targets lists the targets being pinged, by subtree id.
func (s *Source) Targets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.targets))
	for id := range s.targets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Counts returns the cumulative echo counts of a target (by subtree id)
// since its pinger last started.
func (s *Source) Counts(id string) (probe.Counts, bool) {
	s.mu.Lock()
	tg := s.targets[id]
	s.mu.Unlock()
	if tg == nil {
		return probe.Counts{}, false
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.pinger == nil {
		return probe.Counts{}, false
	}
	return tg.pinger.Counts(), true
}

// Where a target came from, for the child's description.
const (
	fromFlag = "--ping.targets"
	fromMesh = "the collector's mesh"
)

// wanted is one address to ping and every source that named it.
type wanted struct {
	Target
	namedBy []string
}

// wantedTargets merges the static targets and the peers into one target
// per address: an address named twice (by --ping.targets and by the mesh,
// or by two peers) is pinged once, under its first name — a static
// target's, which also wins a name clash with a peer at another address.
// Host names are compared as written, not resolved. Between two peers
// whose names make one id, the one already pinged at that address keeps
// it (incumbent): a newcomer (say a look-alike name announcing another
// address) cannot move a peer's target elsewhere; only the peer's own
// change of address, which drops the old entry, does.
func wantedTargets(static, peers []Target, incumbent func(Target) bool) map[string]wanted {
	want := map[string]wanted{}
	byHost := map[string]string{}
	add := func(t Target, from string) {
		if t.Name != t.Host {
			from += " (as " + t.Name + ")"
		}
		if id, ok := byHost[t.Host]; ok {
			if w := want[id]; !slices.Contains(w.namedBy, from) {
				w.namedBy = append(w.namedBy, from)
				want[id] = w
			}
			return
		}
		if _, taken := want[t.ID()]; taken {
			return
		}
		want[t.ID()] = wanted{Target: t, namedBy: []string{from}}
		byHost[t.Host] = t.ID()
	}
	for _, t := range static {
		add(t, fromFlag)
	}
	isIncumbent := func(t Target) bool { return incumbent != nil && incumbent(t) }
	for _, t := range peers {
		if isIncumbent(t) {
			add(t, fromMesh)
		}
	}
	for _, t := range peers {
		if !isIncumbent(t) {
			add(t, fromMesh)
		}
	}
	return want
}

// reconcile starts pingers for new targets and stops those for vanished
// ones. Called with s.mu held.
func (s *Source) reconcile() {
	if s.closed {
		return
	}
	want := wantedTargets(s.opts.Targets, s.peers, func(t Target) bool {
		tg, ok := s.targets[t.ID()]
		return ok && tg.spec.Host == t.Host
	})
	for id, tg := range s.targets {
		// Who names a target is in its definition, which the agent sends
		// once: a change restarts it like a new address does.
		if w, ok := want[id]; ok && w.Host == tg.spec.Host && slices.Equal(w.namedBy, tg.namedBy) {
			continue
		}
		tg.stop()
		delete(s.targets, id)
		// Retired even when it comes back (a new address): the agent then
		// forgets and redefines it, so baselines start afresh.
		s.retired = append(s.retired, id)
		s.log.Info("ping: target stopped", "target", id, "host", tg.spec.Host)
	}
	for id, t := range want {
		if _, ok := s.targets[id]; ok {
			continue
		}
		tg := newTarget(t.Target, t.namedBy, s.opts.LossWindow)
		s.targets[id] = tg
		if s.mode != 0 {
			tg.start(s.ctx, s.opts, s.log)
		}
		s.log.Info("ping: target started", "target", id, "host", t.Host)
	}
}

// Collect folds each target's echoes since the previous call into this
// interval's histograms and gauges.
func (s *Source) Collect(context.Context) (source.Reading, error) {
	r := source.Reading{
		Metrics: catalog.PingTree(), Counters: map[string]uint64{}, Gauges: map[string]float64{},
		Histograms: map[string]*loglinear.Histogram{},
	}
	if c, err := ReadClock(); err == nil {
		r.Gauges[catalog.PingClock] = 0
		if c.Synced {
			r.Gauges[catalog.PingClock] = 1
		}
		r.Gauges[catalog.PingClockOffset] = float64(c.Offset) / 1e6
		r.Gauges[catalog.PingClockMaxError] = float64(c.MaxError) / 1e6
	} else {
		s.log.Warn("ping: read clock", "err", err)
	}

	s.mu.Lock()
	r.Retired, s.retired = s.retired, nil
	targets := make([]*target, 0, len(s.targets))
	for _, tg := range s.targets {
		targets = append(targets, tg)
		r.Metrics = append(r.Metrics, tg.metrics...)
	}
	s.mu.Unlock()

	worst, answered := 0.0, false
	for _, tg := range targets {
		if s.mode == 0 {
			continue // no socket: the target's metrics stay UNKNOWN
		}
		if rtt := tg.drain(&r); !math.IsNaN(rtt) {
			worst, answered = max(worst, rtt), true
		}
	}
	// With no target, or no echo answered this interval (every one lost),
	// there is no round trip to speak of: the root has no value, not a
	// 0 ms that reads as a fast network, and its own state is idle rather
	// than UNKNOWN; the targets' loss children say what is wrong, and the
	// root takes their state. Without a socket the targets are UNKNOWN,
	// and so is it.
	switch {
	case s.mode != 0 && answered:
		r.Gauges[catalog.Ping] = worst
	case s.mode != 0:
		r.Idle = append(r.Idle, catalog.Ping)
	}
	return r, nil
}

// Close stops every pinger.
func (s *Source) Close() error {
	s.mu.Lock()
	s.closed = true
	targets := s.targets
	s.targets = map[string]*target{}
	s.mu.Unlock()
	s.cancel()
	for _, tg := range targets {
		tg.stop()
	}
	return nil
}

// histogram slots of a target, in the order of hists.
const (
	hUser = iota
	hKernel
	hHost
	hSend
	hQdisc
	hReceive
	nHist
)

var histSuffix = [nHist]string{"", "/" + catalog.PingKernelRTT, "/" + catalog.PingHostDelay, "/" + catalog.PingSend,
	"/" + catalog.PingQdisc, "/" + catalog.PingReceive}

// target is one pinged host: its pinger goroutine and what it measured
// since the last Collect.
type target struct {
	spec    Target
	namedBy []string
	id      string
	metrics []catalog.Metric

	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	pinger     *probe.Pinger // the running one, nil between attempts
	hists      [nHist]*loglinear.Histogram
	outcomes   []bool // ring of the latest echoes: true = lost
	next       int    // ring position
	filled     int
	jitter     float64 // RFC 3550 estimate, ns
	lastRTT    time.Duration
	haveLast   bool
	localDrops uint64 // cumulative
	// sent and lost count echoes with a known outcome since the source
	// started (cumulative, like every counter): they survive a pinger's
	// restart so the agent's increases never go backwards.
	sent, lost uint64
}

func newTarget(t Target, namedBy []string, window int) *target {
	tg := &target{spec: t, namedBy: namedBy, id: t.ID(), outcomes: make([]bool, window)}
	tg.metrics = catalog.PingTarget(tg.id, t.Host, namedBy...)
	tg.resetHists()
	return tg
}

func (tg *target) resetHists() {
	for i := range tg.hists {
		tg.hists[i] = loglinear.New()
	}
}

func (tg *target) start(parent context.Context, opts Options, log *slog.Logger) {
	ctx, cancel := context.WithCancel(parent)
	tg.cancel, tg.done = cancel, make(chan struct{})
	go func() {
		defer close(tg.done)
		tg.loop(ctx, opts, log.With("target", tg.id))
	}()
}

func (tg *target) stop() {
	if tg.cancel == nil {
		return
	}
	tg.cancel()
	<-tg.done
}

// loop resolves the host, opens a pinger and runs it, starting over after
// a failure, until ctx ends.
func (tg *target) loop(ctx context.Context, opts Options, log *slog.Logger) {
	for ctx.Err() == nil {
		err := tg.runOnce(ctx, opts)
		if ctx.Err() != nil {
			return
		}
		log.Warn("ping: target failed; retrying", "host", tg.spec.Host, "err", err, "in", opts.Retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(opts.Retry):
		}
	}
}

func (tg *target) runOnce(ctx context.Context, opts Options) error {
	addr, err := netip.ParseAddr(tg.spec.Host)
	if err != nil {
		// Names resolve in the agent's own namespace, once per (re)start.
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", tg.spec.Host)
		if err != nil {
			return fmt.Errorf("resolve: %w", err)
		}
		if len(addrs) == 0 {
			return fmt.Errorf("resolve %s: no addresses", tg.spec.Host)
		}
		addr = addrs[0]
		for _, a := range addrs {
			if a.Unmap().Is4() { // prefer IPv4, as ping(8) does
				addr = a
				break
			}
		}
	}
	p, err := probe.Open(probe.Options{Netns: opts.Netns, Target: addr, Interval: opts.Interval, Timeout: opts.Timeout, Size: opts.Size})
	if err != nil {
		return err
	}
	defer p.Close()
	tg.mu.Lock()
	tg.pinger = p
	tg.mu.Unlock()
	defer func() {
		tg.mu.Lock()
		tg.pinger = nil
		tg.mu.Unlock()
	}()
	err = p.Run(ctx, tg.record)
	if err == nil && ctx.Err() == nil {
		err = fmt.Errorf("pinger stopped")
	}
	return err
}

func (tg *target) record(r probe.Result) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.outcomes[tg.next] = r.Lost
	tg.next = (tg.next + 1) % len(tg.outcomes)
	tg.filled = min(tg.filled+1, len(tg.outcomes))
	tg.sent++
	if r.LocalDrop {
		tg.localDrops++
	}
	if r.Lost {
		tg.lost++
		return
	}
	tg.hists[hUser].Record(uint64(r.UserRTT))
	rtt := r.UserRTT
	if r.HasKernel {
		rtt = r.KernelRTT
		tg.hists[hKernel].Record(uint64(r.KernelRTT))
		tg.hists[hHost].Record(uint64(r.HostDelay))
		tg.hists[hReceive].Record(uint64(r.Receive))
	}
	if r.HasSched {
		tg.hists[hSend].Record(uint64(r.Send))
		tg.hists[hQdisc].Record(uint64(r.Qdisc))
	}
	if tg.haveLast {
		d := math.Abs(float64(rtt - tg.lastRTT))
		tg.jitter += (d - tg.jitter) / 16
	}
	tg.lastRTT, tg.haveLast = rtt, true
}

// drain moves the interval's measurements into r and returns the user RTT
// p99 in ms (NaN without replies). A target not being pinged right now (its
// name does not resolve, its socket failed) reports nothing: UNKNOWN, not
// a healthy-looking zero.
func (tg *target) drain(r *source.Reading) float64 {
	tg.mu.Lock()
	if tg.pinger == nil {
		// What was recorded before the pinger stopped stays for the next
		// drain, so the histograms keep matching sent - lost.
		tg.mu.Unlock()
		return math.NaN()
	}
	hists := tg.hists
	tg.resetHists()
	lost := 0
	for i := range tg.filled {
		if tg.outcomes[i] {
			lost++
		}
	}
	loss := 0.0
	if tg.filled > 0 {
		loss = 100 * float64(lost) / float64(tg.filled)
	}
	jitter, drops, sent, lostTotal := tg.jitter, tg.localDrops, tg.sent, tg.lost
	tg.mu.Unlock()

	for i, h := range hists {
		r.Histograms[tg.id+histSuffix[i]] = h
	}
	r.Gauges[tg.id+"/"+catalog.PingLoss] = loss
	r.Gauges[tg.id+"/"+catalog.PingJitter] = jitter / 1e6
	r.Counters[tg.id+"/"+catalog.PingLocalDrops] = drops
	r.Counters[tg.id+"/"+catalog.PingSent] = sent
	r.Counters[tg.id+"/"+catalog.PingLost] = lostTotal
	if hists[hUser].Count == 0 {
		return math.NaN()
	}
	return hists[hUser].Quantile(0.99) / 1e6
}
