package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

func regDefs(n int, title string) []MetricDef {
	defs := make([]MetricDef, n)
	for i := range defs {
		defs[i] = MetricDef{Path: fmt.Sprintf("m/%d", i), Title: title, Unit: "1/s", Kind: KindRate}
	}
	return defs
}

func registration(name, tenant string, defs []MetricDef) Registration {
	n := Node{Name: name, InstanceID: 1, IntervalMS: 1000, Tenant: tenant}
	if tenant != "" {
		n.Labels = map[string]string{"customer": tenant}
	}
	return Registration{Node: n, Defs: defs, Hash: DefinitionsHash(defs)}
}

// nodeDefs is what the store says of a node's definitions: path → title,
// and its recorded hash and total.
func nodeDefs(t *testing.T, st *Store, id int32) (map[string]string, []byte, *int32) {
	t.Helper()
	ctx := context.Background()
	rows, err := st.pool.Query(ctx, `SELECT m.path, md.title FROM node_metrics nm JOIN metric_paths m ON m.id = nm.metric_id
		JOIN metric_defs md ON md.id = nm.def_id WHERE nm.node_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var p, title string
		if err := rows.Scan(&p, &title); err != nil {
			t.Fatal(err)
		}
		out[p] = title
	}
	var (
		hash  []byte
		total *int32
	)
	if err := st.pool.QueryRow(ctx, `SELECT defs_hash, defs_total FROM nodes WHERE id = $1`, id).Scan(&hash, &total); err != nil {
		t.Fatal(err)
	}
	return out, hash, total
}

// A batch stores every node and its definitions; the same Hellos again
// write no definitions (Same), changed ones rewrite theirs, one node's
// refusal (too many metrics) or failure (a label the database refuses)
// is its own, and a node whose tenant changed moves to a new row.
func TestRegisterNodesBatch(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	a, b := regDefs(5, "A"), regDefs(5, "B")
	first := []Registration{registration("r-1", "acme", a), registration("r-2", "acme", a), registration("r-3", "globex", b)}
	res := st.RegisterNodes(ctx, first, 10)
	ids := map[string]int32{}
	for i, r := range res {
		if r.Err != nil || r.ID == 0 || r.Same || r.TooMany || r.Others != 0 || r.IDs == nil {
			t.Fatalf("first registration of %s: %+v", first[i].Node.Name, r)
		}
		defs, hash, total := nodeDefs(t, st, r.ID)
		want := first[i].Defs
		if len(defs) != len(want) || defs[want[0].Path] != want[0].Title || !slices.Equal(hash, first[i].Hash) || total == nil || int(*total) != len(want) {
			t.Fatalf("%s stored %v hash %x total %v, want %d definitions titled %s, hash %x", first[i].Node.Name, defs, hash, total, len(want), want[0].Title, first[i].Hash)
		}
		for _, d := range want {
			if r.IDs[d.Path] == 0 {
				t.Fatalf("%s: no id for %s in %v", first[i].Node.Name, d.Path, r.IDs)
			}
		}
		ids[first[i].Node.Name] = r.ID
	}

	// Again: r-1 the same (nothing written, ids only when asked), r-2
	// with more definitions than allowed, r-3 moved to another tenant
	// with other definitions, r-4 new with a label the database refuses
	// (validation refuses NUL; here it stands for any one node's
	// failure), r-5 new.
	same := registration("r-1", "acme", a)
	same.NeedIDs = true
	bad := registration("r-4", "acme", a)
	bad.Node.Labels["x"] = "nul\x00"
	second := []Registration{same, registration("r-2", "acme", regDefs(11, "A")), registration("r-3", "initech", a), bad, registration("r-5", "", b)}
	res = st.RegisterNodes(ctx, second, 10)
	if r := res[0]; r.Err != nil || !r.Same || r.ID != ids["r-1"] || r.Others != 0 || r.IDs == nil {
		t.Fatalf("r-1 again: %+v", r)
	}
	if r := res[1]; r.Err != nil || !r.TooMany || r.ID != ids["r-2"] || r.Others != 0 {
		t.Fatalf("r-2 with 11 definitions: %+v", r)
	}
	if defs, _, _ := nodeDefs(t, st, ids["r-2"]); len(defs) != 5 {
		t.Fatalf("r-2 refused, yet has %d definitions", len(defs))
	}
	r3 := res[2]
	if r3.Err != nil || r3.ID == ids["r-3"] || r3.Same || r3.Others != 0 {
		t.Fatalf("r-3 moved to another tenant: %+v (old id %d)", r3, ids["r-3"])
	}
	var retired bool
	var tenant string
	if err := st.pool.QueryRow(ctx, `SELECT retired_at IS NOT NULL FROM nodes WHERE id = $1`, ids["r-3"]).Scan(&retired); err != nil || !retired {
		t.Fatalf("r-3's old row retired: %v %v", retired, err)
	}
	if err := st.pool.QueryRow(ctx, `SELECT tenant FROM nodes WHERE name = 'r-3' AND retired_at IS NULL`).Scan(&tenant); err != nil || tenant != "initech" || r3.ID == 0 {
		t.Fatalf("r-3's current row: tenant %q %v", tenant, err)
	}
	if defs, _, _ := nodeDefs(t, st, r3.ID); len(defs) != 5 || defs["m/0"] != "A" {
		t.Fatalf("r-3's new row has %v", defs)
	}
	if res[3].Err == nil {
		t.Fatalf("r-4 with a NUL label: %+v, want its error", res[3])
	}
	if r := res[4]; r.Err != nil || r.ID == 0 || r.Same {
		t.Fatalf("r-5 beside a failing node: %+v", r)
	}
	var n int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE name = 'r-4'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows of r-4 (%v)", n, err)
	}

	// A node's definitions changed: Others counts what lies outside the
	// new ones, and the new ones are written.
	changed := regDefs(3, "C")
	changed[2].Path = "other"
	res = st.RegisterNodes(ctx, []Registration{registration("r-1", "acme", changed)}, 10)
	if r := res[0]; r.Err != nil || r.Same || r.Others != 3 {
		t.Fatalf("r-1 changed: %+v, want 3 others (m/2..m/4)", r)
	}
	if defs, _, total := nodeDefs(t, st, ids["r-1"]); len(defs) != 6 || defs["m/0"] != "C" || defs["m/4"] != "A" || *total != 6 {
		t.Fatalf("r-1 after a change: %v total %d", defs, *total)
	}
}

// Hellos of one node in one batch (a restarted agent whose old stream
// lingers) are registered one after the other: both get its row.
func TestRegisterNodesSameNameInBatch(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	a, b := regDefs(4, "A"), regDefs(4, "B")
	res := st.RegisterNodes(ctx, []Registration{registration("twice", "", a), registration("other", "", a), registration("twice", "", b)}, 10)
	for i, r := range res {
		if r.Err != nil || r.ID == 0 {
			t.Fatalf("registration %d: %+v", i, r)
		}
	}
	if res[0].ID != res[2].ID {
		t.Fatalf("one node got ids %d and %d", res[0].ID, res[2].ID)
	}
	if defs, hash, _ := nodeDefs(t, st, res[2].ID); defs["m/0"] != "B" || !slices.Equal(hash, DefinitionsHash(b)) {
		t.Fatalf("the later Hello's definitions stand: %v", defs)
	}
	// Concurrent batches of the same names (two collectors).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for k := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defs := a
			if k%2 == 1 {
				defs = b
			}
			for _, r := range st.RegisterNodes(ctx, []Registration{registration("twice", "", defs), registration("other", "", defs), registration(fmt.Sprint("new-", k), "", defs)}, 10) {
				if r.Err != nil {
					errs <- r.Err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A batch of new names that would cross the node limit admits exactly up
// to it, counting names reserved by Hellos not registered yet; a name
// already registered is always admitted, and a name twice is one node.
func TestAdmitNodesBatchAtLimit(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if _, err := st.UpsertNode(ctx, Node{Name: n, InstanceID: 1, IntervalMS: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		max, reserved int
		names         []string
		want, fresh   []bool
		total         int
	}{
		{max: 5, names: []string{"c", "a", "d", "c", "e", "f", "b"},
			want: []bool{true, true, true, true, true, false, true}, fresh: []bool{true, false, true, true, true, false, false}, total: 5},
		{max: 5, reserved: 2, names: []string{"c", "d", "a"},
			want: []bool{true, false, true}, fresh: []bool{true, false, false}, total: 5},
		{max: 2, names: []string{"c", "a"}, want: []bool{false, true}, fresh: []bool{false, false}, total: 2},
		{max: 100, names: []string{"c", "d"}, want: []bool{true, true}, fresh: []bool{true, true}},
	} {
		ok, fresh, total, err := st.AdmitNodes(ctx, tc.names, tc.max, tc.reserved)
		if err != nil || !slices.Equal(ok, tc.want) || !slices.Equal(fresh, tc.fresh) || total != tc.total {
			t.Errorf("AdmitNodes(%v, max %d, reserved %d) = %v %v %d %v, want %v %v %d", tc.names, tc.max, tc.reserved, ok, fresh, total, err, tc.want, tc.fresh, tc.total)
		}
	}
}

// Without a foreign key from node_metrics to nodes (migration 022),
// deleting a node still deletes its definitions, and a stream's new
// definitions for a node deleted meanwhile are refused, not orphaned.
func TestNodeMetricsFollowTheirNode(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	res := st.RegisterNodes(ctx, []Registration{registration("gone", "", regDefs(4, "A")), registration("stays", "", regDefs(4, "A"))}, 10)
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := st.DeleteNode(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	count := func(id int32) int {
		var n int
		if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM node_metrics WHERE node_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n, m := count(res[0].ID), count(res[1].ID); n != 0 || m != 4 {
		t.Fatalf("after deleting a node: %d of its definitions left, %d of the other's (want 0, 4)", n, m)
	}
	if _, err := st.UpsertDefinitions(ctx, res[0].ID, regDefs(5, "B")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("new definitions of a deleted node: %v, want ErrNotFound", err)
	}
	if n := count(res[0].ID); n != 0 {
		t.Fatalf("%d definitions written for a deleted node", n)
	}
}

// A new node's definitions are copied, and checked after the copy: a
// registration whose cached dictionary ids a retention pass deleted (the
// collector read the epoch just before the pass bumped it) finds them gone
// and registers the node with fresh ones, and no row names a deleted entry.
func TestRegisterNodesStaleIDs(t *testing.T) {
	ctx := context.Background()
	url := pgcluster.Database(t)
	st, other := openStore(t, url), openStore(t, url)
	defs := regDefs(3, "stale")
	// other caches the catalogue's ids, registering a node whose
	// definitions then go, leaving the entries unnamed.
	first := other.RegisterNodes(ctx, []Registration{registration("stale-a", "", defs)}, 100)
	if first[0].Err != nil {
		t.Fatal(first[0].Err)
	}
	if _, err := st.pool.Exec(ctx, `DELETE FROM node_metrics WHERE node_id = $1`, first[0].ID); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, err := st.CollectDictionaries(ctx, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if p, d, err := st.CollectDictionaries(ctx, now.Add(2*time.Hour), time.Hour); err != nil || p != 3 || d == 0 {
		t.Fatalf("CollectDictionaries = %d paths, %d definitions, %v; want the catalogue's 3 paths and its definitions", p, d, err)
	}
	var epoch int64
	if err := st.pool.QueryRow(ctx, `SELECT epoch FROM dictionary_epoch`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	other.mu.Lock()
	other.epoch = epoch
	other.mu.Unlock()

	out := other.RegisterNodes(ctx, []Registration{registration("stale-b", "", defs)}, 100)
	if out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	got, _, total := nodeDefs(t, st, out[0].ID)
	if len(got) != 3 || got["m/0"] != "stale" || total == nil || *total != 3 {
		t.Fatalf("stale-b's definitions = %v (total %v), want its 3", got, total)
	}
	var dangling int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM node_metrics nm WHERE node_id = $1
		AND (NOT EXISTS (SELECT 1 FROM metric_paths WHERE id = nm.metric_id) OR NOT EXISTS (SELECT 1 FROM metric_defs WHERE id = nm.def_id))`,
		out[0].ID).Scan(&dangling); err != nil || dangling != 0 {
		t.Fatalf("%d of stale-b's rows name deleted entries (%v)", dangling, err)
	}
	for p, id := range out[0].IDs {
		var path string
		if err := st.pool.QueryRow(ctx, `SELECT path FROM metric_paths WHERE id = $1`, id).Scan(&path); err != nil || path != p {
			t.Errorf("id %d for %s names %q (%v)", id, p, path, err)
		}
	}
}
