package access

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/store"
)

// PruneAudit deletes audit entries recorded before cutoff, oldest first,
// batch per statement (audit_log_at serves the order).
func PruneAudit(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int) (int64, error) {
	n, err := store.DeleteInBatches(ctx, pool, `
		DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < $1 ORDER BY at, id LIMIT $2)`, batch, cutoff)
	if err != nil {
		return n, fmt.Errorf("delete audit entries before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}
