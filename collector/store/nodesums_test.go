package store

import (
	"context"
	"hash/maphash"
	"reflect"
	"slices"
	"testing"
)

// TestNodesChanged: a first read decodes every current node, as Nodes
// returns it; a second, with the sums kept, decodes none; then only the
// node whose labels changed and the new node, and a retired node is not
// listed at all.
func TestNodesChanged(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	defs := regDefs(2, "A")
	var regs []Registration
	for _, name := range []string{"s-1", "s-2", "s-3", "s-4"} {
		regs = append(regs, registration(name, "acme", defs))
	}
	ids := map[string]int32{}
	for i, r := range st.RegisterNodes(ctx, regs, 10) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[regs[i].Node.Name] = r.ID
	}
	seed := maphash.MakeSeed()
	sums := map[int32]NodeSum{}
	read := func() (decoded []Node, listed []int32) {
		t.Helper()
		err := st.NodesChanged(ctx, seed, func(id int32, sum NodeSum) bool {
			listed = append(listed, id)
			s, ok := sums[id]
			return !ok || s != sum
		}, func(n Node, sum NodeSum) {
			sums[n.ID] = sum
			decoded = append(decoded, n)
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(decoded, func(a, b Node) int { return int(a.ID - b.ID) })
		slices.Sort(listed)
		return decoded, listed
	}
	all, err := st.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(all, func(a, b Node) int { return int(a.ID - b.ID) })
	if got, _ := read(); !reflect.DeepEqual(got, all) {
		t.Fatalf("first read decoded %+v, want every node as Nodes reads it: %+v", got, all)
	}
	if got, listed := read(); len(got) != 0 || len(listed) != 4 {
		t.Fatalf("nothing changed, yet decoded %+v (listed %v)", got, listed)
	}

	if _, err := st.pool.Exec(ctx, `UPDATE nodes SET labels = '{"customer": "acme", "rack": "7"}' WHERE id = $1`, ids["s-2"]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.pool.Exec(ctx, `UPDATE nodes SET retired_at = now() WHERE id = $1`, ids["s-3"]); err != nil {
		t.Fatal(err)
	}
	res := st.RegisterNodes(ctx, []Registration{registration("s-5", "acme", defs)}, 10)
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	got, listed := read()
	if len(got) != 2 || got[0].ID != ids["s-2"] || got[0].Labels["rack"] != "7" || got[1].ID != res[0].ID || got[1].Name != "s-5" {
		t.Fatalf("after a label change and a new node, decoded %+v", got)
	}
	if slices.Contains(listed, ids["s-3"]) || len(listed) != 4 {
		t.Fatalf("listed %v: want the four current nodes, not the retired %d", listed, ids["s-3"])
	}
}
