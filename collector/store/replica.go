package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenReplica connects to a read-only copy of the database, such as a
// streaming-replication standby, for Reads. It applies no migrations (a
// standby replays the primary's). A replica that does not answer yet is
// not an error: until it does, Reads asks the primary.
func OpenReplica(ctx context.Context, url string, log *slog.Logger) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse read database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create read database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		log.Warn("the read database does not answer; reads go to the primary until it does",
			"host", cfg.ConnConfig.Host, "port", cfg.ConnConfig.Port, "err", err)
	}
	return newStore(pool, log), nil
}

// Reads is the primary Store with its read-heavy queries (series,
// histograms, events, and the rollups reports read) sent to a replica.
// Everything else, and above all what must see its own writes (nodes,
// definitions, the tree's latest values, access, overrides), stays on the
// primary. A replica is behind by its replay lag, which these reads
// tolerate. When the replica cannot be reached, a query goes to the
// primary instead: a standby down costs the primary load, not answers.
type Reads struct {
	*Store
	replica *Store
	log     *slog.Logger
	down    atomic.Bool // the replica's last query failed to reach it
}

// NewReads sends the read-heavy queries of primary to replica.
func NewReads(primary, replica *Store, log *slog.Logger) *Reads {
	return &Reads{Store: primary, replica: replica, log: log}
}

// unreachable reports errors that say nothing about the query and all
// about the replica: no connection, a server shutting down or still
// starting, or a query cancelled because replay needed its rows.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "57", "53": // connection, operator intervention (shutdown, recovery conflict), resources
			return true
		}
		return pgErr.Code == "40001" // a standby cancels queries that conflict with replay this way
	}
	return !errors.Is(err, ErrNotFound)
}

// replicaFirst runs q on the replica, and on the primary when the replica
// cannot be reached.
func replicaFirst[T any](ctx context.Context, r *Reads, what string, q func(*Store) (T, error)) (T, error) {
	v, err := q(r.replica)
	if err == nil || ctx.Err() != nil || !unreachable(err) {
		if err == nil && r.down.Swap(false) {
			r.log.Info("the read database answers again", "query", what)
		}
		return v, err
	}
	if !r.down.Swap(true) {
		r.log.Warn("the read database cannot be reached; reads go to the primary", "query", what, "err", err)
	}
	return q(r.Store)
}

func (r *Reads) Series(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]Bucket, error) {
	return replicaFirst(ctx, r, "series", func(s *Store) ([]Bucket, error) { return s.Series(ctx, nodeID, path, from, to, step) })
}

func (r *Reads) HistogramSeries(ctx context.Context, nodeID int32, path string, from, to time.Time, step time.Duration) ([]HistogramBucket, error) {
	return replicaFirst(ctx, r, "histogram series", func(s *Store) ([]HistogramBucket, error) {
		return s.HistogramSeries(ctx, nodeID, path, from, to, step)
	})
}

func (r *Reads) Events(ctx context.Context, nodeID int32, path string, from, to time.Time, limit int) ([]StoredEvent, error) {
	return replicaFirst(ctx, r, "events", func(s *Store) ([]StoredEvent, error) { return s.Events(ctx, nodeID, path, from, to, limit) })
}

func (r *Reads) ReadRollups(ctx context.Context, q RollupQuery) ([]SampleRow, []HistogramRow, error) {
	type rows struct {
		s []SampleRow
		h []HistogramRow
	}
	v, err := replicaFirst(ctx, r, "report rollups", func(s *Store) (rows, error) {
		sr, hr, err := s.ReadRollups(ctx, q)
		return rows{sr, hr}, err
	})
	return v.s, v.h, err
}

func (r *Reads) DefinitionsOf(ctx context.Context, nodeIDs []int32) (map[string]MetricDef, error) {
	return replicaFirst(ctx, r, "report definitions", func(s *Store) (map[string]MetricDef, error) { return s.DefinitionsOf(ctx, nodeIDs) })
}

func (r *Reads) BadMinutes(ctx context.Context, nodeIDs []int32, from, to time.Time, limit int) ([]SampleRow, error) {
	return replicaFirst(ctx, r, "report bad minutes", func(s *Store) ([]SampleRow, error) {
		return s.BadMinutes(ctx, nodeIDs, from, to, limit)
	})
}
