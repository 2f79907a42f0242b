package report

import (
	"encoding/csv"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// formulaStart are the first characters that make a spreadsheet read a
// cell as a formula (OWASP, "CSV injection"): a metric title an agent sent
// as =HYPERLINK(…) would otherwise run when a customer opens the file.
const formulaStart = "=+-@\t\r"

// text escapes a cell that holds text from outside the collector (agents'
// titles, node names, labels, targets, definition names): one that a
// spreadsheet would take for a formula gets a leading single quote, which
// spreadsheets show as text and do not evaluate. csv.Writer still quotes
// what needs quoting (commas, quotes, line breaks) around the result.
func text(s string) string {
	if s != "" && strings.ContainsRune(formulaStart, rune(s[0])) {
		return "'" + s
	}
	return s
}

// number passes a numeric cell through unless it is not a plain number,
// which the collector's own formatting never makes: a negative value stays
// a number a spreadsheet can sum, anything else is escaped as text.
func number(s string) string {
	if s == "" || plainNumber.MatchString(s) {
		return s
	}
	return text(s)
}

var plainNumber = regexp.MustCompile(`^-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$`)

// WriteCSV writes the report as CSV: one table per section, each
// introduced by its own header row whose first column is "section" and
// whose column names carry their units; an empty cell is no data. Every
// text cell is escaped against formula injection (text), every numeric one
// checked to be a plain number (number).
func WriteCSV(w io.Writer, r *Report) error {
	c := csv.NewWriter(w)
	f := func(v *float64) string {
		if v == nil {
			return ""
		}
		return number(strconv.FormatFloat(*v, 'g', 6, 64))
	}
	fv := func(v float64) string { return number(strconv.FormatFloat(v, 'g', 6, 64)) }
	i := func(v *int64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatInt(*v, 10)
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	s := func(v *string) string {
		if v == nil {
			return ""
		}
		return text(*v)
	}
	// list joins names with spaces, each escaped: a cell is read as a
	// formula by its first character, but a name inside may be pasted
	// into a cell of its own.
	list := func(names []string) string {
		out := make([]string, len(names))
		for j, x := range names {
			out[j] = text(x)
		}
		return strings.Join(out, " ")
	}
	rows := [][]string{
		{"section", "from", "to", "previous_from", "previous_to", "nodes", "error_bound_relative", "resolution_s"},
		{"period", ts(r.Period.From), ts(r.Period.To), ts(r.Period.PreviousFrom), ts(r.Period.PreviousTo),
			list(r.Scope.Nodes), fv(r.ErrorBound), strconv.Itoa(r.Resolution)},
		{"section", "target", "nodes", "p50_ms", "p90_ms", "p99_ms", "max_ms", "sent_probes", "lost_probes", "loss_ratio",
			"host_delay_p50_ms", "host_delay_p99_ms", "previous_p50_ms", "previous_p99_ms", "previous_loss_ratio"},
	}
	for _, t := range r.Ping.Targets {
		rows = append(rows, []string{"ping_target", text(t.Target), list(t.Nodes), f(t.P50), f(t.P90), f(t.P99), f(t.Max),
			i(t.Sent), i(t.Lost), f(t.Loss), f(t.HostDelayP50), f(t.HostDelayP99), f(t.Previous.P50), f(t.Previous.P99), f(t.Previous.Loss)})
	}
	// Percentiles in one order in every table (p50, p90, p99, max), the
	// per-node table's columns in the per-target table's order.
	rows = append(rows, []string{"section", "node", "p50_ms", "p90_ms", "p99_ms", "max_ms", "sent_probes", "lost_probes", "loss_ratio", "host_delay_p50_ms", "host_delay_p99_ms"})
	for _, pn := range r.Ping.PerNode {
		rows = append(rows, []string{"ping_node", text(pn.Node), f(pn.P50), f(pn.P90), f(pn.P99), f(pn.Max), i(pn.Sent), i(pn.Lost), f(pn.Loss), f(pn.HostDelayP50), f(pn.HostDelayP99)})
	}
	rows = append(rows, []string{"section", "target", "t", "p50_ms", "p99_ms", "loss_ratio"})
	for _, sr := range r.Ping.Series {
		for _, p := range sr.Points {
			rows = append(rows, []string{"ping_series", text(sr.Target), ts(p.T), f(p.P50), f(p.P99), f(p.Loss)})
		}
	}
	rows = append(rows, []string{"section", "metric", "title", "p50_us", "p90_us", "p99_us", "max_us", "count",
		"previous_p50_us", "previous_p99_us", "previous_count"})
	for _, k := range r.KernelLatency {
		rows = append(rows, []string{"kernel_latency", text(k.Metric), text(k.Title), f(k.P50), f(k.P90), f(k.P99), f(k.Max),
			n(k.Count), f(k.Previous.P50), f(k.Previous.P99), i(k.Previous.Count)})
	}
	rows = append(rows, []string{"section", "metric", "direction", "reason", "count", "per_hour"})
	for _, x := range r.Reliability.Resets {
		rows = append(rows, []string{"resets", text(x.Metric), text(x.Direction), text(x.Reason), n(x.Count), f(x.PerHour)})
	}
	for _, x := range r.Reliability.Drops {
		rows = append(rows, []string{"drops", text(x.Metric), "", text(x.Reason), n(x.Count), f(x.PerHour)})
	}
	rt := r.Reliability.Retransmits
	rows = append(rows,
		[]string{"section", "retransmitted_segments", "per_1000_segments", "retransmits_per_s", "rtos", "rtos_per_s",
			"previous_resets", "previous_retransmits", "previous_drops"},
		[]string{"retransmits", i(rt.Segments), f(rt.Per1000Segments), f(rt.PerSecond), i(rt.RTOs), f(rt.RTOsPerSecond),
			i(r.Reliability.Previous.Resets), i(r.Reliability.Previous.Retransmits), i(r.Reliability.Previous.Drops)},
		[]string{"section", "node", "root", "ok_share", "warn_share", "crit_share", "no_data_share"})
	for _, a := range r.Availability {
		rows = append(rows, []string{"availability", text(a.Node), text(a.Root), fv(a.OK), fv(a.Warn), fv(a.Crit), fv(a.NoData)})
	}
	rows = append(rows, []string{"section", "node", "root", "state", "start", "end", "seconds", "worst_value", "child", "tree_url", "metric", "unit"})
	for _, x := range r.Incidents {
		rows = append(rows, []string{"incident", text(x.Node), text(x.Root), text(x.State), ts(x.Start), ts(x.End), fv(x.Seconds), f(x.WorstValue), s(x.Child), text(x.TreeURL), text(x.Metric), text(x.Unit)})
	}
	rows = append(rows, []string{"section", "name", "attainment_ratio", "hours", "no_data_hours", "missed_hours"})
	for _, o := range r.Objectives {
		missed := make([]string, len(o.Missed))
		for j, m := range o.Missed {
			missed[j] = ts(m)
		}
		rows = append(rows, []string{"objective", text(o.Name), f(o.Attainment), strconv.Itoa(o.Hours), strconv.Itoa(o.NoDataHours), strings.Join(missed, " ")})
	}
	if err := c.WriteAll(rows); err != nil {
		return err
	}
	return c.Error()
}
