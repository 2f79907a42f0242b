// Package retention bounds everything the collector stores. Raw reports,
// histograms and evidence leave by dropping day partitions, rollups by
// age; the catalogue (each node's definitions, the dictionaries of metric
// paths and definitions, the newest values) keeps only what retained data
// or a live node still names; nodes that stopped reporting, resolved
// alerts and audit entries leave after their own retentions. A pass runs
// at a time its caller gives, so a simulation can run a month in minutes
// (bench/lifecycle).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/alert"
	"github.com/nbs-project/nbs/collector/nodeauth"
	"github.com/nbs-project/nbs/collector/store"
)

const (
	// batch bounds the rows one statement deletes or rewrites, so no pass
	// holds many locks or a long transaction.
	batch = 1000
	// maxExpiredNodes bounds the nodes one pass deletes (each is a
	// transaction of its own); the next pass takes the rest.
	maxExpiredNodes = 1000
	// dictionaryGrace is how long a metric path or definition no node
	// names is kept: a collector that resolved it just before has time to
	// name it again (and the pass's lock makes a late one safe anyway).
	dictionaryGrace = 24 * time.Hour
	// dictionaryEvery spaces the dictionary collections, which scan the
	// nodes' definitions and hold registrations off while they delete.
	dictionaryEvery = 24 * time.Hour
)

// Nodes deletes expired nodes and ends streams whose definitions were
// pruned, on every collector (nodeauth.Admin).
type Nodes interface {
	Expire(ctx context.Context, node string) error
	ExpireUnreported(ctx context.Context, node string) error
	Refresh(ctx context.Context, nodes []string)
}

// Stats is what one pass removed.
type Stats struct {
	Partitions      int   // raw day partitions dropped
	Rollups         int64 // rollup rows
	LatestValues    int64 // values removed from node_latest
	Counters        int64 // running totals of the exports not moved within the raw retention
	Definitions     int64 // node_metrics rows
	RefreshedNodes  int   // nodes whose streams were ended to announce again
	ExpiredNodes    int   // nodes deleted
	UnreportedNodes int   // nodes deleted that registered and never reported
	RetiredNodes    int   // former tenants' rows of nodes deleted
	Credentials     int64 // credentials and bindings of names that never reported
	MetricPaths     int64 // metric_paths rows
	MetricDefs      int64 // metric_defs rows
	Alerts          int64 // resolved alerts (their deliveries cascade)
	AuditEntries    int64
	Took            time.Duration
	UnfinishedSteps int // steps that failed (logged); the next pass retries them
}

// Retainer runs retention passes.
type Retainer struct {
	st    *store.Store
	nodes Nodes
	cfg   Config
	log   *slog.Logger
	// collected is the pass time of the last dictionary collection.
	collected time.Time
}

// New returns a Retainer; cfg is validated by the collector's
// configuration (collector/app).
func New(st *store.Store, nodes Nodes, cfg Config, log *slog.Logger) *Retainer {
	return &Retainer{st: st, nodes: nodes, cfg: cfg, log: log}
}

// Run makes a pass at once and then every interval until ctx ends.
func (r *Retainer) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s, err := r.Pass(ctx, time.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.Warn("retention pass incomplete; the next pass retries", "err", err)
		}
		if s != (Stats{Took: s.Took}) {
			r.log.Info("retention pass", "partitions", s.Partitions, "rollups", s.Rollups, "latest_values", s.LatestValues, "export_counters", s.Counters,
				"definitions", s.Definitions, "refreshed_nodes", s.RefreshedNodes, "expired_nodes", s.ExpiredNodes, "unreported_nodes", s.UnreportedNodes,
				"retired_node_rows", s.RetiredNodes, "unused_credentials", s.Credentials,
				"metric_paths", s.MetricPaths, "metric_defs", s.MetricDefs, "alerts", s.Alerts, "audit_entries", s.AuditEntries, "took", s.Took)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// Pass removes what is past its retention at now. A step that fails does
// not stop the others (each is safe alone); the errors are returned
// together. Dictionaries are collected at most daily (the first pass
// does). A Retainer runs one pass at a time.
func (r *Retainer) Pass(ctx context.Context, now time.Time) (Stats, error) {
	start := time.Now()
	var s Stats
	var errs []error
	step := func(err error) {
		if err != nil {
			errs = append(errs, err)
			s.UnfinishedSteps++
		}
	}
	dropped, err := r.st.DropPartitionsBefore(ctx, now.Add(-r.cfg.Raw))
	s.Partitions = len(dropped)
	step(err)
	for _, res := range []struct {
		res  int32
		keep time.Duration
	}{{store.RollupMinute, r.cfg.Rollup1m}, {store.RollupHour, r.cfg.Rollup1h}, {store.RollupDay, r.cfg.Rollup1h}} {
		n, err := r.st.DeleteRollupsBefore(ctx, res.res, now.Add(-res.keep))
		s.Rollups += n
		step(err)
	}
	// Nodes before their definitions: an expired node's go with it.
	expired, err := r.st.ExpiredNodes(ctx, now.Add(-r.cfg.Nodes), maxExpiredNodes)
	step(err)
	for _, node := range expired {
		if err := r.nodes.Expire(ctx, node); err != nil && !errors.Is(err, store.ErrNotFound) {
			step(fmt.Errorf("expire node %q: %w", node, err))
			continue
		}
		s.ExpiredNodes++
	}
	// Names registered and never used leave within hours, not the node
	// retention: each holds a place under --ingest.max-nodes, and a
	// bootstrap token's holder can register many.
	unreported, err := r.st.UnreportedNodes(ctx, now.Add(-r.cfg.unreported()), maxExpiredNodes)
	step(err)
	for _, node := range unreported {
		if err := r.nodes.ExpireUnreported(ctx, node); err != nil && !errors.Is(err, store.ErrNotFound) {
			step(fmt.Errorf("expire unreported node %q: %w", node, err))
			continue
		}
		s.UnreportedNodes++
	}
	// A node's former tenant's part of its history ends when the node
	// retention has passed since it was retired: it holds nothing newer.
	retired, err := r.st.ExpiredRetiredNodes(ctx, now.Add(-r.cfg.Nodes), maxExpiredNodes)
	step(err)
	for _, id := range retired {
		if err := r.st.DeleteRetiredNode(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			step(fmt.Errorf("delete retired node row %d: %w", id, err))
			continue
		}
		s.RetiredNodes++
	}
	// Enrolled names that never registered (or whose node is gone) would
	// otherwise pile up: a bootstrap token's holder can enroll names.
	s.Credentials, err = nodeauth.PruneUnused(ctx, r.st.Pool(), now.Add(-r.cfg.Nodes), batch)
	step(err)
	s.LatestValues, err = r.st.PruneLatest(ctx, now.Add(-r.cfg.Raw), batch)
	step(err)
	s.Counters, err = r.st.PruneCounters(ctx, now.Add(-r.cfg.Raw), batch)
	step(err)
	refresh, n, err := r.st.PruneDefinitions(ctx, now.Add(-r.cfg.Catalogue()), batch)
	s.Definitions, s.RefreshedNodes = n, len(refresh)
	step(err)
	if len(refresh) > 0 {
		r.nodes.Refresh(ctx, refresh)
	}
	if now.Sub(r.collected) >= dictionaryEvery || now.Before(r.collected) {
		s.MetricPaths, s.MetricDefs, err = r.st.CollectDictionaries(ctx, now, dictionaryGrace)
		step(err)
		if err == nil {
			r.collected = now
		}
	}
	s.Alerts, err = alert.PruneHistory(ctx, r.st.Pool(), now.Add(-r.cfg.Alerts), batch)
	step(err)
	s.AuditEntries, err = access.PruneAudit(ctx, r.st.Pool(), now.Add(-r.cfg.Audit), batch)
	step(err)
	s.Took = time.Since(start)
	return s, errors.Join(errs...)
}
