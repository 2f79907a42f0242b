package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Registration is one Hello to register: its node (authenticated, with
// its labels and tenant final) and the definitions it brings.
type Registration struct {
	Node Node
	Defs []MetricDef
	// Hash is DefinitionsHash(Defs): a node whose last registered
	// definitions had it writes none of them again.
	Hash []byte
	// NeedIDs asks for the ids of Defs even when nothing is written
	// (the caller has not resolved this catalogue yet).
	NeedIDs bool
}

// Registered is what RegisterNodes did with one Registration.
type Registered struct {
	ID int32
	// Same: the node's stored definitions were these already; nothing
	// of them was written.
	Same bool
	// Others counts the node's stored definitions outside Defs.
	Others int
	// TooMany: Others + len(Defs) passes the limit; the node row was
	// written (as a Hello always did), its definitions were not.
	TooMany bool
	// IDs maps paths to metric ids: a superset of Defs' paths, shared
	// by the batch (read only). Nil when TooMany, or Same without NeedIDs.
	IDs map[string]int32
	// Err is this node's failure; the others' stand.
	Err error
}

// RegisterNodes registers a batch of Hellos: every node's row, and the
// definitions of those whose last registered ones differ, in one
// transaction (a few statements for the whole batch, whatever its size)
// instead of some ten round trips and three commits a node. A node
// whose definitions would pass maxMetrics gets TooMany and nothing of
// them is written. Repeated names are registered in turn, each in a
// transaction of its own after the one before. A batch the database
// refuses as a whole is retried a node at a time, so one node's failure
// is its own.
func (s *Store) RegisterNodes(ctx context.Context, regs []Registration, maxMetrics int) []Registered {
	out := make([]Registered, len(regs))
	// Waves of distinct names: one statement may not upsert a row twice.
	rest := make([]int, len(regs))
	for i := range regs {
		rest[i] = i
	}
	for len(rest) > 0 {
		seen := make(map[string]bool, len(rest))
		var wave, later []int
		for _, i := range rest {
			if seen[regs[i].Node.Name] {
				later = append(later, i)
				continue
			}
			seen[regs[i].Node.Name] = true
			wave = append(wave, i)
		}
		s.registerWave(ctx, regs, wave, maxMetrics, out)
		rest = later
	}
	return out
}

// registerWave registers regs[idx] (distinct names) into out.
func (s *Store) registerWave(ctx context.Context, regs []Registration, idx []int, maxMetrics int, out []Registered) {
	batch := make([]Registration, len(idx))
	for k, i := range idx {
		batch[k] = regs[i]
	}
	res, err := s.registerBatch(ctx, batch, maxMetrics)
	if errors.Is(err, errStaleIDs) {
		// A retention pass deleted cached ids between our epoch check and
		// the insert; resolved afresh, they are recreated.
		s.forgetIDs(-1)
		res, err = s.registerBatch(ctx, batch, maxMetrics)
	}
	if err != nil && len(batch) > 1 && ctx.Err() == nil {
		// Something in the batch was refused: alone, each node meets
		// only its own failure.
		s.log.Warn("registration batch failed; registering its nodes one at a time", "nodes", len(batch), "err", err)
		for _, i := range idx {
			s.registerWave(ctx, regs, []int{i}, maxMetrics, out)
		}
		return
	}
	for k, i := range idx {
		if err != nil {
			out[i] = Registered{Err: fmt.Errorf("register node %q: %w", regs[i].Node.Name, err)}
			continue
		}
		out[i] = res[k]
	}
}

// nodeRow is a node's columns as the upsert takes them.
type nodeRow struct {
	labels, caps string
	claimed      *string
}

func encodeNode(n Node) (nodeRow, error) {
	labels, err := json.Marshal(nonNilMap(n.Labels))
	if err != nil {
		return nodeRow{}, fmt.Errorf("encode labels: %w", err)
	}
	caps, err := json.Marshal(n.Capabilities)
	if err != nil {
		return nodeRow{}, fmt.Errorf("encode capabilities: %w", err)
	}
	r := nodeRow{labels: string(labels), caps: string(caps)}
	if len(n.ClaimedLabels) > 0 {
		c, err := json.Marshal(n.ClaimedLabels)
		if err != nil {
			return nodeRow{}, fmt.Errorf("encode claimed labels: %w", err)
		}
		cs := string(c)
		r.claimed = &cs
	}
	return r, nil
}

// upsertNodes is upsertNode for many rows, in name order (two batches
// upserting the same names lock them in the same order), returning
// whether each row was inserted and the definitions its node had
// registered (KnownDefinitions). A name whose current row has another
// tenant returns nothing.
const upsertNodes = `
		INSERT INTO nodes AS n (name, labels, agent_version, kernel_release, instance_id, interval_ms, capabilities, ping_address, tenant, claimed_labels)
		SELECT * FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[], $5::int8[], $6::int4[], $7::jsonb[], $8::text[], $9::text[], $10::jsonb[])
		ORDER BY 1
		ON CONFLICT (name) WHERE retired_at IS NULL DO UPDATE SET labels = EXCLUDED.labels, agent_version = EXCLUDED.agent_version,
			kernel_release = EXCLUDED.kernel_release, instance_id = EXCLUDED.instance_id,
			interval_ms = EXCLUDED.interval_ms, capabilities = EXCLUDED.capabilities,
			ping_address = EXCLUDED.ping_address, claimed_labels = EXCLUDED.claimed_labels, last_hello = now()
		WHERE n.tenant = EXCLUDED.tenant
		RETURNING n.name, n.id, n.xmax = 0, n.defs_hash, n.defs_total`

func (s *Store) registerBatch(ctx context.Context, batch []Registration, maxMetrics int) ([]Registered, error) {
	res := make([]Registered, len(batch))
	// Rows encoded first: a node that cannot be is its own failure.
	var (
		live                                                   []int
		names, labels, versions, kernels, caps, pings, tenants []string
		instances                                              []int64
		intervals                                              []int32
		claimed                                                []*string
	)
	for i, r := range batch {
		row, err := encodeNode(r.Node)
		if err != nil {
			res[i].Err = fmt.Errorf("register node %q: %w", r.Node.Name, err)
			continue
		}
		n := r.Node
		live = append(live, i)
		names, labels, versions, kernels = append(names, n.Name), append(labels, row.labels), append(versions, n.AgentVersion), append(kernels, n.KernelRelease)
		instances, intervals, caps = append(instances, int64(n.InstanceID)), append(intervals, int32(n.IntervalMS)), append(caps, row.caps)
		pings, tenants, claimed = append(pings, n.PingAddress), append(tenants, n.Tenant), append(claimed, row.claimed)
	}
	if len(live) == 0 {
		return res, nil
	}
	// The dictionaries first, outside the transaction (their entries are
	// shared and kept by later passes whether or not it commits): a
	// fleet brings a few catalogues, so this is one lookup per distinct
	// catalogue, and none at all once the collector has seen them.
	var (
		paths   []string
		defs    []MetricDef
		seenCat = map[string]bool{}
		seen    = map[string]bool{}
	)
	for _, i := range live {
		if seenCat[string(batch[i].Hash)] && batch[i].Hash != nil {
			continue
		}
		seenCat[string(batch[i].Hash)] = true
		for _, d := range batch[i].Defs {
			if !seen[d.Path] {
				seen[d.Path] = true
				paths = append(paths, d.Path)
			}
			defs = append(defs, d)
		}
	}
	ids, err := s.MetricIDs(ctx, paths)
	if err != nil {
		return nil, err
	}
	defIDs, err := s.definitionIDs(ctx, defs)
	if err != nil {
		return nil, err
	}
	defID := make(map[string]int32, len(defs))
	for k, d := range defs {
		thr, _ := thresholdJSON(d) // definitionIDs encoded it already
		defID[defKey(d, thr)] = defIDs[k]
	}

	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Nothing here is promised to anyone before it is durable: the
		// agent is told nothing but its Config, and a registration lost
		// with the last moments of WAL at a crash is redone by the
		// agent's next Hello (it reconnects to a collector that restarted
		// with the database). The first report the node sends is acked
		// only after its own commit flushes the WAL, which flushes this
		// commit, written before it, too. An enrollment's credential is
		// not in this transaction: Authenticate commits it synchronously,
		// before it is sent. So a registration need not wait for its
		// fsync — with a saturated disk that wait is most of its cost.
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return fmt.Errorf("set synchronous_commit: %w", err)
		}
		for i := range res {
			if res[i].Err == nil {
				res[i] = Registered{}
			}
		}
		rows, err := tx.Query(ctx, upsertNodes, names, labels, versions, kernels, instances, intervals, caps, pings, tenants, claimed)
		if err != nil {
			return fmt.Errorf("upsert nodes: %w", err)
		}
		type upserted struct {
			id       int32
			inserted bool
			hash     []byte
			total    *int32
		}
		got := make(map[string]upserted, len(live))
		for rows.Next() {
			var (
				name string
				u    upserted
			)
			if err := rows.Scan(&name, &u.id, &u.inserted, &u.hash, &u.total); err != nil {
				rows.Close()
				return fmt.Errorf("upsert nodes: %w", err)
			}
			got[name] = u
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("upsert nodes: %w", err)
		}
		var (
			nodeIDs, metricIDs, defIDs []int32
			// fresh are the rows of nodes this transaction inserted:
			// none of them can conflict, so they are copied.
			fresh    [][]any
			marked   []int32
			hashes   [][]byte
			checkIDs = map[[2]int32]bool{} // (metric, def) pairs fresh rows use
		)
		for k, i := range live {
			r := batch[i]
			u, ok := got[r.Node.Name]
			if !ok {
				// Its current row has another tenant (UpsertNode).
				retired, err := retireNode(ctx, tx, r.Node.Name, r.Node.Tenant)
				if err != nil {
					return err
				}
				args := []any{names[k], labels[k], versions[k], kernels[k], instances[k], intervals[k], caps[k], pings[k], tenants[k], claimed[k]}
				if retired != 0 {
					s.log.Info("node changed tenant: its history stays with the old one", "node", r.Node.Name, "retired_id", retired, "tenant", r.Node.Tenant)
					if u.id, err = reviveNode(ctx, tx, args...); err != nil {
						return err
					}
				}
				if u.id == 0 {
					if err := tx.QueryRow(ctx, upsertNode+` RETURNING id`, args...).Scan(&u.id); err != nil {
						return fmt.Errorf("insert node %q for its new tenant: %w", r.Node.Name, err)
					}
					u.inserted = true
				} else if err := tx.QueryRow(ctx, `SELECT defs_hash, defs_total FROM nodes WHERE id = $1`, u.id).Scan(&u.hash, &u.total); err != nil {
					return fmt.Errorf("read node %q's revived row: %w", r.Node.Name, err)
				}
			}
			out := &res[i]
			out.ID = u.id
			// A row just inserted has no definitions: nothing to ask.
			out.Same = !u.inserted && u.total != nil && u.hash != nil && bytes.Equal(u.hash, r.Hash)
			switch {
			case u.inserted:
				out.Others = 0
			case out.Same:
				out.Others = int(*u.total) - len(r.Defs)
			default:
				paths := make([]string, len(r.Defs))
				for j, d := range r.Defs {
					paths[j] = d.Path
				}
				if err := tx.QueryRow(ctx, definitionsOutside, u.id, paths).Scan(&out.Others); err != nil {
					return fmt.Errorf("count metric definitions of node %d: %w", u.id, err)
				}
			}
			if out.Others+len(r.Defs) > maxMetrics {
				out.TooMany = true
				continue
			}
			if out.Same {
				if r.NeedIDs {
					out.IDs = ids
				}
				continue
			}
			out.IDs = ids
			for _, d := range uniqueDefs(r.Defs) {
				thr, err := thresholdJSON(d)
				if err != nil {
					return err
				}
				m, def := ids[d.Path], defID[defKey(d, thr)]
				if u.inserted {
					fresh = append(fresh, []any{u.id, m, def})
					checkIDs[[2]int32{m, def}] = true
					continue
				}
				nodeIDs, metricIDs, defIDs = append(nodeIDs, u.id), append(metricIDs, m), append(defIDs, def)
			}
			marked, hashes = append(marked, u.id), append(hashes, r.Hash)
		}
		if len(marked) == 0 {
			return nil
		}
		// A new node's definitions are copied: a fleet's first Hellos
		// write some 190 rows a node, and COPY writes them a page at a
		// time (heap_multi_insert) without the upsert's speculative
		// insertion, in about half the WAL and time (BENCHMARKS.md,
		// "Fleet"). Its ids are checked after it, once per distinct pair:
		// the COPY took its lock on node_metrics before the check's
		// snapshot is taken, so, as for the upsert below, either a
		// retention pass waited for this transaction and sees these rows,
		// or the COPY waited for the pass and the check sees the entries
		// gone.
		if len(fresh) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"node_metrics"}, []string{"node_id", "metric_id", "def_id"}, pgx.CopyFromRows(fresh)); err != nil {
				return fmt.Errorf("copy metric definitions: %w", err)
			}
			ms, ds := make([]int32, 0, len(checkIDs)), make([]int32, 0, len(checkIDs))
			for k := range checkIDs {
				ms, ds = append(ms, k[0]), append(ds, k[1])
			}
			var missing int
			if err := tx.QueryRow(ctx, `
				SELECT count(*) FROM unnest($1::int[], $2::int[]) AS u (m, d)
				WHERE NOT EXISTS (SELECT 1 FROM metric_paths WHERE id = u.m)
				   OR NOT EXISTS (SELECT 1 FROM metric_defs WHERE id = u.d)`, ms, ds).Scan(&missing); err != nil {
				return fmt.Errorf("check metric definitions: %w", err)
			}
			if missing > 0 {
				return errStaleIDs
			}
		}
		// The ids are checked in the insert's own statement: it takes its
		// lock on node_metrics when it is bound, before its snapshot is
		// taken; a retention pass deletes dictionary entries holding a
		// lock that conflicts with it (CollectDictionaries), so either the
		// pass waited for this transaction and sees these rows, or this
		// statement waited for the pass and sees the entries gone.
		var missing int
		if len(nodeIDs) == 0 {
			// Only new nodes' rows: copied and checked above.
		} else if err := tx.QueryRow(ctx, `
			WITH u AS (SELECT * FROM unnest($1::int[], $2::int[], $3::int[]) AS u (n, m, d)),
			ins AS (
				INSERT INTO node_metrics AS nm (node_id, metric_id, def_id)
				SELECT n, m, d FROM u ORDER BY n, m
				ON CONFLICT (node_id, metric_id) DO UPDATE SET def_id = EXCLUDED.def_id, last_sample = NULL
				WHERE nm.def_id IS DISTINCT FROM EXCLUDED.def_id)
			SELECT count(*) FROM u
			WHERE NOT EXISTS (SELECT 1 FROM metric_paths WHERE id = u.m)
			   OR NOT EXISTS (SELECT 1 FROM metric_defs WHERE id = u.d)`, nodeIDs, metricIDs, defIDs).Scan(&missing); err != nil {
			return fmt.Errorf("insert metric definitions: %w", err)
		}
		if missing > 0 {
			return errStaleIDs
		}
		// MarkDefinitions, for the batch: the next Hello with the same
		// definitions writes none of them.
		if _, err := tx.Exec(ctx, `
			UPDATE nodes n SET defs_hash = u.h, defs_total = (SELECT count(*) FROM node_metrics WHERE node_id = n.id)
			FROM unnest($1::int[], $2::bytea[]) AS u (id, h) WHERE n.id = u.id`, marked, hashes); err != nil {
			return fmt.Errorf("record definitions hashes: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// uniqueDefs keeps one definition per path, the last winning: a statement
// may not update the same row twice.
func uniqueDefs(defs []MetricDef) []MetricDef {
	last := make(map[string]int, len(defs))
	for i, d := range defs {
		last[d.Path] = i
	}
	if len(last) == len(defs) {
		return defs
	}
	uniq := make([]MetricDef, 0, len(last))
	for i, d := range defs {
		if last[d.Path] == i {
			uniq = append(uniq, d)
		}
	}
	return uniq
}

// AdmitNodes decides, for each name in turn, whether a Hello from it may
// register under a limit of max nodes, as AdmitNode does for one, in one
// query for them all. reserved counts new names admitted earlier that
// are not registered yet (nor given up): they count against the limit.
// A new name admitted here counts against the names after it, so a
// batch that would cross the limit admits exactly up to it. total is the
// node count (with reserved ones and those admitted here) when a name is
// refused. fresh marks the names admitted that have no node yet.
func (s *Store) AdmitNodes(ctx context.Context, names []string, max, reserved int) (admitted, fresh []bool, total int, err error) {
	var (
		existing []string
		seq      int64
	)
	err = s.pool.QueryRow(ctx, `SELECT coalesce((SELECT array_agg(name) FROM nodes WHERE name = ANY($1) AND retired_at IS NULL), '{}'), `+nodeIDsIssued,
		names).Scan(&existing, &seq)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("look up nodes: %w", err)
	}
	admitted, fresh = make([]bool, len(names)), make([]bool, len(names))
	newNames := map[string]bool{} // admitted here
	s.mu.Lock()
	t := s.nodes
	s.mu.Unlock()
	counted := false
	for i, name := range names {
		if slices.Contains(existing, name) {
			admitted[i] = true
			continue
		}
		if newNames[name] {
			admitted[i], fresh[i] = true, true
			continue
		}
		pending := int64(reserved + len(newNames))
		if !counted && !(t.valid && t.count+(seq-t.seq)+pending < int64(max)) {
			// The bound reached the limit: count exactly, once. The ids
			// first: a node inserted after this is in the next bound's
			// difference, whether or not the count sees it.
			if err := s.pool.QueryRow(ctx, `SELECT `+nodeIDsIssued).Scan(&seq); err != nil {
				return nil, nil, 0, fmt.Errorf("count nodes: %w", err)
			}
			var n int64
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE retired_at IS NULL`).Scan(&n); err != nil {
				return nil, nil, 0, fmt.Errorf("count nodes: %w", err)
			}
			t = nodeTally{count: n, seq: seq, valid: true}
			s.mu.Lock()
			s.nodes = t
			s.mu.Unlock()
			counted = true
		}
		if t.count+(seq-t.seq)+pending < int64(max) {
			admitted[i], fresh[i] = true, true
			newNames[name] = true
			continue
		}
		total = int(t.count + (seq - t.seq) + pending)
	}
	return admitted, fresh, total, nil
}

const definitionsOutside = `
		SELECT count(*) FROM node_metrics nm JOIN metric_paths m ON m.id = nm.metric_id
		WHERE nm.node_id = $1 AND m.path NOT IN (SELECT unnest($2::text[]))`
