package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestTenantChangeRetiresTheNodeRow: a Hello or an operator's rebind that
// changes a node's tenant keeps what it reported before under a retired
// row its former tenant still sees, and starts a new row the new tenant
// sees; staff see the current row; a deletion takes every row.
func TestTenantChangeRetiresTheNodeRow(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	report := func(id int32, seq uint64, v float64) {
		t.Helper()
		mids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{{Path: "tcp_reset", Kind: store.KindRate}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, Seq: seq, Time: time.Now(), IntervalMS: 1000,
			Samples: []store.Sample{{MetricID: mids["tcp_reset"], Path: "tcp_reset", Value: v}}}}); err != nil {
			t.Fatal(err)
		}
	}
	node := func(tenant string) store.Node {
		return store.Node{Name: "n1", Tenant: tenant, Labels: map[string]string{"customer": tenant, "rack": "r1"}, PingAddress: "198.18.0.1"}
	}
	acmeID, err := st.UpsertNode(ctx, node("acme"))
	if err != nil {
		t.Fatal(err)
	}
	report(acmeID, 1, 3)
	if again, err := st.UpsertNode(ctx, node("acme")); err != nil || again != acmeID {
		t.Fatalf("the same tenant's next Hello: id %d, %v; want the same row %d", again, err, acmeID)
	}
	globexID, err := st.UpsertNode(ctx, node("globex"))
	if err != nil {
		t.Fatal(err)
	}
	if globexID == acmeID {
		t.Fatalf("a Hello with another tenant kept row %d; want a new row", acmeID)
	}
	report(globexID, 1, 5)

	customer := func(tenant string) access.Principal {
		return access.Principal{Name: tenant, Role: access.RoleCustomer, Via: access.ViaToken, Selector: access.Selector{"customer": tenant}}
	}
	for _, c := range []struct {
		name    string
		scope   store.Scope
		id      int32
		retired bool
	}{
		{"staff", store.All{}, globexID, false},
		{"the former tenant", customer("acme"), acmeID, true},
		{"the new tenant", customer("globex"), globexID, false},
	} {
		n, err := st.NodeByNameIn(ctx, c.scope, "n1")
		if err != nil || n.ID != c.id || (n.Retired != nil) != c.retired {
			t.Errorf("%s reads n1 as row %d (retired %v), %v; want row %d (retired %v)", c.name, n.ID, n.Retired, err, c.id, c.retired)
		}
		nodes, err := st.NodesIn(ctx, c.scope)
		if err != nil || len(nodes) != 1 || nodes[0].ID != c.id {
			t.Errorf("%s lists %+v, %v; want only row %d", c.name, nodes, err, c.id)
		}
	}
	if _, err := st.NodeByNameIn(ctx, customer("initech"), "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant reads n1: %v; want not found", err)
	}
	if n, err := st.NodeByName(ctx, "n1"); err != nil || n.ID != globexID || n.Tenant != "globex" {
		t.Errorf("NodeByName: %+v, %v; want the current row %d of globex", n, err, globexID)
	}
	if ok, _, err := st.AdmitNode(ctx, "n1", 1); err != nil || !ok {
		t.Errorf("a node with a retired row counts once: admitted %v, %v", ok, err)
	}

	// An operator moves it back to acme: acme's row is current again, with
	// the new labels at once and the Hello's other labels kept, so acme
	// reads the node's history before the first move and after the return
	// by its name; globex keeps the period between.
	if found, err := st.Rebind(ctx, "n1", map[string]string{"customer": "acme"}, []string{"customer"}, "acme"); err != nil || !found {
		t.Fatalf("rebind: %v, %v", found, err)
	}
	cur, err := st.NodeByName(ctx, "n1")
	if err != nil || cur.ID != acmeID || cur.Retired != nil || cur.Tenant != "acme" || cur.Labels["customer"] != "acme" || cur.Labels["rack"] != "r1" || cur.PingAddress != "198.18.0.1" {
		t.Errorf("after the move back the current row is %+v, %v; want acme's row %d again, keeping rack and ping address", cur, err, acmeID)
	}
	report(acmeID, 2, 7)
	for _, c := range []struct {
		name  string
		scope store.Scope
		id    int32
		sum   float64
	}{
		{"acme", customer("acme"), acmeID, 10}, {"globex", customer("globex"), globexID, 5},
	} {
		n, err := st.NodeByNameIn(ctx, c.scope, "n1")
		if err != nil || n.ID != c.id {
			t.Errorf("%s reads n1 as row %d, %v; want row %d", c.name, n.ID, err, c.id)
			continue
		}
		buckets, err := st.Series(ctx, n.ID, "tcp_reset", time.Now().Add(-time.Hour), time.Now().Add(time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, b := range buckets {
			sum += b.Sum
		}
		if sum != c.sum {
			t.Errorf("%s reads %v resets of n1, want %v (its own periods only)", c.name, sum, c.sum)
		}
	}
	// A Hello of globex's again (the agent's, after an operator's move)
	// revives globex's row the same way.
	if id, err := st.UpsertNode(ctx, node("globex")); err != nil || id != globexID {
		t.Errorf("a Hello moving n1 back to globex: row %d, %v; want globex's row %d", id, err, globexID)
	}
	if found, err := st.Rebind(ctx, "n1", map[string]string{"customer": "acme"}, []string{"customer"}, "acme"); err != nil || !found {
		t.Fatalf("rebind: %v, %v", found, err)
	}
	// Retired rows expire on their own; the current one stays.
	ids, err := st.ExpiredRetiredNodes(ctx, time.Now().Add(time.Minute), 10)
	if err != nil || len(ids) != 1 || ids[0] != globexID {
		t.Fatalf("expired retired rows: %v, %v; want globex's row %d", ids, err, globexID)
	}
	if err := st.DeleteRetiredNode(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []store.Scope{store.All{}, customer("acme"), customer("globex")} {
		if _, err := st.NodeByNameIn(ctx, scope, "n1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after the delete, %v still reads n1: %v", scope, err)
		}
	}
}
