package alert

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nbs-project/nbs/collector/store"
)

// PruneHistory deletes alerts resolved before cutoff, with their delivery
// log (which cascades), and silences that ended before cutoff, batch per
// statement. An alert whose resolve is still waiting to be delivered stays
// until it is delivered or given up: the outbox must not lose a resolve.
// Open alerts are never deleted.
func PruneHistory(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int) (int64, error) {
	if _, err := store.DeleteInBatches(ctx, pool, `
		DELETE FROM alert_silences WHERE id IN (SELECT id FROM alert_silences WHERE ends_at < $1 LIMIT $2)`, batch, cutoff); err != nil {
		return 0, fmt.Errorf("delete alert silences ended before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	n, err := store.DeleteInBatches(ctx, pool, `
		DELETE FROM alert_instances WHERE id IN (
			SELECT i.id FROM alert_instances i
			WHERE i.state = 'resolved' AND i.resolved_at < $1
			  AND NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.instance_id = i.id AND d.status = 'pending')
			LIMIT $2)`, batch, cutoff)
	if err != nil {
		return n, fmt.Errorf("delete alerts resolved before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return n, nil
}
