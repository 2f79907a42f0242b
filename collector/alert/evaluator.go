package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nbs-project/nbs/collector/store"
)

const (
	// sweepEvery: the leader reads every node's new reports this often even
	// without a wake-up, in case a NOTIFY was lost (a follower's database
	// hiccup, a leader change in between).
	sweepEvery = 10 * time.Second
	// reloadEvery: rules and node labels are re-read this often besides on
	// notification.
	reloadEvery = 30 * time.Second
	// flushEvery bounds how often watermarks are written when nothing else
	// changed; a new leader replays at most this much twice, harmlessly.
	flushEvery = time.Second
	// newNodeLookback is how much history a node the evaluator has never
	// read gets evaluated from (a fresh install, a new node).
	newNodeLookback = time.Minute
)

// evaluator is the leader's state for one term; a database error discards
// it and the next one starts again from what PostgreSQL holds.
type evaluator struct {
	s         *Service
	epoch     int64
	eng       *Engine
	paths     map[int32]string
	nodes     map[int32]store.Node
	known     map[int32]bool // nodes whose watermark is persisted
	wm        map[int32]time.Time
	lastFlush time.Time
	lastSweep time.Time
	lastLoad  time.Time
	defs      defsCache
}

// evaluate runs evaluator terms until ctx ends or another leader fences
// this one off.
func (s *Service) evaluate(ctx context.Context, epoch int64) error {
	backoff := time.Second
	for ctx.Err() == nil {
		ev := &evaluator{s: s, epoch: epoch, eng: NewEngine(), paths: map[int32]string{}, known: map[int32]bool{},
			wm: map[int32]time.Time{}, defs: defsCache{}}
		err := ev.init(ctx)
		if err == nil {
			err = ev.loop(ctx)
		}
		if errors.Is(err, errFenced) || ctx.Err() != nil {
			return err
		}
		s.log.Warn("alert evaluation failed; restarting from the database", "err", err, "in", backoff)
		select {
		case <-time.After(backoff + rand.N(backoff/2)):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	return nil
}

// init rebuilds the engine from PostgreSQL: open instances, recently
// resolved identities, watermarks, every node's newest state (for group
// rules), then the rules, whose changes since the last term (a rule deleted
// while nobody led) are persisted at once.
func (ev *evaluator) init(ctx context.Context) error {
	open, err := ev.s.repo.instances(ctx, `WHERE state <> 'resolved'`)
	if err != nil {
		return err
	}
	for i := range open {
		inst := open[i].Instance
		ev.eng.Restore(&inst)
	}
	resolved, err := ev.s.repo.instances(ctx, `WHERE state = 'resolved' AND resolved_at > now() - $1::interval`, resolvedMemory)
	if err != nil {
		return err
	}
	for _, r := range resolved {
		ev.eng.RestoreResolved(r.Fingerprint, r.LastTS)
	}
	wms, err := ev.s.repo.watermarks(ctx)
	if err != nil {
		return err
	}
	for id, ts := range wms {
		ev.eng.SetWatermark(id, ts)
		ev.known[id] = true
	}
	if err := ev.loadNodes(ctx); err != nil {
		return err
	}
	latest, err := ev.s.st.LatestAll(ctx)
	if err != nil {
		return err
	}
	for id, l := range latest {
		n, ok := ev.nodes[id]
		if !ok {
			continue
		}
		var samples []Sample
		newest := l.Time.UnixMilli()
		for p, v := range l.Metrics {
			if v.TimeMS >= newest { // node_latest keeps children not streamed since; those are OK now
				samples = append(samples, Sample{Path: p, Value: v.Value, State: v.State})
			}
		}
		ev.eng.SeedNode(nodeInfo(n), l.Time, time.Duration(l.IntervalMS)*time.Millisecond, samples)
	}
	changes, err := ev.loadRules(ctx)
	if err != nil {
		return err
	}
	ev.s.dirty.add(nil, true)
	return ev.persist(ctx, changes, time.Now())
}

func nodeInfo(n store.Node) NodeInfo { return NodeInfo{ID: n.ID, Name: n.Name, Labels: n.Labels} }

func (ev *evaluator) loadNodes(ctx context.Context) error {
	nodes, err := ev.s.st.Nodes(ctx)
	if err != nil {
		return err
	}
	ev.nodes = make(map[int32]store.Node, len(nodes))
	for _, n := range nodes {
		ev.nodes[n.ID] = n
	}
	return nil
}

func (ev *evaluator) loadRules(ctx context.Context) ([]Change, error) {
	rules, err := ev.s.repo.rules(ctx)
	if err != nil {
		return nil, err
	}
	ev.lastLoad = time.Now()
	return ev.eng.SetRules(rules, time.Now().Truncate(time.Microsecond)), nil
}

func (ev *evaluator) loop(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := ev.cycle(ctx); err != nil {
			return err
		}
		select {
		case <-ev.s.dirty.wake:
		case <-tick.C:
		case <-ev.s.rulesCh:
			ev.lastLoad = time.Time{}
		case <-ctx.Done():
			return nil
		}
	}
}

// cycle reads the new reports of the dirty nodes, runs them through the
// engine, evaluates group rules, and persists what changed.
func (ev *evaluator) cycle(ctx context.Context) error {
	// PostgreSQL keeps microseconds: the same instant in memory and stored.
	now := time.Now().Truncate(time.Microsecond)
	var changes []Change
	if now.Sub(ev.lastLoad) >= reloadEvery {
		if err := ev.loadNodes(ctx); err != nil {
			return err
		}
		c, err := ev.loadRules(ctx)
		if err != nil {
			return err
		}
		changes = append(changes, c...)
	}
	dirty, all := ev.s.dirty.take()
	if now.Sub(ev.lastSweep) >= sweepEvery {
		all = true
	}
	if all {
		ev.lastSweep = now
		dirty = map[int32]bool{}
		for id := range ev.nodes {
			dirty[id] = true
		}
	}
	if len(dirty) > 0 {
		c, err := ev.observe(ctx, dirty, now)
		if err != nil {
			ev.s.dirty.add(keys(dirty), false) // read them again next time
			return err
		}
		changes = append(changes, c...)
	}
	changes = append(changes, ev.eng.EvaluateGroups(now)...)
	ev.eng.Prune(now)
	return ev.persist(ctx, changes, now)
}

func keys(m map[int32]bool) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// observe reads the reports of the given nodes newer than their
// watermarks, in report order, and feeds them to the engine. The replay is
// bounded relative to the node's own newest report (not this collector's
// clock, which the agent's may not agree with).
func (ev *evaluator) observe(ctx context.Context, dirty map[int32]bool, now time.Time) ([]Change, error) {
	ids := make([]int32, 0, len(dirty))
	since := make([]time.Time, 0, len(dirty))
	lookback := make([]int64, 0, len(dirty))
	for id := range dirty {
		wm, ok := ev.eng.Watermark(id)
		lb := ev.s.cfg.Lookback
		if !ok {
			wm, lb = time.Unix(0, 0), newNodeLookback
		}
		ids, since, lookback = append(ids, id), append(since, wm), append(lookback, lb.Milliseconds())
	}
	rows, err := ev.s.repo.pool.Query(ctx, `
		SELECT r.node_id, r.ts, r.interval_ms, r.metric_ids, r.vals, r.states
		FROM unnest($1::int[], $2::timestamptz[], $3::bigint[]) AS w(node_id, since, lookback_ms)
		JOIN node_latest l ON l.node_id = w.node_id AND l.ts > w.since -- nodes with nothing new cost one lookup
		JOIN reports r ON r.node_id = w.node_id
			AND r.ts > greatest(w.since, l.ts - w.lookback_ms * interval '1 millisecond')
		ORDER BY r.node_id, r.ts`, ids, since, lookback)
	if err != nil {
		return nil, fmt.Errorf("read new reports: %w", err)
	}
	type report struct {
		node     int32
		ts       time.Time
		interval int32
		ids      []int32
		vals     []float64
		states   []int16
	}
	var reports []report
	missing := map[int32]bool{}
	for rows.Next() {
		var r report
		if err := rows.Scan(&r.node, &r.ts, &r.interval, &r.ids, &r.vals, &r.states); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read new reports: %w", err)
		}
		for _, id := range r.ids {
			if _, ok := ev.paths[id]; !ok {
				missing[id] = true
			}
		}
		reports = append(reports, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read new reports: %w", err)
	}
	if len(missing) > 0 {
		if err := ev.loadPaths(ctx, keys(missing)); err != nil {
			return nil, err
		}
	}
	var changes []Change
	for _, r := range reports {
		n, ok := ev.nodes[r.node]
		if !ok {
			if err := ev.loadNodes(ctx); err != nil {
				return nil, err
			}
			if n, ok = ev.nodes[r.node]; !ok {
				continue
			}
		}
		o := Observation{Node: nodeInfo(n), Time: r.ts, Interval: time.Duration(r.interval) * time.Millisecond,
			Samples: make([]Sample, 0, len(r.ids))}
		for i, id := range r.ids {
			if i < len(r.vals) && i < len(r.states) {
				o.Samples = append(o.Samples, Sample{Path: ev.paths[id], Value: r.vals[i], State: store.State(r.states[i])})
			}
		}
		changes = append(changes, ev.eng.Observe(o, now)...)
		ev.wm[r.node] = r.ts
	}
	return changes, nil
}

func (ev *evaluator) loadPaths(ctx context.Context, ids []int32) error {
	rows, err := ev.s.repo.pool.Query(ctx, `SELECT id, path FROM metric_paths WHERE id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("read metric paths: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int32
		var p string
		if err := rows.Scan(&id, &p); err != nil {
			return fmt.Errorf("read metric paths: %w", err)
		}
		ev.paths[id] = p
	}
	return rows.Err()
}

// persist writes a cycle's changes, their deliveries and the watermarks in
// one transaction under the fencing epoch: either all of it happened, and
// the outbox will announce it, or none of it, and the next term replays it.
func (ev *evaluator) persist(ctx context.Context, changes []Change, now time.Time) error {
	flush := len(ev.wm) > 0 && (len(changes) > 0 || now.Sub(ev.lastFlush) >= flushEvery)
	if len(changes) == 0 && !flush {
		return nil
	}
	for _, c := range changes {
		if c.Kind == ChangeFired {
			ev.s.describe(ctx, ev, c)
		}
	}
	deliveries := 0
	err := pgx.BeginFunc(ctx, ev.s.repo.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE alert_leader SET heartbeat = now() WHERE id = 1 AND epoch = $1`, ev.epoch)
		if err != nil {
			return fmt.Errorf("check alert leader epoch: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return errFenced
		}
		for _, c := range changes {
			n, err := ev.s.persistChange(ctx, tx, c)
			if err != nil {
				return err
			}
			deliveries += n
		}
		if flush {
			ids := make([]int32, 0, len(ev.wm))
			tss := make([]time.Time, 0, len(ev.wm))
			for id, ts := range ev.wm {
				ids, tss = append(ids, id), append(tss, ts)
			}
			// Nodes deleted meanwhile would fail the foreign key; skip them.
			if _, err := tx.Exec(ctx, `
				INSERT INTO alert_watermarks (node_id, ts)
				SELECT w.node_id, w.ts FROM unnest($1::int[], $2::timestamptz[]) AS w(node_id, ts)
				JOIN nodes n ON n.id = w.node_id
				ON CONFLICT (node_id) DO UPDATE SET ts = greatest(alert_watermarks.ts, EXCLUDED.ts)`, ids, tss); err != nil {
				return fmt.Errorf("store alert watermarks: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("persist alert changes: %w", err)
	}
	if flush {
		ev.wm = map[int32]time.Time{}
		ev.lastFlush = now
	}
	for _, c := range changes {
		l := ev.s.log.With("alert", c.Inst.RuleName, "node", c.Inst.Node, "metric", c.Inst.Metric, "id", c.Inst.ID)
		switch c.Kind {
		case ChangeFired:
			// took: from the start of the evaluation cycle to the commit that
			// queued the notifications, this collector's own share of the latency.
			l.Info("alert firing", "child", c.Inst.Child, "took", time.Since(now).Round(time.Microsecond))
		case ChangeResolved:
			l.Info("alert resolved")
		default:
			l.Debug("alert " + c.Kind.String())
		}
	}
	if deliveries > 0 {
		select {
		case ev.s.sendWake <- struct{}{}:
		default:
		}
	}
	return nil
}

// persistChange writes one transition and queues its notifications; it
// returns how many deliveries it queued.
func (s *Service) persistChange(ctx context.Context, tx pgx.Tx, c Change) (int, error) {
	inst := c.Inst
	switch c.Kind {
	case ChangeCleared:
		if inst.ID != 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM alert_instances WHERE id = $1`, inst.ID); err != nil {
				return 0, fmt.Errorf("clear pending alert %d: %w", inst.ID, err)
			}
		}
		return 0, nil
	case ChangePending, ChangeFired:
		group, _ := json.Marshal(nonNil(inst.Group))
		labels, _ := json.Marshal(nonNil(inst.Labels))
		annotations, _ := json.Marshal(nonNil(inst.Annotations))
		var fired *time.Time
		var value *float64
		if inst.State == Firing {
			fired = &inst.FiredAt
			if v, ok := headlineValue(inst); ok {
				value = &v
			}
		}
		var nodeID *int32
		if inst.Kind == KindNode {
			nodeID = &inst.NodeID
		}
		if inst.ID == 0 {
			err := tx.QueryRow(ctx, `
				INSERT INTO alert_instances (fingerprint, rule_id, rule_name, kind, severity, node_id, node, metric, child,
					group_key, state, since, last_ts, fired_at, value, labels, annotations)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING id`,
				inst.Fingerprint, inst.RuleID, inst.RuleName, inst.Kind, inst.Severity, nodeID, inst.Node, inst.Metric,
				inst.Child, group, string(inst.State), inst.Since, inst.LastTS, fired, value, labels, annotations).Scan(&inst.ID)
			if err != nil {
				return 0, fmt.Errorf("store alert %s: %w", inst.Fingerprint, err)
			}
		} else if _, err := tx.Exec(ctx, `
				UPDATE alert_instances SET state = $2, since = $3, last_ts = $4, fired_at = $5, child = $6, value = $7,
					labels = $8, annotations = $9, updated_at = now()
				WHERE id = $1`, inst.ID, string(inst.State), inst.Since, inst.LastTS, fired, inst.Child, value, labels, annotations); err != nil {
			return 0, fmt.Errorf("update alert %d: %w", inst.ID, err)
		}
		if c.Kind == ChangeFired {
			return s.queueDeliveries(ctx, tx, inst, "firing")
		}
		return 0, nil
	case ChangeResolved:
		if inst.ID == 0 { // fired and resolved before ever being stored: cannot happen, but do not page for it
			return 0, nil
		}
		if _, err := tx.Exec(ctx, `UPDATE alert_instances SET state = 'resolved', resolved_at = $2, last_ts = $3, updated_at = now()
			WHERE id = $1`, inst.ID, inst.ResolvedAt, inst.LastTS); err != nil {
			return 0, fmt.Errorf("resolve alert %d: %w", inst.ID, err)
		}
		return s.queueDeliveries(ctx, tx, inst, "resolved")
	}
	return 0, nil
}
