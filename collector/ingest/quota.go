package ingest

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TenantQuotas tells how many nodes a tenant has and may have
// (store.TenantNodes).
type TenantQuotas interface {
	// TenantNodes is the quota an operator set for the tenant
	// (nbs-collector nodes quota; set false: none) and, when a quota
	// applies (set, or always), the tenant's registered nodes.
	TenantNodes(ctx context.Context, tenant string, always bool) (count, quota int, set bool, err error)
}

// tenantGate counts, per tenant, the new nodes admitted under their
// tenant's quota and not registered yet, so Hellos registering together
// on this collector cannot pass it.
type tenantGate struct {
	pending map[string]int // guarded by Server.mu
}

// admitTenant decides whether a new node of tenant may register under its
// quota: the operator's (nbs-collector nodes quota), else
// --ingest.max-nodes-per-tenant (0: none). It counts the tenant's nodes
// in the database and the new ones admitted here and not registered yet;
// done releases the node's place once it is registered or refused.
// Collectors registering a tenant's new nodes at the same moment may pass
// its quota by the Hellos in flight.
func (s *Server) admitTenant(ctx context.Context, tenant string) (done func(), err error) {
	none := func() {}
	if tenant == "" || s.quotas == nil {
		return none, nil
	}
	s.mu.Lock()
	ahead := s.tenants.pending[tenant]
	s.tenants.pending[tenant]++
	s.mu.Unlock()
	done = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.tenants.pending[tenant]--; s.tenants.pending[tenant] <= 0 {
			delete(s.tenants.pending, tenant)
		}
	}
	count, quota, set, err := s.quotas.TenantNodes(ctx, tenant, s.limits.MaxNodesPerTenant > 0)
	if err != nil {
		done()
		return none, err
	}
	flag := "--ingest.max-nodes-per-tenant"
	if set {
		flag = "nbs-collector nodes quota set " + tenant
	} else if quota = s.limits.MaxNodesPerTenant; quota == 0 {
		done()
		return none, nil
	}
	if count+ahead >= quota {
		done()
		return none, &quotaError{tenant: tenant, nodes: count + ahead, quota: quota, flag: flag}
	}
	return done, nil
}

// quotaError refuses a tenant's new node past its quota.
type quotaError struct {
	tenant       string
	nodes, quota int
	flag         string
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("tenant %q has %d nodes, at most %d allowed (%s): delete its unused nodes (nbs-collector nodes delete) or raise its quota",
		e.tenant, e.nodes, e.quota, e.flag)
}

func (e *quotaError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}
