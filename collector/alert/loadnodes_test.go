package alert

import (
	"context"
	"reflect"
	"testing"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// TestLoadNodesDecodesWhatChanged: the evaluator's reload holds every
// current node as the store reads it; a node whose row did not change
// keeps what was decoded before (its labels the same map), one whose
// labels changed has the new ones, and a retired node is forgotten.
func TestLoadNodesDecodesWhatChanged(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, pgcluster.Database(t))
	other := store.Node{Name: "web-2", Labels: map[string]string{"customer": "acme"}, InstanceID: 1, IntervalMS: 1000}
	gone := store.Node{Name: "web-3", InstanceID: 1, IntervalMS: 1000}
	var err error
	for _, n := range []*store.Node{&other, &gone} {
		if n.ID, err = f.st.UpsertNode(ctx, *n); err != nil {
			t.Fatal(err)
		}
	}
	ev := &evaluator{s: &Service{st: f.st}}
	check := func(when string) {
		t.Helper()
		if err := ev.loadNodes(ctx); err != nil {
			t.Fatal(err)
		}
		all, err := f.st.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int32]store.Node{}
		for _, n := range all {
			want[n.ID] = n
		}
		if !reflect.DeepEqual(ev.nodes, want) {
			t.Fatalf("%s: the evaluator holds %+v, the store %+v", when, ev.nodes, want)
		}
	}
	check("first load")
	labels := reflect.ValueOf(ev.nodes[f.node.ID].Labels).UnsafePointer()

	other.Labels = map[string]string{"customer": "acme", "rack": "7"}
	if _, err := f.st.UpsertNode(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Pool().Exec(ctx, `UPDATE nodes SET retired_at = now() WHERE id = $1`, gone.ID); err != nil {
		t.Fatal(err)
	}
	check("after a label change and a retirement")
	if _, ok := ev.nodes[gone.ID]; ok {
		t.Fatalf("retired node %d still held", gone.ID)
	}
	if reflect.ValueOf(ev.nodes[f.node.ID].Labels).UnsafePointer() != labels {
		t.Fatalf("an unchanged node's row was decoded again")
	}
}
