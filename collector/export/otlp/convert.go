package otlp

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/nbs-project/nbs/collector/export"
)

// ServiceName is every node's service.name. The measurements are the
// node agent's, one agent per node, so the node is the service instance
// (service.instance.id): a Prometheus OTLP receiver turns the two into
// job="nbs-agent", instance="<node>", the same whichever collector
// pushes. Naming the collector instead would make instance the pushing
// collector, and every series would change identity at a failover.
const ServiceName = "nbs-agent"

// ScopeName is the instrumentation scope of every metric.
const ScopeName = "github.com/nbs-project/nbs/collector/export"

// The export's labels that describe the node rather than the series: they
// go to the node's Resource.
const (
	nodeLabel   = "node"
	tenantLabel = "tenant"
)

// TenantAttribute is the Resource attribute of the node's tenant (no
// semantic convention names a tenant).
const TenantAttribute = "nbs.tenant"

// naming is how one Prometheus family is named in OTLP.
type naming struct {
	name, unit string
}

// namer turns Prometheus family names into OTLP names and units, and
// remembers them (a snapshot holds the same few dozen families each time).
type namer struct {
	mu    sync.Mutex
	cache map[string]naming
}

func newNamer() *namer { return &namer{cache: map[string]naming{}} }

// countUnits are the UCUM annotations of the nouns a family name ends
// with. A Prometheus receiver drops an annotation ({packet}) when it
// builds the name, so the noun stays in the OTLP name too: the unit is for
// OTLP-native backends.
var countUnits = map[string]string{
	"packets": "{packet}", "segments": "{segment}", "events": "{event}", "resets": "{reset}",
	"samples": "{sample}", "reports": "{report}", "flows": "{flow}", "entries": "{entry}",
	"sources": "{source}", "runs": "{run}", "echoes": "{echo}",
}

// name returns the OTLP name and unit of a Prometheus family: without
// _total (a monotonic Sum says it), with _seconds moved to unit "s",
// _ratio of a gauge to "1" and _per_second to "/s" — exactly what the
// Prometheus OTLP translation appends again (otlptranslator, the code
// Prometheus 3 runs), so a Prometheus receiver stores the scrape's name.
// A name for which the split would not come back (a family added later
// with another suffix) goes unsplit, only without _total: the round trip
// is checked here, not assumed.
func (n *namer) name(promName string, counter bool) naming {
	n.mu.Lock()
	defer n.mu.Unlock()
	if nm, ok := n.cache[promName]; ok {
		return nm
	}
	nm := splitName(promName, counter)
	if !roundTrips(nm, promName, counter) {
		nm = naming{name: strings.TrimSuffix(promName, "_total")}
		if !roundTrips(nm, promName, counter) {
			nm = naming{name: promName}
		}
	}
	n.cache[promName] = nm
	return nm
}

func splitName(promName string, counter bool) naming {
	base := promName
	if counter {
		base = strings.TrimSuffix(base, "_total")
	}
	switch {
	case strings.HasSuffix(base, "_seconds"):
		return naming{name: strings.TrimSuffix(base, "_seconds"), unit: "s"}
	case !counter && strings.HasSuffix(base, "_ratio"):
		return naming{name: strings.TrimSuffix(base, "_ratio"), unit: "1"}
	case strings.HasSuffix(base, "_per_second"):
		base = strings.TrimSuffix(base, "_per_second")
		u := countUnits[base[strings.LastIndexByte(base, '_')+1:]]
		if u == "" {
			u = "1"
		}
		return naming{name: base, unit: u + "/s"}
	}
	return naming{name: base, unit: countUnits[base[strings.LastIndexByte(base, '_')+1:]]}
}

// roundTrips reports whether both Prometheus OTLP translations that keep
// suffixes (underscore escaping, the default, and UTF-8) give promName
// back.
func roundTrips(nm naming, promName string, counter bool) bool {
	var t otlptranslator.MetricType = otlptranslator.MetricTypeGauge
	if counter {
		t = otlptranslator.MetricTypeMonotonicCounter
	}
	for _, s := range []otlptranslator.TranslationStrategyOption{otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.NoUTF8EscapingWithSuffixes} {
		mn := otlptranslator.NewMetricNamer("", s)
		got, err := mn.Build(otlptranslator.Metric{Name: nm.name, Unit: nm.unit, Type: t})
		if err != nil || got != promName {
			return false
		}
	}
	return true
}

// starts gives each counter series a start time that stays put while the
// series goes on.
type starts struct {
	mu   sync.Mutex
	seen map[string]time.Time
	next map[string]time.Time
}

func newStarts() *starts { return &starts{seen: map[string]time.Time{}} }

// begin opens one snapshot's bookkeeping; end forgets the series it did
// not hold (a series that ended and comes back is a new series).
func (s *starts) begin() {
	s.mu.Lock()
	s.next = make(map[string]time.Time, len(s.seen))
}

func (s *starts) end() {
	s.seen, s.next = s.next, nil
	s.mu.Unlock()
}

// of returns the start of the series key: when this sender first saw it.
func (s *starts) of(key string, now time.Time) time.Time {
	t, ok := s.seen[key]
	if !ok || t.After(now) {
		t = now
	}
	s.next[key] = t
	return t
}

// convert turns a snapshot into one ResourceMetrics per node, in node
// order, each with the node's families in name order.
func convert(snap export.Snapshot, n *namer, st *starts, scopeVersion string) []*metricdata.ResourceMetrics {
	type nodeMetrics struct {
		tenant  string
		version string
		metrics []metricdata.Metrics
		index   map[string]int // family → its place in metrics
	}
	nodes := map[string]*nodeMetrics{}
	st.begin()
	defer st.end()
	var key strings.Builder
	for _, mf := range snap.Families {
		counter := mf.GetType() == dto.MetricType_COUNTER
		nm := n.name(mf.GetName(), counter)
		for _, m := range mf.GetMetric() {
			node, tenant, attrs := attributes(m.GetLabel())
			nd := nodes[node]
			if nd == nil {
				nd = &nodeMetrics{tenant: tenant, index: map[string]int{}}
				nodes[node] = nd
			}
			if mf.GetName() == "nbs_node_info" {
				for _, l := range m.GetLabel() {
					if l.GetName() == "agent_version" {
						nd.version = l.GetValue()
					}
				}
			}
			i, ok := nd.index[mf.GetName()]
			if !ok {
				i = len(nd.metrics)
				nd.index[mf.GetName()] = i
				md := metricdata.Metrics{Name: nm.name, Description: mf.GetHelp(), Unit: nm.unit}
				if counter {
					md.Data = metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
				} else {
					md.Data = metricdata.Gauge[float64]{}
				}
				nd.metrics = append(nd.metrics, md)
			}
			md := &nd.metrics[i]
			set := attribute.NewSet(attrs...)
			if counter {
				start := snap.Now
				if c := m.GetCounter().GetCreatedTimestamp(); c != nil {
					start = c.AsTime()
				} else {
					// The series' labels (node and tenant among them) name it.
					key.Reset()
					key.WriteString(mf.GetName())
					for _, l := range m.GetLabel() {
						key.WriteByte(0)
						key.WriteString(l.GetName())
						key.WriteByte('=')
						key.WriteString(l.GetValue())
					}
					start = st.of(key.String(), snap.Now)
				}
				sum := md.Data.(metricdata.Sum[float64])
				sum.DataPoints = append(sum.DataPoints, metricdata.DataPoint[float64]{Attributes: set, StartTime: start, Time: snap.Now, Value: m.GetCounter().GetValue()})
				md.Data = sum
			} else {
				g := md.Data.(metricdata.Gauge[float64])
				g.DataPoints = append(g.DataPoints, metricdata.DataPoint[float64]{Attributes: set, Time: snap.Now, Value: m.GetGauge().GetValue()})
				md.Data = g
			}
		}
	}
	names := make([]string, 0, len(nodes))
	for name := range nodes {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*metricdata.ResourceMetrics, 0, len(names))
	scope := instrumentation.Scope{Name: ScopeName, Version: scopeVersion}
	for _, name := range names {
		nd := nodes[name]
		res := []attribute.KeyValue{semconv.ServiceName(ServiceName), semconv.ServiceInstanceID(name), semconv.HostName(name)}
		if nd.version != "" {
			res = append(res, semconv.ServiceVersion(nd.version))
		}
		if nd.tenant != "" {
			res = append(res, attribute.String(TenantAttribute, nd.tenant))
		}
		out = append(out, &metricdata.ResourceMetrics{
			Resource:     resource.NewWithAttributes(semconv.SchemaURL, res...),
			ScopeMetrics: []metricdata.ScopeMetrics{{Scope: scope, Metrics: nd.metrics}},
		})
	}
	return out
}

// attributes splits a series' labels into its node, its tenant and its
// data point attributes: every other label under its own name (so a
// Prometheus receiver gives back the scrape's labels), plus the semantic
// convention's attributes that a label's value is exactly.
func attributes(labels []*dto.LabelPair) (node, tenant string, attrs []attribute.KeyValue) {
	attrs = make([]attribute.KeyValue, 0, len(labels)+2)
	for _, l := range labels {
		name, v := l.GetName(), l.GetValue()
		switch name {
		case nodeLabel:
			node = v
			continue
		case tenantLabel:
			tenant = v
			continue
		}
		attrs = append(attrs, attribute.String(name, v))
		attrs = append(attrs, conventions(name, v)...)
	}
	return node, tenant, attrs
}

// maxOwnerID is the longest owner id the agent writes whole; a longer
// one is cut and ends in a hash (agent/owner.Owner.ID), so its name
// cannot be read back.
const maxOwnerID = 96

// conventions returns the semantic convention attributes a label's value
// stands for: an owner that is a pod ("pod:<namespace>.<name>", or
// "pod:<uid>" when the namespace is not known) or a container, a device
// (network.interface.name), a transport protocol, a ping target named
// by its address.
func conventions(name, v string) []attribute.KeyValue {
	switch name {
	case "owner":
		if len(v) >= maxOwnerID {
			return nil
		}
		if rest, ok := strings.CutPrefix(v, "pod:"); ok {
			if ns, pod, ok := strings.Cut(rest, "."); ok && ns != "" && pod != "" {
				return []attribute.KeyValue{semconv.K8SNamespaceName(ns), semconv.K8SPodName(pod)}
			}
			if rest != "" {
				return []attribute.KeyValue{semconv.K8SPodUID(rest)}
			}
		}
		if id, ok := strings.CutPrefix(v, "container:"); ok && id != "" {
			return []attribute.KeyValue{semconv.ContainerID(id)}
		}
	case "device":
		if v != "" && v != export.OverflowValue {
			return []attribute.KeyValue{semconv.NetworkInterfaceName(v)}
		}
	case "protocol":
		switch v {
		case "tcp", "udp", "quic":
			return []attribute.KeyValue{attribute.String(string(semconv.NetworkTransportKey), v)}
		}
	case "target":
		if a, err := netip.ParseAddr(v); err == nil {
			return []attribute.KeyValue{semconv.NetworkPeerAddress(a.String())}
		}
	}
	return nil
}
