// Command gendocs writes docs/metrics.md from the agent's catalogue, so the
// reference an operator reads is the same data the agent announces.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"github.com/nbs-project/nbs/internal/promfamily"
	"os"
	"strings"

	"github.com/nbs-project/nbs/agent/catalog"
)

func main() {
	out := flag.String("o", "docs/metrics.md", "output file")
	flag.Parse()
	if err := os.WriteFile(*out, render(catalog.Documented()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
}

func kind(k catalog.Kind) string {
	switch k {
	case catalog.Rate:
		return "rate"
	case catalog.Gauge:
		return "gauge"
	case catalog.Histogram:
		return "histogram"
	}
	return "?"
}

func threshold(t *catalog.Threshold) string {
	if t == nil {
		return "—"
	}
	cmp := "≥"
	if t.Below {
		cmp = "≤"
	}
	var s string
	if t.Baseline > 0 {
		s = fmt.Sprintf("warn %s %g×, crit %s %g× the median of the last %d intervals", cmp, t.Warn, cmp, t.Crit, t.Baseline)
		if t.Floor > 0 {
			s += fmt.Sprintf(", never below %g", t.Floor)
		}
	} else {
		s = fmt.Sprintf("warn %s %g, crit %s %g", cmp, t.Warn, cmp, t.Crit)
	}
	if t.Hold > 1 {
		s += fmt.Sprintf(", held %d intervals", t.Hold)
	}
	return s
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// prometheus is the series a metric is exported as (internal/promfamily):
// its family and the labels its path fills.
func prometheus(rules *promfamily.Rules, m catalog.Metric) string {
	match := rules.Lookup(m.ID, promfamily.Kind(m.Kind), m.Unit, m.Quantile)
	var labels []string
	for i, l := range match.Family.Labels {
		if v := match.Values[i]; v != "" {
			labels = append(labels, fmt.Sprintf("%s=%q", l, v))
		}
	}
	if len(labels) == 0 {
		return "`" + match.Family.Name + "`"
	}
	return "`" + match.Family.Name + "{" + strings.Join(labels, ",") + "}`"
}

func table(b *bytes.Buffer, ms []catalog.Metric) {
	rules := promfamily.New()
	b.WriteString("| id | title | unit | kind | default threshold | Prometheus |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, m := range ms {
		unit := m.Unit
		if m.Kind == catalog.Histogram && m.Quantile > 0 {
			unit = fmt.Sprintf("%s (p%g)", m.Unit, m.Quantile*100)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s | %s |\n", m.ID, cell(m.Title), cell(unit), kind(m.Kind), threshold(m.Threshold), cell(prometheus(rules, m)))
	}
	b.WriteString("\n")
	for _, m := range ms {
		fmt.Fprintf(b, "- **`%s`** — %s\n", m.ID, m.Description)
	}
	b.WriteString("\n")
}

func render(branches []catalog.Branch) []byte {
	var b bytes.Buffer
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Generated from the agent's catalogue (`agent/catalog`) by `make generate`; do not edit.\n\n")
	b.WriteString("A rate's value is per second; reports carry its increase over the interval. A histogram's value is the\n")
	b.WriteString("quantile named by its unit. A parent's state is the worst of its own and its children's. Thresholds are\n")
	b.WriteString("defaults: operators override them per scope (`PUT /api/v1/thresholds`). The Prometheus column is the series\n")
	b.WriteString("the collector exports it as ([export.md](export.md); every series also has `node` and, where set, `tenant`).\n\n")
	for _, br := range branches {
		fmt.Fprintf(&b, "## `%s`\n\n", br.Root)
		table(&b, br.Metrics)
		if len(br.Children) > 0 {
			b.WriteString("### Children created at run time\n\n")
			table(&b, br.Children)
		}
		if len(br.Notes) > 0 {
			b.WriteString("### Named children with specific advice\n\n")
			table(&b, br.Notes)
		}
	}
	families(&b)
	return b.Bytes()
}

// families lists every family the exports hold, as the reference for a
// scrape config or a dashboard.
func families(b *bytes.Buffer) {
	b.WriteString("## Prometheus families\n\n")
	b.WriteString("What `GET /api/v1/export/metrics`, remote write and OTLP carry besides `nbs_node_info`,\n")
	b.WriteString("`nbs_node_last_report_timestamp_seconds` and `nbs_metric_state` (see [export.md](export.md)). One family is one\n")
	b.WriteString("level of one breakdown: labels shown absent are the levels above (the node's total has no `reason`).\n\n")
	b.WriteString("| family | type | labels besides node, tenant | what |\n| --- | --- | --- | --- |\n")
	for _, f := range promfamily.New().Families() {
		t := "gauge"
		if f.Type == promfamily.Counter {
			t = "counter"
		}
		labels := "—"
		if len(f.Labels) > 0 {
			labels = "`" + strings.Join(f.Labels, "`, `") + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", f.Name, t, labels, cell(f.Help))
	}
	b.WriteString("\n")
}
