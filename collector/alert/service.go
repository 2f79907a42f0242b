package alert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
	"github.com/nbs-project/nbs/collector/alert/notify/webhook"
	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
)

const (
	// leaderLockID is the advisory lock whose holder evaluates alerts.
	leaderLockID = 0x6e6273_a1
	// wakeChannel carries "these nodes have new reports" from every
	// collector to the leader; rulesChannel says the rules changed.
	wakeChannel  = "nbs_alert_wake"
	rulesChannel = "nbs_alert_rules"
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
	holder     string

	hook     chan []int32
	overflow atomic.Bool
	leading  atomic.Bool
	dirty    dirtySet
	rulesCh  chan struct{}
	sendWake chan struct{}
}

// New builds the service; it reads the webhook secret, so a missing or
// short secret fails the collector's start rather than the first page.
func New(st *store.Store, cfg Config, log *slog.Logger) (*Service, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, st: st, repo: repo{st.Pool()}, log: log, am: alertmanager.New(nil),
		hook: make(chan []int32, hookQueue), dirty: dirtySet{wake: make(chan struct{}, 1)},
		rulesCh: make(chan struct{}, 1), sendWake: make(chan struct{}, 1)}
	if cfg.WebhookURL != "" {
		secret, err := readSecret(cfg.WebhookSecretFile)
		if err != nil {
			return nil, err
		}
		s.webhook = webhook.New(nil, secret)
	}
	host, _ := os.Hostname()
	s.holder = fmt.Sprintf("%s pid %d %s", host, os.Getpid(), cfg.ExternalURL)
	return s, nil
}

// SetThresholds lets descriptions quote the effective thresholds (operator
// overrides included) rather than the catalogue defaults.
func (s *Service) SetThresholds(t api.Thresholds) { s.thresholds = t }

// Leading reports whether this collector evaluates alerts right now.
func (s *Service) Leading() bool { return s.leading.Load() }

// OnStored is the writer's hook. It runs on a database writer, so it never
// blocks: the node ids go to a bounded queue, and if that is full the
// forwarder is told to sweep every node instead (nothing is lost, since the
// evaluator reads the reports themselves from PostgreSQL).
func (s *Service) OnStored(reports []store.Report) {
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
	wg.Go(func() { s.elect(ctx) })
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
		if s.leading.Load() {
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
		_, err := s.repo.pool.Exec(ctx, `SELECT pg_notify($1, '*')`, wakeChannel)
		return err
	}
	for _, payload := range wakePayloads(ids) {
		if _, err := s.repo.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, wakeChannel, payload); err != nil {
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

// elect campaigns for the advisory lock on a dedicated connection (a pooled
// one could be recycled, silently dropping the lock) and leads while it
// holds it. When the leader's process or connection dies, PostgreSQL
// releases the lock and the next collector to try takes over.
func (s *Service) elect(ctx context.Context) {
	backoff := s.cfg.LeaderRetry
	for ctx.Err() == nil {
		err := s.campaign(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("alert leader election", "err", err, "retry_in", backoff)
		}
		select {
		case <-time.After(backoff + rand.N(backoff/2+1)):
		case <-ctx.Done():
			return
		}
		if err != nil {
			backoff = min(2*backoff, 30*time.Second)
		} else {
			backoff = s.cfg.LeaderRetry
		}
	}
}

func (s *Service) campaign(ctx context.Context) error {
	cfg := s.repo.pool.Config().ConnConfig.Copy()
	// The server notices a vanished leader host by TCP keepalive; without
	// these it may take the kernel's default two hours to free the lock.
	cfg.RuntimeParams["tcp_keepalives_idle"] = "5"
	cfg.RuntimeParams["tcp_keepalives_interval"] = "2"
	cfg.RuntimeParams["tcp_keepalives_count"] = "3"
	cfg.RuntimeParams["application_name"] = "nbs-collector alert leader"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect for leader election: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx) //nolint:errcheck // closing releases the lock either way
	}()
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, leaderLockID).Scan(&got); err != nil {
			return fmt.Errorf("try the alert leader lock: %w", err)
		}
		if got {
			return s.lead(ctx, conn)
		}
		select {
		case <-time.After(s.cfg.LeaderRetry):
		case <-ctx.Done():
			return nil
		}
	}
}

var errFenced = errors.New("another collector took over alert evaluation")

// lead runs the evaluator and the sender until the lock connection fails,
// the epoch shows another leader, or ctx ends. The lock connection doubles
// as the LISTEN connection, so a leader that stops hearing notifications is
// exactly one that lost its lock.
func (s *Service) lead(ctx context.Context, conn *pgx.Conn) error {
	var epoch int64
	err := conn.QueryRow(ctx, `UPDATE alert_leader SET epoch = epoch + 1, holder = $1, since = now(), heartbeat = now()
		WHERE id = 1 RETURNING epoch`, s.holder).Scan(&epoch)
	if err != nil {
		return fmt.Errorf("take the alert leader epoch: %w", err)
	}
	for _, ch := range []string{wakeChannel, rulesChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	s.log.Info("leading alert evaluation", "epoch", epoch)
	leadCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	evalErr := make(chan error, 1)
	s.leading.Store(true)
	defer func() {
		s.leading.Store(false)
		cancel()
		wg.Wait()
		s.log.Info("stopped leading alert evaluation", "epoch", epoch)
	}()
	wg.Go(func() { evalErr <- s.evaluate(leadCtx, epoch) })
	wg.Go(func() { s.deliver(leadCtx) })

	lastPing := time.Now()
	for {
		select {
		case err := <-evalErr:
			return err
		default:
		}
		waitCtx, stop := context.WithTimeout(ctx, leaderPing)
		n, err := conn.WaitForNotification(waitCtx)
		stop()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !pgconn.Timeout(err) {
			return fmt.Errorf("alert leader connection: %w", err)
		}
		if n != nil {
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
		if time.Since(lastPing) >= leaderPing {
			lastPing = time.Now()
			if err := s.heartbeat(ctx, conn, epoch); err != nil {
				return err
			}
		}
	}
}

// heartbeat proves the lock connection alive and the epoch still ours.
func (s *Service) heartbeat(ctx context.Context, conn *pgx.Conn, epoch int64) error {
	pingCtx, cancel := context.WithTimeout(ctx, 2*leaderPing)
	defer cancel()
	tag, err := conn.Exec(pingCtx, `UPDATE alert_leader SET heartbeat = now() WHERE id = 1 AND epoch = $1`, epoch)
	if err != nil {
		return fmt.Errorf("alert leader heartbeat: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errFenced
	}
	return nil
}
