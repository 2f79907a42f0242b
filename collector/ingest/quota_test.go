package ingest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeQuotas counts a tenant's nodes among what reg registered.
type fakeQuotas struct {
	reg   *countingRegistry
	quota map[string]int
}

func (q *fakeQuotas) TenantNodes(_ context.Context, tenant string, _ bool) (count, quota int, set bool, err error) {
	q.reg.mu.Lock()
	defer q.reg.mu.Unlock()
	for _, ns := range q.reg.upserts {
		if ns[len(ns)-1].Tenant == tenant {
			count++
		}
	}
	quota, set = q.quota[tenant]
	return count, quota, set, nil
}

// Hellos of a tenant's new nodes registering at once cannot pass its
// quota together; another tenant's, and the tenant's known nodes, are not
// held back by it.
func TestTenantQuotaHoldsForHellosTogether(t *testing.T) {
	q := &fakeQuotas{quota: map[string]int{"acme": 3}}
	lim := DefaultLimits()
	lim.MaxNodesPerTenant = 100
	_, reg, client := startServerWith(t, ServerOptions{Auth: credentialAuth{}, Quotas: q, Limits: lim})
	q.reg = reg
	// The Hellos arrive together: the registrar admits them in one batch,
	// and they count their tenant's nodes before any is stored.
	const hellos = 10
	var wg sync.WaitGroup
	errs := make(chan error, hellos)
	for i := range hellos {
		wg.Go(func() {
			node := fmt.Sprintf("acme-%d", i)
			_, m, err := open(t, client, node, cred("cred-"+node), 1, map[string]string{"customer": "acme"})
			if err == nil && m.GetConfig() == nil {
				err = fmt.Errorf("first answer %v, not a Config", m)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	admitted := 0
	for err := range errs {
		switch {
		case err == nil:
			admitted++
		case status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `at most 3 allowed (nbs-collector nodes quota set acme)`):
			t.Errorf("a Hello past acme's quota: %v", err)
		}
	}
	if admitted != 3 {
		t.Errorf("%d of acme's %d new nodes admitted together, want its quota of 3", admitted, hellos)
	}
	// globex has the flag's quota, far off; acme's known nodes come back.
	if _, m, err := open(t, client, "globex-1", cred("cred-globex-1"), 1, map[string]string{"customer": "globex"}); err != nil || m.GetConfig() == nil {
		t.Errorf("globex's node: %v, %v; want its Config", m, err)
	}
	registered := 0
	for i := range hellos {
		node := fmt.Sprintf("acme-%d", i)
		if reg.count(node) == 0 {
			continue
		}
		registered++
		if _, m, err := open(t, client, node, cred("cred-"+node), 2, map[string]string{"customer": "acme"}); err != nil || m.GetConfig() == nil {
			t.Errorf("acme's registered %s reconnecting at its quota: %v, %v; want its Config", node, m, err)
		}
	}
	if registered != 3 {
		t.Errorf("%d of acme's nodes registered, want 3", registered)
	}
}
