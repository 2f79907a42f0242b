package alert

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
	"github.com/nbs-project/nbs/collector/alert/notify/webhook"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/leader"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

const (
	// leaderLockID is the advisory lock whose holder evaluates alerts.
	leaderLockID = 0x6e6273_a1
	// maxPayload stays under PostgreSQL's 8000-byte NOTIFY limit.
	maxPayload = 7000
	// hookQueue bounds the batches waiting between the writer and the
	// forwarder; beyond it the hook drops and asks for a full sweep.
	hookQueue = 1024
	// leaderPing is how often the leader checks its lock connection (and
	// its fencing epoch): the bound on how long a leader that lost its
	// database keeps sending.
	leaderPing = time.Second
)

// Service evaluates alert rules on stored reports and delivers alerts.
// Every collector runs one; only the leader evaluates and delivers.
type Service struct {
	cfg        Config
	st         *store.Store
	repo       repo
	log        *slog.Logger
	thresholds api.Thresholds
	am         *alertmanager.Client
	webhook    *webhook.Client
	elector    *leader.Elector
	metrics    telemetry.AlertMetrics

	hook     chan []int32
	overflow atomic.Bool
	// handover carries the reports this collector stored while it leads
	// to its evaluator; hook carries node ids otherwise.
	handover *handover
	dirty    dirtySet
	rulesCh  chan struct{}
	sendWake chan struct{}
}

// New builds the service; it reads the webhook secret, so a missing or
// short secret fails the collector's start rather than the first page.
func New(st *store.Store, cfg Config, log *slog.Logger, m *telemetry.Metrics) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, st: st, repo: repo{st.Pool()}, log: log, metrics: m.Alert, am: alertmanager.New(nil),
		hook: make(chan []int32, hookQueue), handover: newHandover(), dirty: dirtySet{wake: make(chan struct{}, 1)},
		rulesCh: make(chan struct{}, 1), sendWake: make(chan struct{}, 1)}
	if cfg.WebhookURL != "" {
		secret, err := readSecret(cfg.WebhookSecretFile)
		if err != nil {
			return nil, err
		}
		s.webhook = webhook.New(nil, secret)
	}
	host, _ := os.Hostname()
	s.elector = leader.New(st.Pool(), leader.Config{Name: "alert leader", LockID: leaderLockID, Table: leaderTable,
		Holder: fmt.Sprintf("%s pid %d %s", host, os.Getpid(), cfg.ExternalURL),
		Retry:  cfg.LeaderRetry, Ping: leaderPing, Listen: []string{wakeChannel, rulesChannel}}, log)
	return s, nil
}

// SetThresholds lets descriptions quote the effective thresholds (operator
// overrides included) rather than the catalogue defaults.
func (s *Service) SetThresholds(t api.Thresholds) { s.thresholds = t }

// Leading reports whether this collector evaluates alerts right now.
func (s *Service) Leading() bool { return s.elector.Leading() }

// OnStored is the writer's hook, called after commit with the reports that
// were new. It runs on a database writer, so it never blocks. While this
// collector leads, the reports go to its evaluator in memory (bounded; a
// report without room leaves its node to be read from PostgreSQL).
// Otherwise the node ids go to a bounded queue for the forwarder, and if
// that is full the forwarder is told to sweep every node instead. Nothing
// is lost either way: the reports are committed, and the database path
// reads whatever did not arrive in memory.
func (s *Service) OnStored(reports []store.Report) {
	if s.Leading() {
		if dropped := s.handover.put(reports); dropped > 0 {
			s.metrics.HandoverOverflow.Add(float64(dropped))
		}
		s.dirty.poke()
		return
	}
	s.forwardIDs(reports)
}

// forwardIDs queues the reports' node ids for the forwarder, or, if its
// queue is full, asks it for a sweep of every node.
func (s *Service) forwardIDs(reports []store.Report) {
	ids := make([]int32, 0, len(reports))
	seen := make(map[int32]bool, len(reports))
	for _, r := range reports {
		if !seen[r.NodeID] {
			seen[r.NodeID] = true
			ids = append(ids, r.NodeID)
		}
	}
	select {
	case s.hook <- ids:
	default:
		s.overflow.Store(true)
	}
}

// Run serves until ctx ends: the forwarder, and the election that runs the
// evaluator and the sender while this collector leads.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.forward(ctx) })
	wg.Go(func() { s.elector.Run(ctx, s.lead, s.heard) })
	wg.Wait()
}

// dirtySet is the nodes with reports the evaluator has not read yet.
type dirtySet struct {
	mu    sync.Mutex
	nodes map[int32]bool
	all   bool
	wake  chan struct{}
}

func (d *dirtySet) add(ids []int32, all bool) {
	d.mu.Lock()
	if d.nodes == nil {
		d.nodes = map[int32]bool{}
	}
	for _, id := range ids {
		d.nodes[id] = true
	}
	d.all = d.all || all
	d.mu.Unlock()
	d.poke()
}

// poke wakes the evaluator without marking anything: the hand-over has
// reports for it.
func (d *dirtySet) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dirtySet) take() (map[int32]bool, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nodes, all := d.nodes, d.all
	d.nodes, d.all = nil, false
	return nodes, all
}

// forward hands stored node ids to the evaluator: directly when this
// collector leads, through NOTIFY otherwise.
func (s *Service) forward(ctx context.Context) {
	for {
		var ids []int32
		select {
		case ids = <-s.hook:
		case <-ctx.Done():
			return
		}
	drain:
		for {
			select {
			case more := <-s.hook:
				ids = append(ids, more...)
			default:
				break drain
			}
		}
		all := s.overflow.Swap(false)
		if s.Leading() {
			s.dirty.add(ids, all)
			continue
		}
		if err := s.notifyLeader(ctx, ids, all); err != nil && ctx.Err() == nil {
			// The leader's periodic sweep reads these reports anyway.
			s.log.Warn("tell the alert leader about new reports", "err", err)
		}
	}
}

func (s *Service) notifyLeader(ctx context.Context, ids []int32, all bool) error {
	if all {
		return s.repo.notifyWake(ctx, "*")
	}
	for _, payload := range wakePayloads(ids) {
		if err := s.repo.notifyWake(ctx, payload); err != nil {
			return err
		}
	}
	return nil
}

// wakePayloads renders node ids as comma-separated decimals in chunks that
// fit a NOTIFY payload.
func wakePayloads(ids []int32) []string {
	var out []string
	var b strings.Builder
	for _, id := range ids {
		s := strconv.FormatInt(int64(id), 10)
		if b.Len()+len(s)+1 > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// parseWake reads a wake payload; "*" means every node.
func parseWake(payload string) (ids []int32, all bool) {
	if payload == "*" {
		return nil, true
	}
	for _, f := range strings.Split(payload, ",") {
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, true // unreadable: be safe and sweep
		}
		ids = append(ids, int32(id))
	}
	return ids, false
}

// lead evaluates and delivers for one term. Its context ends when this
// collector loses the lead; a database error of the evaluator restarts the
// evaluator, a fenced write ends the term.
func (s *Service) lead(ctx context.Context, term leader.Term) error {
	s.metrics.Leader.Set(1)
	defer s.metrics.Leader.Set(0)
	defer s.handBack()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { s.deliver(ctx) })
	return s.evaluate(ctx, term)
}

// handBack runs when a term ends: what the hand-over still holds (reports
// stored while this collector led, not yet evaluated) goes to the forwarder
// as node ids, so the next leader hears of them by NOTIFY rather than only
// at its sweep; missed nodes beyond the bound become a sweep of every node.
func (s *Service) handBack() {
	reports, missed, all := s.handover.take()
	for id := range missed {
		reports = append(reports, store.Report{NodeID: id})
	}
	if all {
		s.overflow.Store(true)
	}
	if len(reports) > 0 || all {
		s.forwardIDs(reports)
	}
}

// heard takes a notification the leader's lock connection received: new
// reports stored by any collector, or changed rules.
func (s *Service) heard(n *pgconn.Notification) {
	switch n.Channel {
	case wakeChannel:
		ids, all := parseWake(n.Payload)
		s.dirty.add(ids, all)
	case rulesChannel:
		select {
		case s.rulesCh <- struct{}{}:
		default:
		}
	}
}
