package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/errkind"
)

// ReadPool bounds a pool that serves heavy reads (reports, long series,
// evidence) apart from the primary's pool, so that a caller asking for a
// lot waits for these connections and never for the writers' or the token
// checks'.
type ReadPool struct {
	// Size is the most connections the pool opens (per database: the
	// primary's read pool and a replica's each have this many).
	Size int32
	// StatementTimeout is PostgreSQL's statement_timeout on them: the
	// server cancels a read that runs longer, so an oversized request
	// costs at most this much database time per statement.
	StatementTimeout time.Duration
}

// OpenReadPool connects a bounded pool for heavy reads to url: the
// primary's (the same database as Open's, through other connections) or a
// read-only replica's, such as a streaming-replication standby (which
// replays the primary's migrations, so none are applied here). A database
// that does not answer yet is not an error: reads fail, or Reads asks the
// primary, until it does.
func OpenReadPool(ctx context.Context, url string, rp ReadPool, log *slog.Logger) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse read database url: %w", err)
	}
	cfg.MaxConns = max(rp.Size, 1)
	defaultConnectTimeout(cfg)
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	// Set at connect, so every statement on these connections has it and
	// none on the primary's pool does.
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(rp.StatementTimeout.Milliseconds(), 10)
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "nbs-collector reads"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create read database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		log.Warn("the read database does not answer yet",
			"host", cfg.ConnConfig.Host, "port", cfg.ConnConfig.Port, "err", err)
	}
	return newStore(pool, log), nil
}

// DefaultConnectTimeout bounds a connection attempt whose URL sets no
// connect_timeout: a database host that vanished (a failover, a network
// partition) fails requests in seconds instead of after the kernel's TCP
// timeout of minutes.
const DefaultConnectTimeout = 5 * time.Second

func defaultConnectTimeout(cfg *pgxpool.Config) {
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
}

// Reads is the primary Store with its heavy queries (series, histograms,
// events and their counterparts, and the rollups, definitions and bad
// minutes reports read) sent to read pools (OpenReadPool): a replica's
// when there is one, else the primary's. Everything else, and above all
// what must see its own writes (nodes, the tree's latest values, access,
// overrides) or must never wait behind a report (ingest, token checks),
// stays on the primary's own pool. A replica is behind by its replay
// lag, which these reads tolerate. When the replica cannot be reached, a
// query goes to the primary's read pool instead: a standby down costs the
// primary load, not answers, and still not the writers' connections.
type Reads struct {
	*Store
	heavy   *Store // the primary's read pool
	replica *Store // nil without one
	timeout time.Duration
	log     *slog.Logger
	down    atomic.Bool // the replica's last query failed to reach it
}

// NewReads sends the heavy queries of primary to replica (nil: none) and,
// without it or while it cannot be reached, to heavy, the primary's read
// pool. rp is what both were opened with.
func NewReads(primary, heavy, replica *Store, rp ReadPool, log *slog.Logger) *Reads {
	return &Reads{Store: primary, heavy: heavy, replica: replica, timeout: rp.StatementTimeout, log: log}
}

// unreachable reports errors that say nothing about the query and all
// about the replica: no connection, a server shutting down or still
// starting, or a query cancelled because replay needed its rows. A
// statement cancelled by its timeout is about the query: it would take as
// long on the primary.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "53": // connection, resources
			return true
		case "57": // operator intervention: shutdown, recovery conflict; not a statement timeout
			return pgErr.Code != "57014"
		}
		return pgErr.Code == "40001" // a standby cancels queries that conflict with replay this way
	}
	return !errors.Is(err, ErrNotFound)
}

// heavyRead runs q on the replica, and on the primary's read pool when
// there is no replica or it cannot be reached.
func heavyRead[T any](ctx context.Context, r *Reads, what string, q func(*Store) (T, error)) (T, error) {
	if r.replica != nil {
		v, err := q(r.replica)
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			if err == nil && r.down.Swap(false) {
				r.log.Info("the read database answers again", "query", what)
			}
			return v, r.tooSlow(ctx, what, err)
		}
		if !r.down.Swap(true) {
			r.log.Warn("the read database cannot be reached; reads go to the primary", "query", what, "err", err)
		}
	}
	v, err := q(r.heavy)
	if err != nil && ctx.Err() == nil && DatabaseDown(err) {
		// A restart or failover of the database leaves the pool's idle
		// connections dead, and the first query on each finds out; a read
		// is safe to ask again, and the pool opens a fresh connection.
		v, err = q(r.heavy)
	}
	return v, r.tooSlow(ctx, what, err)
}

// heavyReadOK is heavyRead for a read that may decline (ok false: the
// caller reads another way).
func heavyReadOK[T any](ctx context.Context, r *Reads, what string, q func(*Store) (T, bool, error)) (T, bool, error) {
	type answer struct {
		v  T
		ok bool
	}
	a, err := heavyRead(ctx, r, what, func(s *Store) (answer, error) {
		v, ok, err := q(s)
		return answer{v, ok}, err
	})
	return a.v, a.ok, err
}

// tooSlow turns a statement the server cancelled while its caller still
// waited — its statement_timeout — into an error that says so and what to
// do; retrying the same request would only be cancelled again.
func (r *Reads) tooSlow(ctx context.Context, what string, err error) error {
	if err == nil || ctx.Err() != nil || !queryCanceled(err) {
		return err
	}
	return errkind.Errorf(errkind.Timeout, "reading the %s took longer than %s, the most one database read may take (--reads.statement-timeout): ask for a shorter period, fewer nodes (a narrower selector) or a coarser step",
		what, r.timeout)
}

func (r *Reads) Series(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]Bucket, error) {
	return heavyRead(ctx, r, "series", func(s *Store) ([]Bucket, error) { return s.Series(ctx, nodeID, path, from, to, step) })
}

func (r *Reads) HistogramSeries(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]HistogramBucket, error) {
	return heavyRead(ctx, r, "histogram series", func(s *Store) ([]HistogramBucket, error) {
		return s.HistogramSeries(ctx, nodeID, path, from, to, step)
	})
}

func (r *Reads) Events(ctx context.Context, nodeID int32, path string, from, to time.Time, limit int) ([]StoredEvent, error) {
	return heavyRead(ctx, r, "events", func(s *Store) ([]StoredEvent, error) { return s.Events(ctx, nodeID, path, from, to, limit) })
}

func (r *Reads) Counterparts(ctx context.Context, scope Scope, except int32, space string, probes []FlowProbe, perProbe int) ([][]Counterpart, error) {
	return heavyRead(ctx, r, "events' counterparts", func(s *Store) ([][]Counterpart, error) {
		return s.Counterparts(ctx, scope, except, space, probes, perProbe)
	})
}

func (r *Reads) ReadRollups(ctx context.Context, q RollupQuery) ([]SampleRow, []HistogramRow, error) {
	type rows struct {
		s []SampleRow
		h []HistogramRow
	}
	v, err := heavyRead(ctx, r, "rollups", func(s *Store) (rows, error) {
		sr, hr, err := s.ReadRollups(ctx, q)
		return rows{sr, hr}, err
	})
	return v.s, v.h, err
}

func (r *Reads) DefinitionsOf(ctx context.Context, nodeIDs []int32) (map[string]MetricDef, error) {
	return heavyRead(ctx, r, "report's definitions", func(s *Store) (map[string]MetricDef, error) { return s.DefinitionsOf(ctx, nodeIDs) })
}

func (r *Reads) BadMinutes(ctx context.Context, nodeIDs []int32, from, to time.Time, limit int) ([]SampleRow, error) {
	return heavyRead(ctx, r, "report's incidents", func(s *Store) ([]SampleRow, error) {
		return s.BadMinutes(ctx, nodeIDs, from, to, limit)
	})
}

// ExportNodes reads on the primary's read pool, never a replica: a
// replica's lag would let two collectors behind one load balancer export
// different totals of one counter, which Prometheus would read as resets.
func (r *Reads) ExportNodes(ctx context.Context, scope Scope, since time.Time) (Export, error) {
	e, err := r.heavy.ExportNodes(ctx, scope, since)
	return e, r.tooSlow(ctx, "export", err)
}
