package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The catalogue's lifecycle (collector/retention runs it). Raw data leaves
// by dropping day partitions and rollups by age; what remains would grow
// with every metric path a fleet ever named (owner children are named
// after pods, so a Kubernetes fleet names new ones daily). The invariant
// kept here: retained data of a node ⇒ that node's definition of the
// metric (reports read titles and units from it) ⇒ its dictionary entries.

// errStaleIDs: a cached dictionary id was deleted under a registration.
var errStaleIDs = errors.New("cached metric dictionary ids were deleted")

// PruneLatest removes from node_latest the values last reported before
// cutoff, batch nodes per statement, and records on each node's definition
// when it was last reported. Rows a write batch holds are skipped, to be
// pruned by the next pass. It returns how many values went.
func (s *Store) PruneLatest(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var total int64
	after := int32(-1 << 31)
	for {
		var last *int32
		var n int64
		err := s.pool.QueryRow(ctx, `
			WITH l AS (
				SELECT node_id, `+latestValues+` AS metrics FROM node_latest WHERE node_id > $1
				ORDER BY node_id LIMIT $2 FOR UPDATE SKIP LOCKED
			), old AS (
				SELECT l.node_id, e.key AS path, (e.value->>'t')::bigint AS t
				FROM l CROSS JOIN LATERAL jsonb_each(l.metrics) e
				WHERE (e.value->>'t')::bigint < $3
			), mark AS (
				UPDATE node_metrics nm SET last_sample = to_timestamp(old.t / 1000.0)
				FROM old JOIN metric_paths p ON p.path = old.path
				WHERE nm.node_id = old.node_id AND nm.metric_id = p.id
			), cut AS (
				UPDATE node_latest nl SET metrics = (`+latestBase+` || nl.metrics) - o.paths, hot = nl.hot - o.paths,
					base_paths = NULL, base_vals = NULL, base_states = NULL, base_times = NULL, base_intervals = NULL, base_novalue = NULL,
					root_states = NULL, metrics_keys = NULL
				FROM (SELECT node_id, array_agg(path) AS paths FROM old GROUP BY node_id) o
				WHERE nl.node_id = o.node_id
			)
			SELECT (SELECT max(node_id) FROM l), (SELECT count(*) FROM old)`,
			after, batch, cutoff.UnixMilli()).Scan(&last, &n)
		if err != nil {
			return total, fmt.Errorf("prune latest values older than %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += n
		if last == nil {
			return total, nil
		}
		after = *last
	}
}

// PruneDefinitions deletes node definitions of metrics last reported
// before cutoff (recorded by PruneLatest) and not reported since, batch
// per statement. cutoff must be older than every retained rollup, which
// is what keeps their titles and units. A never reported definition stays
// while its node does. It returns the nodes that lost definitions: their
// next Hello registers in full, and a stream they hold must be ended so
// that it announces again what it still reports.
func (s *Store) PruneDefinitions(ctx context.Context, cutoff time.Time, batch int) ([]string, int64, error) {
	seen := map[string]bool{}
	var nodes []string
	var total int64
	for {
		rows, err := s.pool.Query(ctx, `
			WITH gone AS (
				SELECT nm.node_id, nm.metric_id FROM node_metrics nm
				WHERE nm.last_sample < $1
				  AND NOT EXISTS (SELECT 1 FROM node_latest l JOIN metric_paths p ON p.id = nm.metric_id
				                  WHERE l.node_id = nm.node_id AND (l.metrics ? p.path OR l.hot ? p.path OR p.path = ANY(l.base_paths)))
				LIMIT $2
			), del AS (
				DELETE FROM node_metrics nm USING gone
				WHERE nm.node_id = gone.node_id AND nm.metric_id = gone.metric_id
				RETURNING nm.node_id
			), stale AS (
				UPDATE nodes n SET defs_hash = NULL FROM (SELECT node_id, count(*) AS k FROM del GROUP BY node_id) d
				WHERE n.id = d.node_id RETURNING n.name, d.k
			)
			SELECT name, k FROM stale`, cutoff, batch)
		if err != nil {
			return nodes, total, fmt.Errorf("prune definitions last reported before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		var n int64
		for rows.Next() {
			var name string
			var k int64
			if err := rows.Scan(&name, &k); err != nil {
				rows.Close()
				return nodes, total, fmt.Errorf("prune definitions: %w", err)
			}
			n += k
			if !seen[name] {
				seen[name] = true
				nodes = append(nodes, name)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nodes, total, fmt.Errorf("prune definitions last reported before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += n
		if n < int64(batch) {
			return nodes, total, nil
		}
	}
}

// dictionaries are the tables of ids node_metrics refers to.
var dictionaries = [...]struct{ table, column string }{{"metric_paths", "metric_id"}, {"metric_defs", "def_id"}}

// CollectDictionaries deletes metric paths and definitions no node's
// catalogue has named since before now-grace. Each pass marks the newly
// unnamed and unmarks the named again; the delete runs with registrations
// held off (a SHARE lock on node_metrics), so none can name an entry
// between the check and the delete, and it bumps dictionary_epoch, so
// every collector forgets its cached ids before it uses one again. It
// returns how many paths and definitions went. Each step scans
// node_metrics (no index serves "does any node name it": see migration
// 013), registrations waiting on the last ones: run it daily, not hourly.
func (s *Store) CollectDictionaries(ctx context.Context, now time.Time, grace time.Duration) (paths, defs int64, err error) {
	for _, d := range dictionaries {
		refd := `EXISTS (SELECT 1 FROM node_metrics nm WHERE nm.` + d.column + ` = x.id)`
		if _, err := s.pool.Exec(ctx, `UPDATE `+d.table+` x SET unused_since = $1 WHERE unused_since IS NULL AND NOT `+refd, now); err != nil {
			return 0, 0, fmt.Errorf("mark unused %s: %w", d.table, err)
		}
		if _, err := s.pool.Exec(ctx, `UPDATE `+d.table+` x SET unused_since = NULL WHERE unused_since IS NOT NULL AND `+refd); err != nil {
			return 0, 0, fmt.Errorf("unmark used %s: %w", d.table, err)
		}
	}
	var deleted [len(dictionaries)]int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// A registration in progress holds the lock a few milliseconds;
		// one that waits longer gives up this pass, not the registration.
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return fmt.Errorf("set lock timeout: %w", err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE node_metrics IN SHARE MODE`); err != nil {
			return fmt.Errorf("hold off registrations: %w", err)
		}
		for i, d := range dictionaries {
			tag, err := tx.Exec(ctx, `DELETE FROM `+d.table+` x WHERE unused_since < $1
				AND NOT EXISTS (SELECT 1 FROM node_metrics nm WHERE nm.`+d.column+` = x.id)`, now.Add(-grace))
			if err != nil {
				return fmt.Errorf("delete unused %s: %w", d.table, err)
			}
			deleted[i] = tag.RowsAffected()
		}
		if deleted[0]+deleted[1] > 0 {
			if _, err := tx.Exec(ctx, `UPDATE dictionary_epoch SET epoch = epoch + 1`); err != nil {
				return fmt.Errorf("bump dictionary epoch: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if deleted[0]+deleted[1] > 0 {
		s.forgetIDs(-1)
	}
	return deleted[0], deleted[1], nil
}

// checkEpoch forgets the cached dictionary ids when a pass deleted
// entries since they were cached.
func (s *Store) checkEpoch(ctx context.Context) error {
	var epoch int64
	if err := s.pool.QueryRow(ctx, `SELECT epoch FROM dictionary_epoch`).Scan(&epoch); err != nil {
		return fmt.Errorf("read dictionary epoch: %w", err)
	}
	s.mu.Lock()
	changed := epoch != s.epoch
	s.mu.Unlock()
	if changed {
		s.forgetIDs(epoch)
	}
	return nil
}

// forgetIDs empties the dictionary caches; epoch is what they are valid
// for from now on (-1: unknown, the next check reads it).
func (s *Store) forgetIDs(epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.metricIDs, s.defIDs, s.epoch = map[string]int32{}, map[string]int32{}, epoch
}

// ExpiredNodes names up to limit nodes that have not reported since
// before cutoff (nodes that never reported: not said Hello since), oldest
// first. Only current rows count: a node's former tenants' rows expire on
// their own (ExpiredRetiredNodes).
func (s *Store) ExpiredNodes(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT n.name FROM nodes n LEFT JOIN node_latest l ON l.node_id = n.id
		WHERE n.retired_at IS NULL AND coalesce(l.ts, n.last_hello) < $1
		ORDER BY coalesce(l.ts, n.last_hello) LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("find nodes silent since %s: %w", cutoff.Format(time.RFC3339), err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find nodes silent since %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return names, nil
}

// DeleteInBatches runs a DELETE whose last parameter is a row limit
// (`… WHERE id IN (SELECT … LIMIT $n)`) until it deletes fewer rows than
// batch: a retention that fell behind catches up without one long
// transaction holding every row it deletes. It returns the rows deleted.
func DeleteInBatches(ctx context.Context, pool *pgxpool.Pool, query string, batch int, args ...any) (int64, error) {
	args = append(args, batch)
	var total int64
	for {
		tag, err := pool.Exec(ctx, query, args...)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// ExpiredRetiredNodes lists up to limit retired node rows (a former
// tenant's part of a node's history) retired before cutoff: by then the
// node retention has passed over everything they hold.
func (s *Store) ExpiredRetiredNodes(ctx context.Context, cutoff time.Time, limit int) ([]int32, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM nodes WHERE retired_at < $1 ORDER BY retired_at LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("find node rows retired before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("find node rows retired before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return ids, nil
}

// UnreportedNodes returns, oldest first, up to limit nodes that have never
// reported and whose last Hello is older than cutoff: names registered
// (often enrolled with a bootstrap token) and never used, each holding a
// place under --ingest.max-nodes. A name with another tenant's row
// (a node moved while it was away) is left to the node retention, so
// no tenant's history goes with it.
func (s *Store) UnreportedNodes(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT n.name FROM nodes n
		WHERE n.retired_at IS NULL AND n.last_hello < $1
		  AND NOT EXISTS (SELECT 1 FROM node_latest l WHERE l.node_id = n.id)
		  AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.node_id = n.id)
		  AND NOT EXISTS (SELECT 1 FROM rollup_pending p WHERE p.node_id = n.id)
		  AND NOT EXISTS (SELECT 1 FROM rollup_samples r WHERE r.res = ANY($3) AND r.node_id = n.id)
		  AND NOT EXISTS (SELECT 1 FROM nodes o WHERE o.name = n.name AND o.id <> n.id)
		ORDER BY n.last_hello LIMIT $2`, cutoff, limit, []int32{RollupMinute, RollupHour, RollupDay})
	if err != nil {
		return nil, fmt.Errorf("find nodes that never reported, registered before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find nodes that never reported, registered before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return names, nil
}

// NodeExists reports whether any row, of any tenant, has the name.
func (s *Store) NodeExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE name = $1)`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up node %q: %w", name, err)
	}
	return ok, nil
}
