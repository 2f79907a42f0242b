package store

import (
	"context"
	"maps"
	"testing"
)

// DefinitionsOf gives each path the definition of the lowest node id among
// the nodes asked for that has it, and no path only other nodes have.
func TestDefinitionsOfLowestNode(t *testing.T) {
	ctx := context.Background()
	st := openTest(t)
	var ids []int32
	for i, defs := range [][]MetricDef{
		{{Path: "ping", Title: "first", Unit: "ms", Kind: KindGauge}, {Path: "ping/a", Title: "a of first", Unit: "ms", Kind: KindHistogram, Scale: 1e6, Quantile: 0.99}},
		{{Path: "ping", Title: "second", Unit: "us", Kind: KindGauge}, {Path: "ping/b", Title: "b of second", Unit: "ms", Kind: KindHistogram, Scale: 1e3, Quantile: 0.9}},
		{{Path: "ping", Title: "third", Unit: "s", Kind: KindGauge}, {Path: "ping/c", Title: "c of third", Unit: "ms", Kind: KindRate}},
	} {
		id, err := st.UpsertNode(ctx, Node{Name: "defs-" + string(rune('a'+i)), InstanceID: 1, IntervalMS: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpsertDefinitions(ctx, id, defs); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	titles := func(m map[string]MetricDef) map[string]string {
		out := map[string]string{}
		for p, d := range m {
			out[p] = d.Title
		}
		return out
	}
	for _, c := range []struct {
		name  string
		nodes []int32
		want  map[string]string
	}{
		{"all, asked in reverse", []int32{ids[2], ids[1], ids[0]}, map[string]string{"ping": "first", "ping/a": "a of first", "ping/b": "b of second", "ping/c": "c of third"}},
		{"the last two", []int32{ids[2], ids[1]}, map[string]string{"ping": "second", "ping/b": "b of second", "ping/c": "c of third"}},
		{"one", []int32{ids[2]}, map[string]string{"ping": "third", "ping/c": "c of third"}},
		{"none", nil, map[string]string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := st.DefinitionsOf(ctx, c.nodes)
			if err != nil {
				t.Fatal(err)
			}
			if g := titles(got); !maps.Equal(g, c.want) {
				t.Errorf("titles %v, want %v", g, c.want)
			}
		})
	}
	got, err := st.DefinitionsOf(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if d := got["ping/b"]; d.Unit != "ms" || d.Kind != KindHistogram || d.Scale != 1e3 || d.Quantile != 0.9 || d.Path != "ping/b" {
		t.Errorf("ping/b: %+v, want its unit, kind, scale and quantile", d)
	}
}
