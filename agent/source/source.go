// Package source defines what each branch of the agent's tree hands to the
// agent every interval.
package source

import (
	"context"

	"github.com/nbs-project/nbs/agent/catalog"
	"github.com/nbs-project/nbs/internal/loglinear"
	nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"
)

// Reading is one collection from a source.
type Reading struct {
	// Metrics the source knows now (fixed ones and any discovered since).
	Metrics []catalog.Metric
	// Counters are cumulative since the source started, by metric id;
	// the agent turns them into increases.
	Counters map[string]uint64
	// Gauges are levels by metric id.
	Gauges map[string]float64
	// Histograms are distributions of this interval only (not cumulative),
	// by metric id, in the shared log-linear layout.
	Histograms map[string]*loglinear.Histogram
	// Events are evidence gathered since the previous collection.
	Events []*nbsv1.Event
	// Retired lists metric ids the source stopped measuring since the
	// previous collection (a ping target removed): the agent forgets them
	// and their subtrees, so they do not linger as UNKNOWN.
	Retired []string
}

// Source is one branch of the tree.
type Source interface {
	Name() string
	Collect(ctx context.Context) (Reading, error)
	// Capabilities say what the source can measure here, and why not.
	Capabilities() []*nbsv1.Capability
	Close() error
}
