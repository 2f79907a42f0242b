package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	collectorapi "github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/pgcluster"
)

// TestSeed seeds a small fleet the benchmark's way and checks it holds
// what the package comment says, and that a series read from rollups
// through the HTTP handler is the series of the raw reports behind them.
func TestSeed(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgcluster.Database(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Fewer days of the other nodes' history than the deep node's, as at
	// 10,000 nodes.
	cfg := seedConfig{Nodes: 4, Deep: 1, Days: 1, History: 1, Raw: time.Hour, Window: day, MinuteOf: day}
	f, rates := seed(t, st, cfg, false)
	if len(rates) != 3 {
		t.Errorf("%d ingest timings, want 3", len(rates))
	}
	end := f.end
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	perHour := int(time.Hour / interval)
	// Raw reports: every node over the raw window, the troubled node-0000
	// over the tree's window (from a whole hour), the deep node over all
	// the days; the troubled node's evidence with each of its reports.
	for _, c := range []struct {
		node int
		from time.Time
	}{{0, end.Add(-cfg.Window).Truncate(time.Hour)}, {1, end.Add(-time.Duration(cfg.Days) * day)}, {2, end.Add(-cfg.Raw)}, {3, end.Add(-cfg.Raw)}} {
		want := int(end.Sub(c.from) / interval)
		if got := count(`SELECT count(*) FROM reports WHERE node_id = $1 AND ts >= $2 AND ts < $3`, f.ids[c.node], c.from, end); got != want {
			t.Errorf("%s: %d reports over the seeded %s, want %d", f.names[c.node], got, end.Sub(c.from), want)
		}
		if got := count(`SELECT count(*) FROM reports WHERE node_id = $1 AND ts < $2`, f.ids[c.node], c.from); got != 0 {
			t.Errorf("%s: %d reports before its seeded %s", f.names[c.node], got, end.Sub(c.from))
		}
	}
	// Every node reports up to now (the minutes seeding took, then the
	// write path's live tail).
	for i, id := range f.ids {
		var last time.Time
		if err := st.Pool().QueryRow(ctx, `SELECT max(ts) FROM reports WHERE node_id = $1`, id).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if age := time.Since(last); age > 2*time.Minute {
			t.Errorf("%s: newest report %s old", f.names[i], age.Round(time.Second))
		}
	}
	if got, want := count(`SELECT count(*) FROM events WHERE node_id = $1 AND ts >= $2 AND ts < $3`, f.ids[0], end.Add(-time.Hour), end), eventsPerRep*perHour; got != want {
		t.Errorf("troubled node: %d events in the last seeded hour, want %d", got, want)
	}
	// Day rollups back over the report's two periods (node-0000 and the
	// deep node), over cfg.History days (the rest).
	for i, id := range f.ids {
		days := 2 * cfg.Days
		if i > cfg.Deep {
			days = cfg.History
		}
		histFrom := end.Add(-time.Duration(days) * day).Truncate(day)
		// The rest's rollups end where their raw reports begin (those
		// are not rolled up): within Raw after midnight, the day before.
		last := end
		if i > cfg.Deep {
			last = end.Add(-cfg.Raw - time.Nanosecond)
		}
		wantDays := int(last.Truncate(day).Sub(histFrom)/day) + 1
		if got := count(`SELECT count(DISTINCT ts) FROM rollup_samples WHERE res = 86400 AND node_id = $1`, id); got != wantDays {
			t.Errorf("%s: day rollups of %d days, want %d", f.names[i], got, wantDays)
		}
	}
	// node-0000's and the deep node's hour rollups are the write path's
	// fold of their raw reports.
	for _, node := range []int{0, 1} {
		hour := end.Add(-12 * time.Hour).Truncate(time.Hour)
		q := store.RollupQuery{NodeIDs: []int32{f.ids[node]}, Res: store.RollupHour, From: hour, To: hour.Add(time.Hour)}
		stored, storedH, err := st.ReadRollups(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		q.Raw = true
		raw, rawH, err := st.ReadRollups(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != len(raw) || len(storedH) != len(rawH) || len(stored) != len(f.defs) {
			t.Fatalf("%s hour rollups: %d samples and %d histograms stored, %d and %d from raw reports, want %d samples",
				f.names[node], len(stored), len(storedH), len(raw), len(rawH), len(f.defs))
		}
		byPath := map[string]store.SampleAgg{}
		for _, r := range raw {
			byPath[r.Path] = r.SampleAgg
		}
		for _, r := range stored {
			w := byPath[r.Path]
			if r.N != w.N || !near(r.Sum, w.Sum) || r.Min != w.Min || r.Max != w.Max || r.OK != w.OK || r.Warn != w.Warn {
				t.Errorf("%s: %s hour rollup %+v, raw reports give %+v", f.names[node], r.Path, r.SampleAgg, w)
			}
		}
	}

	// Series of the deep node, an hour a step over its raw day: from
	// rollups through the handler, against the raw reports.
	srv, token := server(t, st)
	from, to := end.Add(-time.Duration(cfg.Days)*day).Truncate(time.Hour).Add(time.Hour), end.Truncate(time.Hour)
	for _, metric := range []string{"tcp_reset", "ping", "ping/peer-0"} {
		u := srv.URL + "/api/v1/nodes/" + f.names[1] + "/series?" + url.Values{"metric": {metric}, "step": {"1h"},
			"from": {strconv.FormatInt(from.UnixMilli(), 10)}, "to": {strconv.FormatInt(to.UnixMilli(), 10)}}.Encode()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got collectorapi.Series
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
		}
		want, err := st.Series(ctx, f.ids[1], metric, from, to, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		hists, err := st.HistogramSeries(ctx, f.ids[1], metric, from, to, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Points) != len(want) || len(want) != int(to.Sub(from)/time.Hour) {
			t.Fatalf("%s: %d points from rollups, %d from raw reports, want %d", metric, len(got.Points), len(want), int(to.Sub(from)/time.Hour))
		}
		for i, p := range got.Points {
			b := want[i]
			var value float64
			switch f.kinds[metric] {
			case store.KindRate:
				value = b.Sum / (float64(b.IntervalMS) / 1000)
			default:
				value = b.Sum / float64(b.Present)
			}
			if !p.Time.Equal(b.Start) || p.Value == nil || !near(*p.Value, value) || p.State != b.Worst.String() {
				t.Errorf("%s at %s: %v %v %s from rollups, raw reports: %v %v %s", metric, p.Time, p.Time, deref(p.Value), p.State, b.Start, value, b.Worst)
			}
			if len(hists) > 0 {
				h, scale := hists[i].Hist, 1.0
				for _, d := range f.defs {
					if d.Path == metric {
						scale = d.Scale
					}
				}
				if p.Percentiles == nil || p.Percentiles.Samples != h.Count || p.Percentiles.P99 != h.Quantile(0.99)/scale {
					t.Errorf("%s at %s: percentiles %+v from rollups, raw: %d samples, p99 %v", metric, p.Time, p.Percentiles, h.Count, h.Quantile(0.99)/scale)
				}
			}
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
