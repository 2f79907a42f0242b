// Package leader elects one collector among many through a PostgreSQL
// advisory lock, with a fencing epoch, and keeps the dedicated database
// sessions such work needs.
//
// A Session holds one connection outside the pool for work bound to a
// database session (an advisory lock, LISTEN) and opens a new one, after a
// backoff, when that work ends. An Elector campaigns for a lock on a
// Session; while it holds the lock it runs the caller's lead function with
// a Term whose epoch fences off a predecessor that lost the lock without
// noticing.
package leader

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxRetry caps the backoff between connections.
const maxRetry = 30 * time.Second

// Session keeps one dedicated PostgreSQL connection for work bound to a
// database session. A pooled connection would not do: the pool may recycle
// it, silently dropping a lock or a LISTEN.
type Session struct {
	// Pool supplies the connection settings, not the connection.
	Pool *pgxpool.Pool
	// Name is the connection's application_name (in pg_stat_activity) and
	// names the session in logs.
	Name string
	// Retry is the wait before reconnecting after work that ended cleanly;
	// after a failure it doubles, up to 30 s.
	Retry time.Duration
	Log   *slog.Logger
}

// Run connects and calls use with the connection until ctx ends; when use
// returns, the connection is closed and, after a backoff with jitter (so a
// fleet of collectors does not reconnect in lockstep), a new one is made.
func (s Session) Run(ctx context.Context, use func(ctx context.Context, conn *pgx.Conn) error) {
	backoff := s.Retry
	for ctx.Err() == nil {
		began := time.Now()
		err := s.once(ctx, use)
		if ctx.Err() != nil {
			return
		}
		// A session that worked for a while starts the backoff over.
		if err == nil || time.Since(began) > maxRetry {
			backoff = s.Retry
		}
		wait := backoff + rand.N(backoff/2+1)
		if err != nil {
			s.Log.Warn("database session ended; reconnecting", "session", s.Name, "err", err, "in", wait.Round(time.Millisecond))
			backoff = min(2*backoff, maxRetry)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

func (s Session) once(ctx context.Context, use func(ctx context.Context, conn *pgx.Conn) error) error {
	cfg := s.Pool.Config().ConnConfig.Copy()
	// The server notices a vanished client host by TCP keepalive; without
	// these it may take the kernel's default two hours to end the session
	// and free its lock.
	cfg.RuntimeParams["tcp_keepalives_idle"] = "5"
	cfg.RuntimeParams["tcp_keepalives_interval"] = "2"
	cfg.RuntimeParams["tcp_keepalives_count"] = "3"
	cfg.RuntimeParams["application_name"] = s.Name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect %s: %w", s.Name, err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx) //nolint:errcheck // closing ends the session (and its locks) either way
	}()
	return use(ctx, conn)
}
