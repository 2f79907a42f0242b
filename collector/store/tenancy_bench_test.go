package store

import (
	"context"
	"fmt"
	"testing"
)

// tenantScope is a customer's scope without importing collector/access
// (which imports this package): labels @> selector.
type tenantScope string

func (s tenantScope) LabelClause(column string, argN int) (string, []any) {
	return fmt.Sprintf("%s @> $%d::jsonb", column, argN), []any{fmt.Sprintf(`{"customer":%q}`, string(s))}
}
func (s tenantScope) Sees(labels map[string]string) bool { return labels["customer"] == string(s) }
func (tenantScope) SeesAll() bool                        { return false }

// BenchmarkTenancy: what history kept per tenant (migration 014: a node
// row per tenant it belonged to) costs. 10,000 nodes of 10 tenants, of
// which 1,000 moved once (so 11,000 rows). Reads: a customer's and staff's
// lookup of a node that moved beside one that never did, and a customer's
// fleet list (DISTINCT ON name) of 1,000 nodes; writes: a Hello of an
// unchanged tenant (the one-statement upsert every Hello makes) beside one
// that moves the node (retire and insert in a transaction). Same run, so
// compare the pairs:
//
//	go test -run '^$' -bench Tenancy ./collector/store
func BenchmarkTenancy(b *testing.B) {
	ctx := context.Background()
	st := openTest(b)
	if _, err := st.pool.Exec(ctx, `
		INSERT INTO nodes (name, labels, tenant, retired_at)
		SELECT 'n' || i, jsonb_build_object('customer', 't' || (i % 10)), 't' || (i % 10), now() - interval '1 day'
		FROM generate_series(1, 1000) i;
		INSERT INTO nodes (name, labels, tenant)
		SELECT 'n' || i, jsonb_build_object('customer', 't' || ((i + 1) % 10)), 't' || ((i + 1) % 10)
		FROM generate_series(1, 10000) i;
		ANALYZE nodes`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"lookup/staff/never moved", func() error { _, err := st.NodeByNameIn(ctx, All{}, "n5005"); return err }},
		{"lookup/staff/moved", func() error { _, err := st.NodeByNameIn(ctx, All{}, "n505"); return err }},
		{"lookup/customer/never moved", func() error { _, err := st.NodeByNameIn(ctx, tenantScope("t6"), "n5005"); return err }},
		{"lookup/customer/moved, current tenant", func() error { _, err := st.NodeByNameIn(ctx, tenantScope("t6"), "n505"); return err }},
		{"lookup/customer/moved, former tenant", func() error { _, err := st.NodeByNameIn(ctx, tenantScope("t5"), "n505"); return err }},
		{"fleet/customer", func() error { _, err := st.NodesIn(ctx, tenantScope("t3")); return err }},
		{"fleet/customer, one row a name (before)", func() error {
			clause, args := tenantScope("t3").LabelClause("labels", 1)
			rows, err := st.pool.Query(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE retired_at IS NULL AND `+clause+` ORDER BY name`, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				if _, err := scanNode(rows); err != nil {
					return err
				}
			}
			rows.Close()
			return rows.Err()
		}},
		{"hello/same tenant", func() error {
			_, err := st.UpsertNode(ctx, Node{Name: "n7007", Tenant: "t8", Labels: map[string]string{"customer": "t8"}})
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("hello/moves tenant", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			tenant := fmt.Sprintf("m%d", i%2)
			if _, err := st.UpsertNode(ctx, Node{Name: "n9009", Tenant: tenant, Labels: map[string]string{"customer": tenant}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
