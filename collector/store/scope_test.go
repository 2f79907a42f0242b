package store_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/store/storetest"
)

// TestScopedQueries: the scoped reads return exactly the nodes a principal
// sees, and a node outside the scope is not found with the very error of a
// node that does not exist.
func TestScopedQueries(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	ids := map[string]int32{}
	for _, n := range []store.Node{
		{Name: "a1", Labels: map[string]string{"customer": "acme", "region": "eu"}},
		{Name: "a2", Labels: map[string]string{"customer": "acme", "region": "us"}},
		{Name: "g1", Labels: map[string]string{"customer": "globex", "region": "eu"}},
		{Name: "bare"},
	} {
		id, err := st.UpsertNode(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		ids[n.Name] = id
		mids, err := st.UpsertDefinitions(ctx, id, []store.MetricDef{{Path: "tcp_reset", Kind: store.KindRate}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.WriteReports(ctx, []store.Report{{NodeID: id, Seq: 1, Time: time.Now(), IntervalMS: 1000,
			Samples: []store.Sample{{MetricID: mids["tcp_reset"], Path: "tcp_reset", Value: 1}}}}); err != nil {
			t.Fatal(err)
		}
	}
	customer := func(sel access.Selector) access.Principal {
		return access.Principal{Name: "c", Role: access.RoleCustomer, Via: access.ViaToken, Selector: sel}
	}
	cases := []struct {
		name  string
		scope store.Scope
		want  []string
	}{
		{"the collector", store.All{}, []string{"a1", "a2", "bare", "g1"}},
		{"a viewer", access.Principal{Name: "v", Role: access.RoleViewer, Via: access.ViaToken}, []string{"a1", "a2", "bare", "g1"}},
		{"acme", customer(access.Selector{"customer": "acme"}), []string{"a1", "a2"}},
		{"acme in eu", customer(access.Selector{"customer": "acme", "region": "eu"}), []string{"a1"}},
		{"a customer without a selector", customer(nil), nil},
		{"nobody", access.Principal{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nodes, err := st.NodesIn(ctx, c.scope)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var want []int32
			for _, n := range nodes {
				names = append(names, n.Name)
			}
			for _, n := range c.want {
				want = append(want, ids[n])
			}
			slices.Sort(want)
			if !slices.Equal(names, c.want) {
				t.Errorf("NodesIn: %v, want %v", names, c.want)
			}
			roots, err := st.RootDefinitionsIn(ctx, c.scope)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(maps.Keys(roots)); !slices.Equal(got, want) {
				t.Errorf("RootDefinitionsIn: nodes %v, want %v", got, want)
			}
			latest, err := st.LatestRootsIn(ctx, c.scope)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(maps.Keys(latest)); !slices.Equal(got, want) {
				t.Errorf("LatestRootsIn: nodes %v, want %v", got, want)
			}
			for _, name := range []string{"a1", "a2", "g1", "bare"} {
				n, err := st.NodeByNameIn(ctx, c.scope, name)
				if slices.Contains(c.want, name) {
					if err != nil || n.Name != name {
						t.Errorf("NodeByNameIn(%s) = %v, %v", name, n.Name, err)
					}
					continue
				}
				_, missing := st.NodeByNameIn(ctx, store.All{}, name+"-gone")
				if !errors.Is(err, store.ErrNotFound) || err.Error() != `node "`+name+`": not found` ||
					missing.Error() != `node "`+name+`-gone": not found` {
					t.Errorf("NodeByNameIn(%s) outside the scope: %v (a missing node: %v); want the same not found", name, err, missing)
				}
			}
		})
	}
}
