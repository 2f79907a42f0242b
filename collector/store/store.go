package store

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/migrations"
)

// ErrNotFound is returned by lookups of a node or metric that does not exist.
var ErrNotFound = errkind.New(errkind.NotFound, "not found")

type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	mu         sync.Mutex
	metricIDs  map[string]int32
	defIDs     map[string]int32 // metric_defs ids by defKey, at most maxDefIDs of them
	maxDefIDs  int
	partitions map[string]bool // "reports_20261121" etc. known to exist
	// exportDefs caches the definitions the Prometheus export reads
	// (ExportNodes), at most maxExportDefs.
	exportDefs map[exportDefKey]exportDef
	nodes      nodeTally
	// epoch is the dictionary_epoch the cached ids are valid for (-1:
	// not read yet); a retention pass that deletes entries bumps it.
	epoch int64
	// latestSeed keys the hashes of node_latest's key sets (metrics_keys):
	// the process's own, so a client cannot make two key sets collide.
	latestSeed maphash.Seed
	// latestBufs holds *[]byte buffers for a batch's latest values
	// (WriteReports).
	latestBufs sync.Pool
	// latestScratches holds *latestScratch: queueLatest's per-node
	// values, kept from batch to batch.
	latestScratches sync.Pool
}

// DefaultMaxDefIDs bounds the definitions a collector remembers: a fleet runs a
// few agent versions, each with a few hundred definitions; a flood of
// distinct ones only costs lookups once it is forgotten.
const DefaultMaxDefIDs = 100_000

// Open connects, applies pending migrations and returns a ready Store
// with a pool of at least 4 connections.
func Open(ctx context.Context, url string, log *slog.Logger) (*Store, error) {
	return OpenWithConns(ctx, url, log, 4)
}

// OpenWithConns is Open with a pool of at least minConns connections (the
// URL's pool_max_conns, when larger, wins): a collector's pool holds its
// writers, its registration, a listener and the short queries of the
// Hello path at once (collector/app).
func OpenWithConns(ctx context.Context, url string, log *slog.Logger, minConns int) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.MaxConns < int32(minConns) {
		cfg.MaxConns = int32(minConns)
	}
	defaultConnectTimeout(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database %s@%s:%d/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	n, err := Migrate(ctx, pool, migrations.FS)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if n > 0 {
		log.Info("applied database migrations", "count", n)
	}
	return newStore(pool, log), nil
}

func newStore(pool *pgxpool.Pool, log *slog.Logger) *Store {
	return &Store{pool: pool, log: log, metricIDs: map[string]int32{}, defIDs: map[string]int32{}, maxDefIDs: DefaultMaxDefIDs, partitions: map[string]bool{}, epoch: -1,
		latestSeed: maphash.MakeSeed(), latestBufs: sync.Pool{New: func() any { return new([]byte) }},
		latestScratches: sync.Pool{New: func() any { return new(latestScratch) }}}
}

func (s *Store) Close() { s.pool.Close() }

// Ping checks the database answers, for readiness.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Pool exposes the connection pool to packages that own their own tables
// (thresholds, alerts) so there is one pool per process.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// UpsertNode records a node's Hello and returns its id. A Hello whose
// tenant differs from the name's current row retires that row and starts a
// new one (migration 014): what the node reported so far stays its old
// tenant's, and only what follows is the new one's.
func (s *Store) UpsertNode(ctx context.Context, n Node) (int32, error) {
	labels, err := json.Marshal(nonNilMap(n.Labels))
	if err != nil {
		return 0, fmt.Errorf("encode labels: %w", err)
	}
	caps, err := json.Marshal(n.Capabilities)
	if err != nil {
		return 0, fmt.Errorf("encode capabilities: %w", err)
	}
	var claimed []byte
	if len(n.ClaimedLabels) > 0 {
		if claimed, err = json.Marshal(n.ClaimedLabels); err != nil {
			return 0, fmt.Errorf("encode claimed labels: %w", err)
		}
	}
	args := []any{n.Name, labels, n.AgentVersion, n.KernelRelease, int64(n.InstanceID), int32(n.IntervalMS), caps, n.PingAddress, n.Tenant, claimed}
	var id int32
	// The common case, one statement: the name's current row has this
	// tenant (or there is none). Nothing comes back when it has another.
	err = s.pool.QueryRow(ctx, upsertNode+` WHERE nodes.tenant = EXCLUDED.tenant RETURNING id`, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			retired, err := retireNode(ctx, tx, n.Name, n.Tenant)
			if err != nil {
				return err
			}
			if retired != 0 {
				s.log.Info("node changed tenant: its history stays with the old one", "node", n.Name, "retired_id", retired, "tenant", n.Tenant)
				if id, err = reviveNode(ctx, tx, args...); err != nil || id != 0 {
					return err
				}
			}
			return tx.QueryRow(ctx, upsertNode+` RETURNING id`, args...).Scan(&id)
		})
	}
	if err != nil {
		return 0, fmt.Errorf("upsert node %q: %w", n.Name, err)
	}
	return id, nil
}

const upsertNode = `
		INSERT INTO nodes (name, labels, agent_version, kernel_release, instance_id, interval_ms, capabilities, ping_address, tenant, claimed_labels)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (name) WHERE retired_at IS NULL DO UPDATE SET labels = EXCLUDED.labels, agent_version = EXCLUDED.agent_version,
			kernel_release = EXCLUDED.kernel_release, instance_id = EXCLUDED.instance_id,
			interval_ms = EXCLUDED.interval_ms, capabilities = EXCLUDED.capabilities,
			ping_address = EXCLUDED.ping_address, claimed_labels = EXCLUDED.claimed_labels, last_hello = now()`

// reviveNode makes current again the row the name had the last time it
// belonged to the tenant (args[8]), with the Hello's columns (upsertNode's
// arguments), once its current row of another tenant was retired: a node
// moved acme → globex → acme is one acme row, whose history before the
// first move and after the return its tenant reads by name, and one
// globex row for the period between. It returns 0 when the tenant never
// had the name.
func reviveNode(ctx context.Context, tx pgx.Tx, args ...any) (int32, error) {
	var id int32
	err := tx.QueryRow(ctx, `
		UPDATE nodes SET retired_at = NULL, labels = $2, agent_version = $3, kernel_release = $4, instance_id = $5, interval_ms = $6,
			capabilities = $7, ping_address = $8, claimed_labels = $10, last_hello = now()
		WHERE id = (SELECT id FROM nodes WHERE name = $1 AND tenant = $9 AND retired_at IS NOT NULL ORDER BY retired_at DESC, id DESC LIMIT 1)
		RETURNING id`, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("revive node %q's row of tenant %q: %w", args[0], args[8], err)
	}
	return id, nil
}

// retireNode retires the name's current row if its tenant is not tenant,
// returning the retired row's id (0: nothing retired).
func retireNode(ctx context.Context, tx pgx.Tx, name, tenant string) (int32, error) {
	var id int32
	err := tx.QueryRow(ctx, `UPDATE nodes SET retired_at = now() WHERE name = $1 AND retired_at IS NULL AND tenant <> $2 RETURNING id`,
		name, tenant).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("retire node %q's row of its former tenant: %w", name, err)
	}
	return id, nil
}

// Rebind applies labels bound by an operator to the name's current row
// at once, rather than at the node's next Hello: keys in bound are set,
// keys in unset removed, and the tenant becomes the tenant's. When the
// tenant changes, the current row is retired and a new row carries the
// name from now (see UpsertNode). It reports whether the name has a row.
func (s *Store) Rebind(ctx context.Context, name string, bound map[string]string, unset []string, tenant string) (bool, error) {
	set, err := json.Marshal(nonNilMap(bound))
	if err != nil {
		return false, fmt.Errorf("encode labels: %w", err)
	}
	found := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var old int32
		if err := tx.QueryRow(ctx, `SELECT id FROM nodes WHERE name = $1 AND retired_at IS NULL FOR UPDATE`, name).Scan(&old); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return fmt.Errorf("find node %q: %w", name, err)
		}
		found = true
		retired, err := retireNode(ctx, tx, name, tenant)
		if err != nil {
			return err
		}
		if retired == 0 {
			_, err := tx.Exec(ctx, `UPDATE nodes SET labels = (labels - $2::text[]) || $3::jsonb, claimed_labels = NULL WHERE id = $1`, old, unset, set)
			return err
		}
		// Back to a tenant it had: that tenant's row is current again
		// (reviveNode), with the labels and what the node said of itself
		// carried over from the row just retired.
		tag, err := tx.Exec(ctx, `
			UPDATE nodes r SET retired_at = NULL, labels = (o.labels - $2::text[]) || $3::jsonb, agent_version = o.agent_version,
				kernel_release = o.kernel_release, instance_id = o.instance_id, interval_ms = o.interval_ms, capabilities = o.capabilities,
				ping_address = o.ping_address, last_hello = o.last_hello, claimed_labels = NULL
			FROM nodes o
			WHERE o.id = $1 AND r.id = (SELECT id FROM nodes WHERE name = o.name AND tenant = $4 AND retired_at IS NOT NULL AND id <> $1
				ORDER BY retired_at DESC, id DESC LIMIT 1)`, old, unset, set, tenant)
		if err != nil || tag.RowsAffected() > 0 {
			return err
		}
		// The new row starts empty but for what the node said of itself;
		// last_hello carries over so the ping mesh keeps the node.
		_, err = tx.Exec(ctx, `
			INSERT INTO nodes (name, labels, agent_version, kernel_release, instance_id, interval_ms, capabilities, ping_address, tenant, last_hello)
			SELECT name, (labels - $2::text[]) || $3::jsonb, agent_version, kernel_release, instance_id, interval_ms, capabilities, ping_address, $4, last_hello
			FROM nodes WHERE id = $1`, old, unset, set, tenant)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("rebind node %q: %w", name, err)
	}
	return found, nil
}

// AdmitNode reports whether a Hello from the named node may register under
// a limit of max nodes: the node is registered already, or fewer than max
// are. total is the number of nodes when it refuses. Every Hello asks, so
// it does not count the nodes each time (a fleet reconnecting would cost
// O(N²)): a registered node is one index lookup; a new one is admitted on
// a bound, the last exact count plus the node ids handed out since (each
// node takes one, deletes only lower it, so it holds for nodes other
// collectors add too), and only a bound at the limit counts again. As
// before, Hellos registering at the same moment may each pass a limit one
// short.
func (s *Store) AdmitNode(ctx context.Context, name string, max int) (bool, int, error) {
	var (
		exists bool
		seq    int64
	)
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE name = $1 AND retired_at IS NULL), `+nodeIDsIssued, name).Scan(&exists, &seq)
	if err != nil {
		return false, 0, fmt.Errorf("look up node %q: %w", name, err)
	}
	if exists {
		return true, 0, nil
	}
	s.mu.Lock()
	t := s.nodes
	s.mu.Unlock()
	if t.valid && t.count+(seq-t.seq) < int64(max) {
		return true, 0, nil
	}
	// The ids first: a node inserted after this is in the next bound's
	// difference, whether or not the count sees it.
	if err := s.pool.QueryRow(ctx, `SELECT `+nodeIDsIssued).Scan(&seq); err != nil {
		return false, 0, fmt.Errorf("count nodes: %w", err)
	}
	var total int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE retired_at IS NULL`).Scan(&total); err != nil {
		return false, 0, fmt.Errorf("count nodes: %w", err)
	}
	s.mu.Lock()
	s.nodes = nodeTally{count: total, seq: seq, valid: true}
	s.mu.Unlock()
	return total < int64(max), int(total), nil
}

// nodeIDsIssued is the last node id handed out (0 before the first):
// sequences are outside transactions, so it counts ids of inserts not yet
// committed and of Hellos that updated an existing node, too.
const nodeIDsIssued = `coalesce(pg_sequence_last_value(pg_get_serial_sequence('nodes', 'id')::regclass), 0)`

// nodeTally is an exact count of the nodes and the last node id issued
// when it was taken (AdmitNode).
type nodeTally struct {
	count, seq int64
	valid      bool
}

// DefinitionsOutside counts the node's stored metric definitions whose
// paths are not among paths. NOT IN a subquery is hashed; = ANY(array)
// would compare every stored path with every given one.
func (s *Store) DefinitionsOutside(ctx context.Context, nodeID int32, paths []string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM node_metrics nm JOIN metric_paths m ON m.id = nm.metric_id
		WHERE nm.node_id = $1 AND m.path NOT IN (SELECT unnest($2::text[]))`, nodeID, paths).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count metric definitions of node %d: %w", nodeID, err)
	}
	return n, nil
}

// MetricIDs resolves metric paths to their dictionary ids, creating missing ones.
func (s *Store) MetricIDs(ctx context.Context, paths []string) (map[string]int32, error) {
	if err := s.checkEpoch(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]int32, len(paths))
	var missing []string
	s.mu.Lock()
	for _, p := range paths {
		if id, ok := s.metricIDs[p]; ok {
			out[p] = id
		} else {
			missing = append(missing, p)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO metric_paths (path) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, missing); err != nil {
		return nil, fmt.Errorf("insert metric paths: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT path, id FROM metric_paths WHERE path = ANY($1)`, missing)
	if err != nil {
		return nil, fmt.Errorf("read metric paths: %w", err)
	}
	defer rows.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for rows.Next() {
		var p string
		var id int32
		if err := rows.Scan(&p, &id); err != nil {
			return nil, fmt.Errorf("scan metric path: %w", err)
		}
		s.metricIDs[p] = id
		out[p] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read metric paths: %w", err)
	}
	return out, nil
}

// UpsertDefinitions records what a node's agent says its metrics are and
// returns the path → id mapping for them.
func (s *Store) UpsertDefinitions(ctx context.Context, nodeID int32, defs []MetricDef) (map[string]int32, error) {
	// One row per path, the last definition winning: a statement may not
	// update the same row twice.
	last := make(map[string]int, len(defs))
	for i, d := range defs {
		last[d.Path] = i
	}
	if len(last) < len(defs) {
		uniq := make([]MetricDef, 0, len(last))
		for i, d := range defs {
			if last[d.Path] == i {
				uniq = append(uniq, d)
			}
		}
		defs = uniq
	}
	paths := make([]string, len(defs))
	for i, d := range defs {
		paths[i] = d.Path
	}
	ids, err := s.upsertDefinitions(ctx, nodeID, defs, paths)
	if errors.Is(err, errStaleIDs) {
		// A retention pass deleted cached ids between our epoch check and
		// the insert; resolved afresh, they are recreated.
		s.forgetIDs(-1)
		ids, err = s.upsertDefinitions(ctx, nodeID, defs, paths)
	}
	if err != nil {
		return nil, fmt.Errorf("upsert metric definitions of node %d: %w", nodeID, err)
	}
	return ids, nil
}

func (s *Store) upsertDefinitions(ctx context.Context, nodeID int32, defs []MetricDef, paths []string) (map[string]int32, error) {
	ids, err := s.MetricIDs(ctx, paths)
	if err != nil {
		return nil, err
	}
	defIDs, err := s.definitionIDs(ctx, defs)
	if err != nil {
		return nil, err
	}
	metricIDs := make([]int32, len(defs))
	for i, d := range defs {
		metricIDs[i] = ids[d.Path]
	}
	// The node's catalogue is (metric, definition) pairs, rewritten only
	// where a definition changed: every Hello (each agent restart and
	// reconnect) carries the whole tree. Any change makes the hash of its
	// last Hello (MarkDefinitions) stale; the Hello path sets it again.
	// The ids are checked after the insert, in its transaction: a
	// retention pass deletes dictionary entries holding a lock this insert
	// conflicts with, so either the pass sees these rows, or this check
	// sees the entries gone (CollectDictionaries).
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The node row held against a delete, as the foreign key did
		// before migration 022: deleteRows removes node_metrics after it.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nodes WHERE id = $1 FOR KEY SHARE)`, nodeID).Scan(&exists); err != nil {
			return fmt.Errorf("lock node %d: %w", nodeID, err)
		}
		if !exists {
			return fmt.Errorf("node %d: %w", nodeID, ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `
			WITH stale AS (UPDATE nodes SET defs_hash = NULL WHERE id = $1 AND defs_hash IS NOT NULL)
			INSERT INTO node_metrics AS nm (node_id, metric_id, def_id)
			SELECT $1, unnest($2::int[]), unnest($3::int[])
			ON CONFLICT (node_id, metric_id) DO UPDATE SET def_id = EXCLUDED.def_id, last_sample = NULL
			WHERE nm.def_id IS DISTINCT FROM EXCLUDED.def_id`, nodeID, metricIDs, defIDs); err != nil {
			return err
		}
		var missing int
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FROM unnest($1::int[], $2::int[]) u(m, d)
			WHERE NOT EXISTS (SELECT 1 FROM metric_paths WHERE id = u.m)
			   OR NOT EXISTS (SELECT 1 FROM metric_defs WHERE id = u.d)`, metricIDs, defIDs).Scan(&missing); err != nil {
			return fmt.Errorf("check dictionary ids: %w", err)
		}
		if missing > 0 {
			return errStaleIDs
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// defKey identifies a definition's contents in defIDs. Validation refuses
// NUL in every text, so it separates the fields unambiguously.
func defKey(d MetricDef, thr []byte) string {
	return strings.Join([]string{d.Title, d.Unit, strconv.Itoa(int(d.Kind)), d.Description, string(thr),
		strconv.FormatFloat(d.Scale, 'g', -1, 64), strconv.FormatFloat(d.Quantile, 'g', -1, 64)}, "\x00")
}

// definitionIDs returns the metric_defs id of each definition, storing the
// ones not stored yet. Each distinct definition is stored once, keyed by a
// hash PostgreSQL computes the same way here and in migration 010; a
// fleet's nodes share nearly all of them, so after its first node a
// collector finds them in defIDs without a query.
// Its caller checked the dictionary epoch (MetricIDs).
func (s *Store) definitionIDs(ctx context.Context, defs []MetricDef) ([]int32, error) {
	out := make([]int32, len(defs))
	var (
		missing                           []int // indexes into defs
		titles, units, descs, missingKeys []string
		kinds                             []int16
		thrs                              []*string
		scales, quantiles                 []float64
	)
	for i, d := range defs {
		thr, err := thresholdJSON(d)
		if err != nil {
			return nil, err
		}
		key := defKey(d, thr)
		s.mu.Lock()
		id, ok := s.defIDs[key]
		s.mu.Unlock()
		if ok {
			out[i] = id
			continue
		}
		missing = append(missing, i)
		titles, units, descs = append(titles, d.Title), append(units, d.Unit), append(descs, d.Description)
		kinds, scales, quantiles = append(kinds, int16(d.Kind)), append(scales, d.Scale), append(quantiles, d.Quantile)
		missingKeys = append(missingKeys, key)
		if thr != nil {
			js := string(thr)
			thrs = append(thrs, &js)
		} else {
			thrs = append(thrs, nil)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	const defsOf = `unnest($1::text[], $2::text[], $3::smallint[], $4::text[], $5::jsonb[], $6::float8[], $7::float8[])
		WITH ORDINALITY AS d (title, unit, kind, description, default_threshold, scale, quantile, n)`
	const hashOf = `decode(md5(jsonb_build_array(d.title, d.unit, d.kind, d.description, d.default_threshold, d.scale, d.quantile)::text), 'hex')`
	args := []any{titles, units, kinds, descs, thrs, scales, quantiles}
	// Two statements: the second's snapshot sees what a concurrent Hello
	// inserted while the first waited on it. Sorted by hash, so two Hellos
	// inserting the same definitions cannot deadlock.
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO metric_defs (hash, title, unit, kind, description, default_threshold, scale, quantile)
		SELECT DISTINCT ON (h) h, title, unit, kind, description, default_threshold, scale, quantile
		FROM (SELECT `+hashOf+` AS h, d.* FROM `+defsOf+`) x
		ORDER BY h
		ON CONFLICT (hash) DO NOTHING`, args...); err != nil {
		return nil, fmt.Errorf("insert metric definitions: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT d.n, md.id FROM `+defsOf+` JOIN metric_defs md ON md.hash = `+hashOf, args...)
	if err != nil {
		return nil, fmt.Errorf("read metric definition ids: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (p [2]int64, err error) {
		err = r.Scan(&p[0], &p[1])
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read metric definition ids: %w", err)
	}
	if len(found) != len(missing) {
		return nil, fmt.Errorf("read metric definition ids: %d of %d found", len(found), len(missing))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.defIDs)+len(found) > s.maxDefIDs {
		s.defIDs = map[string]int32{}
	}
	for _, f := range found {
		k := int(f[0]) - 1 // ordinality counts from 1
		out[missing[k]] = int32(f[1])
		if len(s.defIDs) < s.maxDefIDs {
			s.defIDs[missingKeys[k]] = int32(f[1])
		}
	}
	return out, nil
}

// DefinitionsHash is what MarkDefinitions records of a Hello's definitions:
// a hash of each path with its contents (defKey), whatever their order.
func DefinitionsHash(defs []MetricDef) []byte {
	sorted := slices.Clone(defs)
	slices.SortFunc(sorted, func(a, b MetricDef) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	for _, d := range sorted {
		thr, err := thresholdJSON(d)
		if err != nil {
			// No Hello matches it then, and each registers in full,
			// which is only slower.
			return nil
		}
		h.Write([]byte(d.Path + "\x00" + defKey(d, thr) + "\n"))
	}
	return h.Sum(nil)
}

// thresholdJSON is a definition's default threshold as stored, nil when
// it has none.
func thresholdJSON(d MetricDef) ([]byte, error) {
	if d.DefaultThreshold == nil {
		return nil, nil
	}
	b, err := json.Marshal(d.DefaultThreshold)
	if err != nil {
		return nil, fmt.Errorf("encode threshold of %s: %w", d.Path, err)
	}
	return b, nil
}

// KnownDefinitions returns the hash MarkDefinitions recorded for the node
// (nil when none, or when its definitions changed since) and how many
// definitions the node had then.
func (s *Store) KnownDefinitions(ctx context.Context, nodeID int32) ([]byte, int, error) {
	var (
		hash  []byte
		total *int32
	)
	if err := s.pool.QueryRow(ctx, `SELECT defs_hash, defs_total FROM nodes WHERE id = $1`, nodeID).Scan(&hash, &total); err != nil {
		return nil, 0, fmt.Errorf("read definitions hash of node %d: %w", nodeID, err)
	}
	if total == nil {
		return nil, 0, nil
	}
	return hash, int(*total), nil
}

// MarkDefinitions records that the node's stored definitions are those of
// a Hello with this hash (DefinitionsHash), and counts them.
func (s *Store) MarkDefinitions(ctx context.Context, nodeID int32, hash []byte) error {
	_, err := s.pool.Exec(ctx, `UPDATE nodes SET defs_hash = $2,
		defs_total = (SELECT count(*) FROM node_metrics WHERE node_id = $1) WHERE id = $1`, nodeID, hash)
	if err != nil {
		return fmt.Errorf("record definitions hash of node %d: %w", nodeID, err)
	}
	return nil
}

// ensurePartitions creates the day partitions a batch needs. Creating them
// on demand (rather than by a scheduler) means a report is never refused for
// lack of a partition. An event's row goes by the event's own time, which
// can be on the other side of midnight from its report's.
func (s *Store) ensurePartitions(ctx context.Context, reports []Report) error {
	days := map[string]time.Time{}
	add := func(t time.Time) {
		d := t.UTC().Truncate(24 * time.Hour)
		days[d.Format("20060102")] = d
	}
	for _, r := range reports {
		add(r.Time)
		for _, e := range r.Events {
			add(e.Time)
		}
	}
	for suffix, day := range days {
		for _, table := range []string{"reports", "histograms", "events"} {
			name := table + "_" + suffix
			s.mu.Lock()
			known := s.partitions[name]
			s.mu.Unlock()
			if known {
				continue
			}
			_, err := s.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
				name, table, day.Format(time.RFC3339), day.Add(24*time.Hour).Format(time.RFC3339)))
			// Two collectors can race on IF NOT EXISTS; losing the race is fine.
			var pgErr *pgconn.PgError
			if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505")) {
				return fmt.Errorf("create partition %s: %w", name, err)
			}
			s.mu.Lock()
			s.partitions[name] = true
			s.mu.Unlock()
		}
	}
	return nil
}

// DropPartitionsBefore drops day partitions that end before cutoff: retention
// is a DROP, not a DELETE.
func (s *Store) DropPartitionsBefore(ctx context.Context, cutoff time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname IN ('reports', 'histograms', 'events')`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	var dropped []string
	for _, n := range names {
		if len(n) < 8 {
			continue
		}
		day, err := time.Parse("20060102", n[len(n)-8:])
		if err != nil || !day.Add(24*time.Hour).Before(cutoff) {
			continue
		}
		if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{n}.Sanitize()); err != nil {
			return dropped, fmt.Errorf("drop partition %s: %w", n, err)
		}
		s.mu.Lock()
		delete(s.partitions, n)
		s.mu.Unlock()
		dropped = append(dropped, n)
	}
	return dropped, nil
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
