// Package push sends the export to the receivers an operator configures
// (Prometheus remote write, OTLP): the leading collector takes a snapshot
// of each receiver's scope every --export.push-interval and appends it to
// that receiver's bounded on-disk queue; a shipper per receiver, on every
// collector, sends its queue's records in order, removing each only once
// the receiver took it.
//
// Nothing lost, nothing doubled: a snapshot's samples all carry its Now
// (the database's clock, shared by every collector), so a record sent
// again after a lost answer or a restart is the same samples at the same
// time, which receivers take as duplicates; records are fsync'd before
// they count as queued, so a restart loses nothing acknowledged; a
// receiver outage only grows the queue (to its bound, past which the
// oldest are dropped and counted). Only one collector of those sharing a
// database takes snapshots (collector/leader, its own lock and term
// table), so no series is pushed twice from two places; a collector that
// loses the lead still ships what it queued.
package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/remotewrite"
	"github.com/nbs-project/nbs/collector/leader"
	"github.com/nbs-project/nbs/collector/store"
)

// Constructor makes the Sender of a receiver of one type.
type Constructor func(r export.Receiver) (export.Sender, error)

// Senders maps a receiver type to its constructor. "otlp" is
// collector/export/otlp's New, added where the collector is wired.
type Senders map[string]Constructor

// DefaultSenders are the types this package can send itself.
func DefaultSenders() Senders {
	return Senders{"remote_write": func(r export.Receiver) (export.Sender, error) { return remotewrite.New(r, nil) }}
}

// Gatherer takes a snapshot of a scope (export.Exporter).
type Gatherer interface {
	Gather(ctx context.Context, scope store.Scope) (export.Snapshot, error)
}

// recorder is the exporter's ledger of exports, for its status page.
type recorder interface {
	Record(kind string, snap export.Snapshot, took time.Duration)
}

const (
	// leaderLockID is the advisory lock whose holder takes the snapshots
	// ("nbs" and a number of its own: alerts hold 0x…a1).
	leaderLockID = 0x6e6273_e1
	leaderTable  = "export_push_leader"
	leaderPing   = 5 * time.Second
)

// Pusher runs the receivers.
type Pusher struct {
	cfg       Config
	g         Gatherer
	receivers []*receiver
	elector   *leader.Elector
	log       *slog.Logger
	m         *metrics
	// backoff between attempts of one record.
	backoff backoff
}

type receiver struct {
	r     export.Receiver
	scope store.Scope
	// match is the selector in its canonical form: receivers with the
	// same one share a snapshot.
	match  string
	sender export.Sender
	q      *queue
	// prev is the last snapshot this term queued: series it had that the
	// next lacks get a staleness marker. Only the lead goroutine uses it.
	prev export.Snapshot

	// What the status page shows (GET /api/v1/export/status).
	mu          sync.Mutex
	lastSuccess time.Time
	lastError   string
	sent        int64
	dropped     int64
}

// note records an outcome for the status page: sent and dropped samples,
// and the error of a failure (kept until a success).
func (r *receiver) note(sent, dropped int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent += int64(sent)
	r.dropped += int64(dropped)
	switch {
	case err != nil:
		r.lastError = strings.ToValidUTF8(err.Error()[:min(len(err.Error()), 512)], "")
	case sent > 0:
		r.lastError = ""
	}
	if sent > 0 {
		r.lastSuccess = time.Now()
	}
}

// New opens each receiver's queue (what an earlier run left is shipped
// first) and makes its sender. pool is for the leader election.
func New(pool *pgxpool.Pool, g Gatherer, cfg Config, rs []export.Receiver, senders Senders, reg prometheus.Registerer, log *slog.Logger) (*Pusher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pusher{cfg: cfg, g: g, log: log, m: newMetrics(), backoff: backoff{min: time.Second, max: cfg.MaxBackoff}}
	for _, r := range rs {
		mk := senders[r.Type]
		if mk == nil {
			return nil, fmt.Errorf("push receiver %s: type %s is not available in this collector", r.Name, r.Type)
		}
		s, err := mk(r)
		if err != nil {
			return nil, fmt.Errorf("push receiver %s: %w", r.Name, err)
		}
		sel, err := access.ParseSelector(r.Match)
		if err != nil {
			return nil, fmt.Errorf("push receiver %s: match: %w", r.Name, err)
		}
		var scope store.Scope = store.All{}
		if len(sel) > 0 {
			scope = selectorScope(sel)
		}
		name := r.Name
		rcv := &receiver{r: r, scope: scope, match: sel.String(), sender: s}
		rcv.q, err = openQueue(filepath.Join(cfg.QueueDir, name), cfg.QueueMaxBytes, func(reason string, samples int) {
			p.m.dropped.WithLabelValues(name, reason).Add(float64(samples))
			if samples > 0 {
				rcv.note(0, samples, nil)
				log.Warn("push queue dropped a snapshot", "receiver", name, "reason", reason, "samples", samples)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("push receiver %s: %w", r.Name, err)
		}
		p.receivers = append(p.receivers, rcv)
		p.m.init(name)
	}
	p.m.queues = p.receivers
	if reg != nil {
		if err := reg.Register(p.m); err != nil {
			return nil, fmt.Errorf("push metrics: %w", err)
		}
	}
	host, _ := os.Hostname()
	p.elector = leader.New(pool, leader.Config{Name: "export push leader", LockID: leaderLockID, Table: leaderTable,
		Holder: fmt.Sprintf("%s pid %d", host, os.Getpid()), Retry: 5 * time.Second, Ping: leaderPing}, log)
	return p, nil
}

// Run ships every receiver's queue and, while this collector leads, fills
// them, until ctx ends. Without receivers it returns at once.
func (p *Pusher) Run(ctx context.Context) {
	if len(p.receivers) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, r := range p.receivers {
		wg.Go(func() { p.ship(ctx, r) })
	}
	p.elector.Run(ctx, p.lead, nil)
	wg.Wait()
}

// Status is each receiver's state on this collector, for the export's
// status page (export.Exporter.SetReceivers).
func (p *Pusher) Status() []export.ReceiverStatus {
	out := make([]export.ReceiverStatus, 0, len(p.receivers))
	for _, r := range p.receivers {
		bytes, _, oldest := r.q.stats()
		st := export.ReceiverStatus{Name: r.r.Name, Type: r.r.Type, URL: r.r.URL, QueueBytes: bytes}
		if !oldest.IsZero() {
			st.QueueOldest = &oldest
		}
		r.mu.Lock()
		if !r.lastSuccess.IsZero() {
			t := r.lastSuccess
			st.LastSuccess = &t
		}
		st.LastError, st.Sent, st.Dropped = r.lastError, r.sent, r.dropped
		r.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Leading reports whether this collector takes the snapshots.
func (p *Pusher) Leading() bool { return p.elector != nil && p.elector.Leading() }

// lead takes a snapshot per receiver every interval while this collector
// leads.
func (p *Pusher) lead(ctx context.Context, _ leader.Term) error {
	p.m.leader.Set(1)
	defer p.m.leader.Set(0)
	defer func() {
		for _, r := range p.receivers {
			r.prev = export.Snapshot{}
		}
	}()
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		// Receivers with the same match share one snapshot.
		taken := map[string]export.Snapshot{}
		for _, r := range p.receivers {
			p.snapshot(ctx, r, taken)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil
		}
	}
}

func (p *Pusher) snapshot(ctx context.Context, r *receiver, taken map[string]export.Snapshot) {
	snap, ok := taken[r.match]
	if !ok {
		var err error
		began := time.Now()
		if snap, err = p.g.Gather(ctx, r.scope); err != nil {
			if ctx.Err() == nil {
				p.m.gatherErrors.WithLabelValues(r.r.Name).Inc()
				p.log.Warn("push: export snapshot", "receiver", r.r.Name, "err", err)
			}
			return
		}
		taken[r.match] = snap
		if rec, ok := p.g.(recorder); ok {
			rec.Record(r.r.Name, snap, time.Since(began))
		}
	} else if rec, ok := p.g.(recorder); ok {
		rec.Record(r.r.Name, snap, 0)
	}
	// A term can end between the snapshot and here (its context says so):
	// the successor takes its own, so this one is not queued.
	if ctx.Err() != nil {
		return
	}
	// Staleness markers are remote write's (a NaN of Prometheus's own
	// bits); OTLP would store them as values.
	if r.r.Type == "remote_write" {
		marked := withStaleMarkers(r.prev, snap)
		r.prev = snap
		snap = marked
	}
	if len(snap.Families) == 0 {
		return
	}
	if err := r.q.append(snap); err != nil {
		p.log.Warn("push: queue the snapshot", "receiver", r.r.Name, "err", err)
	}
}

// staleNaN is Prometheus's staleness marker: a series' sample with this
// value ends it at once, as a scrape that no longer has it does, rather
// than leaving it in queries for the 5 min lookback.
var staleNaN = math.Float64frombits(0x7ff0000000000002)

// withStaleMarkers is snap with a staleness marker, at snap's time, for
// each series of prev that snap lacks (a node gone from the window, a
// counter that stopped moving). After a restart or a failover prev is
// empty: series that ended then fade after the receiver's lookback.
func withStaleMarkers(prev, snap export.Snapshot) export.Snapshot {
	if len(prev.Families) == 0 {
		return snap
	}
	key := func(m *dto.Metric) string {
		var b strings.Builder
		for _, l := range m.GetLabel() {
			b.WriteString(l.GetName())
			b.WriteByte(0)
			b.WriteString(l.GetValue())
			b.WriteByte(0)
		}
		return b.String()
	}
	now := map[string]map[string]bool{}
	for _, mf := range snap.Families {
		keys := make(map[string]bool, len(mf.Metric))
		for _, m := range mf.Metric {
			keys[key(m)] = true
		}
		now[mf.GetName()] = keys
	}
	out := export.Snapshot{Now: snap.Now, Stats: snap.Stats, Families: slices.Clone(snap.Families)}
	index := map[string]int{}
	for i, mf := range out.Families {
		index[mf.GetName()] = i
	}
	for _, mf := range prev.Families {
		keys := now[mf.GetName()]
		var gone []*dto.Metric
		for _, m := range mf.Metric {
			if keys[key(m)] {
				continue
			}
			stale := &dto.Metric{Label: m.Label}
			if mf.GetType() == dto.MetricType_COUNTER {
				stale.Counter = &dto.Counter{Value: proto.Float64(staleNaN)}
			} else {
				stale.Gauge = &dto.Gauge{Value: proto.Float64(staleNaN)}
			}
			gone = append(gone, stale)
		}
		if len(gone) == 0 {
			continue
		}
		if i, ok := index[mf.GetName()]; ok {
			// A new family: snap's is prev next time, without markers.
			f := out.Families[i]
			out.Families[i] = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Unit: f.Unit, Metric: append(slices.Clip(f.Metric), gone...)}
			continue
		}
		index[mf.GetName()] = len(out.Families)
		out.Families = append(out.Families, &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Metric: gone})
	}
	return out
}

// ship sends r's queue head first, until ctx ends.
func (p *Pusher) ship(ctx context.Context, r *receiver) {
	name := r.r.Name
	attempt := 0
	for ctx.Err() == nil {
		e, ok := r.q.head()
		if !ok {
			select {
			case <-r.q.wake:
			case <-ctx.Done():
			}
			continue
		}
		snap, err := r.q.read(e)
		switch {
		case errors.Is(err, errGone):
			continue
		case errors.Is(err, errCorrupt):
			p.m.dropped.WithLabelValues(name, "corrupt").Add(float64(e.samples))
			r.note(0, e.samples, err)
			p.log.Warn("push: a queued snapshot cannot be read; dropped", "receiver", name, "err", err, "samples", e.samples)
			p.remove(r, e)
			continue
		case err != nil:
			// The disk failed us: retried like a send.
		default:
			err = r.sender.Send(ctx, snap)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil || export.IsPermanent(err) {
			attempt = 0
			refused := 0
			if err != nil {
				refused = e.samples
				var partial interface{ RejectedSamples() int }
				if errors.As(err, &partial) {
					refused = min(partial.RejectedSamples(), e.samples)
				}
				p.m.dropped.WithLabelValues(name, "refused").Add(float64(refused))
				p.log.Warn("push: the receiver refused samples; dropped", "receiver", name, "samples", refused, "of", e.samples,
					"snapshot", e.now, "err", err)
			}
			if refused < e.samples {
				p.m.sent.WithLabelValues(name).Add(float64(e.samples - refused))
				p.m.lastSuccess.WithLabelValues(name).Set(float64(time.Now().UnixMilli()) / 1000)
			}
			r.note(e.samples-refused, refused, err)
			p.remove(r, e)
			continue
		}
		p.m.failed.WithLabelValues(name).Add(float64(e.samples))
		r.note(0, 0, err)
		wait := p.backoff.next(attempt)
		attempt++
		p.log.Warn("push: send failed; retrying", "receiver", name, "err", err, "attempt", attempt, "in", wait.Round(time.Millisecond),
			"snapshot", e.now)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

func (p *Pusher) remove(r *receiver, e entry) {
	if err := r.q.remove(e); err != nil {
		p.log.Warn("push: remove a queue record", "receiver", r.r.Name, "err", err)
	}
}

// backoff is exponential with jitter: attempt n waits between half and
// all of min·2ⁿ, capped at max, so collectors and receivers recovering
// together do not retry in lockstep.
type backoff struct{ min, max time.Duration }

func (b backoff) next(attempt int) time.Duration {
	d := b.max
	if attempt < 32 {
		d = min(b.min<<attempt, b.max)
	}
	return d/2 + rand.N(d/2+1)
}

// selectorScope is a receiver's match: the nodes whose labels hold the
// selector, of every tenant (the collector's own scope narrowed).
type selectorScope access.Selector

func (s selectorScope) LabelClause(column string, argN int) (string, []any) {
	return fmt.Sprintf("%s @> $%d::jsonb", column, argN), []any{access.Selector(s).JSON()}
}
func (s selectorScope) Sees(labels map[string]string) bool { return access.Selector(s).Matches(labels) }
func (s selectorScope) SeesAll() bool                      { return false }
