package nodeauth

import (
	"context"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/errkind"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// MaxTenantQuota bounds a tenant's node quota, as --ingest.max-nodes is.
const MaxTenantQuota = 1 << 24

// SetTenantQuota sets how many nodes the tenant may register (0: no new
// node), replacing --ingest.max-nodes-per-tenant for it. Nodes it has
// already stay: the quota refuses new ones only.
func (a *Admin) SetTenantQuota(ctx context.Context, tenant string, maxNodes int) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if maxNodes < 0 || maxNodes > MaxTenantQuota {
		return errkind.Errorf(errkind.Invalid, "node quota %d must be from 0 (no new node) to %d", maxNodes, MaxTenantQuota)
	}
	if err := a.store.SetTenantQuota(ctx, tenant, maxNodes, access.FromContext(ctx).Name); err != nil {
		return err
	}
	a.log.Info("tenant node quota set", "tenant", tenant, "max_nodes", maxNodes)
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: "set", ObjectKind: "tenant_quota", ObjectID: tenant, New: map[string]int{"max_nodes": maxNodes}}); err != nil {
		a.log.Error("audit a tenant node quota", "tenant", tenant, "err", err)
	}
	return nil
}

// RemoveTenantQuota gives the tenant --ingest.max-nodes-per-tenant again.
func (a *Admin) RemoveTenantQuota(ctx context.Context, tenant string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := a.store.DeleteTenantQuota(ctx, tenant); err != nil {
		return err
	}
	a.log.Info("tenant node quota removed", "tenant", tenant)
	if err := access.Audit(ctx, a.repo.pool, access.Entry{Action: "remove", ObjectKind: "tenant_quota", ObjectID: tenant}); err != nil {
		a.log.Error("audit a tenant node quota", "tenant", tenant, "err", err)
	}
	return nil
}

// TenantQuotas lists the quotas operators set, with each tenant's nodes.
func (a *Admin) TenantQuotas(ctx context.Context) ([]store.TenantQuota, error) {
	return a.store.TenantQuotas(ctx)
}

func checkTenant(tenant string) error {
	if tenant == "" {
		return errkind.New(errkind.Invalid, "a tenant is a value of the tenant label, e.g. acme; empty is no tenant")
	}
	if err := schema.CheckLabelValue(tenant); err != nil {
		return errkind.Errorf(errkind.Invalid, "tenant %.80q: %v", tenant, err)
	}
	return nil
}
