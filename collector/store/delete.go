package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DeleteNode deletes a node and everything it reported, in one transaction:
// reports, histograms and events (partitioned, so not cascaded), its
// rollups and metric definitions (no foreign keys: migrations 022, 025),
// and through the nodes row its latest values and alert watermark.
// Every row the name had is deleted, those of its former tenants too
// (migration 014). Alert history (alert_instances) is kept. It returns
// ErrNotFound when no node has the name. A report of the node still in
// flight then fails its foreign key and is refused alone (the writer
// splits failing batches).
func (s *Store) DeleteNode(ctx context.Context, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// FOR UPDATE serialises this with a Hello of the same node upserting it.
		rows, err := tx.Query(ctx, `SELECT id FROM nodes WHERE name = $1 FOR UPDATE`, name)
		if err != nil {
			return fmt.Errorf("find node %q: %w", name, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return fmt.Errorf("find node %q: %w", name, err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("node %q: %w", name, ErrNotFound)
		}
		return deleteRows(ctx, tx, name, ids)
	})
}

// DeleteRetiredNode deletes one retired row of a node (one former
// tenant's part of its history) with everything it reported.
func (s *Store) DeleteRetiredNode(ctx context.Context, id int32) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var name string
		err := tx.QueryRow(ctx, `SELECT name FROM nodes WHERE id = $1 AND retired_at IS NOT NULL FOR UPDATE`, id).Scan(&name)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("retired node row %d: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("find retired node row %d: %w", id, err)
		}
		return deleteRows(ctx, tx, name, []int32{id})
	})
}

func deleteRows(ctx context.Context, tx pgx.Tx, name string, ids []int32) error {
	for _, table := range []string{"events", "histograms", "reports", "export_counters"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE node_id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("delete %s of node %q: %w", table, name, err)
		}
	}
	// The report pre-aggregate's days that summed these nodes: rebuilt
	// without them by the folder's backfill (scopeagg.go).
	if err := forgetScopeDaysOf(ctx, tx, ids); err != nil {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	// No foreign key cascades to node_metrics (migration 022). After the
	// node rows: that statement waited for any registration holding them,
	// and this one's snapshot sees what it committed.
	if _, err := tx.Exec(ctx, `DELETE FROM node_metrics WHERE node_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("delete metric definitions of node %q: %w", name, err)
	}
	// Nor to the rollups (migration 024), for the same reason after the
	// node rows: a fold locks the nodes it writes rollups for. Every
	// resolution named, so the primary key's index finds each node's rows.
	for _, table := range []string{"rollup_samples", "rollup_histograms", "flow_edges"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE res = ANY($2) AND node_id = ANY($1)`,
			ids, []int32{RollupMinute, RollupHour, RollupDay}); err != nil {
			return fmt.Errorf("delete %s of node %q: %w", table, name, err)
		}
	}
	// The addresses its owners held: a deleted node's pods resolve no
	// peer any more.
	if _, err := tx.Exec(ctx, `DELETE FROM flow_holders WHERE node_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("delete address holders of node %q: %w", name, err)
	}
	return nil
}
