package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/report"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// scopeCounter counts the pre-aggregate reads that served their days, and
// those of them that reached the day from (the current period's).
type scopeCounter struct {
	*store.Store
	from                   time.Time
	served, refused, reach atomic.Int64
}

func (c *scopeCounter) ReadScopeDays(ctx context.Context, q store.ScopeDayQuery) ([]store.SampleRow, []store.HistogramRow, bool, error) {
	s, h, ok, err := c.Store.ReadScopeDays(ctx, q)
	if ok {
		c.served.Add(1)
		if !q.To.Before(c.from) {
			c.reach.Add(1)
		}
	} else {
		c.refused.Add(1)
	}
	return s, h, ok, err
}

// TestPreAggregateEqualsPerNode: a report whose whole days come from the
// per-scope day pre-aggregate (the fleet's or one tenant's) and per-node
// period sums is, JSON byte for byte, the report read from every node's
// day rollups; a selector it does not cover exactly (nodes of two tenants
// but not the fleet) falls back; and a late report, folded, changes both
// the same way.
func TestPreAggregateEqualsPerNode(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	end := time.Now().UTC().Truncate(time.Minute)
	seedFilterFleet(t, st, end)
	today := end.Add(-3 * time.Hour).Truncate(24 * time.Hour)
	if err := st.RebuildScopeDays(ctx, today.Add(-63*24*time.Hour), today); err != nil {
		t.Fatal(err)
	}
	objectives := []report.Objective{{Name: "ping", Metric: "ping", Quantile: 0.99, BelowMS: 0.05, Per: "hour"}}
	cases := []struct {
		name   string
		ctx    context.Context
		q      report.Query
		served bool // the current period's whole days from the pre-aggregate
	}{
		{"30 days, staff: the fleet", staff(), report.Query{From: end.Add(-30 * 24 * time.Hour), To: end}, true},
		{"30 days, a customer: its tenant", customer("acme"), report.Query{From: end.Add(-30 * 24 * time.Hour), To: end, Objectives: objectives}, true},
		{"40 days, staff, a tenant's selector", staff(), report.Query{Selector: access.Selector{"customer": "globex"}, From: end.Add(-40 * 24 * time.Hour), To: end}, true},
		{"30 days, one target", staff(), report.Query{From: end.Add(-30 * 24 * time.Hour), To: end, Targets: []string{"peer-b"}}, true},
		{"10 days, hourly charts", customer("globex"), report.Query{From: end.Add(-10 * 24 * time.Hour), To: end}, true},
		{"30 days, a rack: two tenants' nodes", staff(), report.Query{Selector: access.Selector{"rack": "r0"}, From: end.Add(-30 * 24 * time.Hour), To: end}, false},
		{"30 whole days", staff(), report.Query{From: today.Add(-30 * 24 * time.Hour), To: today}, true},
	}
	// folded is the day the day fold has reached: the seed's, or end's
	// own after a FoldRollups.
	check := func(t *testing.T, c struct {
		name   string
		ctx    context.Context
		q      report.Query
		served bool
	}, folded time.Time) {
		sc := &scopeCounter{Store: st, from: today}
		got, err := report.Compute(c.ctx, sc, c.q, end)
		if err != nil {
			t.Fatal(err)
		}
		ref := c.q
		ref.PerNode = true
		want, err := report.Compute(c.ctx, st, ref, end)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.Ping.Targets) == 0 || len(want.KernelLatency) == 0 || want.Reliability.Retransmits.Segments == nil ||
			len(want.Availability) == 0 || len(want.AvailabilityTimeline) == 0 || len(want.Ping.PerNode) == 0 {
			t.Fatalf("the seed left a section empty: %d targets, %d kernel, retransmits %v, %d availability",
				len(want.Ping.Targets), len(want.KernelLatency), want.Reliability.Retransmits.Segments, len(want.Availability))
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			i := 0
			for i < len(g) && i < len(w) && g[i] == w[i] {
				i++
			}
			t.Errorf("the report from the pre-aggregate differs from the per-node one at byte %d:\n got …%.600s\nwant …%.600s", i, g[max(0, i-200):], w[max(0, i-200):])
		}
		// The seed leaves the day fold three hours behind end, as if it
		// ran late: in the hours after midnight the day before is not
		// folded, the pre-aggregate cannot serve it and the report reads
		// per node (answers equal). In production the fold reaches it
		// minutes after midnight.
		// The period's whole days end at its end rounded up to the hour,
		// and never after the day that holds end.
		to := c.q.To.Truncate(time.Hour)
		if to.Before(c.q.To) {
			to = to.Add(time.Hour)
		}
		lastDay := to.Truncate(24 * time.Hour)
		if d := end.Truncate(24 * time.Hour); d.Before(lastDay) {
			lastDay = d
		}
		wantServed := c.served && !lastDay.After(folded)
		if served := sc.reach.Load() > 0; served != wantServed {
			t.Errorf("pre-aggregate served %d reads (%d of the current period), refused %d: want the current period served %v",
				sc.served.Load(), sc.reach.Load(), sc.refused.Load(), wantServed)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, c, today) })
	}

	// A late report for a folded day: until the fold recomputes its hour
	// and day, the day is read per node; after, from the pre-aggregate
	// again, with the report counted once either way.
	t.Run("late report", func(t *testing.T) {
		nodes, err := st.NodesIn(ctx, access.Principal{Role: access.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		var all []store.MetricDef
		for _, d := range filterDefs {
			d.def.Title = d.def.Path
			all = append(all, d.def)
		}
		ids, err := st.UpsertDefinitions(ctx, nodes[0].ID, all)
		if err != nil {
			t.Fatal(err)
		}
		late := today.Add(-5*24*time.Hour + 7*time.Hour + 30*time.Second)
		r := store.Report{NodeID: nodes[0].ID, InstanceID: 2, Seq: 1, Time: late, IntervalMS: 10000}
		for _, p := range []string{"ping/peer-a/sent", "ping/peer-a/lost", "latency/retransmits", "tcp_reset/sent/no_socket", "ping"} {
			r.Samples = append(r.Samples, store.Sample{MetricID: ids[p], Path: p, Value: 1000, State: store.StateCrit})
		}
		write(t, st, []store.Report{r})
		c := cases[0]
		c.served = false // pending, then dirty: per node
		check(t, c, today)
		res, err := st.FoldRollups(ctx, store.FoldOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The fold may now reach further than the seed's: in the hours
		// after midnight, the day before end's too.
		c.served = true
		check(t, c, res.DayThrough)
	})
}
