package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrFenced says another process took the lead since this term began.
var ErrFenced = errors.New("another process took the lead")

// Config says what an Elector campaigns for.
type Config struct {
	// Name is the lock connection's application_name and names the lead in
	// logs and errors, e.g. "alert leader".
	Name string
	// LockID is the advisory lock whose holder leads.
	LockID int64
	// Table holds the term record: one row, id = 1, with columns
	// epoch bigint, holder text, since and heartbeat timestamptz.
	Table string
	// Holder says who this process is; the leader records it in Table.
	Holder string
	// Retry is how often a follower tries the lock: the bound on failover
	// time after the leader's session ends.
	Retry time.Duration
	// Ping is how often the leader proves its connection alive and its
	// epoch current: the bound on how long a deposed leader keeps leading.
	Ping time.Duration
	// Listen names channels LISTENed on the lock connection while leading,
	// so a leader that stops hearing them is exactly one that lost the lock.
	Listen []string
}

// Elector campaigns for the lead until its Run ends.
type Elector struct {
	cfg     Config
	table   string // quoted
	session Session
	log     *slog.Logger
	leading atomic.Bool
}

// New prepares an Elector; it connects when Run starts.
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) *Elector {
	return &Elector{cfg: cfg, table: pgx.Identifier{cfg.Table}.Sanitize(), log: log,
		session: Session{Pool: pool, Name: "nbs-collector " + cfg.Name, Retry: cfg.Retry, Log: log}}
}

// Leading reports whether this process leads right now.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Term is one stretch of leadership.
type Term struct {
	Epoch int64
	table string
}

// Fence proves, inside the caller's transaction, that this term is still
// the newest: a write fenced in the same transaction cannot overwrite a
// successor's. It returns ErrFenced when another process took the lead.
func (t Term) Fence(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, `UPDATE `+t.table+` SET heartbeat = now() WHERE id = 1 AND epoch = $1`, t.Epoch)
	if err != nil {
		return fmt.Errorf("check the leader epoch: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// Run campaigns until ctx ends. Each time this process wins, lead runs with
// a context that ends when the lead is lost (the lock connection failed,
// the epoch moved on, ctx ended); the term ends when lead returns. notify
// receives the notifications of Config.Listen while leading, on the
// Elector's goroutine: it must not block.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, t Term) error, notify func(*pgconn.Notification)) {
	e.session.Run(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return e.campaign(ctx, conn, lead, notify)
	})
}

func (e *Elector) campaign(ctx context.Context, conn *pgx.Conn, lead func(context.Context, Term) error, notify func(*pgconn.Notification)) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, e.cfg.LockID).Scan(&got); err != nil {
			return fmt.Errorf("try the %s lock: %w", e.cfg.Name, err)
		}
		if got {
			return e.lead(ctx, conn, lead, notify)
		}
		select {
		case <-time.After(e.cfg.Retry):
		case <-ctx.Done():
			return nil
		}
	}
}

// lead takes the next epoch and runs the caller's lead until it returns or
// the lock connection, a heartbeat or ctx says the lead is lost.
func (e *Elector) lead(ctx context.Context, conn *pgx.Conn, lead func(context.Context, Term) error, notify func(*pgconn.Notification)) error {
	t := Term{table: e.table}
	err := conn.QueryRow(ctx, `UPDATE `+e.table+` SET epoch = epoch + 1, holder = $1, since = now(), heartbeat = now()
		WHERE id = 1 RETURNING epoch`, e.cfg.Holder).Scan(&t.Epoch)
	if err != nil {
		return fmt.Errorf("take the %s epoch: %w", e.cfg.Name, err)
	}
	for _, ch := range e.cfg.Listen {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	e.log.Info("leading", "lead", e.cfg.Name, "epoch", t.Epoch)
	leadCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	leadErr := make(chan error, 1)
	e.leading.Store(true)
	defer func() {
		e.leading.Store(false)
		cancel()
		wg.Wait()
		e.log.Info("stopped leading", "lead", e.cfg.Name, "epoch", t.Epoch)
	}()
	wg.Go(func() { leadErr <- lead(leadCtx, t) })

	lastPing := time.Now()
	for {
		select {
		case err := <-leadErr:
			return err
		default:
		}
		waitCtx, stop := context.WithTimeout(ctx, e.cfg.Ping)
		n, err := conn.WaitForNotification(waitCtx)
		stop()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !pgconn.Timeout(err) {
			return fmt.Errorf("%s connection: %w", e.cfg.Name, err)
		}
		if n != nil && notify != nil {
			notify(n)
		}
		if time.Since(lastPing) >= e.cfg.Ping {
			lastPing = time.Now()
			if err := e.heartbeat(ctx, conn, t.Epoch); err != nil {
				return err
			}
		}
	}
}

// heartbeat proves the lock connection alive and the epoch still ours.
func (e *Elector) heartbeat(ctx context.Context, conn *pgx.Conn, epoch int64) error {
	pingCtx, cancel := context.WithTimeout(ctx, 2*e.cfg.Ping)
	defer cancel()
	tag, err := conn.Exec(pingCtx, `UPDATE `+e.table+` SET heartbeat = now() WHERE id = 1 AND epoch = $1`, epoch)
	if err != nil {
		return fmt.Errorf("%s heartbeat: %w", e.cfg.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrFenced
	}
	return nil
}

// Status is who leads, as the leader itself recorded it.
type Status struct {
	Holder    string    `json:"holder"`
	Epoch     int64     `json:"epoch"`
	Since     time.Time `json:"since"`
	Heartbeat time.Time `json:"heartbeat"`
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadStatus reads the term record of a table an Elector campaigns with.
func ReadStatus(ctx context.Context, q Querier, table string) (Status, error) {
	var s Status
	err := q.QueryRow(ctx, `SELECT holder, epoch, since, heartbeat FROM `+pgx.Identifier{table}.Sanitize()+` WHERE id = 1`).
		Scan(&s.Holder, &s.Epoch, &s.Since, &s.Heartbeat)
	if err != nil {
		return s, fmt.Errorf("read the leader of %s: %w", table, err)
	}
	return s, nil
}
