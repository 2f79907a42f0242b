package report

// Incidents: spans of non-OK minutes of a root, with the child that
// explains each.

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// incidents joins consecutive non-OK minutes of a root into spans; the
// child that explains one is the child non-OK the longest in it, and the
// worst value is that child's (in its unit), else the root's. Only the
// metrics shown says the caller sees count (nil: all): a root it may not
// see has no incidents, a child it may not see explains none.
func incidents(bad []store.SampleRow, names map[int32]string, defs map[string]store.MetricDef, shown func(path string) bool, now time.Time) []Incident {
	if shown == nil {
		shown = func(string) bool { return true }
	}
	type key struct {
		node int32
		root string
	}
	byRoot := map[key][]store.SampleRow{}
	children := map[key][]store.SampleRow{}
	for _, r := range bad {
		root, _, isChild := strings.Cut(r.Path, "/")
		if !shown(root) || !shown(r.Path) {
			continue
		}
		if isChild {
			children[key{r.NodeID, root}] = append(children[key{r.NodeID, root}], r)
		} else {
			byRoot[key{r.NodeID, root}] = append(byRoot[key{r.NodeID, root}], r)
		}
	}
	var out []Incident
	for k, rows := range byRoot {
		sort.Slice(rows, func(i, j int) bool { return rows[i].TS.Before(rows[j].TS) })
		var open *Incident
		var last time.Time
		flush := func() {
			if open == nil {
				return
			}
			open.End = last.Add(time.Minute)
			open.Seconds = open.End.Sub(open.Start).Seconds()
			open.Child = explain(children[k], open.Start, open.End)
			if open.Child != nil {
				open.Metric, open.WorstValue = *open.Child, worst(children[k], *open.Child, open.Start, open.End, defs)
			}
			open.Unit = defs[open.Metric].Unit
			open.TreeURL = treeURL(open.Node, open.Start, open.End, now, open.Metric)
			out = append(out, *open)
			open = nil
		}
		for _, r := range rows {
			if open != nil && r.TS.Sub(last) > time.Minute {
				flush()
			}
			if open == nil {
				open = &Incident{Node: names[k.node], Root: k.root, State: "warn", Start: r.TS, Metric: k.root}
			}
			if r.Crit > 0 {
				open.State = "crit"
			}
			if v := worse(open.WorstValue, r, below(defs, k.root)); v != nil {
				open.WorstValue = v
			}
			last = r.TS
		}
		flush()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Node+out[i].Root < out[j].Node+out[j].Root
	})
	if len(out) > maxIncidents {
		out = out[:maxIncidents]
	}
	return out
}

// incidentLead is how much of the time before an incident its tree link
// shows: the chart starts OK, then breaks.
const incidentLead = 5 * time.Minute

// treeURL opens the node's page over the incident's window, with metric
// selected: from a little before its start to its end (never past now).
// The tree is read as of to= from minute rollups before it, so its last
// raised minute is in it and the breach shows; at= its start would read
// the minute before the breach, still OK.
func treeURL(node string, start, end, now time.Time, metric string) string {
	if !now.IsZero() && end.After(now) {
		end = now
	}
	if !end.After(start) {
		end = start.Add(time.Minute)
	}
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	q := url.Values{"from": {ms(start.Add(-incidentLead))}, "to": {ms(end)}, "metric": {metric}}
	return fmt.Sprintf("/nodes/%s?%s", url.PathEscape(node), q.Encode())
}

// below: a metric whose threshold is "below" is worst at its minimum.
func below(defs map[string]store.MetricDef, path string) bool {
	t := defs[path].DefaultThreshold
	return t != nil && t.Comparison == "below"
}

// worse is r's worst value if it is worse than cur, else nil (also when r
// had no value: an interval in breach without one, a ping root whose every
// echo was lost, has no worst value, not 0).
func worse(cur *float64, r store.SampleRow, low bool) *float64 {
	if r.N == 0 {
		return nil
	}
	v := r.Max
	if low {
		v = r.Min
	}
	if cur == nil || (low && v < *cur) || (!low && v > *cur) {
		return num(v)
	}
	return nil
}

// worst is the worst value of path's non-OK minutes in [from, to).
func worst(rows []store.SampleRow, path string, from, to time.Time, defs map[string]store.MetricDef) *float64 {
	var w *float64
	for _, r := range rows {
		if r.Path == path && !r.TS.Before(from) && r.TS.Before(to) {
			if v := worse(w, r, below(defs, path)); v != nil {
				w = v
			}
		}
	}
	return w
}

func explain(children []store.SampleRow, from, to time.Time) *string {
	bad := map[string]float64{}
	for _, c := range children {
		if !c.TS.Before(from) && c.TS.Before(to) {
			// CRIT seconds weigh more than WARN seconds.
			bad[c.Path] += c.Warn + 2*c.Crit
		}
	}
	var best string
	for p, v := range bad {
		if best == "" || v > bad[best] || (v == bad[best] && (len(p) > len(best) || (len(p) == len(best) && p < best))) {
			best = p
		}
	}
	if best == "" {
		return nil
	}
	return &best
}
