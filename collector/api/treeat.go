package api

import (
	"context"
	"net/url"
	"time"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/internal/loglinear"
	"github.com/nbs-project/nbs/internal/schema"
)

// A tree asked for a past time (?at=, or ?from=&to=) is computed from the
// rollups of that time, to the minute: the values and states as of the
// instant, and the recent fields (recent_count, recent_state) over the
// window. Raw reports are kept for days, rollups for months, so an incident
// link in a report still opens its tree weeks later.
const (
	// treeLookback is how far before the instant a metric's last value is
	// looked for: a gauge not streamed since (it stayed OK) shows its last
	// level from up to this long before.
	treeLookback = time.Hour
	// A window of up to treeMinuteWindow is read from minute rollups, up to
	// treeHourWindow from hour rollups, longer ones from day rollups: at
	// most 1,440 buckets per metric.
	treeMinuteWindow = 24 * time.Hour
	treeHourWindow   = 60 * 24 * time.Hour
)

// treeTime is the time a tree is asked for: live (the zero value), or as
// of At with the recent fields over [From, At].
type treeTime struct {
	Past     bool
	At, From time.Time
}

// parseTreeTime reads ?at=, ?from= and ?to=. With at alone the window is the
// recent window before it; with from and to the tree is as of to (or of at,
// which must then lie in the window). from and to obey the series' limits
// (at most 400 days, from before to).
func parseTreeTime(q url.Values, window time.Duration, now time.Time) (treeTime, error) {
	atS, fromS, toS := q.Get("at"), q.Get("from"), q.Get("to")
	if atS == "" && fromS == "" && toS == "" {
		return treeTime{}, nil
	}
	tt := treeTime{Past: true}
	if atS != "" {
		at, err := parseTime(atS)
		if err != nil {
			return tt, invalid("at: %v", err)
		}
		tt.At = at
	}
	if fromS == "" && toS == "" {
		tt.From = tt.At.Add(-window)
		return tt, nil
	}
	if toS == "" && atS != "" {
		toS = tt.At.Format(time.RFC3339Nano)
	}
	from, to, err := timeRange(fromS, toS, window, now)
	if err != nil {
		return tt, err
	}
	tt.From = from
	if atS == "" {
		tt.At = to
	} else if tt.At.Before(from) || tt.At.After(to) {
		return tt, invalid("at (%s) must lie between from (%s) and to (%s)", tt.At.UTC().Format(time.RFC3339),
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	return tt, nil
}

// windowRes is the rollup resolution a past tree's window is read from.
func windowRes(d time.Duration) int32 {
	switch {
	case d <= treeMinuteWindow:
		return store.RollupMinute
	case d <= treeHourWindow:
		return store.RollupHour
	}
	return store.RollupDay
}

// aggState is the worst state of a rollup aggregate: CRIT or WARN if any
// time was spent in it, UNKNOWN if a sizeable part of the reported time was
// in no state, else OK.
func aggState(a store.SampleAgg, intervalMS int64) store.State {
	seconds := float64(a.N*intervalMS) / 1000
	switch {
	case a.Crit > 0:
		return store.StateCrit
	case a.Warn > 0:
		return store.StateWarn
	case a.N > 0 && a.OK < seconds-float64(intervalMS)/2000:
		return store.StateUnknown
	}
	return store.StateOK
}

// pastTree reads what BuildTree needs for a tree as of tt: the newest
// minute of each metric before tt.At as its latest value, and the window's
// totals and worst states.
func (a *API) pastTree(ctx context.Context, n store.Node, defs []store.MetricDef, tt treeTime) (store.Latest, bool, map[string]store.Recent, error) {
	latest, ok, err := a.latestAt(ctx, n, defs, tt.At)
	if err != nil {
		return latest, false, nil, err
	}
	recent := map[string]store.Recent{}
	res := windowRes(tt.At.Sub(tt.From))
	// Buckets that start in the window; the last one, partly after At,
	// counts whole (the answer is to the bucket).
	samples, _, err := a.q.ReadRollups(ctx, store.RollupQuery{NodeIDs: []int32{n.ID}, Res: res, From: tt.From.Truncate(time.Duration(res) * time.Second), To: tt.At})
	if err != nil {
		return latest, false, nil, err
	}
	iv := int64(n.IntervalMS)
	for _, r := range samples {
		rc := recent[r.Path]
		rc.Sum += r.Sum
		rc.Worst = store.Worse(store.Worse(store.StateOK, rc.Worst), aggState(r.SampleAgg, iv))
		recent[r.Path] = rc
	}
	return latest, ok, recent, nil
}

// latestAt is a node's latest values as of at, from minute rollups: each
// metric's newest minute in the hour before at. A minute's gauge is its
// mean, a rate its increase over the minute (per second over the reports of
// the minute), a histogram its headline quantile of the merged minute,
// none when it had no samples.
func (a *API) latestAt(ctx context.Context, n store.Node, defs []store.MetricDef, at time.Time) (store.Latest, bool, error) {
	l := store.Latest{IntervalMS: n.IntervalMS, Metrics: map[string]store.LatestValue{}}
	samples, hists, err := a.q.ReadRollups(ctx, store.RollupQuery{NodeIDs: []int32{n.ID}, Res: store.RollupMinute,
		From: at.Add(-treeLookback).Truncate(time.Minute), To: at})
	if err != nil {
		return l, false, err
	}
	if len(samples) == 0 {
		return l, false, nil
	}
	byPath := make(map[string]store.MetricDef, len(defs))
	for _, d := range defs {
		byPath[d.Path] = d
	}
	newest := map[string]store.SampleRow{}
	roots := map[int64]int64{} // reports per minute: the most any root carried
	for _, r := range samples {
		if cur, ok := newest[r.Path]; !ok || r.TS.After(cur.TS) {
			newest[r.Path] = r
		}
		if l.Time.Before(r.TS) {
			l.Time = r.TS
		}
		if schema.Root(r.Path) == r.Path {
			roots[r.TS.Unix()] = max(roots[r.TS.Unix()], r.N)
		}
	}
	type key struct {
		path string
		ts   int64
	}
	merged := map[key]*loglinear.Histogram{}
	for _, h := range hists {
		k := key{h.Path, h.TS.Unix()}
		m := merged[k]
		if m == nil {
			m = loglinear.New()
			merged[k] = m
		}
		for i, b := range h.Index {
			m.Counts[uint32(b)] += uint64(h.Counts[i])
		}
		m.Count += h.Count
		m.Sum += h.Sum
	}
	iv := int64(n.IntervalMS)
	for path, r := range newest {
		d, ok := byPath[path]
		if !ok {
			continue
		}
		reports := max(roots[r.TS.Unix()], r.N)
		v := store.LatestValue{State: aggState(r.SampleAgg, iv), TimeMS: r.TS.UnixMilli(), IntervalMS: uint32(min(reports*iv, 1<<31))}
		switch {
		case r.N == 0 && d.Kind != store.KindHistogram:
			// Every report of the minute carried it without a value.
			v.NoValue = true
		case d.Kind == store.KindRate:
			v.Value = r.Sum
		case d.Kind == store.KindHistogram:
			h := merged[key{path, r.TS.Unix()}]
			if h == nil || h.Count == 0 {
				v.NoValue = true
			} else {
				q := d.Quantile
				if q <= 0 {
					q = 0.99
				}
				v.Value = h.Quantile(q) / max(d.Scale, 1)
				v.NoValue = !finite(v.Value)
			}
		default:
			v.Value = r.Sum / float64(max(r.N, 1))
		}
		l.Metrics[path] = v
	}
	return l, true, nil
}
