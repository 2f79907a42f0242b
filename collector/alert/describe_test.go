package alert

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

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
			"warn 3x and crit 10x the moving median of the last 30 intervals, 1.2 resets/s: warn 3.6 resets/s, crit 12 resets/s (above; never raised below 1 resets/s)"},
		{"baseline, median unknown: factors stay factors", store.Threshold{Warn: 3, Crit: 10, Comparison: "above", BaselineIntervals: 30}, nil,
			"warn 3x median, crit 10x median",
			"warn 3x and crit 10x the moving median of the last 30 intervals (above; the median is not known: no stored values before the breach)"},
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

// A baseline threshold is described in the metric's unit: the moving median
// of the values before the firing report, the factors, and the levels they
// make, in the description, the threshold annotation, Alertmanager's
// annotations and the webhook; the tree link carries the breach window.
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
	svc := start(t, f.st, rcv.config(t), "baseline")
	waitLeading(t, svc)
	// 40 reports: the first ten at 9 ms fall out of the 30-interval window,
	// the next thirty are 1.1, 1.2 or 1.3 ms (median 1.2), then 59.8 ms
	// twice: the second report (which fires) is judged against 29 of them
	// and the first 59.8.
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
	rtt(59.8)
	rtt(59.8)
	fired := f.clock
	want := "warn 3x median 1.2 ms = 3.6 ms, crit 10x median 1.2 ms = 12 ms"
	waitFor(t, 5*time.Second, func() string {
		if a, n := rcv.lastAM("NBSRootCritical", "web-1"); n == 0 || a.Annotations["threshold"] != want {
			return fmt.Sprintf("alertmanager annotations %v, want threshold %q", a.Annotations, want)
		}
		return ""
	})
	a, _ := rcv.lastAM("NBSRootCritical", "web-1")
	for _, w := range []string{"59.8 ms", "the moving median of the last 30 intervals, 1.2 ms: warn 3.6 ms, crit 12 ms"} {
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
	if hook["threshold"] != want {
		t.Errorf("webhook threshold %q, want %q", hook["threshold"], want)
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
