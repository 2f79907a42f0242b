package alert

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

func TestThresholdLevels(t *testing.T) {
	m := 1.2
	cases := []struct {
		name        string
		thr         store.Threshold
		median      *float64
		short, long string
	}{
		{"absolute", store.Threshold{Warn: 20, Crit: 200, Comparison: "above"}, nil,
			"warn 20 resets/s, crit 200 resets/s", "thresholds warn 20 resets/s and crit 200 resets/s (above)"},
		{"absolute below", store.Threshold{Warn: 5, Crit: 1, Comparison: "below"}, nil,
			"warn 5 resets/s, crit 1 resets/s", "thresholds warn 5 resets/s and crit 1 resets/s (below)"},
		{"baseline with its median", store.Threshold{Warn: 3, Crit: 10, Comparison: "above", BaselineIntervals: 30, Floor: 1}, &m,
			"warn 3x median 1.2 resets/s = 3.6 resets/s, crit 10x median 1.2 resets/s = 12 resets/s",
			"warn 3x and crit 10x the median of the 30 intervals before the breach, 1.2 resets/s: warn 3.6 resets/s, crit 12 resets/s (above; never raised below 1 resets/s)"},
		{"baseline, median unknown: factors stay factors", store.Threshold{Warn: 3, Crit: 10, Comparison: "above", BaselineIntervals: 30}, nil,
			"warn 3x median, crit 10x median",
			"warn 3x and crit 10x the median of the 30 intervals before the breach (above; the median is not known: no stored values before the breach)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := thresholdLevels(&c.thr, "resets/s", c.median)
			if got.short != c.short || got.long != c.long {
				t.Errorf("thresholdLevels:\n short %q\n want  %q\n long  %q\n want  %q", got.short, c.short, got.long, c.long)
			}
		})
	}
}

func TestBreachWindow(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	cases := []struct {
		start, end time.Time
		from, to   time.Time
	}{
		{t0, t0.Add(30 * time.Second), t0.Add(-windowPad), t0.Add(30*time.Second + windowPad)},
		{t0, t0.Add(4 * time.Hour), t0.Add(-time.Hour), t0.Add(5 * time.Hour)},
		{t0.Add(500 * time.Millisecond), t0.Add(-time.Minute), t0.Add(-windowPad), t0.Add(windowPad + time.Second)},
	}
	for _, c := range cases {
		from, to := breachWindow(c.start, c.end)
		if !from.Equal(c.from) || !to.Equal(c.to) {
			t.Errorf("breachWindow(%s, %s) = %s, %s; want %s, %s", c.start, c.end, from, to, c.from, c.to)
		}
	}
}

// A baseline threshold is described in the metric's unit: the median of
// the values before the breach began (not the breach's own), the factors,
// and the levels they make, in one text that the API (what the UI shows),
// Alertmanager and the webhook all carry; the tree link carries the breach
// window.
func TestDescribeBaselineInUnit(t *testing.T) {
	rcv := newReceivers(t)
	ctx := context.Background()
	f := newFixture(t, pgcluster.Database(t))
	ids, err := f.st.UpsertDefinitions(ctx, f.node.ID, []store.MetricDef{
		{Path: "rtt", Title: "RTT", Unit: "ms", Kind: store.KindGauge},
		{Path: "rtt/kernel", Title: "Kernel RTT", Unit: "ms", Kind: store.KindGauge,
			DefaultThreshold: &store.Threshold{Warn: 3, Crit: 10, Comparison: "above", HoldIntervals: 3, BaselineIntervals: 30, Floor: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The breach holds for 20 intervals before it fires: the newest 30
	// reports before the firing one are mostly the breach, whose median is
	// the breach's own value.
	if _, err := f.st.Pool().Exec(ctx, `UPDATE alert_rules SET for_intervals = 20 WHERE name = 'NBSRootCritical'`); err != nil {
		t.Fatal(err)
	}
	svc := start(t, f.st, rcv.config(t), "baseline")
	waitLeading(t, svc)
	// 40 reports: the first ten at 9 ms fall out of the 30-interval window
	// before the breach, the next thirty are 1.1, 1.2 or 1.3 ms (median
	// 1.2), then 59.8 ms until it fires.
	rtt := func(v float64) {
		f.seq++
		f.clock = f.clock.Add(time.Second)
		st := store.StateOK
		if v > 12 {
			st = store.StateCrit
		}
		r := store.Report{NodeID: f.node.ID, InstanceID: 1, Seq: f.seq, Time: f.clock, IntervalMS: 1000, Samples: []store.Sample{
			{MetricID: ids["rtt"], Path: "rtt", Value: v, State: st}}}
		// Every fourth report carries the root only (a gauge the agent had
		// no value of): skipped, not read as zero.
		if f.seq%4 != 0 || v > 12 {
			r.Samples = append(r.Samples, store.Sample{MetricID: ids["rtt/kernel"], Path: "rtt/kernel", Value: v, State: st})
		}
		if _, err := f.st.WriteReports(ctx, []store.Report{r}); err != nil {
			t.Fatal(err)
		}
		svc.OnStored([]store.Report{r})
	}
	for i := range 40 {
		switch {
		case i < 10:
			rtt(9)
		case i%3 == 0:
			rtt(1.1)
		case i%3 == 1:
			rtt(1.2)
		default:
			rtt(1.3)
		}
	}
	start := f.clock
	want := "warn 3x median 1.2 ms = 3.6 ms, crit 10x median 1.2 ms = 12 ms"
	for range 24 {
		rtt(59.8)
	}
	fired := f.clock
	waitFor(t, 10*time.Second, func() string {
		if a, n := rcv.lastAM("NBSRootCritical", "web-1"); n == 0 || a.Annotations["threshold"] != want {
			return fmt.Sprintf("alertmanager annotations %v, want threshold %q", a.Annotations, want)
		}
		return ""
	})
	a, _ := rcv.lastAM("NBSRootCritical", "web-1")
	for _, w := range []string{"59.8 ms", "the median of the 30 intervals before the breach, 1.2 ms: warn 3.6 ms, crit 12 ms"} {
		if !strings.Contains(a.Annotations["description"], w) {
			t.Errorf("description %q lacks %q", a.Annotations["description"], w)
		}
	}
	if a.Annotations["baseline_median"] != "1.2 ms" {
		t.Errorf("baseline_median %q, want 1.2 ms", a.Annotations["baseline_median"])
	}
	rcv.mu.Lock()
	var hook map[string]string
	for _, m := range rcv.messages {
		if m.Alert.Metric == "rtt/kernel" {
			hook = m.Alert.Annotations
		}
	}
	rcv.mu.Unlock()
	// One text, three carriers: the webhook, Alertmanager and the API the
	// UI reads say the same words.
	pg, err := svc.repo.listAlerts(ctx, alertFilter{State: "firing", Limit: 10, Viewer: access.Principal{Name: "t", Role: access.RoleViewer, Via: access.ViaSystem}})
	if err != nil || len(pg.Alerts) != 1 {
		t.Fatalf("firing alerts: %d, %v", len(pg.Alerts), err)
	}
	ui := svc.storedView(&pg.Alerts[0])
	for _, k := range []string{"summary", "description", "threshold", "baseline_median"} {
		if hook[k] != a.Annotations[k] || ui.Annotations[k] != a.Annotations[k] || a.Annotations[k] == "" {
			t.Errorf("%s differs:\n alertmanager %q\n webhook      %q\n API (UI)     %q", k, a.Annotations[k], hook[k], ui.Annotations[k])
		}
	}
	if ui.Description != a.Annotations["description"] || ui.Summary != a.Annotations["summary"] {
		t.Errorf("API description/summary %q / %q; Alertmanager's %q / %q", ui.Description, ui.Summary, a.Annotations["description"], a.Annotations["summary"])
	}
	u, err := url.Parse(a.Annotations["tree_url"])
	if err != nil {
		t.Fatal(err)
	}
	from, _ := time.Parse(time.RFC3339, u.Query().Get("from"))
	to, _ := time.Parse(time.RFC3339, u.Query().Get("to"))
	if u.Path != "/nodes/web-1" || u.Query().Get("metric") != "rtt/kernel" || !from.Before(start) || to.Before(fired) {
		t.Errorf("tree link %s: want /nodes/web-1, the metric, and a window around %s–%s", u, start, fired)
	}
}
