package api

import (
	"context"
	"slices"

	"github.com/nbs-project/nbs/collector/store"
)

func (a *API) withoutForeignPing(ctx context.Context, scope store.Scope, defs []store.MetricDef) ([]store.MetricDef, error) {
	return WithoutForeignPing(ctx, a.q, scope, defs)
}

// WithoutForeignPing drops from defs the ping targets a customer must
// not see named (store.ForeignPing); q is the store.
func WithoutForeignPing(ctx context.Context, q any, scope store.Scope, defs []store.MetricDef) ([]store.MetricDef, error) {
	paths := make([]string, len(defs))
	for i, d := range defs {
		paths[i] = d.Path
	}
	hide, err := store.ForeignPing(ctx, q, scope, paths)
	if err != nil || hide == nil {
		return defs, err
	}
	out := make([]store.MetricDef, 0, len(defs))
	for _, d := range defs {
		if !hide(d.Path) {
			out = append(out, d)
		}
	}
	return out, nil
}

// withoutForeignEvents drops the evidence of ping targets a customer
// must not see named (store.ForeignPing).
func (a *API) withoutForeignEvents(ctx context.Context, scope store.Scope, events []store.StoredEvent) ([]store.StoredEvent, error) {
	paths := make([]string, len(events))
	for i, e := range events {
		paths[i] = e.Metric
	}
	hide, err := store.ForeignPing(ctx, a.q, scope, paths)
	if err != nil || hide == nil {
		return events, err
	}
	return slices.DeleteFunc(events, func(e store.StoredEvent) bool { return hide(e.Metric) }), nil
}
