// Package export turns the fleet's metric trees into Prometheus metric
// families (internal/promfamily names them): the scrape endpoint serves
// them, and the pushers (remote write, OTLP) send the same families. What
// goes in is every current node that reported within the window: its
// roots, the children its newest report raised, and the counters that
// moved within the window — with the node's info and each shown metric's
// state beside them.
//
// Counters are running totals kept in PostgreSQL (store.ExportNodes,
// migration 027), so every collector exports the same value and it rises
// across agent restarts and collector failover.
package export

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/promfamily"
)

// Config is what an operator sets (collector flags --export.*).
type Config struct {
	// Window: a node that has not reported within it is left out (a gone
	// node's series end), and so is a child counter that has not moved.
	Window time.Duration
	// CounterHold: a counter's first increase is held back this long, so
	// Prometheus, which takes a new series' first sample as its start,
	// sees it as an increase. Longer than the scrape interval.
	CounterHold time.Duration
	// MaxSeriesPerNode and MaxSeriesPerFamily cap what one export holds;
	// past them a counter is summed into its family's overflow series
	// (labels "_overflow", so the family's sum stays right) and a gauge is
	// left out, both counted.
	MaxSeriesPerNode   int
	MaxSeriesPerFamily int
}

// DefaultConfig is what the collector starts with.
func DefaultConfig() Config {
	return Config{Window: 5 * time.Minute, CounterHold: time.Minute, MaxSeriesPerNode: 500, MaxSeriesPerFamily: 200_000}
}

// Check refuses values that cannot work.
func (c Config) Check() error {
	var errs []error
	if c.Window < 10*time.Second || c.Window > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--export.window %s: must be between 10s and 24h", c.Window))
	}
	if c.CounterHold < 0 || c.CounterHold > time.Hour {
		errs = append(errs, fmt.Errorf("--export.counter-hold %s: must be between 0 and 1h", c.CounterHold))
	}
	if c.MaxSeriesPerNode < 10 || c.MaxSeriesPerNode > 100_000 {
		errs = append(errs, fmt.Errorf("--export.max-series-per-node %d: must be between 10 and 100000", c.MaxSeriesPerNode))
	}
	if c.MaxSeriesPerFamily < 100 || c.MaxSeriesPerFamily > 10_000_000 {
		errs = append(errs, fmt.Errorf("--export.max-series-per-family %d: must be between 100 and 10000000", c.MaxSeriesPerFamily))
	}
	return errors.Join(errs...)
}

// OverflowValue is every breakdown label's value on an overflow series.
const OverflowValue = "_overflow"

// Source reads the fleet (store.Store).
type Source interface {
	ExportNodes(ctx context.Context, scope store.Scope, since time.Time) (store.Export, error)
	NamesOutside(ctx context.Context, scope store.Scope, names []string) ([]string, error)
}

// Exporter builds the families.
type Exporter struct {
	src    Source
	rules  *promfamily.Rules
	cfg    Config
	ledger ledger
}

func New(src Source, cfg Config) *Exporter {
	return &Exporter{src: src, rules: promfamily.New(), cfg: cfg, ledger: ledger{kinds: map[string]*KindStatus{}}}
}

// Snapshot is one export: the families, at the database's clock.
type Snapshot struct {
	Now      time.Time
	Families []*dto.MetricFamily
	Stats    Stats
}

// Stats say what an export held and what it could not.
type Stats struct {
	Nodes  int
	Series int
	// Overflowed: series past a cap (summed into an overflow series, or
	// left out for a gauge).
	Overflowed int
}

// The families every export has beside the tree's.
var (
	infoFamily  = &promfamily.Family{Name: "nbs_node_info", Type: promfamily.Gauge, Labels: []string{"agent_version", "kernel_release"}, Help: "1 for every node reporting within the export window, with its agent's version and kernel release."}
	lastFamily  = &promfamily.Family{Name: "nbs_node_last_report_timestamp_seconds", Type: promfamily.Gauge, Help: "When the node's newest report was stored (Unix seconds)."}
	stateFamily = &promfamily.Family{Name: "nbs_metric_state", Type: promfamily.Gauge, Labels: []string{"metric"}, Help: "The state of each root and raised child of the tree: 0 ok, 1 unknown, 2 warn, 3 crit (label metric is its path)."}
)

// Families lists every family an export can hold, for the reference.
func (e *Exporter) Families() []*promfamily.Family {
	return append([]*promfamily.Family{infoFamily, lastFamily, stateFamily}, e.rules.Families()...)
}

type series struct {
	fam    *promfamily.Family
	values []string
	value  float64
	depth  int
	path   string
	// created is a counter's start (its row's born): the same from every
	// collector, so an OTLP backend sees one start, not a reset a failover.
	created time.Time
}

// Gather builds the export of what scope sees.
func (e *Exporter) Gather(ctx context.Context, scope store.Scope) (Snapshot, error) {
	var snap Snapshot
	// The database's clock: every collector shares it.
	exp, err := e.src.ExportNodes(ctx, scope, time.Now().Add(-e.cfg.Window))
	if err != nil {
		return snap, err
	}
	snap.Now = exp.Now
	since := exp.Now.Add(-e.cfg.Window)
	hide, err := e.foreignPing(ctx, scope, exp)
	if err != nil {
		return snap, err
	}
	b := newBuilder(e.cfg)
	// A fleet's nodes share their paths: each is looked up once an export.
	type lookupKey struct {
		path     string
		kind     store.Kind
		unit     string
		quantile float64
	}
	matches := map[lookupKey]promfamily.Match{}
	lookup := func(m store.ExportMetric) promfamily.Match {
		k := lookupKey{m.Path, m.Kind, m.Unit, m.Quantile}
		match, ok := matches[k]
		if !ok {
			match = e.rules.Lookup(m.Path, promfamily.Kind(m.Kind), m.Unit, m.Quantile)
			matches[k] = match
		}
		return match
	}
	for _, n := range exp.Nodes {
		if n.Last.Before(since) {
			continue
		}
		snap.Stats.Nodes++
		var ss []series
		for _, m := range n.Metrics {
			if hide != nil && hide(m.Path) {
				continue
			}
			depth := strings.Count(m.Path, "/")
			if m.HasLatest && m.Latest.State != store.StateUnspecified {
				ss = append(ss, series{fam: stateFamily, values: []string{m.Path}, value: float64(m.Latest.State.Severity() - 1), depth: depth, path: m.Path})
			}
			match := lookup(m)
			s := series{fam: match.Family, values: match.Values, depth: depth, path: m.Path}
			switch {
			case m.Kind == store.KindRate:
				s.value = counterValue(m.Counter, exp.Now, e.cfg.CounterHold)
				if m.Counter != nil {
					s.created = m.Counter.Born
				}
			case !m.HasLatest || m.Latest.NoValue:
				continue
			default:
				s.value = m.Latest.Value * match.Scale
			}
			ss = append(ss, s)
		}
		// Roots first, then shallower before deeper: what a cap leaves
		// out is the finest breakdown.
		slices.SortStableFunc(ss, func(a, b series) int {
			return cmp.Or(cmp.Compare(a.depth, b.depth), cmp.Compare(a.path, b.path), strings.Compare(a.fam.Name, b.fam.Name))
		})
		base := []*dto.LabelPair{label("node", n.Name)}
		if n.Tenant != "" {
			base = append(base, label("tenant", n.Tenant))
		}
		b.add(base, series{fam: infoFamily, values: []string{n.AgentVersion, n.KernelRelease}, value: 1}, true)
		b.add(base, series{fam: lastFamily, value: float64(n.Last.UnixMilli()) / 1000}, true)
		b.node = 0
		for _, s := range ss {
			b.add(base, s, false)
		}
	}
	snap.Families, snap.Stats.Series, snap.Stats.Overflowed = b.finish()
	return snap, nil
}

// counterValue is a counter's exported value: its total, less its first
// increase while that is held back.
func counterValue(c *store.CounterTotal, now time.Time, hold time.Duration) float64 {
	if c == nil {
		return 0
	}
	if now.Sub(c.Born) < hold {
		return c.Total - c.BornInc
	}
	return c.Total
}

// foreignPing hides, from a customer, ping targets that name another
// tenant's node (stored before ingest refused them; store.ForeignPing).
func (e *Exporter) foreignPing(ctx context.Context, scope store.Scope, exp store.Export) (func(string) bool, error) {
	if scope.SeesAll() {
		return nil, nil
	}
	var paths []string
	for _, n := range exp.Nodes {
		for _, m := range n.Metrics {
			if store.PingTargetOf(m.Path) != "" {
				paths = append(paths, m.Path)
			}
		}
	}
	hide, err := store.ForeignPing(ctx, e.src, scope, paths)
	if err != nil {
		return nil, fmt.Errorf("export: check ping targets: %w", err)
	}
	return hide, nil
}

// builder collects series into families under the caps.
type builder struct {
	cfg        Config
	fams       map[string]*dto.MetricFamily
	perFam     map[string]int
	overflow   map[string]*dto.Metric // family and node → its overflow series
	orders     map[*promfamily.Family][]int
	node       int // series of the current node
	series     int
	overflowed int
}

func newBuilder(cfg Config) *builder {
	return &builder{cfg: cfg, fams: map[string]*dto.MetricFamily{}, perFam: map[string]int{}, overflow: map[string]*dto.Metric{},
		orders: map[*promfamily.Family][]int{}}
}

func (b *builder) family(f *promfamily.Family) *dto.MetricFamily {
	mf := b.fams[f.Name]
	if mf == nil {
		t := dto.MetricType_GAUGE
		if f.Type == promfamily.Counter {
			t = dto.MetricType_COUNTER
		}
		mf = &dto.MetricFamily{Name: proto.String(f.Name), Help: proto.String(f.Help), Type: t.Enum()}
		b.fams[f.Name] = mf
	}
	return mf
}

// add puts one series of a node in its family, or, past a cap, a counter
// into its family's overflow series of that node. exempt: the node's own
// info, never capped.
func (b *builder) add(base []*dto.LabelPair, s series, exempt bool) {
	mf := b.family(s.fam)
	if !exempt && (b.node >= b.cfg.MaxSeriesPerNode || b.perFam[s.fam.Name] >= b.cfg.MaxSeriesPerFamily) {
		b.overflowed++
		if s.fam.Type != promfamily.Counter {
			return
		}
		key := s.fam.Name + "\x00" + base[0].GetValue()
		if m := b.overflow[key]; m != nil {
			m.Counter.Value = proto.Float64(m.Counter.GetValue() + s.value)
			if c := m.Counter.GetCreatedTimestamp(); !s.created.IsZero() && (c == nil || s.created.Before(c.AsTime())) {
				m.Counter.CreatedTimestamp = timestamppb.New(s.created)
			}
			return
		}
		vals := make([]string, len(s.fam.Labels))
		for i := range vals {
			vals[i] = OverflowValue
		}
		m := b.metric(base, s.fam, vals, s.value, s.created)
		b.overflow[key] = m
		mf.Metric = append(mf.Metric, m)
		b.series++
		return
	}
	if !exempt {
		b.node++
		b.perFam[s.fam.Name]++
	}
	mf.Metric = append(mf.Metric, b.metric(base, s.fam, s.values, s.value, s.created))
	b.series++
}

// metric is one series: base (the node's labels, in name order, shared by
// its series) merged with the family's labels, in name order as remote
// write wants them, without sorting each series' labels again.
func (b *builder) metric(base []*dto.LabelPair, f *promfamily.Family, values []string, v float64, created time.Time) *dto.Metric {
	labels := make([]*dto.LabelPair, 0, len(base)+len(values))
	order := b.sortedLabels(f)
	bi := 0
	for _, i := range order {
		if values[i] == "" {
			continue
		}
		name := f.Labels[i]
		for bi < len(base) && base[bi].GetName() < name {
			labels = append(labels, base[bi])
			bi++
		}
		labels = append(labels, label(name, values[i]))
	}
	labels = append(labels, base[bi:]...)
	m := &dto.Metric{Label: labels}
	if f.Type == promfamily.Counter {
		m.Counter = &dto.Counter{Value: proto.Float64(v)}
		if !created.IsZero() {
			m.Counter.CreatedTimestamp = timestamppb.New(created)
		}
	} else {
		m.Gauge = &dto.Gauge{Value: proto.Float64(v)}
	}
	return m
}

// sortedLabels is the order of f's labels by name, worked out once a family.
func (b *builder) sortedLabels(f *promfamily.Family) []int {
	if o, ok := b.orders[f]; ok {
		return o
	}
	o := make([]int, len(f.Labels))
	for i := range o {
		o[i] = i
	}
	slices.SortFunc(o, func(a, b int) int { return strings.Compare(f.Labels[a], f.Labels[b]) })
	b.orders[f] = o
	return o
}

func label(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: proto.String(name), Value: proto.String(value)}
}

// finish returns the families in name order, with their series.
func (b *builder) finish() ([]*dto.MetricFamily, int, int) {
	out := make([]*dto.MetricFamily, 0, len(b.fams))
	for _, mf := range b.fams {
		if len(mf.Metric) > 0 {
			out = append(out, mf)
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, b.series, b.overflowed
}

// RegisterFlags binds c to the --export.* flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Window, "export.window", c.Window, "the Prometheus export (GET /api/v1/export/metrics, remote write, OTLP) holds the nodes that reported within this, and the child counters that moved within it: a gone node's or owner's series end after it")
	fs.DurationVar(&c.CounterHold, "export.counter-hold", c.CounterHold, "a new counter's first increase is exported this long after it was stored, so Prometheus sees it as an increase rather than the series' start: keep it longer than the scrape interval (0: off)")
	fs.IntVar(&c.MaxSeriesPerNode, "export.max-series-per-node", c.MaxSeriesPerNode, "series one node may have in an export; past it counters are summed into their family's _overflow series and gauges left out (counted in nbs_collector_export_overflowed_series_total)")
	fs.IntVar(&c.MaxSeriesPerFamily, "export.max-series-per-family", c.MaxSeriesPerFamily, "series one metric family may have in an export; past it as past --export.max-series-per-node")
}
