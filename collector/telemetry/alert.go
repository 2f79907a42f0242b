package telemetry

import "github.com/prometheus/client_golang/prometheus"

// AlertMetrics is what alerting reports, after Alertmanager's own
// notification metrics. Only the collector that evaluates (the leader)
// delivers and holds alerts; the others report zeros, so sums over
// collectors are right.
type AlertMetrics struct {
	Notifications       *prometheus.CounterVec   // integration
	NotificationsFailed *prometheus.CounterVec   // integration
	NotificationLatency *prometheus.HistogramVec // integration
	Alerts              *prometheus.GaugeVec     // state: pending, firing
	Leader              prometheus.Gauge
	EvaluationFailures  prometheus.Counter
	ReportsRead         *prometheus.CounterVec // source: memory, database
	HandoverOverflow    prometheus.Counter
}

func newAlertMetrics() AlertMetrics {
	m := AlertMetrics{
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_alert_notifications_total",
			Help: "Notifications attempted, by integration; a post of several alerts to one Alertmanager is one."}, []string{"integration"}),
		NotificationsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_alert_notifications_failed_total",
			Help: "Notifications that failed (and are retried with backoff), by integration."}, []string{"integration"}),
		NotificationLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nbs_collector_alert_notification_latency_seconds",
			Help:    "Time to deliver one notification, by integration.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"integration"}),
		Alerts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nbs_collector_alerts",
			Help: "Alerts this collector holds as the evaluator, by state (pending, firing)."}, []string{"state"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nbs_collector_alert_leader",
			Help: "1 while this collector evaluates alerts and delivers them, else 0."}),
		EvaluationFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nbs_collector_alert_evaluation_failures_total",
			Help: "Alert evaluations that failed (a database error) and restarted from what PostgreSQL holds."}),
		ReportsRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nbs_collector_alert_reports_read_total",
			Help: "Reports the alert leader evaluated, by source: memory (stored by its own writer and handed over) or database (read back from PostgreSQL: other collectors' reports, sweeps, overflow)."}, []string{"source"}),
		HandoverOverflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nbs_collector_alert_handover_overflow_total",
			Help: "Stored reports the alert leader's in-memory hand-over had no room for; their nodes are read from PostgreSQL instead."}),
	}
	// Series exist from the start, so rate() and absence alerts work.
	for _, i := range []string{"alertmanager", "webhook"} {
		m.Notifications.WithLabelValues(i)
		m.NotificationsFailed.WithLabelValues(i)
	}
	for _, s := range []string{"pending", "firing"} {
		m.Alerts.WithLabelValues(s)
	}
	for _, s := range []string{"memory", "database"} {
		m.ReportsRead.WithLabelValues(s)
	}
	return m
}

func (m AlertMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Notifications, m.NotificationsFailed, m.NotificationLatency, m.Alerts, m.Leader, m.EvaluationFailures, m.ReportsRead, m.HandoverOverflow}
}
