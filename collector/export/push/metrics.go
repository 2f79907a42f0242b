package push

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the pusher's on the collector's /metrics.
type metrics struct {
	sent         *prometheus.CounterVec
	failed       *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	gatherErrors *prometheus.CounterVec
	lastSuccess  *prometheus.GaugeVec
	leader       prometheus.Gauge
	// queues are read when scraped.
	queues []*receiver

	queueBytes, queueRecords, queueAge *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_export_push_samples_sent_total",
			Help: "Samples the receiver took, by receiver."}, []string{"receiver"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_export_push_samples_failed_total",
			Help: "Samples of sends that failed and are retried (a snapshot counts again at each failed attempt), by receiver."}, []string{"receiver"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_export_push_samples_dropped_total",
			Help: "Samples dropped, by receiver and reason: full (the queue's bound), refused (the receiver answered 4xx but 429, e.g. out of order), corrupt (a queue record that could not be read back)."},
			[]string{"receiver", "reason"}),
		gatherErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nbs_collector_export_push_snapshot_errors_total",
			Help: "Snapshots the leading collector could not take (the database failed), by receiver."}, []string{"receiver"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nbs_collector_export_push_last_success_timestamp_seconds",
			Help: "When the receiver last took a snapshot (Unix seconds; 0: not since this collector started)."}, []string{"receiver"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nbs_collector_export_push_leader",
			Help: "1 while this collector takes the push snapshots (one collector of those sharing a database)."}),
		queueBytes: prometheus.NewDesc("nbs_collector_export_push_queue_bytes",
			"Bytes of the receiver's on-disk queue (bounded by --export.queue-max-bytes).", []string{"receiver"}, nil),
		queueRecords: prometheus.NewDesc("nbs_collector_export_push_queue_snapshots",
			"Snapshots waiting in the receiver's on-disk queue.", []string{"receiver"}, nil),
		queueAge: prometheus.NewDesc("nbs_collector_export_push_queue_oldest_age_seconds",
			"Age of the oldest snapshot waiting in the receiver's queue (0 when empty): how far the receiver is behind.", []string{"receiver"}, nil),
	}
}

// init makes a receiver's series exist before anything happens to it, so
// rate() and alerts see zeros rather than nothing.
func (m *metrics) init(name string) {
	m.sent.WithLabelValues(name)
	m.failed.WithLabelValues(name)
	for _, r := range []string{"full", "refused", "corrupt"} {
		m.dropped.WithLabelValues(name, r)
	}
	m.gatherErrors.WithLabelValues(name)
	m.lastSuccess.WithLabelValues(name)
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.sent.Describe(ch)
	m.failed.Describe(ch)
	m.dropped.Describe(ch)
	m.gatherErrors.Describe(ch)
	m.lastSuccess.Describe(ch)
	m.leader.Describe(ch)
	ch <- m.queueBytes
	ch <- m.queueRecords
	ch <- m.queueAge
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.sent.Collect(ch)
	m.failed.Collect(ch)
	m.dropped.Collect(ch)
	m.gatherErrors.Collect(ch)
	m.lastSuccess.Collect(ch)
	m.leader.Collect(ch)
	for _, r := range m.queues {
		bytes, records, oldest := r.q.stats()
		age := 0.0
		if !oldest.IsZero() {
			age = max(time.Since(oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(m.queueBytes, prometheus.GaugeValue, float64(bytes), r.r.Name)
		ch <- prometheus.MustNewConstMetric(m.queueRecords, prometheus.GaugeValue, float64(records), r.r.Name)
		ch <- prometheus.MustNewConstMetric(m.queueAge, prometheus.GaugeValue, age, r.r.Name)
	}
}
