package report

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
)

func TestIncidentsValueOfTheExplainingChild(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	defs := map[string]store.MetricDef{
		"ping":                {Unit: "ms"},
		"ping/gw/loss":        {Unit: "%"},
		"ping/gw":             {Unit: "ms"},
		"drops":               {Unit: "packets/s"},
		"agent":               {Unit: ""},
		"clock":               {Unit: "", DefaultThreshold: &store.Threshold{Comparison: "below"}},
		"clock/sync/accuracy": {Unit: "ppm", DefaultThreshold: &store.Threshold{Comparison: "below"}},
	}
	row := func(node int32, path string, min int, lo, hi, crit float64) store.SampleRow {
		return store.SampleRow{NodeID: node, Path: path, TS: t0.Add(time.Duration(min) * time.Minute),
			SampleAgg: store.SampleAgg{N: 6, Min: lo, Max: hi, Warn: 60 - crit, Crit: crit}}
	}
	bad := []store.SampleRow{
		// ping WARN two minutes, explained by the gw loss (in %), not the
		// RTT child that was raised one minute only.
		row(1, "ping", 0, 40, 60, 0), row(1, "ping", 1, 40, 90, 0),
		row(1, "ping/gw/loss", 0, 2, 5, 0), row(1, "ping/gw/loss", 1, 3, 12, 60),
		row(1, "ping/gw", 1, 40, 90, 0),
		// drops with no child: the root's own value.
		row(1, "drops", 5, 1, 7, 0),
		// A "below" metric is worst at its minimum.
		row(1, "clock", 8, 0, 1, 0), row(1, "clock/sync/accuracy", 8, 0.25, 3, 0),
		// The agent's root: staff's.
		row(1, "agent", 3, 0, 1, 60),
	}
	names := map[int32]string{1: "gw / vm"}
	// The report is made a minute into the drops incident: its link ends then.
	now := t0.Add(5*time.Minute + 30*time.Second)
	got := incidents(bad, names, defs, func(p string) bool { return !api.StaffMetric(p) }, now)
	url := func(metric string, from, to int) string {
		return fmt.Sprintf("/nodes/gw%%20%%2F%%20vm?from=%d&metric=%s&to=%d", t0.Add(time.Duration(from)*time.Minute).UnixMilli(), metric, t0.Add(time.Duration(to)*time.Minute).UnixMilli())
	}
	want := []struct {
		root, metric, unit, url string
		worst                   float64
	}{
		// The window: five minutes before the start to the end of the last
		// raised minute (the tree is read as of to=, from the minutes
		// before it, so the breach shows), never past now.
		{"ping", "ping/gw/loss", "%", url("ping%2Fgw%2Floss", -5, 2), 12},
		{"drops", "drops", "packets/s", fmt.Sprintf("/nodes/gw%%20%%2F%%20vm?from=%d&metric=drops&to=%d", t0.UnixMilli(), now.UnixMilli()), 7},
		{"clock", "clock/sync/accuracy", "ppm", url("clock%2Fsync%2Faccuracy", 3, 9), 0.25},
	}
	if len(got) != len(want) {
		t.Fatalf("incidents %+v, want %d (the agent's hidden)", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Root != w.root || g.Metric != w.metric || g.Unit != w.unit || g.TreeURL != w.url || g.WorstValue == nil || *g.WorstValue != w.worst {
			t.Errorf("incident %d: root %s metric %s unit %q url %s worst %v; want %+v", i, g.Root, g.Metric, g.Unit, g.TreeURL, deref(g.WorstValue), w)
		}
	}
	// The state is the root's own (WARN), whatever its children were.
	if got[0].State != "warn" {
		t.Errorf("ping incident state %s, want warn", got[0].State)
	}
	if all := incidents(bad, names, defs, nil, now); len(all) != 4 {
		t.Errorf("staff see %d incidents, want 4 with the agent's", len(all))
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestCalendar(t *testing.T) {
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	// Wednesday 2026-11-04 13:30 UTC, and a Monday and a Sunday, and the
	// first of a month across a year.
	wed := time.Date(2026, 11, 4, 13, 30, 0, 0, time.UTC)
	mon := time.Date(2026, 11, 2, 0, 10, 0, 0, time.UTC)
	sun := time.Date(2026, 11, 8, 23, 0, 0, 0, time.UTC)
	jan := time.Date(2027, 1, 1, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		now      time.Time
		from, to time.Time
	}{
		{"this_week", wed, day(2026, 11, 2), wed},
		{"last_week", wed, day(2026, 10, 26), day(2026, 11, 2)},
		{"this_week", mon, day(2026, 11, 2), mon},
		{"this_week", sun, day(2026, 11, 2), sun},
		{"last_week", sun, day(2026, 10, 26), day(2026, 11, 2)},
		{"this_month", wed, day(2026, 11, 1), wed},
		{"last_month", wed, day(2026, 10, 1), day(2026, 11, 1)},
		{"last_month", jan, day(2026, 12, 1), day(2027, 1, 1)},
		{"this_month", jan, day(2027, 1, 1), jan},
	}
	for _, tt := range tests {
		from, to, ok := Calendar(tt.name, tt.now)
		if !ok || !from.Equal(tt.from) || !to.Equal(tt.to) {
			t.Errorf("%s at %s: %s – %s (%v), want %s – %s", tt.name, tt.now, from, to, ok, tt.from, tt.to)
		}
	}
	if _, _, ok := Calendar("7d", wed); ok {
		t.Error("7d is not a calendar period")
	}
	d := Definition{Period: "last_month"}
	if from, to := d.span(wed); !from.Equal(day(2026, 10, 1)) || !to.Equal(day(2026, 11, 1)) {
		t.Errorf("a saved last_month runs %s – %s", from, to)
	}
	if err := (DefinitionInput{Name: "x", Period: "this_week"}).Validate(); err != nil {
		t.Errorf("this_week: %v", err)
	}
}

// An incident's worst value is of the minutes that had one: a ping root
// whose every echo was lost (a rollup of no value: n 0, min +Inf, max -Inf)
// has none, neither 0 nor an infinity.
func TestIncidentsWorstValueSkipsNoValue(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	defs := map[string]store.MetricDef{"ping": {Unit: "ms"}}
	lost := func(node int32, min int) store.SampleRow {
		return store.SampleRow{NodeID: node, Path: "ping", TS: t0.Add(time.Duration(min) * time.Minute),
			SampleAgg: store.SampleAgg{N: 0, Min: math.Inf(1), Max: math.Inf(-1), Crit: 60}}
	}
	slow := func(node int32, min int, hi float64) store.SampleRow {
		return store.SampleRow{NodeID: node, Path: "ping", TS: t0.Add(time.Duration(min) * time.Minute),
			SampleAgg: store.SampleAgg{N: 6, Min: 1, Max: hi, Warn: 60}}
	}
	for _, c := range []struct {
		name  string
		rows  []store.SampleRow
		worst *float64
	}{
		{"every minute lost", []store.SampleRow{lost(1, 0), lost(1, 1)}, nil},
		{"lost, then slow", []store.SampleRow{lost(1, 0), slow(1, 1, 80), lost(1, 2)}, ptrTo(80)},
		{"slow, then lost", []store.SampleRow{slow(1, 0, 30), lost(1, 1)}, ptrTo(30)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := incidents(c.rows, map[int32]string{1: "n"}, defs, nil, t0.Add(time.Hour))
			if len(got) != 1 {
				t.Fatalf("incidents %+v, want 1", got)
			}
			if w := got[0].WorstValue; (w == nil) != (c.worst == nil) || (w != nil && *w != *c.worst) {
				t.Errorf("worst %v, want %v", deref(w), deref(c.worst))
			}
			if got[0].State != "crit" {
				t.Errorf("state %s, want crit: the lost minutes were", got[0].State)
			}
		})
	}
}

func ptrTo(v float64) *float64 { return &v }
