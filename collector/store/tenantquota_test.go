package store

import (
	"context"
	"testing"
)

// TenantNodes counts a tenant's current nodes whenever a quota applies:
// the operator's, or the caller's default (always). Without either, the
// count is not needed and not read.
func TestTenantNodes(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	for _, r := range []Registration{
		registration("tq-a1", "acme", regDefs(1, "a")),
		registration("tq-a2", "acme", regDefs(1, "a")),
		registration("tq-b1", "beta", regDefs(1, "a")),
	} {
		if out := st.RegisterNodes(ctx, []Registration{r}, 100); out[0].Err != nil {
			t.Fatal(out[0].Err)
		}
	}
	if err := st.SetTenantQuota(ctx, "acme", 5, "test"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant       string
		always       bool
		count, quota int
		set          bool
	}{
		{"acme", false, 2, 5, true}, // the operator's quota: counted
		{"acme", true, 2, 5, true},
		{"beta", true, 1, 0, false},  // the caller's default quota
		{"beta", false, 0, 0, false}, // no quota: nothing to count
		{"gamma", true, 0, 0, false}, // no nodes
	} {
		count, quota, set, err := st.TenantNodes(ctx, c.tenant, c.always)
		if err != nil || count != c.count || quota != c.quota || set != c.set {
			t.Errorf("TenantNodes(%s, always %v) = %d, %d, %v, %v; want %d, %d, %v", c.tenant, c.always, count, quota, set, err, c.count, c.quota, c.set)
		}
	}
}
