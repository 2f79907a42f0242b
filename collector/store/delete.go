package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DeleteNode deletes a node and everything it reported, in one transaction:
// reports, histograms and events (partitioned, so not cascaded), and through
// the nodes row its metric definitions, latest values and alert watermark.
// Alert history (alert_instances) is kept. It returns ErrNotFound when no
// node has the name. A report of the node still in flight then fails its
// foreign key and is refused alone (the writer splits failing batches).
func (s *Store) DeleteNode(ctx context.Context, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int32
		// FOR UPDATE serialises this with a Hello of the same node upserting it.
		err := tx.QueryRow(ctx, `SELECT id FROM nodes WHERE name = $1 FOR UPDATE`, name).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("node %q: %w", name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("find node %q: %w", name, err)
		}
		for _, table := range []string{"events", "histograms", "reports"} {
			if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE node_id = $1`, id); err != nil {
				return fmt.Errorf("delete %s of node %q: %w", table, name, err)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete node %q: %w", name, err)
		}
		return nil
	})
}
