// Package telemetry holds the collector's own health metrics, exported on
// /metrics in the Prometheus format.
package telemetry

import (
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is created once per collector process and passed to the parts
// that report into it; it owns its registry, so tests can make their own.
type Metrics struct {
	Registry *prometheus.Registry

	Streams prometheus.Gauge
	Reports *prometheus.CounterVec // result: stored, duplicate, rejected
	Samples prometheus.Counter
	Rejects *prometheus.CounterVec // reason
	// LabelConflicts counts Hellos whose labels differed from those bound
	// to the node server-side (its tenant): the bound ones were used.
	LabelConflicts prometheus.Counter
	// PingAddressesTaken is how many nodes announce a ping address a node
	// of another tenant announced first: they are no ping peers.
	PingAddressesTaken prometheus.Gauge
	DBWrite            prometheus.Histogram
	DBBatch            prometheus.Histogram
	DBErrors           prometheus.Counter
	WriteQueue         prometheus.Gauge
	HTTPRequests       *prometheus.CounterVec
	HTTPDurations      *prometheus.HistogramVec
	Alert              AlertMetrics
	ExportSeries       *prometheus.GaugeVec
	ExportNodes        *prometheus.GaugeVec
	ExportOverflowed   *prometheus.CounterVec
	ExportSeconds      *prometheus.HistogramVec
}

// ObserveExport records one export of the metric trees (collector/export):
// kind is scrape, or a pusher's receiver.
func (m *Metrics) ObserveExport(kind string, series, nodes, overflowed int, took time.Duration) {
	m.ExportSeries.WithLabelValues(kind).Set(float64(series))
	m.ExportNodes.WithLabelValues(kind).Set(float64(nodes))
	m.ExportOverflowed.WithLabelValues(kind).Add(float64(overflowed))
	m.ExportSeconds.WithLabelValues(kind).Observe(took.Seconds())
}

func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nbs_collector_streams", Help: "Agent streams currently open on this collector."}),
		Reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_reports_total", Help: "Reports received, by result (stored, duplicate, rejected)."}, []string{"result"}),
		Samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nbs_collector_samples_total", Help: "Samples stored."}),
		Rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_rejects_total", Help: "Messages rejected, by reason."}, []string{"reason"}),
		LabelConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nbs_collector_hello_label_conflicts_total",
			Help: "Hellos that claimed labels (the tenant among them) other than those bound to the node by the operator; the bound ones were used. The node identity list shows which nodes and what they claimed."}),
		PingAddressesTaken: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nbs_collector_ping_addresses_taken",
			Help: "Nodes announcing a ping address that a node of another tenant announced first: they are no ping peers until they announce another (the collector's log names them)."}),
		DBWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nbs_collector_db_write_seconds", Help: "Time to write one batch of reports to PostgreSQL.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		DBBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nbs_collector_db_batch_reports", Help: "Reports per database write batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		DBErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nbs_collector_db_errors_total", Help: "Failed database write attempts (retried)."}),
		WriteQueue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nbs_collector_write_queue_reports", Help: "Reports waiting to be written to PostgreSQL."}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_http_requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "code"}),
		HTTPDurations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nbs_collector_http_request_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"route"}),
		Alert: newAlertMetrics(),
		ExportSeries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nbs_collector_export_series", Help: "Series in the newest export of the metric trees, by kind (scrape, or a push receiver): the active series a Prometheus holds of NBS."}, []string{"kind"}),
		ExportNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nbs_collector_export_nodes", Help: "Nodes in the newest export of the metric trees, by kind."}, []string{"kind"}),
		ExportOverflowed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_export_overflowed_series_total", Help: "Series past --export.max-series-per-node or --export.max-series-per-family, by kind: counters summed into their family's _overflow series, gauges left out."}, []string{"kind"}),
		ExportSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nbs_collector_export_seconds", Help: "Time to build one export of the metric trees, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"kind"}),
	}
	// The Go runtime's estimate of the CPU its garbage collector took
	// (runtime/metrics /cpu/classes/gc/..., e.g.
	// go_cpu_classes_gc_total_cpu_seconds_total), beside the process's
	// own process_cpu_seconds_total: the share of the collector's CPU that
	// is GC, without a profile (BENCHMARKS.md, "Collector memory per
	// connected node").
	gcCPU := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/`)}
	m.Registry.MustRegister(m.Streams, m.Reports, m.Samples, m.Rejects, m.LabelConflicts, m.PingAddressesTaken, m.DBWrite, m.DBBatch, m.DBErrors,
		m.WriteQueue, m.HTTPRequests, m.HTTPDurations, m.ExportSeries, m.ExportNodes, m.ExportOverflowed, m.ExportSeconds,
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPU)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Registry.MustRegister(m.Alert.collectors()...)
	return m
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
