package store

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nbs-project/nbs/internal/pgcluster"
)

// The catalogue keeps exactly what is still named: a value leaves the
// latest values after the raw retention, its definition once no rollup can
// hold it, and its dictionary entries a grace period after no node names
// them; a metric reported again, a definition never reported and another
// node's definitions stay. A collector holding cached ids of deleted
// entries resolves them afresh, even when it read the epoch just before
// they went.
func TestCatalogueLifecycle(t *testing.T) {
	ctx := context.Background()
	url := pgcluster.Database(t)
	st, other := openStore(t, url), openStore(t, url)
	now := time.Now().UTC().Truncate(time.Second)
	defs := func(paths ...string) []MetricDef {
		var out []MetricDef
		for _, p := range paths {
			out = append(out, MetricDef{Path: p, Title: "title of " + p, Unit: "1", Kind: KindRate})
		}
		return out
	}
	node := func(name string, paths ...string) (int32, map[string]int32) {
		t.Helper()
		id, err := st.UpsertNode(ctx, Node{Name: name, InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.UpsertDefinitions(ctx, id, defs(paths...))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.MarkDefinitions(ctx, id, DefinitionsHash(defs(paths...))); err != nil {
			t.Fatal(err)
		}
		return id, ids
	}
	var seq uint64
	report := func(id int32, ids map[string]int32, at time.Time, paths ...string) {
		t.Helper()
		seq++
		r := Report{NodeID: id, InstanceID: 1, Seq: seq, Time: at, IntervalMS: 10000}
		for _, p := range paths {
			r.Samples = append(r.Samples, Sample{MetricID: ids[p], Path: p, Value: 1, State: StateOK})
		}
		if _, err := st.WriteReports(ctx, []Report{r}); err != nil {
			t.Fatal(err)
		}
	}
	catalogue := func(id int32) []string {
		t.Helper()
		got, err := st.Definitions(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range got {
			out = append(out, d.Path)
		}
		return out
	}

	a, aIDs := node("life-a", "r", "r/pod:old", "r/pod:back", "r/quiet")
	b, bIDs := node("life-b", "r")
	report(a, aIDs, now.Add(-10*24*time.Hour), "r", "r/pod:old", "r/pod:back")
	report(a, aIDs, now.Add(-time.Hour), "r")
	report(b, bIDs, now.Add(-time.Hour), "r")

	// A second collector has the pod's ids cached.
	if _, err := other.MetricIDs(ctx, []string{"r/pod:old"}); err != nil {
		t.Fatal(err)
	}

	n, err := st.PruneLatest(ctx, now.Add(-5*24*time.Hour), 1)
	if err != nil || n != 2 {
		t.Fatalf("PruneLatest = %d, %v; want the 2 pod values", n, err)
	}
	l, _, err := st.Latest(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Metrics) != 1 || l.Metrics["r"].TimeMS == 0 {
		t.Fatalf("latest after pruning: %v, want r alone", l.Metrics)
	}
	// The pod that came back is in the latest values again.
	report(a, aIDs, now, "r", "r/pod:back")

	if nodes, n, err := st.PruneDefinitions(ctx, now.Add(-20*24*time.Hour), 10); err != nil || n != 0 || len(nodes) != 0 {
		t.Fatalf("PruneDefinitions before the catalogue retention = %v, %d, %v; want nothing", nodes, n, err)
	}
	nodes, n, err := st.PruneDefinitions(ctx, now.Add(-24*time.Hour), 1)
	if err != nil || n != 1 || !slices.Equal(nodes, []string{"life-a"}) {
		t.Fatalf("PruneDefinitions = %v, %d, %v; want life-a's old pod", nodes, n, err)
	}
	if got, want := catalogue(a), []string{"r", "r/pod:back", "r/quiet"}; !slices.Equal(got, want) {
		t.Errorf("life-a's catalogue = %v, want %v (reported again, never reported)", got, want)
	}
	if got := catalogue(b); !slices.Equal(got, []string{"r"}) {
		t.Errorf("life-b's catalogue = %v", got)
	}
	if hash, _, err := st.KnownDefinitions(ctx, a); err != nil || hash != nil {
		t.Errorf("life-a's definitions hash = %x, %v; want none, so its next Hello registers in full", hash, err)
	}

	if p, d, err := st.CollectDictionaries(ctx, now, time.Hour); err != nil || p+d != 0 {
		t.Fatalf("CollectDictionaries within the grace = %d, %d, %v; want nothing", p, d, err)
	}
	var epoch int64
	if err := st.pool.QueryRow(ctx, `SELECT epoch FROM dictionary_epoch`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	if p, d, err := st.CollectDictionaries(ctx, now.Add(2*time.Hour), time.Hour); err != nil || p != 1 || d != 1 {
		t.Fatalf("CollectDictionaries after the grace = %d paths, %d definitions, %v; want the old pod's 1 and 1", p, d, err)
	}
	var left int
	if err := st.pool.QueryRow(ctx, `SELECT count(*) FROM metric_paths WHERE path IN ('r', 'r/pod:back', 'r/quiet', 'r/pod:old')`).Scan(&left); err != nil || left != 3 {
		t.Fatalf("%d of the named paths left (%v), want 3", left, err)
	}

	// The other collector read the epoch just before the pass bumped it:
	// its insert finds the cached ids gone and resolves them again.
	other.mu.Lock()
	other.epoch = epoch + 1
	other.mu.Unlock()
	ids, err := other.UpsertDefinitions(ctx, b, defs("r/pod:old"))
	if err != nil {
		t.Fatal(err)
	}
	var path string
	if err := st.pool.QueryRow(ctx, `SELECT path FROM metric_paths WHERE id = $1`, ids["r/pod:old"]).Scan(&path); err != nil || path != "r/pod:old" {
		t.Fatalf("re-registered id %d names %q (%v), want r/pod:old", ids["r/pod:old"], path, err)
	}
	if got, want := catalogue(b), []string{"r", "r/pod:old"}; !slices.Equal(got, want) {
		t.Errorf("life-b's catalogue = %v, want %v", got, want)
	}
}

// A node is expired by its last report, or its last Hello if it never
// reported.
func TestExpiredNodes(t *testing.T) {
	st := openTest(t)
	ctx := context.Background()
	now := time.Now()
	for _, n := range []struct {
		name string
		at   time.Time // zero: never reported
	}{{"exp-old", now.Add(-40 * 24 * time.Hour)}, {"exp-new", now.Add(-time.Hour)}, {"exp-silent", time.Time{}}} {
		id, err := st.UpsertNode(ctx, Node{Name: n.name, InstanceID: 1, IntervalMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if !n.at.IsZero() {
			if _, err := st.WriteReports(ctx, []Report{{NodeID: id, InstanceID: 1, Seq: 1, Time: n.at, IntervalMS: 1000}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.ExpiredNodes(ctx, now.Add(-30*24*time.Hour), 10)
	if err != nil || !slices.Equal(got, []string{"exp-old"}) {
		t.Errorf("expired 30 days ago: %v, %v; want exp-old", got, err)
	}
	got, err = st.ExpiredNodes(ctx, now.Add(time.Minute), 10)
	if err != nil || !slices.Equal(got, []string{"exp-old", "exp-new", "exp-silent"}) {
		t.Errorf("expired now: %v, %v; want all three, oldest first", got, err)
	}
}

// openStore opens a Store of its own on url, closed when t ends: tests of
// two collectors sharing a database.
func openStore(t *testing.T, url string) *Store {
	t.Helper()
	st, err := Open(context.Background(), url, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
