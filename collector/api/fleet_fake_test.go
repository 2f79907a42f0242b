package api_test

import (
	"context"
	"strings"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/schema"
)

// Fleet answers from memory as the store does, without its paging: every
// node the scope sees whose name matches, with its roots' newest values.
func (f *fakeStore) Fleet(_ context.Context, scope store.Scope, q store.FleetQuery) (store.FleetPage, error) {
	page := store.FleetPage{Counts: map[store.State]int{}, Entries: []store.FleetEntry{}}
	for _, n := range f.nodes {
		if !scope.Sees(n.Labels) || !strings.Contains(n.Name, q.Name) {
			continue
		}
		e := store.FleetEntry{Node: n, State: store.StateUnknown, Roots: map[string]store.RootValue{}, Raised: map[string]store.LatestValue{}}
		if l, ok := f.latest[n.ID]; ok {
			e.Reported, e.Time, e.IntervalMS, e.State = true, l.Time, l.IntervalMS, store.StateOK
			for p, v := range l.Metrics {
				switch {
				case schema.Root(p) == p:
					e.Roots[p] = store.RootValue{LatestValue: v}
					e.State = store.Worse(e.State, v.State)
				case v.State != store.StateOK && v.TimeMS >= l.Time.UnixMilli():
					e.Raised[p] = v
				}
			}
		}
		page.Total++
		page.Counts[e.State]++
		page.Entries = append(page.Entries, e)
	}
	page.Matched = page.Total
	return page, nil
}

func (f *fakeStore) PathDefinitionsOf(_ context.Context, ids []int32, paths []string) (map[string]store.MetricDef, error) {
	out := map[string]store.MetricDef{}
	for _, id := range ids {
		for _, d := range f.defs[id] {
			for _, p := range paths {
				if d.Path == p {
					out[p] = d
				}
			}
		}
	}
	return out, nil
}
