package report

import (
	"encoding/csv"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteCSV writes the report as CSV: one table per section, each
// introduced by its own header row whose first column is "section" and
// whose column names carry their units; an empty cell is no data.
func WriteCSV(w io.Writer, r *Report) error {
	c := csv.NewWriter(w)
	f := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'g', 6, 64)
	}
	fv := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	i := func(v *int64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatInt(*v, 10)
	}
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	s := func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	}
	rows := [][]string{
		{"section", "from", "to", "previous_from", "previous_to", "nodes", "error_bound_relative", "resolution_s"},
		{"period", ts(r.Period.From), ts(r.Period.To), ts(r.Period.PreviousFrom), ts(r.Period.PreviousTo),
			strings.Join(r.Scope.Nodes, " "), fv(r.ErrorBound), strconv.Itoa(r.Resolution)},
		{"section", "target", "nodes", "p50_ms", "p90_ms", "p99_ms", "max_ms", "sent_probes", "lost_probes", "loss_ratio",
			"host_delay_p50_ms", "host_delay_p99_ms", "previous_p50_ms", "previous_p99_ms", "previous_loss_ratio"},
	}
	for _, t := range r.Ping.Targets {
		rows = append(rows, []string{"ping_target", t.Target, strings.Join(t.Nodes, " "), f(t.P50), f(t.P90), f(t.P99), f(t.Max),
			i(t.Sent), i(t.Lost), f(t.Loss), f(t.HostDelayP50), f(t.HostDelayP99), f(t.Previous.P50), f(t.Previous.P99), f(t.Previous.Loss)})
	}
	rows = append(rows, []string{"section", "node", "p50_ms", "p99_ms", "max_ms", "sent_probes", "lost_probes", "loss_ratio"})
	for _, n := range r.Ping.PerNode {
		rows = append(rows, []string{"ping_node", n.Node, f(n.P50), f(n.P99), f(n.Max), i(n.Sent), i(n.Lost), f(n.Loss)})
	}
	rows = append(rows, []string{"section", "target", "t", "p50_ms", "p99_ms", "loss_ratio"})
	for _, sr := range r.Ping.Series {
		for _, p := range sr.Points {
			rows = append(rows, []string{"ping_series", sr.Target, ts(p.T), f(p.P50), f(p.P99), f(p.Loss)})
		}
	}
	rows = append(rows, []string{"section", "metric", "title", "p50_us", "p90_us", "p99_us", "max_us", "count",
		"previous_p50_us", "previous_p99_us", "previous_count"})
	for _, k := range r.KernelLatency {
		rows = append(rows, []string{"kernel_latency", k.Metric, k.Title, f(k.P50), f(k.P90), f(k.P99), f(k.Max),
			strconv.FormatInt(k.Count, 10), f(k.Previous.P50), f(k.Previous.P99), i(k.Previous.Count)})
	}
	rows = append(rows, []string{"section", "metric", "direction", "reason", "count", "per_hour"})
	for _, x := range r.Reliability.Resets {
		rows = append(rows, []string{"resets", x.Metric, x.Direction, x.Reason, strconv.FormatInt(x.Count, 10), f(x.PerHour)})
	}
	for _, x := range r.Reliability.Drops {
		rows = append(rows, []string{"drops", x.Metric, "", x.Reason, strconv.FormatInt(x.Count, 10), f(x.PerHour)})
	}
	rt := r.Reliability.Retransmits
	rows = append(rows,
		[]string{"section", "retransmitted_segments", "per_1000_segments", "retransmits_per_s", "rtos", "rtos_per_s",
			"previous_resets", "previous_retransmits", "previous_drops"},
		[]string{"retransmits", i(rt.Segments), f(rt.Per1000Segments), f(rt.PerSecond), i(rt.RTOs), f(rt.RTOsPerSecond),
			i(r.Reliability.Previous.Resets), i(r.Reliability.Previous.Retransmits), i(r.Reliability.Previous.Drops)},
		[]string{"section", "node", "root", "ok_share", "warn_share", "crit_share", "no_data_share"})
	for _, a := range r.Availability {
		rows = append(rows, []string{"availability", a.Node, a.Root, fv(a.OK), fv(a.Warn), fv(a.Crit), fv(a.NoData)})
	}
	rows = append(rows, []string{"section", "node", "root", "state", "start", "end", "seconds", "worst_value", "child", "tree_url"})
	for _, x := range r.Incidents {
		rows = append(rows, []string{"incident", x.Node, x.Root, x.State, ts(x.Start), ts(x.End), fv(x.Seconds), f(x.WorstValue), s(x.Child), x.TreeURL})
	}
	rows = append(rows, []string{"section", "name", "attainment_ratio", "hours", "no_data_hours", "missed_hours"})
	for _, o := range r.Objectives {
		missed := make([]string, len(o.Missed))
		for j, m := range o.Missed {
			missed[j] = ts(m)
		}
		rows = append(rows, []string{"objective", o.Name, f(o.Attainment), strconv.Itoa(o.Hours), strconv.Itoa(o.NoDataHours), strings.Join(missed, " ")})
	}
	if err := c.WriteAll(rows); err != nil {
		return err
	}
	return c.Error()
}
