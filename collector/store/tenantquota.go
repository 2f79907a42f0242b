package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TenantQuota is a tenant's node quota set by the operator, with the
// tenant's registered nodes.
type TenantQuota struct {
	Tenant   string    `json:"tenant"`
	MaxNodes int       `json:"max_nodes"`
	Nodes    int       `json:"nodes"`
	SetBy    string    `json:"set_by"`
	SetAt    time.Time `json:"set_at"`
}

// TenantNodes returns the quota an operator set for the tenant (set
// false: none) and, when a quota applies (set, or always: the caller has
// a default one), the tenant's registered nodes (its current rows). The
// count reads the tenant's every row: without a quota to hold it to, a
// Hello of each new node paid it for nothing (BENCHMARKS.md, "Fleet").
func (s *Store) TenantNodes(ctx context.Context, tenant string, always bool) (count, quota int, set bool, err error) {
	var q, n *int
	if err := s.pool.QueryRow(ctx, `SELECT q.max_nodes,
		CASE WHEN $2 OR q.max_nodes IS NOT NULL THEN (SELECT count(*) FROM nodes WHERE tenant = $1 AND retired_at IS NULL) END
		FROM (VALUES (1)) AS one (x) LEFT JOIN tenant_quotas q ON q.tenant = $1`, tenant, always).Scan(&q, &n); err != nil {
		return 0, 0, false, fmt.Errorf("count nodes of tenant %q: %w", tenant, err)
	}
	if n != nil {
		count = *n
	}
	if q != nil {
		return count, *q, true, nil
	}
	return count, 0, false, nil
}

// SetTenantQuota sets (or replaces) the tenant's node quota.
func (s *Store) SetTenantQuota(ctx context.Context, tenant string, maxNodes int, by string) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO tenant_quotas (tenant, max_nodes, set_by) VALUES ($1, $2, $3)
		ON CONFLICT (tenant) DO UPDATE SET max_nodes = EXCLUDED.max_nodes, set_by = EXCLUDED.set_by, set_at = now()`, tenant, maxNodes, by); err != nil {
		return fmt.Errorf("set the node quota of tenant %q: %w", tenant, err)
	}
	return nil
}

// DeleteTenantQuota removes the tenant's quota; ErrNotFound when it had
// none.
func (s *Store) DeleteTenantQuota(ctx context.Context, tenant string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM tenant_quotas WHERE tenant = $1`, tenant)
	if err != nil {
		return fmt.Errorf("remove the node quota of tenant %q: %w", tenant, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("tenant %q has no node quota: %w", tenant, ErrNotFound)
	}
	return nil
}

// TenantQuotas lists the quotas set, by tenant, with each tenant's nodes.
func (s *Store) TenantQuotas(ctx context.Context) ([]TenantQuota, error) {
	rows, err := s.pool.Query(ctx, `SELECT q.tenant, q.max_nodes,
			(SELECT count(*) FROM nodes n WHERE n.tenant = q.tenant AND n.retired_at IS NULL), q.set_by, q.set_at
		FROM tenant_quotas q ORDER BY q.tenant`)
	if err != nil {
		return nil, fmt.Errorf("list tenant node quotas: %w", err)
	}
	qs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TenantQuota])
	if err != nil {
		return nil, fmt.Errorf("list tenant node quotas: %w", err)
	}
	return qs, nil
}
