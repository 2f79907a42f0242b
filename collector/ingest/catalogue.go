package ingest

import (
	"math"
	"slices"
	"sync"

	"github.com/nbs-project/nbs/collector/store"
)

// A catalogue is the metric definitions of a Hello, shared by every stream
// whose Hello brought the same ones (store.DefinitionsHash): in a fleet
// nearly all nodes run the same agent with the same tree, so the ~100 KB of
// definitions each Hello carries is kept once, not once per node, from the
// moment the Hello is decoded. Metric ids are global by path (metric_paths),
// so the path → id map is shared too.
type catalogue struct {
	hash []byte
	defs []store.MetricDef
	refs int // streams (registering or registered) using it; guarded by catalogues.mu

	mu      sync.Mutex
	metrics map[string]streamMetric // set when registered; replaced, never changed
}

// resolved is the catalogue's path → metric map, nil until a stream has
// registered it.
func (c *catalogue) resolved() map[string]streamMetric {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.metrics
}

// resolve sets the path → metric map from the ids a registration returned,
// unless another stream did first: ids are global, so both are the same —
// except after a retention pass deleted dictionary entries nothing named
// and they were made again (collector/retention): then the new ids win.
func (c *catalogue) resolve(ids map[string]int32) map[string]streamMetric {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics != nil && sameIDs(c.metrics, ids) {
		return c.metrics
	}
	m := make(map[string]streamMetric, len(c.defs))
	for _, d := range c.defs {
		m[d.Path] = streamMetric{id: ids[d.Path], kind: d.Kind, path: d.Path}
	}
	c.metrics = m
	return c.metrics
}

func sameIDs(m map[string]streamMetric, ids map[string]int32) bool {
	for p, sm := range m {
		if ids[p] != sm.id {
			return false
		}
	}
	return true
}

// catalogues interns catalogues by hash. An entry lives while a stream uses
// it, so the table holds no more catalogues than there are streams (each
// bounded by --ingest.max-metrics-per-node and the message size).
type catalogues struct {
	mu     sync.Mutex
	byHash map[string]*catalogue
	// byShape finds a catalogue a Hello repeats, definition for
	// definition in the same order, without hashing it: as every agent of
	// a version sends its tree, that is nearly every Hello, and hashing a
	// tree (sorted, thresholds as JSON) took 42% of the collector's CPU
	// while 30,000 nodes registered. At most maxSameShape catalogues of a
	// shape are compared; a Hello matching none is hashed.
	byShape map[catalogueShape][]*catalogue
}

// catalogueShape is what catalogues a Hello may repeat have in common.
type catalogueShape struct {
	n           int
	first, last string
}

func shapeOf(defs []store.MetricDef) catalogueShape {
	if len(defs) == 0 {
		return catalogueShape{}
	}
	return catalogueShape{n: len(defs), first: defs[0].Path, last: defs[len(defs)-1].Path}
}

// maxSameShape bounds the catalogues of one shape a Hello is compared
// with, so that Hellos crafted to share a shape cost a hash each, not a
// comparison with every one of them.
const maxSameShape = 4

// sameDefs says whether a and b are the same definitions in the same
// order, bit for bit (so that they hash alike: -0 is not 0 here).
func sameDefs(a, b []store.MetricDef) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Path != y.Path || x.Title != y.Title || x.Unit != y.Unit || x.Kind != y.Kind || x.Description != y.Description ||
			math.Float64bits(x.Scale) != math.Float64bits(y.Scale) || math.Float64bits(x.Quantile) != math.Float64bits(y.Quantile) ||
			!sameThreshold(x.DefaultThreshold, y.DefaultThreshold) {
			return false
		}
	}
	return true
}

func sameThreshold(a, b *store.Threshold) bool {
	if a == nil || b == nil {
		return a == b
	}
	return math.Float64bits(a.Warn) == math.Float64bits(b.Warn) && math.Float64bits(a.Crit) == math.Float64bits(b.Crit) &&
		a.Comparison == b.Comparison && a.HoldIntervals == b.HoldIntervals && a.BaselineIntervals == b.BaselineIntervals &&
		math.Float64bits(a.Floor) == math.Float64bits(b.Floor)
}

// intern returns the catalogue of defs, the one already known when a stream
// brought the same definitions, and counts a user of it; release it once
// the stream ends.
func (cs *catalogues) intern(defs []store.MetricDef) *catalogue {
	shape := shapeOf(defs)
	cs.mu.Lock()
	for _, c := range cs.byShape[shape] {
		if sameDefs(defs, c.defs) {
			c.refs++
			cs.mu.Unlock()
			return c
		}
	}
	cs.mu.Unlock()
	hash := store.DefinitionsHash(defs)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if hash != nil {
		if c := cs.byHash[string(hash)]; c != nil {
			c.refs++
			return c
		}
	}
	c := &catalogue{hash: hash, defs: defs, refs: 1}
	if hash != nil { // unhashable (cannot happen for validated definitions): never shared
		if cs.byHash == nil {
			cs.byHash = map[string]*catalogue{}
			cs.byShape = map[catalogueShape][]*catalogue{}
		}
		cs.byHash[string(hash)] = c
		if len(cs.byShape[shape]) < maxSameShape {
			cs.byShape[shape] = append(cs.byShape[shape], c)
		}
	}
	return c
}

func (cs *catalogues) release(c *catalogue) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c.refs--; c.refs == 0 && cs.byHash[string(c.hash)] == c {
		delete(cs.byHash, string(c.hash))
		shape := shapeOf(c.defs)
		if same := slices.DeleteFunc(cs.byShape[shape], func(o *catalogue) bool { return o == c }); len(same) > 0 {
			cs.byShape[shape] = same
		} else {
			delete(cs.byShape, shape)
		}
	}
}

func (cs *catalogues) len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.byHash)
}

// metricSet is what a stream may report: its Hello's catalogue, shared
// with other streams, and what its reports defined since, its own (a report
// may also redefine a metric of the catalogue).
type metricSet struct {
	base     map[string]streamMetric
	extra    map[string]streamMetric
	shadowed int // paths in both
}

func (m *metricSet) get(path string) (streamMetric, bool) {
	if sm, ok := m.extra[path]; ok {
		return sm, true
	}
	sm, ok := m.base[path]
	return sm, ok
}

func (m *metricSet) has(path string) bool {
	_, ok := m.get(path)
	return ok
}

func (m *metricSet) len() int { return len(m.base) + len(m.extra) - m.shadowed }

func (m *metricSet) add(path string, sm streamMetric) {
	if m.extra == nil {
		m.extra = map[string]streamMetric{}
	}
	if _, again := m.extra[path]; !again {
		if _, inBase := m.base[path]; inBase {
			m.shadowed++
		}
	}
	m.extra[path] = sm
}
